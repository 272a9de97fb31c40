#include "target/tcp_queue.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "coalesce/stats_json.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/prefetch.h"
#include "target/target.h"
#include "wire/nvme_build.h"

namespace sens::target {

namespace st = nvme::status;
using coalesce::FlushReason;
using coalesce::PduClass;
using S = ReqState;

namespace {
constexpr Nanos kCloseTimeout = 2 * kSecond;  // a TermReq / last response the peer never reads
constexpr size_t kRecvBudget = 256 * 1024;    // per readiness event, for fairness
// Before ICReq/Connect a queue reads small PDUs only: a small staging buffer keeps an idle
// connection cheap; Connect grows it (I/O queues, kIoStaging) to batch many PDUs per read.
constexpr size_t kSetupStaging = 4096;
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
  LOG_DEBUG("connection %llu (%s): TLS 1.3 %s, identity '%s', records by %s, AES-GCM by %s",
            static_cast<unsigned long long>(id_), endpoint_.peer.c_str(), tls_->cipher().c_str(),
            tls_->peer_identity().c_str(), tls_->records_description().c_str(), tls_->aes_gcm());
  if (!tls_->kernel_refusal().empty()) {
    // Said once per process at INFO: the operator asked for auto and gets user-space records.
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      LOG_INFO("TLS records by sens in user space: the kernel's TLS is not available (%s)",
               tls_->kernel_refusal().c_str());
  }
  const bool own = std::strcmp(tls_->records(), "sens") == 0;
  ++ctx_.io_metrics.tls_sessions[tls_->kernel_records()                          ? 3
                                 : !own                                          ? 2
                                 : std::strcmp(tls_->aes_gcm(), "ipsec-mb") == 0 ? 0
                                                                                 : 1];
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
  // The queue is sealed behind it: whatever finishes later is freed unsent (drive()).
  sendq_.enqueue_last(&pdu, 1, PduClass::kUrgent,
                      {[](void* self, uint64_t) {
                         auto* q = static_cast<TcpQueue*>(self);
                         q->close_pending_ = false;
                         q->close("after its last PDU");
                       },
                       this, 0});
  on_closing();
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
  // FREE -> NEW; without in-capsule data the capsule is all in, and drive() goes on.
  r.events = req_event::kCapsule | (layout.data_len == 0 ? req_event::kCapsuleIn : 0);
  drive(r);
  if (layout.data_len == 0) return !closed_;
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
  // The capsule's data, or an H2CData PDU's, is in.
  if (header.type == uint8_t(pdu::Type::kCapsuleCmd))
    r->events |= req_event::kCapsuleIn;
  else
    r->received += reinterpret_cast<const pdu::DataHeader&>(header).datal;
  drive(*r);
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

// Plain TCP (and the kernel's TLS records): the kernel copies a zero-copy read's bytes into
// the socket at the end of the reactor's pass, after the pass's other commands. Asked for now,
// they come from DRAM while those run: random reads over a namespace larger than the cache miss
// on every line. Not under sens's own TLS records: sealing prefetches each next piece while it
// encrypts the current one, which hides the misses better than a wait here (A/B: 0.85-0.90x
// with both). Up to 16 KiB: a larger read streams, and the hardware prefetcher keeps up.
void TcpQueue::prefetch_answer(const void* data, uint32_t len) const {
  if (tls_ && !tls_->kernel_records()) return;
  prefetch_lines(data, std::min<uint32_t>(len, 16 << 10));
}

void TcpQueue::send_data(Request& r, const void* data, uint32_t len, uint8_t* stable) {
  if (stable) prefetch_answer(data, len);  // (memory a device holds, not a buffer just filled)
  r.out_data = data;
  r.out_len = len;
  r.out_stable = stable;
  decide(r, ReqAction::kSendData);  // sent by drive() (send_c2h_data)
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
  r.answer_status = status;
  r.answer_result = result;
  decide(r, ReqAction::kRespond);  // sent by drive() (respond)
}

}  // namespace sens::target
