#include "target/tcp_queue.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "coalesce/stats_json.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "target/dhchap.h"
#include "target/target.h"
#include "wire/nvme_build.h"

namespace sens::target {

namespace st = nvme::status;
using coalesce::FlushReason;
using coalesce::PduClass;
using S = ReqState;

namespace {
constexpr Nanos kSetupTimeout = 10 * kSecond;  // ICReq + Connect must arrive by then
// DH-HMAC-CHAP must end by then after Connect (an ffdhe8192 exchange in a slow VM included).
constexpr Nanos kAuthTimeout = 30 * kSecond;
constexpr Nanos kCloseTimeout = 2 * kSecond;  // a TermReq / last response the peer never reads
// A host is dropped once no admin command arrived for kato plus one KAS granule, so a host
// that sends Keep Alive at exactly kato (as older Linux hosts do) is not dropped by a race.
constexpr Nanos kKeepAliveGrace = kKasUnits * 100 * kMilli;
constexpr size_t kRecvBudget = 256 * 1024;  // per readiness event, for fairness
// Before ICReq/Connect a queue reads small PDUs only: a small staging buffer keeps an idle
// connection cheap; Connect grows it (I/O queues) to batch many PDUs per read.
constexpr size_t kSetupStaging = 4096;
constexpr size_t kIoStaging = 64 * 1024;
}  // namespace

TcpQueue::TcpQueue(ReactorContext& ctx, int fd, uint64_t id, Endpoint endpoint)
    : CommandQueue(ctx),
      fd_(fd),
      id_(id),
      endpoint_(std::move(endpoint)),
      reader_(pdu::Receiver::kController, *this, kSetupStaging),
      sendq_(ctx.reactor, ctx.config.coalesce, *this),
      pool_(ctx.pool),
      inline_pool_(ctx.inline_pool),
      ka_timer_([this] { on_keep_alive_timer(); }),
      setup_timer_([this] { on_setup_timer(); }),
      stall_(Nanos(ctx.config.stall_timeout_ms) * kMilli),  // issue 29 hook
      stall_timer_([this] { on_stall_timer(); }) {          // issue 29 hook
  pool_.attach(&pool_account_);                             // issue 29 hook: pool shares
  inline_pool_.attach(&inline_account_);                    // issue 29 hook
  sendq_.set_fd(fd_);
  // Until Connect names the queue, nothing is delayed: the admin queue never is.
  coalesce::Config urgent = ctx.config.coalesce;
  urgent.policy = coalesce::Policy::kOff;
  sendq_.set_config(urgent);
  reader_.set_max_plen(pdu::kMaxHlen + 2 * pdu::kDigestLen + kAdminDataMax);
  reader_waiter_.queue = this;
  reader_waiter_.ready = &TcpQueue::on_reader_buffer;
  reader_waiter_.account = &inline_account_;  // issue 29 hook
  if (endpoint_.tls && ctx.target.tls()) {
    tls_ = std::make_unique<transport::TlsChannel>(*ctx.target.tls(), fd_);
    state_ = State::kHandshake;  // the set-up deadline bounds the handshake too
  }
  ctx_.reactor.add(fd_, EPOLLIN, this);
  ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kSetupTimeout);
  LOG_DEBUG("connection %llu from %s", static_cast<unsigned long long>(id_),
            endpoint_.peer.c_str());
}

TcpQueue::~TcpQueue() {
  if (!closed_) close("destroyed");
  ctx_.reactor.add_outstanding(-active_requests_);  // requests a close left behind
  inline_pool_.cancel(&reader_waiter_);
  inline_pool_.put(held_buf_, held_bytes_, false, &inline_account_);
  for (auto& s : slots_) {
    pool_.cancel(s.get());
    give_back_buffer(s->req);
    bind_ns(s->req, nullptr);  // requests the close left behind let their namespace go
  }
  pool_.detach(&pool_account_);  // issue 29 hook: everything is back
  inline_pool_.detach(&inline_account_);
  if (staging_mem_) ctx_.staging_pool->put(staging_mem_, kIoStaging);  // the reader is done
}

