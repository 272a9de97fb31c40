#include "transport/send_queue.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/crc32c.h"
#include "transport/tls.h"

namespace sens::transport {

using coalesce::FlushReason;

SendQueue::SendQueue(Reactor& reactor, const coalesce::Config& config, Owner& owner)
    : reactor_(reactor),
      owner_(owner),
      scheduler_(config, reactor.clock()),
      timer_([this] { on_timer(); }) {
  // Small at first (an idle connection stays cheap); grown by use, then kept.
  iov_.reserve(64);
  scratch_.reserve(64);
}

SendQueue::~SendQueue() {
  reactor_.cancel(timer_);
  reactor_.cancel_pass_end(*this);
}

void SendQueue::set_config(const coalesce::Config& config) {
  flush(FlushReason::kImmediate);
  scheduler_.~Scheduler();
  new (&scheduler_) coalesce::Scheduler(config, reactor_.clock());
}

void SendQueue::retune(const coalesce::Config& config) {
  coalesce::Stats kept = scheduler_.stats();
  set_config(config);
  scheduler_.adopt_stats(std::move(kept));
}

void SendQueue::reset_counters() {
  counters_ = SendCounters{};
  scheduler_.adopt_stats(coalesce::Stats{});
}

bool SendQueue::enqueue(const iovec* iov, int n, coalesce::PduClass cls, SentCallback sent,
                        int second) {
  return enqueue_changeable(iov, n, -1, nullptr, cls, sent, nullptr, {}, second);
}

bool SendQueue::enqueue_last(const iovec* iov, int n, coalesce::PduClass cls, SentCallback sent) {
  if (!enqueue(iov, n, cls, sent)) return false;
  sealed_ = true;
  return true;
}

bool SendQueue::enqueue_changeable(const iovec* iov, int n, int changeable, void* stable,
                                   coalesce::PduClass cls, SentCallback sent, uint32_t* digest,
                                   DigestSource digest_source, int second) {
  using coalesce::Policy;
  if (sealed_) {
    ++counters_.refused_sealed;
    return false;
  }
  const Policy policy = scheduler_.config().policy;
  const bool pair = second > 0 && second < n;
  if (pair && !coalesce::pass_batched(policy)) {
    // Each PDU counts (and may flush) on its own: as two calls.
    if (!enqueue_changeable(iov, second, changeable, stable, cls, {}, digest, digest_source))
      return false;
    return enqueue_changeable(iov + second, n - second, -1, nullptr, cls, sent);
  }
  // Socket full: a control PDU (it unblocks the peer) overtakes PDUs still waiting, under the
  // policies that know PDU classes.
  // Not over TLS: the queue's head is already gathered (and partly encrypted) in order.
  const bool overtake = blocked_ && !tls_ && cls == coalesce::PduClass::kControl &&
                        (policy == Policy::kSemantic || policy == Policy::kAdaptive);
  size_t at = overtake ? control_slot() : iov_.size();
  const size_t first = at;
  uint32_t bytes = 0;
  bool pdu_start = true;
  for (int i = 0; i < n; ++i) {
    if (i == second) pdu_start = true;
    if (iov[i].iov_len == 0) continue;
    // Appended in place (the usual case); inserted only when a control PDU overtakes.
    Entry& e = at == iov_.size() ? iov_.emplace_back() : *iov_.emplace(iov_.begin() + long(at));
    e.iov = iov[i];
    e.pdu_start = pdu_start;
    pdu_start = false;
    if (i == changeable) {
      e.stable = stable;
      e.digest = digest;
      e.digest_source = digest_source;
    }
    ++at;
    bytes += uint32_t(iov[i].iov_len);
  }
  if (bytes == 0) {  // nothing to send: the PDU is "sent" now
    if (sent.fn) sent.fn(sent.ctx, sent.arg);
    return true;
  }
  iov_[at - 1].sent = sent;
  if (first < committed_) {  // moved ahead: it leaves with what is committed
    committed_ += at - first;
    control_end_ = at;
    ++counters_.control_first;
  }
  if (blocked_ && stable) snapshot_waiting();  // it will wait: copy it now
  queued_bytes_ += bytes;
  FlushReason reason = scheduler_.on_enqueue(cls, bytes, pair ? 2 : 1);
  if (reason != FlushReason::kNone) {
    commit(reason);
    send_committed();
    return true;
  }
  rearm_timer();
  if (policy == Policy::kEager || policy == Policy::kAdaptive) reactor_.at_pass_end(*this);
  return true;
}

size_t SendQueue::control_slot() const {
  // After the PDU being sent (head_ may be mid-PDU) and any control PDU moved before.
  size_t i = std::max(head_ + 1, control_end_);
  while (i < committed_ && !iov_[i].pdu_start) ++i;
  return std::min(i, committed_);
}

void SendQueue::on_pass_end() {
  if (dead_) return;
  FlushReason reason = scheduler_.on_pass_end(reactor_.busy_fraction(), owner_.pdus_in_progress());
  if (reason == FlushReason::kNone) return;  // held (adaptive): the timer or the next PDU
  commit(reason);
  send_committed();
}

void SendQueue::commit(FlushReason reason) {
  if (committed_ == iov_.size()) return;
  scheduler_.on_flushed(reason);
  committed_ = iov_.size();
  rearm_timer();
}

void SendQueue::flush(FlushReason reason) {
  commit(reason);
  send_committed();
}

void SendQueue::shutdown() {
  dead_ = true;
  fd_ = -1;
  reactor_.cancel(timer_);
  reactor_.cancel_pass_end(*this);
  iov_.clear();
  head_ = committed_ = head_offset_ = control_end_ = 0;
  queued_bytes_ = 0;
}

void SendQueue::seal_digest(Entry& e) {
  if (e.digest_source.fn &&
      e.digest_source.fn(e.digest_source.ctx, e.iov.iov_base, e.iov.iov_len, e.digest))
    counters_.digest_source_bytes += e.iov.iov_len;
  else
    *e.digest = crc32c(e.iov.iov_base, e.iov.iov_len);
  e.digest = nullptr;
}

void SendQueue::snapshot_waiting() {
  for (size_t i = head_; i < iov_.size(); ++i) {
    Entry& e = iov_[i];
    if (!e.stable) continue;
    if (e.digest) seal_digest(e);                 // of the bytes copied (nothing runs in between)
    size_t sent = i == head_ ? head_offset_ : 0;  // offsets stay valid in the copy
    std::memcpy(static_cast<char*>(e.stable) + sent, static_cast<char*>(e.iov.iov_base) + sent,
                e.iov.iov_len - sent);
    counters_.snapshot_bytes += e.iov.iov_len - sent;
    e.iov.iov_base = e.stable;
    e.stable = nullptr;
  }
}

void SendQueue::on_writable() {
  if (!blocked_) return;
  blocked_ = false;
  owner_.want_writable(false);
  if (head_ < committed_) ++scheduler_.stats().flushes[size_t(FlushReason::kSocketFull)];
  send_committed();
}

void SendQueue::rearm_timer() {
  Nanos d = scheduler_.next_deadline();
  if (d == coalesce::kNoDeadline) {
    reactor_.cancel(timer_);
  } else if (!timer_.armed() || timer_.deadline() != d) {
    reactor_.arm(timer_, d);
  }
}

void SendQueue::on_timer() {
  FlushReason reason = scheduler_.on_timer();
  if (reason != FlushReason::kNone) {
    commit(reason);
    send_committed();
  } else {
    rearm_timer();
  }
}

void SendQueue::account_sent(size_t sent) {
  counters_.bytes += sent;
  queued_bytes_ -= sent;
  size_t left = sent;
  // Completion callbacks may enqueue more PDUs; they only append, so indices stay valid.
  while (left > 0) {
    Entry& e = iov_[head_];
    size_t rest = e.iov.iov_len - head_offset_;
    if (left < rest) {
      head_offset_ += left;
      break;
    }
    left -= rest;
    head_offset_ = 0;
    SentCallback cb = e.sent;
    ++head_;
    if (cb.fn) cb.fn(cb.ctx, cb.arg);
    // The callback closed the connection (a last PDU's): shutdown() emptied the queue, and
    // what was walked is gone; no callback of a dropped PDU may run.
    if (dead_) return;
  }
}

size_t SendQueue::list_committed(size_t max_iovs, size_t max_bytes) {
  scratch_.clear();
  size_t listed = 0;
  for (size_t i = head_; i < committed_ && scratch_.size() < max_iovs && listed < max_bytes; ++i) {
    if (iov_[i].digest) seal_digest(iov_[i]);
    iovec v = iov_[i].iov;
    if (i == head_) {
      v.iov_base = static_cast<char*>(v.iov_base) + head_offset_;
      v.iov_len -= head_offset_;
    }
    scratch_.push_back(v);
    listed += v.iov_len;
  }
  return listed;
}

void SendQueue::wait_writable() {
  blocked_ = true;
  snapshot_waiting();
  owner_.want_writable(true);
}

void SendQueue::set_tls(TlsChannel* tls) {
  tls_ = tls && !tls->kernel_records() ? tls : nullptr;
}

bool SendQueue::send_tls() {
  // The committed PDUs as one list from the first byte not yet counted as sent; the channel
  // skips what it has encrypted already and takes a batch of records' worth (~64 KiB), so a
  // bounded list is enough.
  list_committed(SIZE_MAX, 256 * 1024);
  TlsChannel::Io io;
  const uint64_t calls = tls_->send_syscalls();
  size_t sent = tls_->send(scratch_.data(), scratch_.size(), 0, &io);
  counters_.sendmsg_calls += tls_->send_syscalls() - calls;
  scheduler_.stats().send_calls += tls_->send_syscalls() - calls;
  account_sent(sent);  // callbacks may enqueue more (appended: the loop picks them up)
  if (io == TlsChannel::Io::kOk) return true;
  if (io == TlsChannel::Io::kWantWrite || io == TlsChannel::Io::kWantRead) {
    ++counters_.eagain;
    wait_writable();
    return false;
  }
  dead_ = true;
  in_send_ = false;
  owner_.on_send_error(EPIPE);
  return false;
}

void SendQueue::send_committed() {
  if (in_send_ || blocked_ || dead_) return;  // the running loop (or EPOLLOUT) picks it up
  in_send_ = true;
  while (head_ < committed_ && !blocked_ && !dead_) {
    if (tls_) {
      if (!send_tls()) {
        if (dead_) return;
        break;
      }
      continue;
    }
    const size_t want = list_committed(IOV_MAX, SIZE_MAX);
    msghdr msg{};
    msg.msg_iov = scratch_.data();
    msg.msg_iovlen = scratch_.size();
    ssize_t sent = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    ++counters_.sendmsg_calls;
    ++scheduler_.stats().send_calls;
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        ++counters_.eagain;
        wait_writable();
        break;
      }
      dead_ = true;
      in_send_ = false;
      owner_.on_send_error(errno);
      return;
    }
    account_sent(size_t(sent));
    if (size_t(sent) < want) wait_writable();  // the socket buffer is full
  }
  in_send_ = false;
  // Reclaim the consumed prefix so the vector stays small without reallocating.
  if (head_ == iov_.size()) {
    iov_.clear();
    head_ = committed_ = control_end_ = 0;
  } else if (head_ >= 4096 && head_ * 2 >= iov_.size()) {
    iov_.erase(iov_.begin(), iov_.begin() + long(head_));
    committed_ -= head_;
    control_end_ = control_end_ > head_ ? control_end_ - head_ : 0;
    head_ = 0;
  }
}

}  // namespace sens::transport
