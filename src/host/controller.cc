#include "host/controller.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "auth/dhchap.h"
#include "auth/tls_psk.h"
#include "common/log.h"
#include "wire/nvme_auth.h"
#include "wire/nvme_build.h"

namespace sens::host {

namespace {

constexpr uint16_t kAdminDepth = 32;  // NVME_AQ_DEPTH, as the Linux host
constexpr uint32_t kCcEnable = 1, kCcShnNormal = 1u << 14;
constexpr uint32_t kCcIosqes = 6u << 16, kCcIocqes = 4u << 20;  // 64-byte SQEs, 16-byte CQEs
constexpr uint32_t kCstsRdy = 1, kCstsCfs = 2, kCstsShstMask = 3u << 2, kCstsShstDone = 2u << 2;

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
  return buf;
}

std::string uuid_text(const std::array<uint8_t, 16>& id) {
  char buf[40];
  std::snprintf(buf, sizeof(buf),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", id[0],
                id[1], id[2], id[3], id[4], id[5], id[6], id[7], id[8], id[9], id[10], id[11],
                id[12], id[13], id[14], id[15]);
  return buf;
}

}  // namespace

std::string describe(const Completion& c) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), " (0x%03x)", c.status);
  return std::string(completion_status_name(c.status)) + buf;
}

Controller::Controller(Reactor& reactor)
    : reactor_(reactor), keep_alive_([this] { on_keep_alive_timer(); }) {}

ControllerOptions::~ControllerOptions() {
  auth::wipe_text(dhchap_secret);
  auth::wipe_text(dhchap_ctrl_secret);
}

Controller::~Controller() {
  auth::wipe(host_key_);
  auth::wipe(ctrl_key_);
  reactor_.cancel(keep_alive_);
  shutting_down_ = true;  // closing is not a failure worth recording
  for (auto& q : io_) q->close("controller destroyed");
  if (admin_) admin_->close("controller destroyed");
}

std::unique_ptr<Queue> Controller::open_queue(const QueueOptions& qo, std::string* error) {
  sockaddr_storage ss;
  socklen_t len;
  if (!trid_sockaddr(trid_, &ss, &len)) {
    *error = "bad address " + trid_.traddr;
    return nullptr;
  }
  const Nanos deadline = reactor_.now() + connect_timeout();
  for (;;) {
    auto q = std::make_unique<Queue>(reactor_, qo);
    *error = q->open(reinterpret_cast<sockaddr*>(&ss), len, deadline);
    if (error->empty()) {
      q->set_on_failure(&Controller::on_queue_failure, this);
      return q;
    }
    // QEMU's port forwarder (and some proxies) accept before anything listens behind them,
    // then close: retry that case, and only that one, until the connect timeout.
    bool retry = *error == "connection closed before ICResp" ||
                 error->find("Connection reset") != std::string::npos;
    if (!retry || reactor_.now() + 200 * kMilli >= deadline) return nullptr;
    usleep(200 * 1000);
  }
}

Completion Controller::wait_command(Queue& q, const nvme::Sqe& sqe, void* buf, uint32_t len,
                                    DataDir dir, Nanos timeout) {
  struct Waiter {
    bool done = false;
    Completion c;
  } w;
  auto cb = [](void* ctx, uint64_t, const Completion& c) {
    auto* w = static_cast<Waiter*>(ctx);
    w->c = c;
    w->done = true;
  };
  // A queue of the library (caller-chosen cids) is set up before any submitter has a cid:
  // its Connect and authentication commands take cid 0, one at a time.
  iovec iov{buf, len};
  const bool sent = q.external_cids() ? q.submitv(sqe, &iov, buf ? 1 : 0, len, dir, cb, &w, 0, 0)
                                      : q.submit(sqe, buf, len, dir, cb, &w, 0);
  if (!sent) {
    Completion c;
    c.status = kStatusHostPathError;
    return c;
  }
  // The queue's watchdog fails the command at its own timeout; this bound is a backstop.
  // The queue's own reactor: a library I/O queue lives on its owner's thread.
  Reactor& r = q.reactor();
  const Nanos deadline = r.now() + timeout + kSecond;
  while (!w.done && r.now() < deadline) r.run_once(10 * kMilli);
  if (!w.done) {
    q.close("admin command timed out");
    if (!w.done) w.c.status = kStatusHostAborted;
  }
  return w.c;
}

