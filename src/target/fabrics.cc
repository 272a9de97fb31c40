// The Fabrics command set: Connect, Property Get/Set, Disconnect.
#include <cstring>

#include "auth/tls_psk.h"
#include "common/log.h"
#include "target/command_queue.h"
#include "target/dhchap.h"
#include "target/target.h"
#include "wire/nvme_auth.h"
#include "wire/nvme_build.h"

namespace sens::target::fabrics {

namespace st = nvme::status;

namespace {

constexpr uint32_t kCcEnable = 1, kCstsReady = 1;
constexpr uint32_t kShnShift = 14, kShstShift = 2, kShstProcessing = 1, kShstComplete = 2;

// Connect's Invalid Parameters answer names the offending field (IATTR, IPO).
uint64_t ipo(uint32_t offset, bool in_data) {
  return (in_data ? (1u << 16) : 0u) | offset;
}

void set_shst(Controller& c, uint32_t shst) {
  c.csts = (c.csts & ~(3u << kShstShift)) | (shst << kShstShift);
}

void connect(CommandQueue& q, Request& r) {
  auto& ctx = q.ctx();
  auto& cmd = reinterpret_cast<const nvme::ConnectCmd&>(r.sqe);
  if (q.connected()) return q.complete(r, st::kCmdSeqError);
  if (!r.in_capsule || r.xfer_len != sizeof(nvme::ConnectData))
    return q.complete(r, st::kSglInvalidDataLength);
  if (cmd.recfmt != 0) return q.complete(r, st::kConnectIncompatibleFormat);
  auto& data = *reinterpret_cast<const nvme::ConnectData*>(r.buf);
  std::string subnqn(nvme::fixed_string(data.subnqn, sizeof(data.subnqn)));
  std::string hostnqn(nvme::fixed_string(data.hostnqn, sizeof(data.hostnqn)));
  Subsystem* sub = ctx.registry.find(subnqn);
  // A discovery-only listener serves the discovery subsystem only.
  if (!sub || (q.via_discovery_listener() && !sub->discovery)) {
    LOG_INFO("connect: unknown subsystem '%s'%s", subnqn.c_str(),
             sub ? " on a discovery listener" : "");
    return q.complete(r, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectData, subnqn), true));
  }
  if (!sub->host_allowed(hostnqn)) {
    LOG_INFO("connect: host '%s' not allowed on '%s'", hostnqn.c_str(), subnqn.c_str());
    return q.complete(r, st::kConnectInvalidHost, ipo(offsetof(nvme::ConnectData, hostnqn), true));
  }
  // What the subsystem requires of this host, on whatever listener it came (its NQN is public:
  // a PSK-only host must not be impersonated on a plain port).
  if (sub->tls_required(hostnqn) && !q.tls_identity()) {
    LOG_INFO("connect: host '%s' must connect to '%s' over TLS (require_tls)", hostnqn.c_str(),
             subnqn.c_str());
    return q.complete(r, st::kConnectInvalidHost, ipo(offsetof(nvme::ConnectData, hostnqn), true));
  }
  if (sub->auth_required(hostnqn) && !sub->auth_for(hostnqn)) {
    LOG_INFO("connect: host '%s' must authenticate to '%s' and has no key (require_auth)",
             hostnqn.c_str(), subnqn.c_str());
    return q.complete(r, st::kConnectInvalidHost, ipo(offsetof(nvme::ConnectData, hostnqn), true));
  }
  // Over TLS the PSK identity names the host and subsystem: a Connect must be for them.
  if (const std::string* identity = q.tls_identity()) {
    auto id = auth::parse_psk_identity(*identity);
    if (!id || id->hostnqn != hostnqn || id->subnqn != subnqn) {
      LOG_INFO("connect: host '%s' to '%s' over a TLS session of another identity", hostnqn.c_str(),
               subnqn.c_str());
      return q.complete(r, st::kConnectInvalidHost,
                        ipo(offsetof(nvme::ConnectData, hostnqn), true));
    }
  }
  uint32_t entries = uint32_t(cmd.sqsize) + 1;
  if (cmd.sqsize == 0 || entries > ctx.config.queue_size)
    return q.complete(r, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectCmd, sqsize), false));

  std::shared_ptr<Controller> ctrl;
  if (cmd.qid == 0) {
    if (data.cntlid != 0xFFFF)
      return q.complete(r, st::kConnectInvalidParam,
                        ipo(offsetof(nvme::ConnectData, cntlid), true));
    // Set before the controller is published: other reactors (its I/O queues' Connect) and the
    // management path (disconnects, ANA notices) read these without the admin queue's thread.
    ctrl = ctx.registry.create_controller(sub, hostnqn, data.hostid, cmd.kato, [&](Controller& c) {
      c.auth = sub->auth_for(hostnqn);
      c.peer = q.peer_address();
      c.over_tls = q.tls_identity() != nullptr;
      c.ana = q.ana_port() ? q.ana_port() : ctx.registry.default_ana();
    });
    if (!ctrl) return q.complete(r, st::kConnectControllerBusy);
  } else {
    ctrl = ctx.registry.find_controller(data.cntlid);
    if (!ctrl || ctrl->subsystem != sub || ctrl->hostnqn != hostnqn)
      return q.complete(r, st::kConnectInvalidParam,
                        ipo(offsetof(nvme::ConnectData, cntlid), true));
    // An I/O queue belongs to the host that created the controller: same NQN and host ID.
    if (std::memcmp(ctrl->hostid, data.hostid, sizeof data.hostid) != 0) {
      LOG_INFO("connect: I/O queue %u for controller %u with another host ID (host '%s')", cmd.qid,
               ctrl->cntlid, hostnqn.c_str());
      return q.complete(r, st::kConnectInvalidParam,
                        ipo(offsetof(nvme::ConnectData, hostid), true));
    }
    // And it joins only once that host has proven its key on the admin queue.
    if (ctrl->auth && !ctrl->admin_authenticated.load()) {
      LOG_INFO("connect: I/O queue %u for controller %u before the admin queue authenticated",
               cmd.qid, ctrl->cntlid);
      return q.complete(r, st::kAuthRequired);
    }
    uint32_t granted = ctrl->io_queues_granted;  // 0: the host never asked; allow the maximum
    if (sub->discovery || cmd.qid > (granted ? granted : ctx.config.max_io_queues))
      return q.complete(r, st::kConnectInvalidParam, ipo(offsetof(nvme::ConnectCmd, qid), false));
  }
  // Registering checks, under the controller's lock, that the admin queue is still there: an
  // I/O queue cannot slip in after the admin queue closed its siblings.
  switch (ctrl->add_queue({&q.counters(), &ctx, q.connection_id(), cmd.qid})) {
    case Controller::AddQueue::kAdded:
      break;
    case Controller::AddQueue::kDuplicate:
      LOG_INFO("connect: queue %u of controller %u is already connected", cmd.qid, ctrl->cntlid);
      return q.complete(r, st::kCmdSeqError);
    case Controller::AddQueue::kGone:
      return q.complete(r, st::kConnectInvalidParam,
                        ipo(offsetof(nvme::ConnectData, cntlid), true));
  }
  uint16_t cntlid = ctrl->cntlid;
  LOG_DEBUG("connect: %s qid %u sqsize %u cntlid %u host %s", subnqn.c_str(), cmd.qid, cmd.sqsize,
            cntlid, hostnqn.c_str());
  // The subsystem's key of this moment (rotated live: the next authentication uses it).
  std::shared_ptr<const HostAuth> auth = ctrl->auth ? sub->auth_for(hostnqn) : nullptr;
  if (ctrl->auth && !auth) auth = ctrl->auth;
  q.on_connected(sub, std::move(ctrl), cmd.qid, entries,
                 cmd.cattr & nvme::kCattrDisableSqFlowControl, auth);
  // AUTHREQ.ATR: this queue must authenticate before anything else runs on it.
  q.complete(r, st::kSuccess, cntlid | (auth ? nvme::auth::kAuthreqAtr : 0u));
}

