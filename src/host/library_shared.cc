// Connection sharing: a SharedConnection carries the commands of several submitting queues
// (kLock: submitted under its mutex; kSendList: drained from per-submitter send-lists by the
// owner thread) and routes completions back to each queue's list. Its reconnect side (held
// commands, reopen) is in library_reconnect.cc.
#include <algorithm>

#include "common/log.h"
#include "host/library.h"

namespace sens::host {

// ---- SharedConnection ----

SharedConnection::SharedConnection(ControllerImpl& ctrl, int index, ShareMode mode, uint16_t qid,
                                   uint32_t depth, std::shared_ptr<OwnerThread> owner)
    : ctrl_(ctrl),
      index_(index),
      mode_(mode),
      qid_(qid),
      depth_(depth),
      requests_(depth),
      link_of_(depth, nullptr),
      reserved_(depth, false) {
  held_.reserve(depth);
  owner_ = std::move(owner);
  owner_->thread().call([this] {
    owner_->add(this);
    Reactor& r = owner_->reactor();
    r.add_pass_hook(this);
    if (mode_ == ShareMode::kLock) r.set_pass_mutex(&lock_);
  });
}

SharedConnection::~SharedConnection() {
  owner_->thread().call([this] {
    close("controller closed");
    fail_held();
    Reactor& r = owner_->reactor();
    r.remove_pass_hook(this);
    r.cancel_pass_end(*this);
    if (mode_ == ShareMode::kLock) r.set_pass_mutex(nullptr);
    owner_->remove(this);
    queue_.reset();
  });
  owner_.reset();  // the last connection of a shared owner joins its thread
}

void SharedConnection::abort_queued(SubmitterLink* l) {
  uint16_t cids[64];
  for (size_t n; (n = l->send.pop(cids, 64)) > 0;)
    for (size_t k = 0; k < n; ++k) route(uint16_t(l->cid_base + cids[k]), aborted_completion());
  fail_link_held(l);
}

void SharedConnection::abort_link(SubmitterLink* l) {
  abort_queued(l);
  if (!queue_ || !queue_->is_open()) return;
  LOG_WARN(
      "host: I/O connection %d reset: a deleted queue's commands were not answered within "
      "abort_timeout_ms",
      index_);
  // Fails every command on it: l's complete aborted (route), the others are held for the
  // reconnect the failure starts (on_queue_failure).
  teardown("I/O queue deleted with commands unanswered");
}

void SharedConnection::shut_down() {
  shut_ = true;  // route(): whatever the host makes up from here on is an abort
  close("controller deleted");
  fail_held();
  for (SubmitterLink* l : links_) abort_queued(l);
}

std::string SharedConnection::open() {
  // Under kLock submitters touch the queue only under the mutex, which every pass holds:
  // connecting drives passes too.
  std::unique_ptr<Queue> q;
  if (std::string e = ctrl_.open_io(owner_->reactor(), qid_, depth_, mode_ == ShareMode::kLock, &q);
      !e.empty())
    return e;
  q->set_on_failure(&SharedConnection::on_queue_failure, this);
  std::lock_guard<std::mutex> g(lock_);
  queue_ = std::move(q);
  return "";
}

void SharedConnection::on_queue_failure(void* ctx, Queue& q) {
  auto* self = static_cast<SharedConnection*>(ctx);
  self->ctrl_.connection_lost(self->epoch_,
                              "I/O connection " + std::to_string(self->index_) + ": " + q.error());
}

void SharedConnection::close(const char* why) {
  if (!queue_) return;
  std::unique_lock<std::mutex> g(lock_, std::defer_lock);
  // kLock: the pass mutex is not held between passes, where jobs (this) run.
  if (mode_ == ShareMode::kLock) g.lock();
  queue_->close(why);
}

int SharedConnection::reserve(uint16_t n) {
  std::lock_guard<std::mutex> g(reserve_mu_);
  for (uint32_t base = 0; base + n <= depth_; ++base) {
    bool fits = true;
    for (uint32_t i = 0; i < n && fits; ++i)
      if (reserved_[base + i]) {
        fits = false;
        base += i;
      }
    if (!fits) continue;
    for (uint32_t i = 0; i < n; ++i) reserved_[base + i] = true;
    return int(base);
  }
  return -1;
}

void SharedConnection::release(uint16_t base, uint16_t n) {
  std::lock_guard<std::mutex> g(reserve_mu_);
  for (uint32_t i = 0; i < n; ++i) reserved_[base + i] = false;
}

void SharedConnection::add_link(SubmitterLink* l) {
  links_.push_back(l);
  for (uint16_t i = 0; i < l->depth; ++i) link_of_[l->cid_base + i] = l;
}

void SharedConnection::remove_link(SubmitterLink* l) {
  links_.erase(std::remove(links_.begin(), links_.end(), l), links_.end());
  touched_.erase(std::remove(touched_.begin(), touched_.end(), l), touched_.end());
  for (uint16_t i = 0; i < l->depth; ++i) link_of_[l->cid_base + i] = nullptr;
}

bool SharedConnection::has_queued() const {
  for (SubmitterLink* l : links_)
    if (!l->send.empty()) return true;
  return false;
}

bool SharedConnection::submit_locked(uint16_t cid) {
  std::lock_guard<std::mutex> g(lock_);
  Request& r = requests_[cid];
  if (queue_ && queue_->is_open() &&
      queue_->submitv(r.sqe, r.iov, r.iovcnt, r.len, r.dir, &SharedConnection::on_done, this, cid,
                      cid))
    return true;
  if (!ctrl_.may_hold()) return false;
  held_.push_back(cid);  // sent by reopen(), under this lock
  return true;
}

bool SharedConnection::on_pass() {
  if (mode_ == ShareMode::kLock) {
    if (queue_) queue_->check_remote_error();
    return false;
  }
  uint32_t entries = 0;
  uint16_t cids[64];
  // Connection-centric: every submitter's list in one pass; the PDUs queue up in the
  // connection's send queue, which the coalescing policy flushes (eager/adaptive: at the end
  // of this pass, in one sendmsg).
  for (size_t i = 0; i < links_.size(); ++i) {
    SubmitterLink* l = links_[i];
    for (size_t n; (n = l->send.pop(cids, 64)) > 0;) {
      for (size_t k = 0; k < n; ++k) submit_one(uint16_t(l->cid_base + cids[k]));
      entries += uint32_t(n);
    }
  }
  if (entries == 0) return false;
  ++drain_.passes;
  drain_.entries += entries;
  drain_.per_pass.record(entries);
  return true;
}

void SharedConnection::submit_one(uint16_t cid) {
  Request& r = requests_[cid];
  if (queue_ && queue_->is_open() &&
      queue_->submitv(r.sqe, r.iov, r.iovcnt, r.len, r.dir, &SharedConnection::on_done, this, cid,
                      cid))
    return;
  SubmitterLink* l = link_of_[cid];
  if (l && !l->closing.load(std::memory_order_acquire) && ctrl_.may_hold()) {
    held_.push_back(cid);  // reconnecting: sent by reopen()
    return;
  }
  route(cid, path_error());
}

void SharedConnection::on_done(void* ctx, uint64_t cid, const Completion& c) {
  auto* self = static_cast<SharedConnection*>(ctx);
  if (!c.ok() && self->hold(uint16_t(cid), c)) return;
  self->route(uint16_t(cid), c);
}

void SharedConnection::route(uint16_t cid, const Completion& c) {
  SubmitterLink* l = link_of_[cid];
  if (!l) return;  // its queue is gone
  const uint16_t rel = uint16_t(cid - l->cid_base);
  // A made-up failure for a command of a queue (or a controller) being deleted: aborted.
  const Completion& out =
      host_made(c.status) && (shut_ || l->closing.load(std::memory_order_acquire))
          ? aborted_completion()
          : c;
  if (!l->poller) {
    l->queue.deliver(rel, out);  // callbacks on this (the owner) thread
    return;
  }
  l->done.push({rel, out});  // never full: it holds the submitter's whole depth
  if (!l->touched) {
    l->touched = true;
    touched_.push_back(l);
    owner_->reactor().at_pass_end(*this);
  }
}

void SharedConnection::on_pass_end() {
  if (touched_.empty()) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pushes before the sleeping_ reads
  for (SubmitterLink* l : touched_) {
    l->touched = false;
    l->poller->wake_if_sleeping();
  }
  touched_.clear();
}

}  // namespace sens::host