void TcpQueue::watch(bool readable, bool writable) {
  if (closed_) return;
  if (readable == reading_ && writable == want_out_) return;
  reading_ = readable;
  want_out_ = writable;
  uint32_t ev = (readable ? uint32_t(EPOLLIN) : 0u) | (writable ? uint32_t(EPOLLOUT) : 0u);
  ctx_.reactor.modify(fd_, ev, this);
}

void TcpQueue::want_writable(bool on) {
  watch(reading_, on);
}

void TcpQueue::on_send_error(int err) {
  LOG_DEBUG("connection %llu: send failed: %s", static_cast<unsigned long long>(id_),
            std::strerror(err));
  close_pending_ = false;
  close("send error");
}

void TcpQueue::step_handshake() {
  using Io = transport::TlsChannel::Io;
  Io io = tls_->handshake();
  if (io == Io::kWantRead || io == Io::kWantWrite) {
    watch(true, io == Io::kWantWrite);
    return;
  }
  if (io != Io::kOk) {
    const std::string& e = tls_->error();
    const bool plain = e.find("wrong version number") != std::string::npos ||
                       e.find("http request") != std::string::npos ||
                       e.find("packet length too long") != std::string::npos ||
                       e.find("record layer failure") != std::string::npos;
    LOG_INFO("connection %llu (%s): TLS handshake failed, closing: %s%s",
             static_cast<unsigned long long>(id_), endpoint_.peer.c_str(), e.c_str(),
             plain ? " (a plain NVMe/TCP host on the TLS port?)" : "");
    close_pending_ = false;
    ++ctx_.io_metrics.tls_handshake_failures;
    close("TLS handshake failed");
    return;
  }
  LOG_DEBUG("connection %llu (%s): TLS 1.3 %s, identity '%s'", static_cast<unsigned long long>(id_),
            endpoint_.peer.c_str(), tls_->cipher().c_str(), tls_->peer_identity().c_str());
  reader_.set_tls(tls_.get());
  sendq_.set_tls(tls_.get());
  state_ = State::kWaitIC;
  watch(true, false);
  // The ICReq may have come with the handshake's last flight, already inside OpenSSL.
  handle_read_status(reader_.read_from(fd_, kRecvBudget));
}

const std::string* TcpQueue::tls_identity() const {
  return tls_ && tls_->established() ? &tls_->peer_identity() : nullptr;
}

void TcpQueue::on_event(uint32_t events) {
  if (closed_) return;
  if (state_ == State::kHandshake) return step_handshake();
  if (events & EPOLLOUT) sendq_.on_writable();
  if (closed_) return;
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && reading_ && !reader_.held())
    handle_read_status(reader_.read_from(fd_, kRecvBudget));
}

void TcpQueue::handle_read_status(transport::PduReader::Status status) {
  using R = transport::PduReader::Status;
  if (closed_) return;
  if (status == R::kClosed) {
    close_pending_ = false;
    close("peer closed");
  } else if (status == R::kError) {
    close_pending_ = false;
    close("receive error");
  } else if (status == R::kHeld && state_ != State::kClosing) {
    watch(false, want_out_);  // the host meets TCP back-pressure until a buffer comes back
  }
}

