#include "host/queue.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "common/log.h"
#include "wire/nvme_build.h"

namespace sens::host {

using coalesce::PduClass;

namespace {

// Fabrics and admin commands may always carry this much in-capsule (NVMe/TCP 1.0, 3.3.2).
constexpr uint32_t kAdminIncapsule = 8192;
// Byte offsets of fields within their PDU headers, for the FEI of a TermReq.
constexpr uint32_t kFeiCid = 8, kFeiDatao = 12, kFeiDatal = 16;
constexpr uint32_t kFeiRespCid = 8 + offsetof(nvme::Cqe, cid);

std::string errno_text(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

}  // namespace

const char* completion_status_name(uint16_t status) {
  if (status == kStatusHostPathError) return "Host path error (transport failed)";
  if (status == kStatusHostAborted) return "Aborted by host (command timeout)";
  return nvme::status_name(status);
}

H2CChunk next_h2c_chunk(uint32_t issued, uint32_t r2t_end, uint32_t maxh2cdata) {
  H2CChunk c;
  if (issued >= r2t_end || maxh2cdata == 0) return c;
  c.offset = issued;
  c.length = std::min(r2t_end - issued, maxh2cdata);
  c.last = issued + c.length == r2t_end;
  return c;
}

Queue::Queue(Reactor& reactor, const QueueOptions& options)
    : reactor_(reactor),
      options_(options),
      reader_(pdu::Receiver::kHost, *this),
      incapsule_limit_(options.qid == 0 ? kAdminIncapsule : 0),
      slots_(std::max<uint16_t>(options.depth, 1)),
      watchdog_([this] { on_watchdog(); }) {
  if (options_.qid == 0) options_.coalesce.policy = coalesce::Policy::kOff;
  options_.depth = uint16_t(slots_.size());
  options_.max_h2c_window = std::max<uint32_t>(options_.max_h2c_window, 1);
  send_ = std::make_unique<transport::SendQueue>(reactor_, options_.coalesce, *this);
  h2c_.resize(size_t(options_.depth) * options_.max_h2c_window);
  free_.reserve(options_.depth);
  // Popped from the back: cid 0 goes first, which reads naturally in traces.
  for (int i = options_.depth - 1; i >= 0; --i) free_.push_back(uint16_t(i));
  // The controller sends C2HData of at most one command's data per PDU.
  reader_.set_max_plen(options_.max_transfer + pdu::kDataHlen + 2 * pdu::kDigestLen + 256);
}

Queue::~Queue() {
  if (state_ == State::kOpen || state_ == State::kIcWait) close("queue destroyed");
}

std::string Queue::begin(int fd, std::unique_ptr<transport::TlsChannel> tls) {
  if (state_ != State::kIdle) {
    ::close(fd);
    return "queue already opened";
  }
  if (tls) {
    LOG_DEBUG("host: connection fd %d: TLS 1.3 %s, records by %s", fd, tls->cipher().c_str(),
              tls->records_description().c_str());
    tls_ = std::move(tls);
    reader_.set_tls(tls_.get());
    send_->set_tls(tls_.get());
  }
  fd_ = fd;
  send_->set_fd(fd);
  epoll_events_ = EPOLLIN;
  reactor_.add(fd, epoll_events_, this);
  state_ = State::kIcWait;

  uint8_t digest = uint8_t((options_.hdr_digest ? pdu::kDigestHeader : 0) |
                           (options_.data_digest ? pdu::kDigestData : 0));
  // maxr2t 0: one R2T outstanding per command, which is what Linux and SPDK targets send.
  pdu::build_icreq(ic_slot_.icreq, digest, 0);
  iovec iov{&ic_slot_, pdu::kICLen};
  send_->enqueue(&iov, 1, PduClass::kUrgent);
  return state_ == State::kIcWait || state_ == State::kOpen ? std::string() : error_;
}

bool Queue::submit(const nvme::Sqe& sqe, void* buf, uint32_t len, DataDir dir, Callback cb,
                   void* ctx, uint64_t tag) {
  iovec one{buf, len};
  return submitv(sqe, &one, 1, len, dir, cb, ctx, tag);
}

namespace {
// Appends to out[] the pieces of the list `iov` covering bytes [offset, offset + len); returns
// how many (at most kMaxIov).
int slice_iov(const iovec* iov, int iovcnt, size_t offset, size_t len, iovec* out) {
  int n = 0;
  for (int i = 0; i < iovcnt && len > 0; ++i) {
    if (offset >= iov[i].iov_len) {
      offset -= iov[i].iov_len;
      continue;
    }
    const size_t k = std::min(iov[i].iov_len - offset, len);
    out[n++] = {static_cast<uint8_t*>(iov[i].iov_base) + offset, k};
    len -= k;
    offset = 0;
  }
  return n;
}

uint32_t crc32c_of(const iovec* iov, int n) {
  uint32_t crc = kCrc32cInit;
  for (int i = 0; i < n; ++i) crc = crc32c_update(crc, iov[i].iov_base, iov[i].iov_len);
  return crc32c_finish(crc);
}
}  // namespace

void Queue::check_remote_error() {
  if (int err = remote_send_error_.exchange(0, std::memory_order_acquire))
    fail(errno_text("send", err));
}

bool Queue::submitv(const nvme::Sqe& sqe, const iovec* iov_in, int iovcnt, uint32_t len,
                    DataDir dir, Callback cb, void* ctx, uint64_t tag, int want_cid) {
  if (state_ != State::kOpen || iovcnt < 0 || iovcnt > kMaxIov) return false;
  uint16_t cid;
  if (options_.external_cids) {
    if (want_cid < 0 || size_t(want_cid) >= slots_.size() || slots_[want_cid].active) return false;
    cid = uint16_t(want_cid);
  } else {
    if (want_cid >= 0 || free_.empty()) return false;
    cid = free_.back();
    free_.pop_back();
  }
  Slot& s = slots_[cid];
  const bool fabrics_or_admin = sqe.opcode == nvme::kFabricsOpcode || options_.qid == 0;
  const uint32_t limit = fabrics_or_admin ? kAdminIncapsule : incapsule_limit_;
  if (dir == DataDir::kNone) len = 0;
  if (iovcnt == 1) {  // the caller's single iovec may be a temporary: keep a copy
    s.one = iov_in[0];
    s.iov = &s.one;
  } else {
    s.iov = iov_in;
  }
  s.iovcnt = uint16_t(len ? iovcnt : 0);
  s.len = len;
  s.dir = dir;
  s.opcode = sqe.opcode;
  s.in_capsule = dir == DataDir::kHostToController && len > 0 && len <= limit;
  s.responded = false;
  s.timed_out = false;
  s.received = s.h2c_issued = s.r2t_end = 0;
  s.pending_sends = 1;
  s.h2c_inflight = 0;
  s.result = Completion{};
  s.watchdog_runs = watchdog_runs_;  // its age is counted in watchdog runs: no clock read
  s.cb = cb;
  s.ctx = ctx;
  s.tag = tag;
  s.active = true;
  ++inflight_;
  if (s.by_r2t()) r2t_write_bytes_ += len;
  if (!options_.remote_submit) reactor_.add_outstanding(1);  // hybrid polling: an answer is due
  ++counters_.submitted;

  const uint32_t incapsule = s.in_capsule ? len : 0;
  pdu::build_capsule_cmd(s.hdr.cmd, sqe, incapsule, digests_);
  nvme::Sqe& q = s.hdr.cmd.sqe;
  q.cid = cid;
  nvme::set_sgl(q, s.in_capsule ? nvme::Xfer::kInCapsule : nvme::Xfer::kTransport, len);
  iovec iov[kMaxIov + 2];
  int n = 0;
  iov[n++] = {&s.hdr, pdu::finish_header(s.hdr, digests_)};
  if (incapsule) {
    if (sqe.opcode != nvme::kFabricsOpcode) ++counters_.incapsule_writes;  // not Connect's
    const int k = slice_iov(s.iov, s.iovcnt, 0, incapsule, iov + n);
    if (digests_.data) s.ddgst = crc32c_of(iov + n, k);
    n += k;
    if (digests_.data) iov[n++] = {&s.ddgst, pdu::kDigestLen};
  }
  // Admin traffic (keep alive, property polls) and Connects never wait for a coalescing timer;
  // nor does a remote submitter's command (it sends under the connection's lock).
  PduClass cls = fabrics_or_admin || options_.remote_submit ? PduClass::kUrgent : PduClass::kData;
  send_->enqueue(iov, n, cls, {&Queue::on_cmd_sent, this, cid});
  return true;
}

void Queue::close(const std::string& why) {
  if (state_ == State::kOpen) send_->flush(coalesce::FlushReason::kClose);
  fail(why);
  if (state_ == State::kFailed) state_ = State::kClosed;
}

// ---- receive ----

void Queue::on_event(uint32_t events) {
  if (options_.remote_submit) {
    check_remote_error();
    if (fd_ < 0) return;
  }
  if ((events & EPOLLOUT) && fd_ >= 0) send_->on_writable();
  if (!(events & (EPOLLIN | EPOLLERR | EPOLLHUP)) || fd_ < 0) return;
  // A bounded budget keeps one busy queue from starving the others on this reactor.
  auto st = reader_.read_from(fd_, 1u << 20);
  if (st == transport::PduReader::Status::kClosed) {
    fail(state_ == State::kIcWait ? "connection closed before ICResp"
                                  : "connection closed by the controller");
  } else if (st == transport::PduReader::Status::kError) {
    fail(errno_text("receive", errno));
  }
}

bool Queue::on_pdu_header(const pdu::CommonHeader& ch, const pdu::Layout& layout) {
  switch (static_cast<pdu::Type>(ch.type)) {
    case pdu::Type::kICResp:
      return on_icresp(reinterpret_cast<const pdu::ICResp&>(ch));
    case pdu::Type::kCapsuleResp:
      return on_capsule_resp(reinterpret_cast<const pdu::CapsuleResp&>(ch));
    case pdu::Type::kC2HData: {
      auto& hdr = reinterpret_cast<const pdu::DataHeader&>(ch);
      if (hdr.datal != layout.data_len)
        return protocol_error(pdu::fes::kInvalidHeaderField, kFeiDatal, &ch, ch.hlen,
                              "C2HData datal " + std::to_string(hdr.datal) + " but " +
                                  std::to_string(layout.data_len) + " bytes of data");
      return on_c2h_data(hdr);
    }
    case pdu::Type::kR2T:
      return on_r2t(reinterpret_cast<const pdu::R2T&>(ch));
    case pdu::Type::kC2HTermReq: {
      auto& t = reinterpret_cast<const pdu::TermReq&>(ch);
      fail("controller terminated the connection (C2HTermReq fes " + std::to_string(t.fes) +
           " fei " + std::to_string(t.fei) + ")");
      return false;
    }
    default:  // the reader lets only host-bound types through
      return protocol_error(pdu::fes::kInvalidHeaderField, 0, &ch, ch.hlen,
                            std::string("unexpected ") + pdu::type_name(ch.type));
  }
}

bool Queue::on_icresp(const pdu::ICResp& resp) {
  if (state_ != State::kIcWait)
    return protocol_error(pdu::fes::kPduSequenceError, 0, &resp, pdu::kICLen, "second ICResp");
  pdu::Check check = pdu::check_icresp(resp);
  if (!check) return protocol_error(check.fes, check.fei, &resp, pdu::kICLen, check.why);
  uint8_t asked = uint8_t((options_.hdr_digest ? pdu::kDigestHeader : 0) |
                          (options_.data_digest ? pdu::kDigestData : 0));
  if (resp.digest != asked) {
    // A controller may decline digests; the host cannot then give what the user asked for.
    fail("ICResp digest 0x" + std::to_string(resp.digest) + ", asked for 0x" +
         std::to_string(asked));
    return false;
  }
  digests_ = {options_.hdr_digest, options_.data_digest};
  maxh2cdata_ = resp.maxh2cdata;
  reader_.set_digests(digests_);
  reader_.set_after_ic(true);
  state_ = State::kOpen;
  watchdog_tick_ = std::clamp<Nanos>(options_.command_timeout / 4, 10 * kMilli, 250 * kMilli);
  reactor_.arm(watchdog_, reactor_.now() + watchdog_tick_);
  if (on_open_) on_open_(on_open_ctx_, *this);
  return state_ == State::kOpen;
}

bool Queue::on_capsule_resp(const pdu::CapsuleResp& resp) {
  const nvme::Cqe& cqe = resp.cqe;
  const uint16_t cid = cqe.cid;
  if (cid >= slots_.size() || !slots_[cid].active || slots_[cid].responded)
    return protocol_error(pdu::fes::kInvalidHeaderField, kFeiRespCid, &resp, resp.ch.hlen,
                          "CapsuleResp for cid " + std::to_string(cid) + ", not in flight");
  Slot& s = slots_[cid];
  // A digest error seen on the data stands even if the controller reports success.
  if (s.result.status == 0) {
    s.result.status = cqe.status_code();
    s.result.dnr = cqe.dnr();
    if (s.result.status == 0 && s.dir == DataDir::kControllerToHost && s.received != s.len)
      s.result.status = nvme::status::kDataTransferError;  // success with data missing
  }
  s.result.dw0 = cqe.dw0;
  s.result.dw1 = cqe.dw1;
  s.responded = true;
  maybe_complete(cid);
  return state_ == State::kOpen;
}

bool Queue::on_c2h_data(const pdu::DataHeader& hdr) {
  const uint16_t cid = hdr.cccid;
  auto bad = [&](uint16_t fes, uint32_t fei, const std::string& why) {
    return protocol_error(fes, fei, &hdr, hdr.ch.hlen,
                          "C2HData cid " + std::to_string(cid) + ": " + why);
  };
  if (cid >= slots_.size() || !slots_[cid].active || slots_[cid].responded)
    return bad(pdu::fes::kInvalidHeaderField, kFeiCid, "not in flight");
  Slot& s = slots_[cid];
  if (s.dir != DataDir::kControllerToHost)
    return bad(pdu::fes::kInvalidHeaderField, kFeiCid, "the command reads no data");
  if (hdr.datao != s.received)
    return bad(pdu::fes::kDataOutOfRange, kFeiDatao,
               "datao " + std::to_string(hdr.datao) + ", expected " + std::to_string(s.received));
  if (uint64_t(hdr.datao) + hdr.datal > s.len)
    return bad(pdu::fes::kDataOutOfRange, kFeiDatal,
               "datao " + std::to_string(hdr.datao) + " + datal " + std::to_string(hdr.datal) +
                   " past the command's " + std::to_string(s.len) + " bytes");
  // The payload lands in the caller's buffer; only headers pass through staging.
  if (s.iovcnt == 1)
    reader_.set_payload_target(static_cast<uint8_t*>(s.iov[0].iov_base) + hdr.datao, hdr.datal);
  else
    reader_.set_payload_target(s.iov, s.iovcnt, hdr.datao, hdr.datal);
  ++counters_.c2h_pdus;
  return true;
}

bool Queue::on_pdu_payload(const pdu::CommonHeader& ch, bool digest_ok) {
  if (ch.type != uint8_t(pdu::Type::kC2HData)) return state_ == State::kOpen;
  auto& hdr = reinterpret_cast<const pdu::DataHeader&>(ch);
  Slot& s = slots_[hdr.cccid];  // validated by on_c2h_data
  s.received += hdr.datal;
  if (!digest_ok && s.result.status == 0)
    s.result.status = nvme::status::kDataTransferError;  // as Linux: fail the command only
  if ((ch.flags & pdu::flag::kDataSuccess)) {
    if (s.received != s.len)
      return protocol_error(pdu::fes::kInvalidHeaderField, 1, &hdr, hdr.ch.hlen,
                            "C2HData SUCCESS after " + std::to_string(s.received) + " of " +
                                std::to_string(s.len) + " bytes");
    // SUCCESS stands in for the CapsuleResp (SQ flow control disabled at Connect).
    ++counters_.c2h_success;
    s.responded = true;
    maybe_complete(hdr.cccid);
  }
  return state_ == State::kOpen;
}

bool Queue::on_r2t(const pdu::R2T& r2t) {
  const uint16_t cid = r2t.cccid;
  auto bad = [&](uint16_t fes, uint32_t fei, const std::string& why) {
    return protocol_error(fes, fei, &r2t, r2t.ch.hlen,
                          "R2T cid " + std::to_string(cid) + ": " + why);
  };
  if (cid >= slots_.size() || !slots_[cid].active || slots_[cid].responded)
    return bad(pdu::fes::kInvalidHeaderField, kFeiCid, "not in flight");
  Slot& s = slots_[cid];
  if (!s.by_r2t())
    return bad(pdu::fes::kInvalidHeaderField, kFeiCid,
               s.in_capsule ? "its data went in-capsule" : "the command writes no data");
  if (s.h2c_issued < s.r2t_end)
    return bad(pdu::fes::kR2TLimitExceeded, 0, "a previous R2T is still being answered");
  if (r2t.r2tl == 0) return bad(pdu::fes::kInvalidHeaderField, kFeiDatal, "r2tl 0");
  if (uint64_t(r2t.r2to) + r2t.r2tl > s.len)
    return bad(pdu::fes::kDataOutOfRange, kFeiDatal,
               "r2to " + std::to_string(r2t.r2to) + " + r2tl " + std::to_string(r2t.r2tl) +
                   " past the command's " + std::to_string(s.len) + " bytes");
  ++counters_.r2ts;
  s.ttag = r2t.ttag;
  s.h2c_issued = r2t.r2to;
  s.r2t_end = r2t.r2to + r2t.r2tl;
  issue_h2c(cid);
  return state_ == State::kOpen;
}

// ---- send ----

void Queue::issue_h2c(uint16_t cid) {
  Slot& s = slots_[cid];
  const uint32_t window = options_.max_h2c_window;
  // Header slots are reused in order: SentCallbacks fire in queue order, so a slot is free
  // once fewer than `window` of this command's PDUs are still waiting.
  while (state_ == State::kOpen && s.h2c_inflight < window) {
    H2CChunk c = next_h2c_chunk(s.h2c_issued, s.r2t_end, maxh2cdata_);
    if (c.length == 0) break;
    H2CSlot& h = h2c_[size_t(cid) * window + (s.h2c_next++ % window)];
    pdu::build_data(h.hdr, pdu::Type::kH2CData, cid, s.ttag, c.offset, c.length,
                    c.last ? pdu::flag::kDataLast : 0, digests_);
    iovec iov[kMaxIov + 2];
    int n = 0;
    uint32_t hl = pdu::kDataHlen;
    if (digests_.header) {
      h.hdgst = crc32c(&h.hdr, pdu::kDataHlen);
      hl += pdu::kDigestLen;
    }
    iov[n++] = {&h.hdr, hl};
    const int k = slice_iov(s.iov, s.iovcnt, c.offset, c.length, iov + n);
    if (digests_.data) h.ddgst = crc32c_of(iov + n, k);
    n += k;
    if (digests_.data) iov[n++] = {&h.ddgst, pdu::kDigestLen};
    s.h2c_issued += c.length;
    ++s.h2c_inflight;
    ++s.pending_sends;
    ++counters_.h2c_pdus;
    // The host's counterpart of R2T: the target's write is stalled until this data arrives,
    // so under the semantic policy it flushes early (c2 / Tc) like an R2T does.
    send_->enqueue(iov, n, PduClass::kControl, {&Queue::on_h2c_sent, this, cid});
  }
  // A group that holds half of the write data the target waits for leaves now, not with the
  // pass: the target opens and writes the first half while this side makes the second. With
  // all of it in one send the two sides take turns where a pass answers every R2T in flight
  // (16 KiB writes QD8 over TLS 1.12x; plain 128 KiB writes QD8 1.04x, 16 KiB QD8 unchanged).
  // (Eager and adaptive only: uniform and semantic are the baselines' rules, kept as they are.)
  const coalesce::Scheduler& group = send_->scheduler();
  if (state_ == State::kOpen && coalesce::pass_batched(group.config().policy) &&
      group.queued_bytes() > 0 && group.queued_bytes() * 2 >= r2t_write_bytes_)
    send_->flush(coalesce::FlushReason::kByteCap);
}

void Queue::on_cmd_sent(void* ctx, uint64_t cid) {
  auto* q = static_cast<Queue*>(ctx);
  if (q->state_ != State::kOpen) return;  // the teardown completed everything already
  Slot& s = q->slots_[cid];
  --s.pending_sends;
  q->maybe_complete(uint16_t(cid));
}

void Queue::on_h2c_sent(void* ctx, uint64_t cid) {
  auto* q = static_cast<Queue*>(ctx);
  if (q->state_ != State::kOpen) return;
  Slot& s = q->slots_[cid];
  --s.pending_sends;
  --s.h2c_inflight;
  if (s.h2c_issued < s.r2t_end) q->issue_h2c(uint16_t(cid));
  q->maybe_complete(uint16_t(cid));
}

void Queue::want_writable(bool on) {
  if (fd_ < 0) return;
  epoll_events_ = EPOLLIN | (on ? EPOLLOUT : 0u);
  reactor_.modify(fd_, epoll_events_, this);
}

uint32_t Queue::pdus_in_progress() const {
  // Completions (which resubmit, in a closed loop) and R2Ts can come only from commands the
  // controller holds: those in flight whose capsule has left.
  const uint32_t queued = send_->scheduler().queued_pdus();
  return inflight_ > queued ? inflight_ - queued : 0;
}

void Queue::on_send_error(int err) {
  if (options_.remote_submit && Reactor::current() != &reactor_) {
    // A submitter's send under the lock: the reactor's thread tears down (it owns the
    // timers); the shutdown wakes it with EPOLLHUP.
    remote_send_error_.store(err, std::memory_order_release);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    return;
  }
  fail(errno_text("send", err));
}

// ---- completion and failure ----

void Queue::maybe_complete(uint16_t cid) {
  Slot& s = slots_[cid];
  // A response can overtake our own send callbacks (a write the controller failed early);
  // the slot's header and the caller's buffer stay ours until every PDU has left.
  if (s.active && s.responded && s.pending_sends == 0) complete(cid);
}

void Queue::complete(uint16_t cid) {
  Slot& s = slots_[cid];
  const Completion result = s.result;
  const Callback cb = s.cb;
  void* const ctx = s.ctx;
  const uint64_t tag = s.tag;
  s.active = false;
  s.cb = nullptr;
  if (!options_.external_cids) free_.push_back(cid);
  --inflight_;
  if (s.by_r2t()) r2t_write_bytes_ -= s.len;
  if (!options_.remote_submit) reactor_.add_outstanding(-1);
  ++counters_.completed;
  if (cb) cb(ctx, tag, result);  // may submit again, reusing this very slot
}

bool Queue::protocol_error(uint16_t fes, uint32_t fei, const void* header, uint32_t len,
                           const std::string& why) {
  if (fd_ >= 0) {
    uint32_t n = pdu::build_term_req(term_slot_, pdu::Type::kH2CTermReq, fes, fei, header, len);
    iovec iov{&term_slot_, n};
    send_->enqueue(&iov, 1, PduClass::kUrgent);  // best effort: the socket closes next
  }
  fail("protocol error: " + why);
  return false;
}

void Queue::on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) {
  protocol_error(check.fes, check.fei, header, len, check.why ? check.why : "bad PDU");
}

void Queue::fail(const std::string& why, uint16_t status) {
  if (state_ == State::kFailed || state_ == State::kClosed) return;
  state_ = State::kFailed;
  error_ = why;
  if (fd_ >= 0) {
    reactor_.remove(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  // Anything still queued can no longer reach a socket (and never reads the buffers again).
  send_->set_fd(-1);
  reactor_.cancel(watchdog_);
  for (uint16_t cid = 0; cid < slots_.size(); ++cid) {
    Slot& s = slots_[cid];
    if (!s.active) continue;
    s.result = Completion{};
    s.result.status = s.timed_out ? kStatusHostAborted : status;
    s.result.dnr = false;
    complete(cid);
  }
  if (on_failure_) on_failure_(on_failure_ctx_, *this);
}

void Queue::on_watchdog() {
  const Nanos now = reactor_.now();
  ++watchdog_runs_;
  // Runs are at least a tick apart, so a command submitted before the last k runs is at least
  // (k - 1) ticks old: never timed out early, at most about two ticks late.
  const uint32_t limit_runs =
      uint32_t((options_.command_timeout + watchdog_tick_ - 1) / watchdog_tick_) + 1;
  int expired = 0;
  uint16_t first = 0;
  for (uint16_t cid = 0; cid < slots_.size(); ++cid) {
    Slot& s = slots_[cid];
    // An Asynchronous Event Request waits for an event, however long (as in Linux).
    if (options_.qid == 0 && s.opcode == nvme::admin_op::kAsyncEvent) continue;
    if (s.active && watchdog_runs_ - s.watchdog_runs >= limit_runs) {
      if (expired++ == 0) first = cid;
      s.timed_out = true;
    }
  }
  if (expired) {
    // There is no reliable abort over NVMe/TCP: like Linux, tear the queue down.
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "%d command(s) timed out after %lld ms (first: cid %u opcode 0x%02x)", expired,
                  (long long)(options_.command_timeout / kMilli), first, slots_[first].opcode);
    fail(buf);
    return;
  }
  reactor_.arm(watchdog_, now + watchdog_tick_);
}

}  // namespace sens::host