void property_get(CommandQueue& q, Request& r) {
  auto& p = reinterpret_cast<const nvme::PropertyCmd&>(r.sqe);
  Controller& c = *q.controller();
  uint64_t value = 0;
  switch (p.offset) {
    case nvme::reg::kCap:
      // MQES, CQR (contiguous queues required), TO = 15 x 500 ms, CSS = NVM, MPSMIN = 4 KiB.
      value = uint64_t(q.ctx().config.queue_size - 1) | (1ull << 16) | (15ull << 24) | (1ull << 37);
      break;
    case nvme::reg::kVs:
      value = kNvmeVersion;
      break;
    case nvme::reg::kCc:
      value = c.cc;
      break;
    case nvme::reg::kCsts:
      value = c.csts;
      break;
    default:
      return q.complete(r, st::kInvalidField);
  }
  q.complete(r, st::kSuccess, value);  // a 64-bit property answers in dw0 and dw1
}

// Shutdown: every namespace flushed (durable) before CSTS.SHST says complete.
void shutdown_step(CommandQueue& q, Request& r) {
  Subsystem* sub = q.subsystem();
  while (r.walk_next < kMaxNsid) {
    Namespace* ns = sub->ns(++r.walk_next);
    if (!ns) continue;
    q.bind_ns(r, ns);
    return q.submit(r, storage::Op::kFlush, 0, 0, nullptr);
  }
  set_shst(*q.controller(), kShstComplete);
  q.complete(r, st::kSuccess);
}