void TcpQueue::close(const char* why) {
  if (closed_) return;
  if (close_pending_) return;  // a TermReq or a response still leaving: closes when sent
  LOG_DEBUG("connection %llu (%s, qid %u) closed: %s", static_cast<unsigned long long>(id_),
            endpoint_.peer.c_str(), qid_, why);
  // Closed before the last flush: a send that fails in it reports back here (on_send_error),
  // and a second pass would close the descriptor and count the connection out twice.
  closed_ = true;
  state_ = State::kClosed;
  sendq_.flush(FlushReason::kClose);
  sendq_.shutdown();  // nothing may write to the descriptor number once it is closed
  ctx_.reactor.cancel(ka_timer_);
  ctx_.reactor.cancel(setup_timer_);
  ctx_.reactor.cancel(stall_timer_);  // issue 29 hook
  ctx_.reactor.remove(fd_, this);
  ::close(fd_);
  fd_ = -1;
  ctx_.target.connection_closed();
  // Buffers come back now, except those device I/O still writes into (device_done frees them).
  inline_pool_.cancel(&reader_waiter_);
  inline_pool_.put(held_buf_, held_bytes_, false, &inline_account_);
  held_buf_ = nullptr;
  for (auto& s : slots_) {
    pool_.cancel(s.get());
    if (s->qos_wait.on) s->qos_wait.on->cancel(s->qos_wait);  // THROTTLED: out of its queue
    if (s->req.state != S::kWaitingDevice) give_back_buffer(s->req);
  }
  if (ctrl_) {
    if (qid_ == 0) {
      // The admin queue owns the controller: its I/O queues go with it.
      ctx_.registry.remove_controller(ctrl_->cntlid);
      ctx_.target.close_controller_queues(ctrl_.get());
    }
    ctrl_->remove_queue(&counters_);
  }
  ctx_.on_queue_closed();
}

uint32_t TcpQueue::inline_limit() const {
  return state_ == State::kReady && qid_ != 0 ? ctx_.config.inline_data : kAdminDataMax;
}

PduClass TcpQueue::data_class() const {
  return qid_ == 0 ? PduClass::kUrgent : PduClass::kData;
}

// ---------------------------------------------------------------------------- receive side

bool TcpQueue::on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) {
  if (closed_ || state_ == State::kClosing) return false;
  switch (pdu::Type(header.type)) {
    case pdu::Type::kICReq:
      return handle_icreq(reinterpret_cast<const pdu::ICReq&>(header));
    case pdu::Type::kCapsuleCmd:
      return handle_capsule(reinterpret_cast<const pdu::CapsuleCmd&>(header), layout);
    case pdu::Type::kH2CData: {
      auto& d = reinterpret_cast<const pdu::DataHeader&>(header);
      if (d.datal != layout.data_len) {
        fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, datal),
              "H2CData DATAL differs from the data the PDU carries", &d, d.ch.hlen);
        return false;
      }
      return handle_h2c_data(d);
    }
    case pdu::Type::kH2CTermReq: {
      auto& t = reinterpret_cast<const pdu::TermReq&>(header);
      LOG_INFO("connection %llu: host terminated the connection (fes 0x%x fei 0x%x)",
               static_cast<unsigned long long>(id_), t.fes, t.fei);
      close_pending_ = false;
      close("H2CTermReq");
      return false;
    }
    default:  // check_common admits only host-to-controller types
      fatal(pdu::fes::kInvalidHeaderField, 0, "unexpected PDU type", &header, header.hlen);
      return false;
  }
}

void TcpQueue::on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) {
  fatal(check.fes, check.fei, check.why ? check.why : "bad PDU", header, len);
}

void TcpQueue::fatal(uint16_t fes, uint32_t fei, const char* why, const void* header,
                     uint32_t len) {
  if (closed_ || state_ == State::kClosing) return;
  LOG_INFO("connection %llu (%s): fatal transport error 0x%x at byte %u: %s",
           static_cast<unsigned long long>(id_), endpoint_.peer.c_str(), fes, fei, why);
  uint32_t n = pdu::build_term_req(term_hdr_, pdu::Type::kC2HTermReq, fes, fei, header, len);
  send_last({term_hdr_.bytes, n});
}

void TcpQueue::send_last(iovec pdu) {
  state_ = State::kClosing;
  watch(false, want_out_);
  close_pending_ = true;
  ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kCloseTimeout);
  sendq_.enqueue(&pdu, 1, PduClass::kUrgent,
                 {[](void* self, uint64_t) {
                    auto* q = static_cast<TcpQueue*>(self);
                    q->close_pending_ = false;
                    q->close("after its last PDU");
                  },
                  this, 0});
}