nvme::Sqe Controller::connect_command(uint16_t qid, uint16_t sqsize,
                                      nvme::ConnectData* data) const {
  uint8_t hostid[16];
  std::memcpy(hostid, options_.hostid.data(), 16);
  nvme::fill_connect_data(*data, hostid, qid == 0 ? 0xFFFF : cntlid(), trid_.subnqn, hostnqn_);
  uint8_t cattr = options_.disable_sqflow ? nvme::kCattrDisableSqFlowControl : 0;
  // KATO is a property of the controller: only the admin Connect carries it.
  return nvme::make_connect(qid, sqsize, qid == 0 ? options_.kato_ms : 0, cattr);
}

std::string Controller::connect_answer(uint16_t qid, const Completion& c, const Queue& q,
                                       bool* authenticate) {
  *authenticate = false;
  if (!c.ok()) {
    std::string why =
        "Connect qid " + std::to_string(qid) + " to " + trid_.subnqn + ": " + describe(c);
    if (c.status == nvme::status::kConnectInvalidParam)
      why += " (invalid " + std::string((c.dw0 >> 16) & 1 ? "data" : "command") +
             " field at byte " + std::to_string(c.dw0 & 0xFFFF) + ")";
    if (!q.error().empty()) why += ": " + q.error();
    return why;
  }
  if (qid == 0) cntlid_.store(uint16_t(c.dw0 & 0xFFFF), std::memory_order_release);
  if (c.dw0 & nvme::auth::kAuthreqAscr)
    return "Connect qid " + std::to_string(qid) +
           ": the controller requires secure channel concatenation (AUTHREQ.ASCR), not "
           "supported";
  if (c.dw0 & nvme::auth::kAuthreqAtr) {
    *authenticate = true;
    return "";
  }
  if (have_ctrl_key_)
    return "Connect qid " + std::to_string(qid) +
           ": a controller secret was given, but the controller does not ask to "
           "authenticate (AUTHREQ.ATR clear): it cannot be authenticated";
  return "";
}

std::string Controller::connect_queue(Queue& q, uint16_t qid, uint16_t sqsize) {
  nvme::ConnectData data;
  const nvme::Sqe sqe = connect_command(qid, sqsize, &data);
  Completion c =
      wait_command(q, sqe, &data, sizeof(data), DataDir::kHostToController, admin_timeout());
  bool auth = false;
  if (std::string e = connect_answer(qid, c, q, &auth); !e.empty()) return e;
  return auth ? authenticate(q, qid) : "";
}

std::string Controller::connect(const TransportId& trid, const ControllerOptions& options) {
  trid_ = trid;
  options_ = options;
  if (std::all_of(options_.hostid.begin(), options_.hostid.end(), [](uint8_t b) { return !b; })) {
    std::random_device rd;
    for (auto& b : options_.hostid) b = uint8_t(rd());
    options_.hostid[6] = uint8_t((options_.hostid[6] & 0x0F) | 0x40);  // UUID version 4
    options_.hostid[8] = uint8_t((options_.hostid[8] & 0x3F) | 0x80);
  }
  hostnqn_ = !options_.hostnqn.empty() ? options_.hostnqn
             : !trid_.hostnqn.empty()
                 ? trid_.hostnqn
                 : "nqn.2014-08.org.nvmexpress:uuid:" + uuid_text(options_.hostid);
  for (auto* secret : {&options_.dhchap_secret, &options_.dhchap_ctrl_secret}) {
    if (secret->empty()) continue;
    const bool host = secret == &options_.dhchap_secret;
    std::string why;
    auto parsed = auth::parse_secret(*secret, &why);
    if (!parsed) return std::string(host ? "--dhchap-secret" : "--dhchap-ctrl-secret") + ": " + why;
    // The host key is transformed with the host NQN, the controller's with the subsystem's.
    (host ? host_key_ : ctrl_key_) = auth::transform_key(*parsed, host ? hostnqn_ : trid_.subnqn);
    (host ? have_host_key_ : have_ctrl_key_) = true;
    auth::wipe(parsed->key);
  }
  if (have_ctrl_key_ && !have_host_key_)
    return "--dhchap-ctrl-secret needs --dhchap-secret: the host authenticates first";
  if (!options_.tls_psk_file.empty()) {
    std::vector<auth::ConfiguredPsk> keys;
    std::string why;
    if (!auth::load_tls_psk_file(options_.tls_psk_file, &keys, &why)) return "--tls: " + why;
    const auth::ConfiguredPsk& key = keys.front();
    transport::TlsPsk psk;
    psk.hash = key.cipher_hash();
    auth::Bytes retained = auth::retained_psk(key, hostnqn_);
    const std::string digest = auth::psk_digest(psk.hash, retained, hostnqn_, trid_.subnqn);
    psk.identity = auth::psk_identity(psk.hash, hostnqn_, trid_.subnqn, digest);
    psk.key = auth::tls_psk(psk.hash, retained, digest);
    auth::wipe(retained);
    for (auto& k : keys) auth::wipe(k.key);
    tls_ = transport::TlsContext::client(std::move(psk), &why);
    if (!tls_) return "--tls: " + why;
  }
  return connect_admin();
}