void property_set(CommandQueue& q, Request& r) {
  auto& p = reinterpret_cast<const nvme::PropertyCmd&>(r.sqe);
  if (p.offset != nvme::reg::kCc) return q.complete(r, st::kInvalidField);
  Controller& c = *q.controller();
  uint32_t cc = uint32_t(p.value);
  uint32_t old = c.cc;
  c.cc = cc;
  bool en = cc & kCcEnable, was = old & kCcEnable;
  if (en && !was) c.csts |= kCstsReady;  // ready at once: nothing to initialise
  if (!en && was) c.csts &= ~kCstsReady;
  uint32_t shn = (cc >> kShnShift) & 3, old_shn = (old >> kShnShift) & 3;
  if (shn && !old_shn) {
    set_shst(c, kShstProcessing);
    r.walk_next = 0;
    return shutdown_step(q, r);
  }
  if (!shn && !en) set_shst(c, 0);
  q.complete(r, st::kSuccess);
}

}  // namespace

Plan plan(CommandQueue& q, Request& r) {
  Plan p;
  uint8_t fctype = r.sqe.fctype();
  if (fctype == nvme::fctype::kConnect) return p;  // its data came in the capsule
  if (!q.connected()) {
    p.status = st::kCmdSeqError;
  } else if (fctype == nvme::fctype::kAuthSend || fctype == nvme::fctype::kAuthReceive) {
    return dhchap::plan(q, r);
  } else if (q.dhchap() && !q.dhchap()->authenticated() && fctype != nvme::fctype::kDisconnect) {
    p.status = st::kAuthRequired;
  } else if (fctype == nvme::fctype::kPropertyGet || fctype == nvme::fctype::kPropertySet) {
    if (q.qid() != 0) p.status = st::kInvalidField;
  } else if (fctype != nvme::fctype::kDisconnect) {
    p.status = st::kInvalidOpcode;
  }
  return p;
}

void execute(CommandQueue& q, Request& r) {
  switch (r.sqe.fctype()) {
    case nvme::fctype::kConnect:
      return connect(q, r);
    case nvme::fctype::kPropertyGet:
      return property_get(q, r);
    case nvme::fctype::kPropertySet:
      return property_set(q, r);
    case nvme::fctype::kDisconnect:
      return q.disconnect(r);
    case nvme::fctype::kAuthSend:
    case nvme::fctype::kAuthReceive:
      return dhchap::execute(q, r);
    default:
      return q.complete(r, st::kInvalidOpcode);
  }
}

void device_done(CommandQueue& q, Request& r) {
  if (r.io.result != 0)
    LOG_WARN("namespace %u: flush at shutdown failed: %s", r.ns ? r.ns->nsid : 0,
             std::strerror(-r.io.result));
  shutdown_step(q, r);  // (a failed flush still lets the others run)
}

}  // namespace sens::target::fabrics