bool TcpQueue::handle_icreq(const pdu::ICReq& req) {
  if (state_ != State::kWaitIC) {
    fatal(pdu::fes::kPduSequenceError, 0, "second ICReq", &req, sizeof(req));
    return false;
  }
  pdu::Check check = pdu::check_icreq(req);
  if (!check) {
    fatal(check.fes, check.fei, check.why, &req, sizeof(req));
    return false;
  }
  if (req.hpda != 0) {
    fatal(pdu::fes::kUnsupportedParameter, offsetof(pdu::ICReq, hpda),
          "host PDU data alignment not supported", &req, sizeof(req));
    return false;
  }
  digests_.header = req.digest & pdu::kDigestHeader;
  digests_.data = req.digest & pdu::kDigestData;
  reader_.set_digests(digests_);
  reader_.set_after_ic(true);
  pdu::build_icresp(ic_hdr_.icresp, req.digest & (pdu::kDigestHeader | pdu::kDigestData),
                    ctx_.config.max_h2c_data);
  iovec iov{ic_hdr_.bytes, sizeof(pdu::ICResp)};
  sendq_.enqueue(&iov, 1, PduClass::kUrgent);
  state_ = State::kWaitConnect;
  return true;
}

TcpQueue::Slot* TcpQueue::take_slot() {
  if (free_.empty()) {
    if (slots_.size() >= sq_entries_) return nullptr;
    // Grown on demand (warm-up only), so a queue costs memory for the depth it really uses.
    auto s = std::make_unique<Slot>();
    s->queue = this;
    s->ready = &TcpQueue::on_slot_buffer;
    s->account = &pool_account_;  // issue 29 hook
    s->req.index = uint16_t(slots_.size());
    s->req.io.user = s.get();
    s->req.io.on_complete = &TcpQueue::on_device_done;
    s->qos_wait.owner = s.get();
    states_.add_free(1);
    free_.push_back(s->req.index);
    slots_.push_back(std::move(s));
  }
  Slot* s = slots_[free_.back()].get();
  free_.pop_back();
  return s;
}

bool TcpQueue::handle_capsule(const pdu::CapsuleCmd& cmd, const pdu::Layout& layout) {
  if (free_.empty() && slots_.size() >= sq_entries_) {
    fatal(pdu::fes::kPduSequenceError, 0, "more commands outstanding than the queue holds", &cmd,
          cmd.ch.hlen);
    return false;
  }
  // In-capsule data needs its buffer before the payload arrives. With none to be had, the
  // reader holds this header and reads nothing more until the pool serves us.
  uint8_t* buf = nullptr;
  uint32_t buf_bytes = 0;
  uint16_t pending = st::kSuccess;
  if (layout.data_len) {
    const auto& sgl = cmd.sqe.sgl;
    if (sgl.type != nvme::kSglDataBlockOffset)
      pending = st::kSglInvalidType;
    else if (sgl.addr != 0)
      pending = st::kSglInvalidOffset;
    else if (sgl.length != layout.data_len || layout.data_len > inline_limit())
      pending = st::kSglInvalidDataLength;
    if (pending == st::kSuccess) {
      if (held_buf_) {
        buf = held_buf_, buf_bytes = held_bytes_;
        held_buf_ = nullptr;
      } else if ((buf = inline_pool_.get(layout.data_len, false, &inline_account_)) != nullptr) {
        buf_bytes = layout.data_len;
      } else {
        reader_waiter_.bytes = layout.data_len;
        inline_pool_.wait(&reader_waiter_);
        if (!reader_ready_) {
          reader_.hold();
          return true;
        }
        reader_ready_ = false;  // served at once
        buf = held_buf_, buf_bytes = held_bytes_;
        held_buf_ = nullptr;
      }
    }
  }
  Slot* slot = take_slot();
  Request& r = slot->req;
  states_.advance(r, S::kNew);
  ++active_requests_;
  ctx_.reactor.add_outstanding(1);  // hybrid polling: an answer is on its way
  r.sqe = cmd.sqe;
  r.buf = buf;
  r.buf_bytes = buf_bytes;
  r.buf_inline = buf != nullptr;
  r.xfer_len = 0;
  r.received = 0;
  r.pending_status = pending;
  r.in_capsule = layout.data_len != 0;
  r.fetch = false;
  r.owns_cid = false;
  bind_ns(r, nullptr);  // (null already: release() let it go)
  ++commands_;
  if (sq_entries_ > 1) sqhd_ = uint16_t((sqhd_ + 1) % sq_entries_);
  if (qid_ == 0 && ctrl_) last_admin_ = ctx_.reactor.now();
  if (layout.data_len == 0) {
    start(r);
    return !closed_;
  }
  current_ = &r;
  if (pending == st::kSuccess) {
    r.xfer_len = layout.data_len;
    reader_.set_payload_target(r.buf, layout.data_len);
  }  // else: the reader drops the payload; the command fails once it has passed
  return true;
}