void Controller::drop(const std::string& why) {
  reactor_.cancel(keep_alive_);
  const bool was = shutting_down_;
  shutting_down_ = true;  // our own close is not a failure to report
  if (admin_) admin_->close(why);
  shutting_down_ = was;
}

std::string Controller::reconnect() {
  drop("reconnecting");
  admin_.reset();
  error_.clear();
  keep_alive_inflight_ = false;
  return connect_admin();
}

void Controller::lost(const std::string& why) {
  if (shutting_down_) return;
  if (error_.empty()) error_ = why;
  if (on_lost_) on_lost_(on_lost_ctx_, why);
}

std::string Controller::connect_admin() {
  QueueOptions qo;
  qo.qid = 0;
  qo.depth = kAdminDepth;
  qo.hdr_digest = options_.hdr_digest;
  qo.data_digest = options_.data_digest;
  qo.command_timeout = options_.admin_timeout;
  qo.max_transfer = 1u << 20;
  qo.tls = tls_.get();
  std::string err;
  admin_ = open_queue(qo, &err);
  if (!admin_)
    return "admin queue to " + trid_.traddr + ":" + std::to_string(trid_.trsvcid) + ": " + err;
  if (std::string e = connect_queue(*admin_, 0, kAdminDepth - 1); !e.empty()) return e;

  uint64_t v = 0;
  if (std::string e = property_get(nvme::reg::kCap, true, &v); !e.empty()) return e;
  cap_ = v;
  if (std::string e = property_get(nvme::reg::kVs, false, &v); !e.empty()) return e;
  vs_ = uint32_t(v);
  cc_ = kCcEnable | kCcIosqes | kCcIocqes;
  if (std::string e = property_set(nvme::reg::kCc, cc_, false); !e.empty()) return e;
  // CAP.TO is in 500 ms units: the longest the controller may take to become ready.
  const Nanos ready_timeout =
      std::clamp<Nanos>(Nanos((cap_ >> 24) & 0xFF) * 500 * kMilli, 500 * kMilli, 60 * kSecond);
  const Nanos ready_deadline = reactor_.now() + ready_timeout;
  for (;;) {
    if (std::string e = property_get(nvme::reg::kCsts, false, &v); !e.empty()) return e;
    if (v & kCstsCfs) return "controller fatal status (CSTS " + hex(v) + ") after CC.EN";
    if (v & kCstsRdy) break;
    if (reactor_.now() >= ready_deadline)
      return "CSTS.RDY not set " + std::to_string(ready_timeout / kMilli) + " ms after CC.EN";
    const Nanos until = reactor_.now() + 10 * kMilli;
    while (reactor_.now() < until) reactor_.run_once(until - reactor_.now());
  }
  id_ = std::make_unique<nvme::IdentifyController>();
  Completion c =
      admin(nvme::make_identify(1, 0), id_.get(), sizeof(*id_), DataDir::kControllerToHost);
  if (!c.ok()) return "Identify Controller: " + describe(c);
  if (id_->icdoff != 0 && trid_.subnqn != nvme::kDiscoveryNqn)
    return "controller reports ICDOFF " + std::to_string(id_->icdoff) + " (NVMe/TCP wants 0)";
  if (options_.kato_ms > 0)
    reactor_.arm(keep_alive_, reactor_.now() + options_.kato_ms * kMilli / 2);
  return "";
}

uint32_t Controller::max_transfer_bytes() const {
  if (!id_ || id_->mdts == 0) return 0;
  const uint64_t mps = 4096ull << ((cap_ >> 48) & 0xF);  // CAP.MPSMIN
  return uint32_t(std::min<uint64_t>(mps << id_->mdts, 1u << 31));
}

uint32_t Controller::io_incapsule_bytes() const {
  if (!id_) return 0;
  const uint64_t bytes = uint64_t(id_->ioccsz) * 16;
  return bytes > sizeof(nvme::Sqe) ? uint32_t(bytes - sizeof(nvme::Sqe)) : 0;
}

