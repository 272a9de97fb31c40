// PollerImpl: one application thread's reactor, which runs its queues' own connections and
// delivers the completions that shared connections' owners put on its queues' lists.
#include <algorithm>

#include "host/library.h"

namespace sens::host {

// ---- PollerImpl ----

PollMode parse_poll_or_default(const std::string& name) {
  PollMode m = PollMode::kAdaptive;
  parse_poll_mode(name, &m);
  return m;
}

PollerImpl::PollerImpl(const PollerOptions& o) {
  reactor_.set_poll(parse_poll_or_default(o.poll), Nanos(o.poll_max_us) * kMicro);
  reactor_.add_pass_hook(this);
  reactor_.set_sleep_guard(this);
  home_.store(std::this_thread::get_id(), std::memory_order_relaxed);
}

PollerImpl::~PollerImpl() {
  // Busy while its queues close: a callback that deletes a queue (or this poller) is deferred
  // into doomed_, which this loop closes too.
  ++depth_;
  while (!queues_.empty() || !doomed_.empty()) {
    if (!doomed_.empty()) {
      std::unique_ptr<IoQueueImpl> q = std::move(doomed_.back());
      doomed_.pop_back();
      q.reset();  // close() and free: it was deleted already
      continue;
    }
    IoQueueImpl* q = queues_.back();
    q->close();  // its owner still holds it: an empty shell from now on
    q->detach_poller();
    remove_queue(q);
  }
  --depth_;
  reactor_.remove_pass_hook(this);
  reactor_.set_sleep_guard(nullptr);
}

void PollerImpl::defer_destroy(std::unique_ptr<IoQueueImpl> q) {
  doomed_.push_back(std::move(q));
}

void PollerImpl::finish_deferred() {
  ++depth_;  // what their callbacks delete is deferred again, and taken by this loop
  while (!doomed_.empty()) {
    std::unique_ptr<IoQueueImpl> q = std::move(doomed_.back());
    doomed_.pop_back();
    q.reset();
  }
  --depth_;
}

void PollerImpl::remove_link(SubmitterLink* l) {
  links_.erase(std::remove(links_.begin(), links_.end(), l), links_.end());
}

void PollerImpl::remove_queue(IoQueueImpl* q) {
  queues_.erase(std::remove(queues_.begin(), queues_.end(), q), queues_.end());
}

int PollerImpl::process_completions(uint32_t max, int64_t timeout_ns) {
  if (depth_ == 0) home_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  ++depth_;
  budget_ = max;
  limited_ = max > 0;
  delivered_ = 0;
  // Reconnect work: one relaxed load per call, nothing per I/O.
  if (local_work_ || recovery_.load(std::memory_order_relaxed)) recover();
  reactor_.run_once(timeout_ns < 0 ? -1 : Nanos(timeout_ns));
  // Queues (or this poller) deleted by callbacks go now that nothing walks them.
  if (--depth_ == 0 && !doomed_.empty()) finish_deferred();
  const int delivered = delivered_;
  if (depth_ == 0 && doomed_self_) delete this;  // nothing of it is touched after
  return delivered;
}

bool PollerImpl::on_pass() {
  bool any = false;
  CompletionEntry batch[32];
  for (size_t i = 0; i < links_.size(); ++i) {
    SubmitterLink* l = links_[i];
    for (;;) {
      size_t want = 32;
      if (limited_) {
        if (budget_ == 0) return any;
        want = std::min<size_t>(want, budget_);
      }
      const size_t n = l->done.pop(batch, want);
      if (n == 0) break;
      any = true;
      if (limited_) budget_ -= uint32_t(n);
      for (size_t k = 0; k < n; ++k) l->queue.deliver(batch[k].cid, batch[k].c);
    }
  }
  return any;
}

bool PollerImpl::before_sleep() {
  sleeping_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (local_work_ || recovery_.load(std::memory_order_relaxed)) {
    sleeping_.store(false, std::memory_order_relaxed);
    return false;
  }
  for (SubmitterLink* l : links_) {
    if (!l->done.empty()) {
      sleeping_.store(false, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

}  // namespace sens::host