bool TcpQueue::handle_h2c_data(const pdu::DataHeader& d) {
  if (d.ttag >= slots_.size() || slots_[d.ttag]->req.state != S::kAwaitingH2C) {
    fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, ttag),
          "H2CData for no outstanding R2T (unknown ttag)", &d, d.ch.hlen);
    return false;
  }
  Request& r = slots_[d.ttag]->req;
  if (d.cccid != r.sqe.cid) {
    fatal(pdu::fes::kInvalidHeaderField, offsetof(pdu::DataHeader, cccid),
          "H2CData command id does not match its R2T", &d, d.ch.hlen);
    return false;
  }
  if (d.datao != r.received) {
    fatal(pdu::fes::kDataOutOfRange, offsetof(pdu::DataHeader, datao),
          "H2CData offset is not where the previous data ended", &d, d.ch.hlen);
    return false;
  }
  if (uint64_t(d.datao) + d.datal > r.xfer_len) {
    fatal(pdu::fes::kDataOutOfRange, offsetof(pdu::DataHeader, datal),
          "H2CData beyond the length of its R2T", &d, d.ch.hlen);
    return false;
  }
  if (d.datal > ctx_.config.max_h2c_data) {
    fatal(pdu::fes::kDataLimitExceeded, offsetof(pdu::DataHeader, datal),
          "H2CData larger than maxh2cdata", &d, d.ch.hlen);
    return false;
  }
  current_ = &r;
  reader_.set_payload_target(r.buf + d.datao, d.datal);
  return true;
}

bool TcpQueue::on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) {
  if (closed_ || state_ == State::kClosing) return false;
  Request* r = current_;
  current_ = nullptr;
  if (!r) return true;  // a TermReq's quoted bytes, already handled
  if (!digest_ok && r->pending_status == st::kSuccess) r->pending_status = st::kDataTransferError;
  if (header.type == uint8_t(pdu::Type::kCapsuleCmd)) {
    start(*r);
    return !closed_;
  }
  auto& d = reinterpret_cast<const pdu::DataHeader&>(header);
  r->received += d.datal;
  if (r->received == r->xfer_len) {
    if (r->pending_status != st::kSuccess) {
      complete(*r, r->pending_status);
    } else {
      states_.advance(*r, S::kReady);
      execute(*r);
    }
  }
  return !closed_;
}

void TcpQueue::on_reader_buffer(BufferPool::Waiter* w) {
  auto* q = static_cast<ReaderWaiter*>(w)->queue;
  q->held_buf_ = w->buf;
  q->held_bytes_ = w->bytes;
  q->reader_ready_ = true;
  if (q->reader_.held()) q->schedule_resume();
}

// ---------------------------------------------------------------------------- send side