std::string Controller::create_io_queues() {
  if (!admin_ || !admin_->is_open()) return "admin queue not connected";
  const uint16_t n = options_.io_queues;
  Completion c = admin(nvme::make_set_num_queues(n, n));
  if (!c.ok()) return "Set Features Number of Queues: " + describe(c);
  const uint32_t granted = std::min((c.dw0 & 0xFFFF) + 1, (c.dw0 >> 16) + 1);
  if (granted < n)
    return "controller grants " + std::to_string(granted) + " I/O queues, " + std::to_string(n) +
           " asked for";
  // One SQ entry stays empty so a full queue is told from an empty one: depth + 1 entries.
  const uint32_t mqes = uint32_t(cap_ & 0xFFFF) + 1;
  if (uint32_t(options_.io_depth) + 1 > mqes)
    return "queue depth " + std::to_string(options_.io_depth) + " needs " +
           std::to_string(options_.io_depth + 1) + " entries, the controller allows " +
           std::to_string(mqes) + " (CAP.MQES)";
  QueueOptions qo;
  qo.depth = options_.io_depth;
  qo.hdr_digest = options_.hdr_digest;
  qo.data_digest = options_.data_digest;
  qo.coalesce = options_.coalesce;
  qo.command_timeout = options_.io_timeout;
  qo.max_transfer = options_.max_transfer;
  qo.tls = tls_.get();
  for (uint16_t qid = 1; qid <= n; ++qid) {
    qo.qid = qid;
    std::string err;
    auto q = open_queue(qo, &err);
    if (!q) return "I/O queue " + std::to_string(qid) + ": " + err;
    if (std::string e = connect_queue(*q, qid, options_.io_depth); !e.empty()) return e;
    q->set_incapsule_limit(io_incapsule_bytes());
    io_.push_back(std::move(q));
  }
  return "";
}

Completion Controller::admin(const nvme::Sqe& sqe, void* buf, uint32_t len, DataDir dir) {
  if (!admin_) {
    Completion c;
    c.status = kStatusHostPathError;
    return c;
  }
  return wait_command(*admin_, sqe, buf, len, dir, admin_timeout());
}

std::string Controller::property_get(uint32_t offset, bool eight_bytes, uint64_t* value) {
  Completion c = admin(nvme::make_property_get(offset, eight_bytes));
  if (!c.ok()) return "Property Get " + hex(offset) + ": " + describe(c);
  *value = uint64_t(c.dw0) | (eight_bytes ? uint64_t(c.dw1) << 32 : 0);
  return "";
}

std::string Controller::property_set(uint32_t offset, uint64_t value, bool eight_bytes) {
  Completion c = admin(nvme::make_property_set(offset, value, eight_bytes));
  if (!c.ok()) return "Property Set " + hex(offset) + " = " + hex(value) + ": " + describe(c);
  return "";
}

std::string Controller::identify_namespace(uint32_t nsid, nvme::IdentifyNamespace* out) {
  Completion c = admin(nvme::make_identify(0, nsid), out, sizeof(*out), DataDir::kControllerToHost);
  if (!c.ok()) return "Identify Namespace " + std::to_string(nsid) + ": " + describe(c);
  return "";
}

std::string Controller::active_namespaces(std::vector<uint32_t>* out) {
  std::vector<uint32_t> list(1024);
  Completion c = admin(nvme::make_identify(2, 0), list.data(), 4096, DataDir::kControllerToHost);
  out->clear();
  if (!c.ok()) {
    // NVMe 1.0 controllers lack CNS 2: every nsid up to NN is then a candidate.
    if (!id_ || id_->nn == 0) return "Identify Active Namespace List: " + describe(c);
    for (uint32_t n = 1; n <= std::min<uint32_t>(id_->nn, 1024); ++n) out->push_back(n);
    return "";
  }
  for (uint32_t nsid : list) {
    if (nsid == 0) break;
    out->push_back(nsid);
  }
  return "";
}

