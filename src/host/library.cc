#include "host/library.h"

#include <openssl/crypto.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace sens {

// ---- public value types ----

std::string Status::to_string() const {
  char buf[16];
  std::snprintf(buf, sizeof(buf), " (0x%03x)", raw_);
  return std::string(host::completion_status_name(raw_)) + buf;
}

const char* share_mode_name(ShareMode m) {
  switch (m) {
    case ShareMode::kNone:
      return "none";
    case ShareMode::kLock:
      return "lock";
    case ShareMode::kSendList:
      return "sendlist";
  }
  return "?";
}

bool parse_share_mode(std::string_view name, ShareMode* out) {
  for (ShareMode m : {ShareMode::kNone, ShareMode::kLock, ShareMode::kSendList}) {
    if (name == share_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

const char* controller_state_name(ControllerState s) {
  switch (s) {
    case ControllerState::kConnecting:
      return "connecting";
    case ControllerState::kLive:
      return "live";
    case ControllerState::kReconnecting:
      return "reconnecting";
    case ControllerState::kFailed:
      return "failed";
    case ControllerState::kClosed:
      return "closed";
  }
  return "?";
}

namespace host {

namespace {
Completion path_error() {
  Completion c;
  c.status = kStatusHostPathError;
  return c;
}
}  // namespace

// ---- ReactorThread ----

ReactorThread::ReactorThread(const char* name, PollMode mode, Nanos max_spin) {
  thread_ = std::thread([this, name, mode, max_spin] { loop(name, mode, max_spin); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ready_; });
}

ReactorThread::~ReactorThread() {
  stop_.store(true);
  if (reactor_) reactor_->wake();
  thread_.join();
}

void ReactorThread::loop(const char* name, PollMode mode, Nanos max_spin) {
  prctl(PR_SET_NAME, name, 0, 0, 0);
  reactor_ = std::make_unique<Reactor>();
  reactor_->set_poll(mode, max_spin);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_all();
  std::vector<std::function<void()>> running;
  while (!stop_.load(std::memory_order_relaxed)) {
    reactor_->run_once(100 * kMilli);
    if (has_jobs_.load(std::memory_order_acquire)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        running.swap(jobs_);
        has_jobs_.store(false, std::memory_order_relaxed);
      }
      for (auto& fn : running) fn();
      running.clear();
    }
  }
  // Jobs queued during the stop still run (they may hold a caller waiting in call()).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& fn : jobs_) fn();
  jobs_.clear();
  reactor_.reset();
  // OpenSSL keeps per-thread random generators (TLS, DH-HMAC-CHAP); free them with the thread.
  OPENSSL_thread_stop();
}

void ReactorThread::run_job(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    has_jobs_.store(true, std::memory_order_release);
  }
  reactor_->wake();
}

void ReactorThread::call(const std::function<void()>& fn) {
  if (on_thread()) {
    fn();
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  run_job([&] {
    fn();
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
}

// ---- OwnerThread ----

OwnerThread::OwnerThread(PollMode mode, Nanos max_spin) : thread_("sens-owner", mode, max_spin) {
  thread_.call([this] { reactor().set_sleep_guard(this); });
}

OwnerThread::~OwnerThread() {
  thread_.call([this] { reactor().set_sleep_guard(nullptr); });
}

void OwnerThread::remove(SharedConnection* c) {
  conns_.erase(std::remove(conns_.begin(), conns_.end(), c), conns_.end());
}

bool OwnerThread::before_sleep() {
  sleeping_.store(true, std::memory_order_relaxed);
  // A submitter pushes, then fences and reads sleeping_; we store, fence, then look: one of
  // the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (SharedConnection* c : conns_) {
    if (c->has_queued()) {
      sleeping_.store(false, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

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

bool SharedConnection::hold(uint16_t cid, const Completion& c) {
  // Only the host's own verdict on a connection that is down, never a controller's status.
  if (c.status != kStatusHostPathError && c.status != kStatusHostAborted) return false;
  if (queue_ && queue_->is_open()) return false;
  Request& r = requests_[cid];
  SubmitterLink* l = link_of_[cid];
  if (!l || l->closing.load(std::memory_order_acquire) || !ctrl_.may_hold() ||
      r.retries >= kMaxRetries)
    return false;
  ++r.retries;
  held_.push_back(cid);  // each cid at most once: never past its reserved depth
  return true;
}

void SharedConnection::teardown(const std::string& why) {
  if (!queue_) return;
  std::unique_lock<std::mutex> g(lock_, std::defer_lock);
  if (mode_ == ShareMode::kLock) g.lock();
  queue_->close(why);  // in flight: held (on_done)
}

std::string SharedConnection::reopen(uint64_t epoch) {
  teardown("reconnecting");
  const uint64_t old = epoch_;
  epoch_ = epoch;
  std::unique_ptr<Queue> previous;
  {
    // open() installs the new queue; the old one goes once nothing can reach it.
    std::unique_lock<std::mutex> g(lock_, std::defer_lock);
    if (mode_ == ShareMode::kLock) g.lock();
    previous = std::move(queue_);
  }
  if (std::string e = open(); !e.empty()) {
    epoch_ = old;
    std::unique_lock<std::mutex> g(lock_, std::defer_lock);
    if (mode_ == ShareMode::kLock) g.lock();
    queue_ = std::move(previous);  // closed: submissions keep being held
    return e;
  }
  previous.reset();
  return "";
}

void SharedConnection::resend_held() {
  std::unique_lock<std::mutex> g(lock_, std::defer_lock);
  if (mode_ == ShareMode::kLock) g.lock();
  uint64_t retried = 0, fresh = 0;
  std::vector<uint16_t> resend;
  resend.swap(held_);
  held_.reserve(depth_);
  for (uint16_t cid : resend) {
    (requests_[cid].retries ? retried : fresh) += 1;
    submit_one(cid);
  }
  ctrl_.count_resent(retried, fresh);
}

void SharedConnection::fail_held() {
  std::unique_lock<std::mutex> g(lock_, std::defer_lock);
  if (mode_ == ShareMode::kLock) g.lock();
  if (queue_ && queue_->is_open()) queue_->close("controller failed");
  std::vector<uint16_t> list;
  list.swap(held_);
  held_.reserve(depth_);
  for (uint16_t cid : list) route(cid, path_error());
}

void SharedConnection::fail_link_held(SubmitterLink* l) {
  std::unique_lock<std::mutex> g(lock_, std::defer_lock);
  if (mode_ == ShareMode::kLock) g.lock();
  size_t keep = 0;
  for (size_t i = 0; i < held_.size(); ++i) {
    const uint16_t cid = held_[i];
    if (link_of_[cid] == l)
      route(cid, path_error());
    else
      held_[keep++] = cid;
  }
  held_.resize(keep);
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
  if (!l->poller) {
    l->queue.deliver(rel, c);  // callbacks on this (the owner) thread
    return;
  }
  l->done.push({rel, c});  // never full: it holds the submitter's whole depth
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

// ---- PollerImpl ----

namespace {
PollMode parse_poll_or_default(const std::string& name) {
  PollMode m = PollMode::kAdaptive;
  parse_poll_mode(name, &m);
  return m;
}
}  // namespace

PollerImpl::PollerImpl(const PollerOptions& o) {
  reactor_.set_poll(parse_poll_or_default(o.poll), Nanos(o.poll_max_us) * kMicro);
  reactor_.add_pass_hook(this);
  reactor_.set_sleep_guard(this);
}

PollerImpl::~PollerImpl() {
  reactor_.remove_pass_hook(this);
  reactor_.set_sleep_guard(nullptr);
}

void PollerImpl::remove_link(SubmitterLink* l) {
  links_.erase(std::remove(links_.begin(), links_.end(), l), links_.end());
}

void PollerImpl::remove_queue(IoQueueImpl* q) {
  queues_.erase(std::remove(queues_.begin(), queues_.end(), q), queues_.end());
}

void PollerImpl::recover() {
  local_work_ = false;
  recovery_.store(false, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  // By index: a queue may reconnect, which drives the reactor (and callbacks) meanwhile.
  for (size_t i = 0; i < queues_.size(); ++i) queues_[i]->recover();
}

int PollerImpl::process_completions(uint32_t max, int64_t timeout_ns) {
  budget_ = max;
  limited_ = max > 0;
  delivered_ = 0;
  // Reconnect work: one relaxed load per call, nothing per I/O.
  if (local_work_ || recovery_.load(std::memory_order_relaxed)) recover();
  reactor_.run_once(timeout_ns < 0 ? -1 : Nanos(timeout_ns));
  return delivered_;
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

// ---- IoQueueImpl ----

IoQueueImpl::IoQueueImpl(ControllerImpl& ctrl, PollerImpl* poller, uint32_t depth)
    : ctrl_(ctrl), poller_(poller), depth_(depth) {
  if (poller_) {
    poller_->add_queue(this);
    ctrl_.add_poller(poller_);
  }
  held_.reserve(depth);
  failed_.reserve(depth);
  scratch_.reserve(depth);
  free_.reserve(depth);
  for (int i = int(depth) - 1; i >= 0; --i) free_.push_back(uint16_t(i));
}

IoQueueImpl::~IoQueueImpl() {
  closing_ = true;  // nothing is held any more
  if (link_) link_->closing.store(true, std::memory_order_release);
  if (inline_) {
    inline_->close("I/O queue destroyed");  // fails what is in flight: callbacks run
    fail_list(held_);
    inline_.reset();
    ctrl_.give_qid(qid_);
  }
  fail_list(failed_);
  if (poller_) {
    poller_->remove_queue(this);
    ctrl_.remove_poller(poller_);
  }
  if (shared_) {
    SharedConnection* held_on = shared_;
    SubmitterLink* hl = link_.get();
    held_on->owner().thread().call([held_on, hl] { held_on->fail_link_held(hl); });
    // Commands in flight complete first (or fail with the connection), bounded by the I/O
    // timeout's watchdog.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(ctrl_.options().io_timeout_ms + 2000);
    while (inflight() > 0 && std::chrono::steady_clock::now() < deadline) {
      if (poller_)
        poller_->process_completions(0, 10 * kMilli);
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    SharedConnection* c = shared_;
    SubmitterLink* l = link_.get();
    c->owner().thread().call([c, l] { c->remove_link(l); });
    if (poller_) poller_->remove_link(l);
    c->release(l->cid_base, l->depth);
  }
}

std::string IoQueueImpl::attach_inline(uint16_t qid) {
  qid_ = qid;
  own_requests_.resize(depth_);
  requests_ = own_requests_.data();
  std::unique_ptr<Queue> q;
  if (std::string e = ctrl_.open_io(poller_->reactor(), qid, depth_, false, &q); !e.empty())
    return e;
  epoch_ = tried_ = ctrl_.epoch();
  q->set_on_failure(&IoQueueImpl::on_inline_failure, this);
  inline_ = std::move(q);
  return "";
}

void IoQueueImpl::on_inline_failure(void* ctx, Queue& q) {
  auto* self = static_cast<IoQueueImpl*>(ctx);
  if (self->closing_) return;
  self->poller_->mark_local_work();
  self->ctrl_.connection_lost(self->epoch_,
                              "I/O queue " + std::to_string(q.qid()) + ": " + q.error());
}

void IoQueueImpl::fail_list(std::vector<uint16_t>& list) {
  // Callbacks may submit again (onto this list): only what is there now.
  scratch_.clear();
  scratch_.swap(list);
  Completion c;
  c.status = kStatusHostPathError;
  for (uint16_t cid : scratch_) deliver(cid, c);
  scratch_.clear();
  if (list.capacity() < depth_) list.reserve(depth_);
}

void IoQueueImpl::fail_later(uint16_t cid) {
  if (poller_) {
    failed_.push_back(cid);
    poller_->mark_local_work();
    return;
  }
  // Callbacks on the owner thread: deliver there (a failed controller; allocation is fine).
  shared_->owner().thread().run_job([this, cid] {
    Completion c;
    c.status = kStatusHostPathError;
    deliver(cid, c);
  });
}

void IoQueueImpl::recover() {
  if (!failed_.empty()) fail_list(failed_);
  if (!inline_ || closing_) return;
  const ControllerState st = ctrl_.state();
  const uint64_t ep = ctrl_.epoch();
  if (st == ControllerState::kFailed || st == ControllerState::kClosed) {
    if (inline_->is_open()) inline_->close("controller failed");  // in flight: path error
    fail_list(held_);
  } else if (st == ControllerState::kReconnecting) {
    if (inline_->is_open()) inline_->close("controller reconnecting");  // in flight: held
  } else if (ep != epoch_ && tried_ != ep) {
    tried_ = ep;  // once per association: a failure sends the controller reconnecting again
    reconnect_inline(ep);
  }
}

void IoQueueImpl::reconnect_inline(uint64_t ep) {
  if (inline_->is_open()) inline_->close("reconnecting");  // the old association's
  std::unique_ptr<Queue> q;
  if (std::string err = ctrl_.open_io(poller_->reactor(), qid_, depth_, false, &q); !err.empty()) {
    ctrl_.connection_lost(ep, "reconnect: " + err);
    return;
  }
  q->set_on_failure(&IoQueueImpl::on_inline_failure, this);
  inline_ = std::move(q);
  epoch_ = ep;
  scratch_.clear();
  scratch_.swap(held_);
  uint64_t retried = 0, fresh = 0;
  for (uint16_t cid : scratch_) {
    Request& rq = requests_[cid];
    (rq.retries ? retried : fresh) += 1;
    if (!inline_->is_open() || !inline_->submitv(rq.sqe, rq.iov, rq.iovcnt, rq.len, rq.dir,
                                                 &IoQueueImpl::on_inline_done, this, cid, cid)) {
      if (ctrl_.may_hold())
        held_.push_back(cid);
      else
        failed_.push_back(cid), poller_->mark_local_work();
    }
  }
  scratch_.clear();
  if (held_.capacity() < depth_) held_.reserve(depth_);
  ctrl_.count_resent(retried, fresh);
}

std::string IoQueueImpl::attach_shared(SharedConnection& c) {
  const int base = c.reserve(uint16_t(depth_));
  if (base < 0)
    return "connection " + std::to_string(c.index()) + " has no room for " +
           std::to_string(depth_) + " more commands (connection_depth " +
           std::to_string(ctrl_.options().connection_depth) + ")";
  shared_ = &c;
  requests_ = &c.request(uint16_t(base));
  link_ = std::make_unique<SubmitterLink>(c, *this, poller_, uint16_t(base), uint16_t(depth_));
  SubmitterLink* l = link_.get();
  if (poller_) poller_->add_link(l);
  c.owner().thread().call([&c, l] { c.add_link(l); });
  return "";
}

bool IoQueueImpl::pop_cid(uint16_t* cid) {
  if (free_.empty() && link_ && !poller_) {
    uint16_t got[64];
    for (size_t n; (n = link_->freed.pop(got, 64)) > 0;)
      for (size_t i = 0; i < n; ++i) free_.push_back(got[i]);
  }
  if (free_.empty()) return false;
  *cid = free_.back();
  free_.pop_back();
  return true;
}

int IoQueueImpl::submit(uint8_t opcode, uint32_t nsid, uint64_t lba, uint32_t blocks,
                        const iovec* iov, int iovcnt, sens::Callback cb, void* ctx) {
  const ControllerState st = ctrl_.state();
  if (st == ControllerState::kClosed) return -ENODEV;
  const Namespace* ns = ctrl_.find_namespace(nsid);
  if (!ns) return -EINVAL;
  const bool data = opcode == nvme::io_op::kRead || opcode == nvme::io_op::kWrite;
  const bool ranged = opcode != nvme::io_op::kFlush;
  if (ranged && (blocks == 0 || lba >= ns->blocks || blocks > ns->blocks - lba)) return -EINVAL;
  if (ranged && opcode != nvme::io_op::kDatasetMgmt && blocks > 0x10000) return -EINVAL;
  uint64_t bytes = 0;
  if (data) {
    if (!iov || iovcnt < 1 || iovcnt > kMaxIov) return -EINVAL;
    for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
    if (bytes != uint64_t(blocks) * ns->block_size) return -EINVAL;
    if (ctrl_.max_transfer() && bytes > ctrl_.max_transfer()) return -EINVAL;
    if (bytes > ctrl_.options().max_transfer) return -EINVAL;
  }
  std::unique_lock<std::mutex> g(submit_mu_, std::defer_lock);
  if (!poller_) g.lock();
  uint16_t cid;
  if (!pop_cid(&cid)) return -EAGAIN;
  Request& r = requests_[cid];
  r.user_cb = cb;
  r.user_ctx = ctx;
  r.retries = 0;
  if (opcode == nvme::io_op::kDatasetMgmt) {
    r.dsm = {0, blocks, lba};
    r.sqe = nvme::make_dsm_deallocate(nsid, 1, nvme::Xfer::kTransport);
    r.one = {&r.dsm, sizeof(r.dsm)};
    r.iov = &r.one;
    r.iovcnt = 1;
    r.len = sizeof(r.dsm);
    r.dir = DataDir::kHostToController;
  } else {
    r.sqe = nvme::make_io(opcode, nsid, lba, ranged ? blocks : 0, nvme::Xfer::kTransport,
                          uint32_t(bytes));
    if (data) {
      if (iovcnt == 1) {
        r.one = iov[0];
        r.iov = &r.one;
      } else {
        r.iov = iov;
      }
      r.iovcnt = uint16_t(iovcnt);
    } else {
      r.iov = nullptr;
      r.iovcnt = 0;
    }
    r.len = uint32_t(bytes);
    r.dir = opcode == nvme::io_op::kRead    ? DataDir::kControllerToHost
            : opcode == nvme::io_op::kWrite ? DataDir::kHostToController
                                            : DataDir::kNone;
  }
  inflight_.fetch_add(1, std::memory_order_relaxed);
  if (inline_) {
    if (st == ControllerState::kFailed) {
      fail_later(cid);
    } else if (!inline_->submitv(r.sqe, r.iov, r.iovcnt, r.len, r.dir, &IoQueueImpl::on_inline_done,
                                 this, cid, cid)) {
      // The connection is down: held for the reconnect (the poller's next call reconnects
      // it if the controller is live again), or failed.
      if (ctrl_.may_hold()) {
        held_.push_back(cid);
        poller_->mark_local_work();
      } else {
        fail_later(cid);
      }
    }
    return 0;
  }
  if (poller_) poller_->reactor().add_outstanding(1);
  if (st == ControllerState::kFailed) {
    fail_later(cid);
    return 0;
  }
  if (shared_->mode() == ShareMode::kLock) {
    if (!shared_->submit_locked(uint16_t(link_->cid_base + cid))) fail_later(cid);
    return 0;
  }
  link_->send.push(cid);  // never full: it holds the whole depth
  shared_->doorbell();
  return 0;
}

void IoQueueImpl::on_inline_done(void* ctx, uint64_t cid, const Completion& c) {
  auto* self = static_cast<IoQueueImpl*>(ctx);
  if (!c.ok() && (c.status == kStatusHostPathError || c.status == kStatusHostAborted) &&
      !self->closing_ && !self->inline_->is_open() && self->ctrl_.may_hold()) {
    Request& r = self->requests_[cid];
    if (r.retries < kMaxRetries) {
      ++r.retries;
      self->held_.push_back(uint16_t(cid));  // sent again once reconnected
      return;
    }
  }
  self->deliver(uint16_t(cid), c);
}

void IoQueueImpl::deliver(uint16_t cid, const Completion& c) {
  Request& r = requests_[cid];
  const sens::Callback cb = r.user_cb;
  void* const ctx = r.user_ctx;
  if (!poller_ && link_)
    link_->freed.push(cid);  // the submitting thread takes it back
  else
    free_.push_back(cid);
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  if (poller_) {
    if (!inline_) poller_->reactor().add_outstanding(-1);
    poller_->count_delivered();
  }
  sens::Completion out;
  out.status = Status(c.status, c.dnr);
  out.dw0 = c.dw0;
  out.dw1 = c.dw1;
  if (cb) cb(ctx, out);
}

// ---- ControllerImpl ----

std::string coalesce_config(const sens::ControllerOptions& o, coalesce::Config* out) {
  coalesce::Config c;
  if (!coalesce::parse_policy(o.coalesce, &c.policy))
    return "coalesce '" + o.coalesce + "': expected off, eager, uniform, semantic or adaptive";
  if (o.pg_pdus < 1 || o.ctrl_pdus < 1) return "pg_pdus and ctrl_pdus must be >= 1";
  if (o.pg_timeout_us > 1000000 || o.ctrl_timeout_us > 1000000)
    return "pg_timeout_us and ctrl_timeout_us must be at most 1000000";
  c.pdus = o.pg_pdus;
  c.timeout = Nanos(o.pg_timeout_us) * kMicro;
  c.ctrl_pdus = o.ctrl_pdus;
  c.ctrl_timeout = Nanos(o.ctrl_timeout_us) * kMicro;
  c.bytes = o.pg_bytes;
  *out = c;
  return "";
}

ControllerImpl::ControllerImpl(const TransportId& trid, const sens::ControllerOptions& o)
    : trid_(trid),
      o_(o),
      reconnect_timer_([this] { control_->run_job([this] { attempt_reconnect(); }); }),
      loss_timer_([this] {
        control_->run_job([this] {
          if (!shut_ && state() == ControllerState::kReconnecting)
            fail_controller("no reconnect within ctrl_loss_tmo " +
                            std::to_string(o_.ctrl_loss_tmo_s) + " s (last: " + last_error() + ")");
        });
      }),
      state_cb_(o.on_state),
      state_ctx_(o.on_state_ctx) {
  coalesce_config(o_, &coalesce_);
  poll_ = parse_poll_or_default(o_.poll);
  max_spin_ = Nanos(o_.poll_max_us) * kMicro;
  // The admin queue is quiet: its thread sleeps in epoll.
  control_ = std::make_unique<ReactorThread>("sens-ctrl", PollMode::kOff, 0);
}

ControllerImpl::~ControllerImpl() {
  shutdown();
  control_.reset();
}

const Namespace* ControllerImpl::find_namespace(uint32_t nsid) const {
  for (const Namespace& n : namespaces_)
    if (n.nsid == nsid) return &n;
  return nullptr;
}

uint64_t ControllerImpl::keep_alives() const {
  return ctrl_ ? ctrl_->keep_alives_sent() : 0;
}

QueueOptions ControllerImpl::io_queue_options(uint16_t qid, uint32_t depth, bool lock) const {
  QueueOptions qo;
  qo.qid = qid;
  qo.depth = uint16_t(depth);
  qo.hdr_digest = o_.hdr_digest;
  qo.data_digest = o_.data_digest;
  qo.coalesce = coalesce_;
  qo.command_timeout = Nanos(o_.io_timeout_ms) * kMilli;
  qo.max_transfer = o_.max_transfer;
  qo.external_cids = true;
  qo.tls = ctrl_->tls();
  if (lock) {
    // Submitters send their own commands at once, under the mutex: no timer, no pass end
    // (the owner's reactor state stays the owner's).
    qo.remote_submit = true;
    qo.coalesce.policy = coalesce::Policy::kOff;
  }
  return qo;
}

std::string ControllerImpl::open_io(Reactor& r, uint16_t qid, uint32_t depth, bool shared_lock,
                                    std::unique_ptr<Queue>* out) {
  auto q = std::make_unique<Queue>(r, io_queue_options(qid, depth, shared_lock));
  sockaddr_storage ss;
  socklen_t len;
  if (!trid_sockaddr(trid(), &ss, &len)) return "bad address " + trid().traddr;
  const Nanos deadline = r.now() + admin_controller().connect_timeout();
  if (std::string e = q->open(reinterpret_cast<sockaddr*>(&ss), len, deadline); !e.empty())
    return "I/O queue " + std::to_string(qid) + ": " + e;
  if (std::string e = ctrl_->connect_queue(*q, qid, uint16_t(depth)); !e.empty()) return e;
  q->set_incapsule_limit(incapsule_);
  *out = std::move(q);
  return "";
}

int ControllerImpl::take_qid() {
  std::lock_guard<std::mutex> g(qid_mu_);
  for (size_t q = 1; q < qid_used_.size(); ++q) {
    if (!qid_used_[q]) {
      qid_used_[q] = true;
      return int(q);
    }
  }
  return -1;
}

void ControllerImpl::give_qid(uint16_t qid) {
  std::lock_guard<std::mutex> g(qid_mu_);
  if (qid < qid_used_.size()) qid_used_[qid] = false;
}

std::string ControllerImpl::bring_up() {
  set_state(ControllerState::kConnecting);
  std::string err = [this]() -> std::string {
    host::ControllerOptions co;
    co.hostnqn = o_.hostnqn;
    co.kato_ms = o_.kato_ms;
    co.hdr_digest = o_.hdr_digest;
    co.data_digest = o_.data_digest;
    co.disable_sqflow = o_.disable_sqflow;
    co.admin_timeout = Nanos(o_.admin_timeout_ms) * kMilli;
    co.connect_timeout = Nanos(o_.connect_timeout_ms) * kMilli;
    co.io_timeout = Nanos(o_.io_timeout_ms) * kMilli;
    co.dhchap_secret = o_.dhchap_secret;
    co.dhchap_ctrl_secret = o_.dhchap_ctrl_secret;
    co.tls_psk_file = o_.tls_psk_file;
    if (o_.ctrl_loss_tmo_s > 0 && o_.reconnect_delay_s == 0)
      return std::string("reconnect_delay_s must be >= 1 (ctrl_loss_tmo_s 0 turns reconnect off)");
    ctrl_ = std::make_unique<Controller>(control_->reactor());
    if (std::string e = ctrl_->connect(trid_, co); !e.empty()) return e;
    ctrl_->set_on_lost(&ControllerImpl::on_admin_lost, this);
    cntlid_ = ctrl_->cntlid();
    max_transfer_ = ctrl_->max_transfer_bytes();
    incapsule_ = ctrl_->io_incapsule_bytes();
    mqes_ = uint32_t(ctrl_->cap() & 0xFFFF) + 1;
    std::vector<uint32_t> nsids;
    if (std::string e = ctrl_->active_namespaces(&nsids); !e.empty()) return e;
    for (uint32_t nsid : nsids) {
      NamespaceInfo info;
      if (!ctrl_->namespace_info(nsid, &info).empty()) continue;  // inactive: skip it
      namespaces_.push_back({info.nsid, info.blocks, info.block_size});
    }
    const uint16_t want = uint16_t(std::clamp<uint32_t>(o_.max_io_queues, 1, 65534));
    host::Completion c = ctrl_->admin(nvme::make_set_num_queues(want, want));
    if (!c.ok()) return "Set Features Number of Queues: " + describe(c);
    const uint32_t granted = std::min((c.dw0 & 0xFFFF) + 1, (c.dw0 >> 16) + 1);
    qid_used_.assign(std::min<uint32_t>(granted, want) + 1, false);
    if (o_.share != ShareMode::kNone) {
      if (o_.connections < 1) return "connections must be >= 1";
      if (o_.connection_depth < 1 || o_.connection_depth + 1 > mqes_)
        return "connection depth " + std::to_string(o_.connection_depth) + " needs " +
               std::to_string(o_.connection_depth + 1) + " entries, the controller allows " +
               std::to_string(mqes_) + " (CAP.MQES)";
      std::vector<std::shared_ptr<OwnerThread>> owners;
      const size_t owner_limit = size_t(Reactor::usable_cpus());
      for (uint32_t i = 0; i < o_.connections; ++i) {
        const int qid = take_qid();
        if (qid < 0)
          return "controller grants " + std::to_string(granted) + " I/O queues, " +
                 std::to_string(o_.connections) + " connections asked for";
        // sendlist: one owner thread per usable CPU at most, connections dealt round-robin
        // (two owners on one CPU take turns at it: 8 threads over 2 connections on one core ran
        // at 0.90x of one connection with two owners). lock: an owner per connection.
        if (o_.share == ShareMode::kLock || owners.size() < owner_limit)
          owners.push_back(std::make_shared<OwnerThread>(poll_mode(), poll_max_spin()));
        auto sc = std::make_unique<SharedConnection>(
            *this, int(i), o_.share, uint16_t(qid), o_.connection_depth, owners[i % owners.size()]);
        std::string err;
        SharedConnection* p = sc.get();
        sc->owner().thread().call([&] { err = p->open(); });
        if (!err.empty()) return err;
        shared_.push_back(std::move(sc));
      }
    }
    return std::string();
  }();
  if (!err.empty()) {
    set_state(ControllerState::kFailed);
    return err;
  }
  set_state(ControllerState::kLive);
  return "";
}

// ---- reconnect (the controller thread) ----

void ControllerImpl::set_state(ControllerState s) {
  state_.store(s, std::memory_order_release);
  if (state_cb_) state_cb_(state_ctx_, s);
}

void ControllerImpl::set_error(const std::string& why) {
  std::lock_guard<std::mutex> g(error_mu_);
  last_error_ = why;
}

std::string ControllerImpl::last_error() const {
  std::lock_guard<std::mutex> g(error_mu_);
  return last_error_;
}

sens::ControllerCounters ControllerImpl::counters() const {
  sens::ControllerCounters c;
  c.losses = losses_.load(std::memory_order_relaxed);
  c.reconnect_attempts = attempts_.load(std::memory_order_relaxed);
  c.reconnects = reconnects_.load(std::memory_order_relaxed);
  c.retried = retried_.load(std::memory_order_relaxed);
  c.held = held_.load(std::memory_order_relaxed);
  return c;
}

void ControllerImpl::set_state_callback(void (*cb)(void*, ControllerState), void* ctx) {
  control_->call([&] {
    state_cb_ = cb;
    state_ctx_ = ctx;
  });
}

void ControllerImpl::add_poller(PollerImpl* p) {
  std::lock_guard<std::mutex> g(pollers_mu_);
  pollers_.push_back(p);
}

void ControllerImpl::remove_poller(PollerImpl* p) {
  std::lock_guard<std::mutex> g(pollers_mu_);
  auto it = std::find(pollers_.begin(), pollers_.end(), p);
  if (it != pollers_.end()) pollers_.erase(it);
}

void ControllerImpl::notify_pollers() {
  std::lock_guard<std::mutex> g(pollers_mu_);
  for (PollerImpl* p : pollers_) p->request_recovery();
}

void ControllerImpl::connection_lost(uint64_t epoch, const std::string& why) {
  // Judged on the controller thread: a connection of the association a reconnect is
  // bringing up may fail before that association is published.
  if (shut_) return;
  control_->run_job([this, epoch, why] { on_lost(epoch, why); });
}

void ControllerImpl::on_admin_lost(void* ctx, const std::string& why) {
  auto* self = static_cast<ControllerImpl*>(ctx);
  // Inside the failing queue's pass: act at the top of the loop. Whatever epoch it is then,
  // a live controller whose admin queue is down has lost its association.
  self->control_->run_job([self, why] {
    Queue* q = self->ctrl_ ? self->ctrl_->admin_queue() : nullptr;
    if (!q || !q->is_open()) self->on_lost(self->epoch(), why);
  });
}

void ControllerImpl::on_lost(uint64_t epoch, const std::string& why) {
  if (shut_ || state() != ControllerState::kLive || epoch != this->epoch()) return;
  losses_.fetch_add(1, std::memory_order_relaxed);
  set_error(why);
  if (o_.ctrl_loss_tmo_s == 0) {
    LOG_WARN("host: controller %s: %s; no reconnect (ctrl_loss_tmo 0)", trid_.subnqn.c_str(),
             why.c_str());
    fail_controller(why);
    return;
  }
  LOG_WARN("host: controller %s: %s; reconnecting every %u s for up to %u s", trid_.subnqn.c_str(),
           why.c_str(), o_.reconnect_delay_s, o_.ctrl_loss_tmo_s);
  set_state(ControllerState::kReconnecting);
  Reactor& r = control_->reactor();
  teardown(why);
  notify_pollers();
  r.arm(reconnect_timer_, r.now() + Nanos(o_.reconnect_delay_s) * kSecond);
  if (o_.ctrl_loss_tmo_s != sens::ControllerOptions::kForever) {
    loss_deadline_ = r.now() + Nanos(o_.ctrl_loss_tmo_s) * kSecond;
    r.arm(loss_timer_, loss_deadline_);
  }
}

void ControllerImpl::teardown(const std::string& why) {
  if (ctrl_) ctrl_->drop(why);
  for (auto& sc : shared_) {
    SharedConnection* c = sc.get();
    c->owner().thread().call([c, &why] { c->teardown(why); });
  }
}

std::string ControllerImpl::renegotiate_queues() {
  const uint16_t want = uint16_t(std::clamp<uint32_t>(o_.max_io_queues, 1, 65534));
  host::Completion c = ctrl_->admin(nvme::make_set_num_queues(want, want));
  if (!c.ok()) return "Set Features Number of Queues: " + describe(c);
  const uint32_t granted = std::min((c.dw0 & 0xFFFF) + 1, (c.dw0 >> 16) + 1);
  std::lock_guard<std::mutex> g(qid_mu_);
  for (size_t q = granted + 1; q < qid_used_.size(); ++q)
    if (qid_used_[q])
      return "the controller now grants " + std::to_string(granted) + " I/O queues, qid " +
             std::to_string(q) + " is in use";
  return "";
}

void ControllerImpl::attempt_reconnect() {
  if (shut_ || state() != ControllerState::kReconnecting) return;
  attempts_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t next = epoch() + 1;
  Reactor& r = control_->reactor();
  // An attempt against a peer that accepts and never answers ends near the deadline, not a
  // connect timeout past it.
  if (o_.ctrl_loss_tmo_s != sens::ControllerOptions::kForever)
    ctrl_->set_timeout_cap(std::max<Nanos>(loss_deadline_ - r.now(), 200 * kMilli));
  std::string err = ctrl_->reconnect();
  if (err.empty()) err = renegotiate_queues();
  for (size_t i = 0; err.empty() && i < shared_.size(); ++i) {
    SharedConnection* c = shared_[i].get();
    c->owner().thread().call([&] { err = c->reopen(next); });
  }
  ctrl_->set_timeout_cap(0);
  if (err.empty() && !(ctrl_->admin_queue() && ctrl_->admin_queue()->is_open()))
    err = "admin queue lost while reconnecting: " + ctrl_->error();
  if (!err.empty()) {
    set_error("reconnect: " + err);
    teardown(err);
    if (o_.ctrl_loss_tmo_s != sens::ControllerOptions::kForever && r.now() >= loss_deadline_) {
      fail_controller("no reconnect within ctrl_loss_tmo " + std::to_string(o_.ctrl_loss_tmo_s) +
                      " s (last: reconnect: " + err + ")");
      return;
    }
    LOG_INFO("host: controller %s: reconnect failed: %s; next try in %u s", trid_.subnqn.c_str(),
             err.c_str(), o_.reconnect_delay_s);
    r.arm(reconnect_timer_, r.now() + Nanos(o_.reconnect_delay_s) * kSecond);
    return;
  }
  r.cancel(loss_timer_);
  cntlid_ = ctrl_->cntlid();
  epoch_.store(next, std::memory_order_release);
  reconnects_.fetch_add(1, std::memory_order_relaxed);
  LOG_INFO("host: controller %s: reconnected (cntlid %u)", trid_.subnqn.c_str(), cntlid_);
  set_state(ControllerState::kLive);
  // As Linux unquiesces the I/O queues: what was held goes once the controller is live.
  for (auto& sc : shared_) {
    SharedConnection* c = sc.get();
    c->owner().thread().call([c] { c->resend_held(); });
  }
  aer_outstanding_ = false;  // the old association's AER failed with its queue
  if (aer_cb_) submit_aer();
  notify_pollers();  // kNone queues reconnect on their pollers' threads
}

void ControllerImpl::fail_controller(const std::string& why) {
  Reactor& r = control_->reactor();
  r.cancel(reconnect_timer_);
  r.cancel(loss_timer_);
  set_error(why);
  LOG_WARN("host: controller %s failed: %s", trid_.subnqn.c_str(), why.c_str());
  set_state(ControllerState::kFailed);  // nothing is held from here on
  if (ctrl_) ctrl_->drop(why);
  for (auto& sc : shared_) {
    SharedConnection* c = sc.get();
    c->owner().thread().call([c] { c->fail_held(); });
  }
  notify_pollers();
}

void ControllerImpl::shutdown() {
  if (shut_) return;
  control_->call([this] {
    shut_ = true;
    control_->reactor().cancel(reconnect_timer_);
    control_->reactor().cancel(loss_timer_);
    state_.store(ControllerState::kClosed, std::memory_order_release);  // nothing held
  });
  notify_pollers();
  shared_.clear();  // closes each on its owner thread (failing what is held), joins the owners
  control_->call([this] {
    if (ctrl_) ctrl_->shutdown();
    ctrl_.reset();
  });
  state_.store(ControllerState::kClosed, std::memory_order_release);
}

std::unique_ptr<sens::IoQueue> ControllerImpl::create_io_queue(Poller* poller, uint32_t depth,
                                                               std::string* error) {
  std::string scratch;
  std::string& err = error ? *error : scratch;
  if (state() != ControllerState::kLive) {
    err = std::string("controller is ") + controller_state_name(state());
    return nullptr;
  }
  if (depth < 1 || depth > 4095) {
    err = "depth " + std::to_string(depth) + ": must be 1..4095";
    return nullptr;
  }
  PollerImpl* p = poller ? &poller->impl() : nullptr;
  auto impl = std::make_unique<IoQueueImpl>(*this, p, depth);
  if (o_.share == ShareMode::kNone && p) {
    if (depth + 1 > mqes_) {
      err = "depth " + std::to_string(depth) + " needs " + std::to_string(depth + 1) +
            " entries, the controller allows " + std::to_string(mqes_) + " (CAP.MQES)";
      return nullptr;
    }
    const int qid = take_qid();
    if (qid < 0) {
      err =
          "no I/O queue left (the controller granted " + std::to_string(qid_used_.size() - 1) + ")";
      return nullptr;
    }
    err = impl->attach_inline(uint16_t(qid));
    if (!err.empty()) {
      give_qid(uint16_t(qid));
      return nullptr;
    }
  } else {
    if (shared_.empty()) {
      err = "no shared connection (share none with callbacks on the owner thread is not built)";
      return nullptr;
    }
    // Round robin; a connection with no room left is skipped.
    const uint32_t start = next_shared_.fetch_add(1);
    for (uint32_t k = 0; k < shared_.size(); ++k) {
      err = impl->attach_shared(*shared_[(start + k) % shared_.size()]);
      if (err.empty()) break;
    }
    if (!err.empty()) return nullptr;
  }
  err.clear();
  return std::unique_ptr<sens::IoQueue>(new sens::IoQueue(std::move(impl)));
}

namespace {
struct AdminCall {
  sens::Callback cb;
  void* ctx;
};
void admin_done(void* ctx, uint64_t, const host::Completion& c) {
  auto* a = static_cast<AdminCall*>(ctx);
  sens::Completion out;
  out.status = Status(c.status, c.dnr);
  out.dw0 = c.dw0;
  out.dw1 = c.dw1;
  if (a->cb) a->cb(a->ctx, out);
  delete a;
}
}  // namespace

int ControllerImpl::admin(const AdminCommand& cmd, void* buf, uint32_t len, sens::Callback cb,
                          void* ctx) {
  const ControllerState st = state();
  if (st == ControllerState::kFailed || st == ControllerState::kClosed) return -ENODEV;
  if (len > 0 && (!buf || cmd.data == AdminCommand::Data::kNone)) return -EINVAL;
  if (len > (1u << 20)) return -EINVAL;
  nvme::Sqe sqe{};
  sqe.opcode = cmd.opcode;
  sqe.nsid = cmd.nsid;
  sqe.cdw10 = cmd.cdw10;
  sqe.cdw11 = cmd.cdw11;
  sqe.cdw12 = cmd.cdw12;
  sqe.cdw13 = cmd.cdw13;
  sqe.cdw14 = cmd.cdw14;
  sqe.cdw15 = cmd.cdw15;
  const DataDir dir = cmd.data == AdminCommand::Data::kToController     ? DataDir::kHostToController
                      : cmd.data == AdminCommand::Data::kFromController ? DataDir::kControllerToHost
                                                                        : DataDir::kNone;
  control_->run_job([this, sqe, buf, len, dir, cb, ctx] {
    auto* a = new AdminCall{cb, ctx};  // admin commands are rare: one allocation each is fine
    Queue* q = ctrl_ ? ctrl_->admin_queue() : nullptr;
    if (!q || !q->submit(sqe, buf, len, dir, &admin_done, a, 0)) admin_done(a, 0, path_error());
  });
  return 0;
}

void ControllerImpl::set_async_event_callback(AsyncEventCallback cb, void* ctx) {
  control_->call([&] {
    aer_cb_ = cb;
    aer_ctx_ = ctx;
    if (cb && !aer_outstanding_) submit_aer();
  });
}

void ControllerImpl::submit_aer() {
  Queue* q = ctrl_ ? ctrl_->admin_queue() : nullptr;
  if (q && q->submit(nvme::make_async_event(), nullptr, 0, DataDir::kNone, &ControllerImpl::on_aer,
                     this, 0))
    aer_outstanding_ = true;
}

void ControllerImpl::on_aer(void* ctx, uint64_t, const host::Completion& c) {
  auto* self = static_cast<ControllerImpl*>(ctx);
  self->aer_outstanding_ = false;
  if (!c.ok()) return;  // the queue closed, or the controller refuses more AERs
  if (self->aer_cb_) {
    self->aer_cb_(self->aer_ctx_, c.dw0);
    self->submit_aer();
  }
}

}  // namespace host

// ---- the public classes over the implementation ----

Poller::Poller(const PollerOptions& options) : impl_(std::make_unique<host::PollerImpl>(options)) {}
Poller::~Poller() = default;
int Poller::process_completions(uint32_t max, int64_t timeout_ns) {
  return impl_->process_completions(max, timeout_ns);
}

IoQueue::IoQueue(std::unique_ptr<host::IoQueueImpl> impl) : impl_(std::move(impl)) {}
IoQueue::~IoQueue() = default;

int IoQueue::read(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt,
                  Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kRead, nsid, lba, blocks, iov, iovcnt, cb, ctx);
}
int IoQueue::write(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt,
                   Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kWrite, nsid, lba, blocks, iov, iovcnt, cb, ctx);
}
int IoQueue::flush(uint32_t nsid, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kFlush, nsid, 0, 0, nullptr, 0, cb, ctx);
}
int IoQueue::write_zeroes(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kWriteZeroes, nsid, lba, blocks, nullptr, 0, cb, ctx);
}
int IoQueue::deallocate(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx) {
  return impl_->submit(nvme::io_op::kDatasetMgmt, nsid, lba, blocks, nullptr, 0, cb, ctx);
}
int IoQueue::process_completions(uint32_t max, int64_t timeout_ns) {
  host::PollerImpl* p = impl_->poller();
  return p ? p->process_completions(max, timeout_ns) : 0;
}
uint32_t IoQueue::depth() const {
  return impl_->depth();
}
uint32_t IoQueue::inflight() const {
  return impl_->inflight();
}
int IoQueue::connection() const {
  return impl_->connection();
}

Controller::Controller(std::unique_ptr<host::ControllerImpl> impl) : impl_(std::move(impl)) {}
Controller::~Controller() {
  if (impl_) impl_->shutdown();
}

namespace {
struct ConnectJob {
  std::unique_ptr<host::ControllerImpl> impl;
  ConnectCallback cb = nullptr;
  void* ctx = nullptr;
  std::promise<ConnectResult> promise;
  bool use_promise = false;
  void finish(ConnectResult r) {
    if (use_promise)
      promise.set_value(std::move(r));
    else if (cb)
      cb(ctx, std::move(r));
  }
};
}  // namespace

static void start_connect(std::string_view trid_text, const ControllerOptions& options,
                          std::shared_ptr<ConnectJob> job) {
  std::string err;
  auto trid = host::parse_trid(trid_text, &err);
  if (trid && trid->subnqn == nvme::kDiscoveryNqn)
    err = "subnqn missing: the library connects to an NVM subsystem, not to discovery";
  coalesce::Config scratch;
  if (trid && err.empty()) err = host::coalesce_config(options, &scratch);
  PollMode pm;
  if (trid && err.empty() && !parse_poll_mode(options.poll, &pm))
    err = "poll '" + options.poll + "': expected off, adaptive or always";
  if (!trid || !err.empty()) {
    ConnectResult r;
    r.error = err;
    job->finish(std::move(r));
    return;
  }
  job->impl = std::make_unique<host::ControllerImpl>(*trid, options);
  host::ControllerImpl* impl = job->impl.get();
  impl->control().run_job([job, impl] {
    ConnectResult r;
    r.error = impl->bring_up();
    if (r.error.empty()) {
      r.controller = host::ControllerImpl::wrap(std::move(job->impl));
      job->finish(std::move(r));
      return;
    }
    // Torn down off this thread (its destructor joins it), and only then reported: a caller
    // that exits on the error must not leave the library's threads running.
    std::thread([job, r = std::move(r)]() mutable {
      job->impl.reset();
      job->finish(std::move(r));
    }).detach();
  });
}

std::future<ConnectResult> Controller::connect(std::string_view trid,
                                               const ControllerOptions& options) {
  auto job = std::make_shared<ConnectJob>();
  job->use_promise = true;
  auto f = job->promise.get_future();
  start_connect(trid, options, job);
  return f;
}

void Controller::connect(std::string_view trid, const ControllerOptions& options,
                         ConnectCallback cb, void* ctx) {
  auto job = std::make_shared<ConnectJob>();
  job->cb = cb;
  job->ctx = ctx;
  start_connect(trid, options, job);
}

std::unique_ptr<sens::Controller> host::ControllerImpl::wrap(std::unique_ptr<ControllerImpl> impl) {
  return std::unique_ptr<sens::Controller>(new sens::Controller(std::move(impl)));
}

const std::vector<Namespace>& Controller::namespaces() const {
  return impl_->namespaces();
}
const Namespace* Controller::find_namespace(uint32_t nsid) const {
  return impl_->find_namespace(nsid);
}
std::unique_ptr<IoQueue> Controller::create_io_queue(Poller* poller, uint32_t depth,
                                                     std::string* error) {
  return impl_->create_io_queue(poller, depth, error);
}
int Controller::admin(const AdminCommand& cmd, void* buf, uint32_t len, Callback cb, void* ctx) {
  return impl_->admin(cmd, buf, len, cb, ctx);
}
Completion Controller::admin_sync(const AdminCommand& cmd, void* buf, uint32_t len) {
  struct Wait {
    std::promise<Completion> p;
  } w;
  auto f = w.p.get_future();
  int rc = impl_->admin(
      cmd, buf, len,
      [](void* ctx, const Completion& c) { static_cast<Wait*>(ctx)->p.set_value(c); }, &w);
  if (rc != 0) return Completion{Status(Status::kHostPathError), 0, 0};
  return f.get();
}
void Controller::set_async_event_callback(AsyncEventCallback cb, void* ctx) {
  impl_->set_async_event_callback(cb, ctx);
}
ControllerState Controller::state() const {
  return impl_->state();
}
void Controller::set_state_callback(void (*cb)(void* ctx, ControllerState state), void* ctx) {
  impl_->set_state_callback(cb, ctx);
}
std::string Controller::last_error() const {
  return impl_->last_error();
}
ControllerCounters Controller::counters() const {
  return impl_->counters();
}
uint16_t Controller::cntlid() const {
  return impl_->cntlid();
}
const std::string& Controller::subnqn() const {
  return impl_->subnqn();
}
uint32_t Controller::max_transfer() const {
  return impl_->max_transfer();
}
uint64_t Controller::keep_alives_sent() const {
  return impl_->keep_alives();
}
const ControllerOptions& Controller::options() const {
  return impl_->options();
}
void Controller::shutdown() {
  impl_->shutdown();
}

}  // namespace sens