void TcpQueue::send_data(Request& r, const void* data, uint32_t len, uint8_t* stable) {
  bool success = sqflow_disabled_ && qid_ != 0;
  uint8_t flags = pdu::flag::kDataLast | (success ? pdu::flag::kDataSuccess : 0);
  pdu::build_data(r.data_hdr.data, pdu::Type::kC2HData, r.sqe.cid, 0, 0, len, flags, digests_);
  uint32_t hl = pdu::finish_header(r.data_hdr, digests_);
  iovec iov[3];
  int n = 0;
  iov[n++] = {r.data_hdr.bytes, hl};
  iov[n++] = {const_cast<void*>(data), len};
  const bool digest = digests_.data && len;
  if (digest) {
    // Bytes that may change while they wait (a RAM namespace's) get their digest from the
    // send queue as they leave; a buffer's is taken now, while the device's copy is in cache.
    if (!stable) r.ddgst = crc32c(data, len);
    iov[n++] = {&r.ddgst, 4};
  }
  states_.advance(r, S::kSendingData);
  transport::SentCallback sent;
  if (success) sent = {&TcpQueue::on_resp_sent, this, r.index};  // no response follows
  if (stable)
    sendq_.enqueue_changeable(iov, n, 1, stable, data_class(), sent, digest ? &r.ddgst : nullptr);
  else
    sendq_.enqueue(iov, n, data_class(), sent);
  if (!success) return complete(r, st::kSuccess);
  count_done(r, st::kSuccess);
}

// Straight from a RAM namespace's memory only where nothing else can change those bytes while
// they leave: one reactor (no other thread writes the namespace; the send queue copies what
// must wait for a full socket). A data digest does not need a copy: the send queue computes it
// as the bytes leave (or are copied), so it describes the bytes sent even if a write lands
// while the PDU waits in its coalescing group.
bool TcpQueue::zero_copy_reads() const {
  return ctx_.config.cores == 1;
}

void TcpQueue::send_r2t(Request& r) {
  r.received = 0;
  pdu::build_r2t(r.r2t_hdr.r2t, r.sqe.cid, r.index, 0, r.xfer_len, digests_);
  uint32_t hl = pdu::finish_header(r.r2t_hdr, digests_);
  iovec iov{r.r2t_hdr.bytes, hl};
  sendq_.enqueue(&iov, 1, qid_ == 0 ? PduClass::kUrgent : PduClass::kControl);
}

void TcpQueue::complete(Request& r, uint16_t status, uint64_t result) {
  count_done(r, status);
  // Transient conditions may be retried; everything else carries Do Not Retry.
  // Path errors (SCT 3, ANA) must not carry it: the host retries them on another path.
  bool dnr = status != st::kSuccess && status != st::kConnectControllerBusy &&
             status != st::kNsNotReady && (status >> 8) != 3;
  auto cqe = nvme::make_cqe(r.sqe.cid, qid_, sqhd_, status, uint32_t(result), dnr);
  cqe.dw1 = uint32_t(result >> 32);
  pdu::build_capsule_resp(r.resp_hdr.resp, cqe, digests_);
  uint32_t hl = pdu::finish_header(r.resp_hdr, digests_);
  iovec iov{r.resp_hdr.bytes, hl};
  states_.advance(r, S::kSendingResponse);
  sendq_.enqueue(&iov, 1, data_class(), {&TcpQueue::on_resp_sent, this, r.index});
}

void TcpQueue::on_resp_sent(void* ctx, uint64_t index) {
  auto* self = static_cast<TcpQueue*>(ctx);
  self->release(self->slots_[index]->req);
}

// ---------------------------------------------------------------------------- Fabrics hooks

void TcpQueue::set_max_plen() {
  reader_.set_max_plen(pdu::kMaxHlen + 2 * pdu::kDigestLen +
                       std::max(inline_limit(), ctx_.config.max_h2c_data));
}