std::string Controller::namespace_info(uint32_t nsid, NamespaceInfo* out) {
  if (nsid == 0) {
    std::vector<uint32_t> list;
    if (std::string e = active_namespaces(&list); !e.empty()) return e;
    if (list.empty()) return "the subsystem has no active namespace";
    nsid = list.front();
  }
  auto ns = std::make_unique<nvme::IdentifyNamespace>();
  if (std::string e = identify_namespace(nsid, ns.get()); !e.empty()) return e;
  if (ns->nsze == 0) return "namespace " + std::to_string(nsid) + " is not active (NSZE 0)";
  const uint8_t lbads = ns->lbaf[ns->flbas & 0xF].lbads;
  if (lbads < 9 || lbads > 16)
    return "namespace " + std::to_string(nsid) + " has LBA data size 2^" + std::to_string(lbads);
  out->nsid = nsid;
  out->blocks = ns->nsze;
  out->block_size = 1u << lbads;
  return "";
}

std::string Controller::discovery_log(std::vector<uint8_t>* out) {
  constexpr size_t kEntry = sizeof(nvme::DiscoveryLogEntry);
  constexpr uint64_t kMaxRecords = 1000;  // keeps the page within one 1 MiB transfer
  for (int attempt = 0; attempt < 4; ++attempt) {
    nvme::DiscoveryLogHeader hdr;
    Completion c = admin(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, sizeof(hdr), 0),
                         &hdr, sizeof(hdr), DataDir::kControllerToHost);
    if (!c.ok()) return "Get Log Page 0x70 (header): " + describe(c);
    const uint64_t numrec = std::min<uint64_t>(hdr.numrec, kMaxRecords);
    out->assign(sizeof(hdr) + numrec * kEntry, 0);
    c = admin(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, uint32_t(out->size()), 0),
              out->data(), uint32_t(out->size()), DataDir::kControllerToHost);
    if (!c.ok()) return "Get Log Page 0x70: " + describe(c);
    nvme::DiscoveryLogHeader again;
    std::memcpy(&again, out->data(), sizeof(again));
    // The log changed between the two reads: its entries may not match the count.
    if (again.genctr == hdr.genctr && again.numrec == hdr.numrec) return "";
  }
  return "discovery log kept changing (genctr) across 4 reads";
}

void Controller::shutdown(Nanos timeout) {
  reactor_.cancel(keep_alive_);
  shutting_down_ = true;
  for (auto& q : io_) q->close("host disconnect");
  if (admin_ && admin_->is_open()) {
    // NVMe/TCP has no Disconnect for the admin queue: shut the controller down, then close.
    const Nanos deadline = reactor_.now() + timeout;
    // Capped, not written into options_: the library's I/O queue set-ups read those on
    // their own threads meanwhile.
    const Nanos saved_cap = timeout_cap_.load(std::memory_order_relaxed);
    set_timeout_cap(saved_cap > 0 ? std::min(saved_cap, timeout) : timeout);
    if (property_set(nvme::reg::kCc, (cc_ & ~(3u << 14)) | kCcShnNormal, false).empty()) {
      uint64_t csts = 0;
      while (reactor_.now() < deadline && admin_->is_open()) {
        if (!property_get(nvme::reg::kCsts, false, &csts).empty()) break;
        if ((csts & kCstsShstMask) == kCstsShstDone) break;
        const Nanos until = std::min(deadline, reactor_.now() + 10 * kMilli);
        while (reactor_.now() < until) reactor_.run_once(until - reactor_.now());
      }
    }
    set_timeout_cap(saved_cap);
  }
  if (admin_) admin_->close("host disconnect");
}

void Controller::on_keep_alive_timer() {
  if (!admin_ || !admin_->is_open()) return;
  // One keep alive at a time: a slow answer is the watchdog's business, not a reason to pile up.
  if (!keep_alive_inflight_ && admin_->submit(nvme::make_keep_alive(), nullptr, 0, DataDir::kNone,
                                              &Controller::on_keep_alive_done, this, 0)) {
    keep_alive_inflight_ = true;
    keep_alives_.fetch_add(1, std::memory_order_relaxed);
  }
  reactor_.arm(keep_alive_, reactor_.now() + options_.kato_ms * kMilli / 2);
}

void Controller::on_keep_alive_done(void* ctx, uint64_t, const Completion& c) {
  auto* self = static_cast<Controller*>(ctx);
  self->keep_alive_inflight_ = false;
  // A queue that failed under it has reported itself already.
  if (!c.ok() && self->admin_ && self->admin_->is_open()) self->lost("Keep Alive: " + describe(c));
}

void Controller::on_queue_failure(void* ctx, Queue& q) {
  auto* self = static_cast<Controller*>(ctx);
  if (self->shutting_down_) return;
  self->lost((q.qid() == 0 ? std::string("admin queue: ")
                           : "I/O queue " + std::to_string(q.qid()) + ": ") +
             q.error());
}

}  // namespace sens::host