void TcpQueue::on_connected(Subsystem* sub, std::shared_ptr<Controller> ctrl, uint16_t qid,
                            uint32_t sq_entries, bool sq_flow_disabled,
                            std::shared_ptr<const HostAuth> auth) {
  subsystem_ = sub;
  ctrl_ = std::move(ctrl);
  qid_ = qid;
  sq_entries_ = sq_entries;
  sqhd_ = uint16_t(1 % sq_entries_);
  sqflow_disabled_ = sq_flow_disabled;
  cids_.assign(65536 / 64, 0);
  if (auth) {
    // The set-up deadline now bounds the authentication: a host that connects and never
    // proves its key is dropped.
    dhchap_ = std::make_unique<DhchapSession>(
        std::move(auth), sub->dhchap_hashes, sub->dhchap_dhgroups,
        DhchapSession::Identity{ctrl_->hostnqn, sub->nqn, ctrl_->cntlid, qid});
    state_ = State::kAuthenticating;
    ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kAuthTimeout);
  } else {
    state_ = State::kReady;
    ctx_.reactor.cancel(setup_timer_);
  }
  set_max_plen();
  if (qid_ != 0) resv_cache_.assign(sub->namespace_count(), ResvCache{});
  if (qid_ != 0) {
    // Under tyche the staging buffer comes coloured from the reactor's staging pool: the
    // heads of many connections' buffers then spread over the cache sets.
    uint8_t* mem = ctx_.staging_pool ? ctx_.staging_pool->get(kIoStaging) : nullptr;
    if (mem && reader_.use_staging(mem, kIoStaging)) {
      staging_mem_ = mem;
    } else {
      if (mem) ctx_.staging_pool->put(mem, kIoStaging);
      reader_.set_staging(kIoStaging);
    }
    // I/O queues coalesce: as the subsystem was retuned live, else as the target is now
    sendq_.set_config(sub->coalescing().value_or(ctx_.coalescing()));
  }
  // Keep alive starts once the host may send one: a host computing its DH value sends nothing.
  if (qid_ == 0 && ctrl_->kato_ms && !auth) reset_keep_alive();
  start_stall_watch();  // issue 29 hook
}

void TcpQueue::on_authenticated(bool ok) {
  if (closed_ || state_ == State::kClosing) return;
  if (ok && state_ == State::kAuthenticating) {
    state_ = State::kReady;
    ctx_.reactor.cancel(setup_timer_);
    set_max_plen();
    if (qid_ == 0) ctrl_->admin_authenticated = true;
    if (qid_ == 0 && ctrl_->kato_ms) reset_keep_alive();
    LOG_DEBUG("connection %llu: host '%s' authenticated on qid %u",
              static_cast<unsigned long long>(id_), ctrl_->hostnqn.c_str(), qid_);
  } else if (!ok && state_ == State::kReady) {
    // A failed re-authentication: no command runs until one succeeds, within the deadline.
    state_ = State::kAuthenticating;
    if (qid_ == 0) ctrl_->admin_authenticated = false;
    ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kAuthTimeout);
  }
}

void TcpQueue::disconnect(Request& r) {
  // Close only once the response has left (the socket may be full), with a deadline.
  states_.advance(r, S::kSendingResponse);
  auto cqe = nvme::make_cqe(r.sqe.cid, qid_, sqhd_, st::kSuccess, 0, false);
  pdu::build_capsule_resp(r.resp_hdr.resp, cqe, digests_);
  send_last({r.resp_hdr.bytes, pdu::finish_header(r.resp_hdr, digests_)});
}

void TcpQueue::keep_alive_changed() {
  if (ctrl_->kato_ms)
    reset_keep_alive();
  else
    ctx_.reactor.cancel(ka_timer_);
}

bool TcpQueue::park_aer(Request& r) {
  if (aer_outstanding_ >= kAerLimit) return false;
  aer_parked_[aer_outstanding_++] = r.index;
  states_.advance(r, S::kAer);  // completed by an event; else freed with the queue
  deliver_events();             // one may be waiting already
  return true;
}

Request& TcpQueue::unpark_aer(uint32_t i) {
  Request& r = slots_[aer_parked_[i]]->req;
  --aer_outstanding_;
  for (; i < aer_outstanding_; ++i) aer_parked_[i] = aer_parked_[i + 1];
  return r;
}

void TcpQueue::deliver_events() {
  if (closed_ || qid_ != 0 || !ctrl_) return;
  // Each notice: its enable bit (Set Features 0Bh), pending and masked flags (masked until
  // the host reads its log page with RAE clear), and the AER's result: Notice (type 2), the
  // information code, the log page.
  struct Notice {
    uint32_t enable_bit;
    std::atomic<bool>& pending;
    std::atomic<bool>& masked;
    uint32_t result;
  };
  Notice notices[] = {
      {1u << 8, ctrl_->ns_event_pending, ctrl_->ns_event_masked,
       0x2u | (0x00u << 8) | (0x04u << 16)},
      {1u << 11, ctrl_->ana_event_pending, ctrl_->ana_event_masked,
       0x2u | (0x03u << 8) | (0x0Cu << 16)},
      {1u << 31, ctrl_->disc_event_pending, ctrl_->disc_event_masked,
       0x2u | (0xF0u << 8) | (0x70u << 16)},
  };
  for (auto& n : notices) {
    if (aer_outstanding_ == 0) return;
    if (!(ctrl_->async_event_config.load() & n.enable_bit)) continue;
    if (n.masked.load() || !n.pending.exchange(false)) continue;
    n.masked = true;
    complete(unpark_aer(0), st::kSuccess, n.result);
  }
}

void TcpQueue::reset_keep_alive() {
  last_admin_ = ctx_.reactor.now();
  if (!ka_timer_.armed() && ctrl_ && ctrl_->kato_ms)
    ctx_.reactor.arm(ka_timer_, last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace);
}

void TcpQueue::on_keep_alive_timer() {
  if (closed_ || !ctrl_ || !ctrl_->kato_ms) return;
  Nanos due = last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace;
  if (ctx_.reactor.now() >= due) {
    LOG_INFO("controller %u (%s): no keep alive within %u ms, dropping the host", ctrl_->cntlid,
             ctrl_->hostnqn.c_str(), ctrl_->kato_ms);
    close("keep alive timeout");
    return;
  }
  ctx_.reactor.arm(ka_timer_, due);
}

void TcpQueue::on_setup_timer() {
  if (closed_) return;
  if (state_ == State::kClosing) {  // the TermReq / response could not be sent: close anyway
    close_pending_ = false;
    close("last PDU not sent in time");
    return;
  }
  if (state_ == State::kReady) return;
  LOG_INFO("connection %llu (%s): %s within %lld s, closing", static_cast<unsigned long long>(id_),
           endpoint_.peer.c_str(),
           state_ == State::kAuthenticating ? "not authenticated" : "no ICReq/Connect",
           static_cast<long long>(
               (state_ == State::kAuthenticating ? kAuthTimeout : kSetupTimeout) / kSecond));
  close("setup timeout");
}

void TcpQueue::retune_coalescing(const Subsystem* sub, const coalesce::Config& config) {
  if (closed_ || qid_ == 0 || !subsystem_) return;  // admin queues never coalesce
  // Target-wide: the connections of subsystems that have their own setting keep it.
  if (sub ? sub != subsystem_ : subsystem_->coalescing().has_value()) return;
  sendq_.retune(config);
}

void TcpQueue::reset_counters() {
  sendq_.reset_counters();
  reader_.reset_counters();
  commands_ = 0;
}

nlohmann::json TcpQueue::stats_json() const {
  nlohmann::json j = coalesce::to_json(sendq_.scheduler().stats());
  j["id"] = id_;
  j["peer"] = endpoint_.peer;
  j["qid"] = qid_;
  j["commands"] = commands_;
  j["recv_calls"] = reader_.counters().recv_calls;
  j["recv_bytes"] = reader_.counters().bytes;
  j["recv_holds"] = reader_.counters().holds;
  // Payload that a large read brought into staging behind a header and that was then copied
  // to its command's buffer (the rest was read in place).
  j["recv_copied_payload_bytes"] = reader_.counters().copied_payload_bytes;
  j["sent_bytes"] = sendq_.counters().bytes;
  j["snapshot_bytes"] = sendq_.counters().snapshot_bytes;
  j["requests"] = states_.to_json();
  return j;
}

}  // namespace sens::target
