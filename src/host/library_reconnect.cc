// The reconnect protocol, in one place. An association is numbered by the controller's epoch
// (incremented by every reconnect); each connection remembers the epoch it belongs to, so a
// loss reported for an older association is ignored. When a connection of the live association
// fails, the controller thread tears everything down (kReconnecting), and commands in flight
// are held by cid rather than failed: a shared connection's in its held_ list (the owner
// thread's; kLock: under its mutex), an inline queue's in IoQueueImpl::held_ (the poller's
// thread). A reconnect brings up the admin queue and the shared connections on the controller
// and owner threads, publishes the new epoch and goes kLive, then the held commands are sent
// again (at most kMaxRetries times each); inline queues reconnect on their pollers' threads when
// the pollers see the new epoch (recover()). Past ctrl_loss_tmo the controller fails, and held
// commands complete with the path error.
//
// An inline queue's reconnect never blocks its poller's thread (the application's): it is a
// QueueSetup (host/queue_setup.h), TCP connect, TLS, ICReq, Fabrics Connect and DH-HMAC-CHAP
// advanced by the poller's reactor as their sockets become ready, with the blocking set-up's
// deadlines; the poller's next call after it finishes sends the held commands, or reports the
// failure (connection_lost), which starts the next attempt as any loss does. The admin queue and
// the shared connections reconnect on the library's own threads (the controller's, the owners'),
// which wait for their steps: no application thread runs them.
#include <algorithm>

#include "common/log.h"
#include "host/library.h"

namespace sens::host {

// ---- SharedConnection: held commands, teardown and reopen (the owner thread) ----

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
      route(cid, aborted_completion());  // its queue is being deleted
    else
      held_[keep++] = cid;
  }
  held_.resize(keep);
}

// ---- PollerImpl ----

void PollerImpl::recover() {
  local_work_ = false;
  recovery_.store(false, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  // By index: a queue may reconnect, which drives the reactor (and callbacks) meanwhile.
  for (size_t i = 0; i < queues_.size(); ++i) queues_[i]->recover();
}

// ---- IoQueueImpl: the inline connection's held commands (the poller's thread) ----

void IoQueueImpl::on_inline_failure(void* ctx, Queue& q) {
  auto* self = static_cast<IoQueueImpl*>(ctx);
  if (self->closing_) return;
  self->poller_->mark_local_work();
  self->ctrl_->connection_lost(self->epoch_,
                               "I/O queue " + std::to_string(q.qid()) + ": " + q.error());
}

void IoQueueImpl::recover() {
  if (!failed_.empty()) fail_list(failed_, gone());
  if (!inline_ || closing_) return;
  if (setup_ && setup_->finished()) finish_reconnect();
  const ControllerState st = ctrl_->state();
  const uint64_t ep = ctrl_->epoch();
  if (st == ControllerState::kFailed || st == ControllerState::kClosed) {
    setup_.reset();
    // In flight: the path error (failed), or aborted (the controller was deleted).
    if (inline_->is_open())
      inline_->close(st == ControllerState::kClosed ? "controller deleted" : "controller failed");
    fail_list(held_, gone());
  } else if (st == ControllerState::kReconnecting) {
    setup_.reset();                                                     // its association is gone
    if (inline_->is_open()) inline_->close("controller reconnecting");  // in flight: held
  } else if (ep != epoch_ && tried_ != ep) {
    tried_ = ep;  // once per association: a failure sends the controller reconnecting again
    reconnect_inline(ep);
  }
}

void IoQueueImpl::reconnect_inline(uint64_t ep) {
  if (inline_->is_open()) inline_->close("reconnecting");  // the old association's
  setup_epoch_ = ep;
  setup_ = ctrl_->start_io_setup(poller_->reactor(), qid_, depth_, false,
                                 &IoQueueImpl::on_setup_finished, this);
  // DH-HMAC-CHAP's DH exchange on the controller's thread, not the application's.
  ControllerImpl* c = ctrl_.get();
  setup_->set_offload([c](std::function<void()> job) { c->control().run_job(std::move(job)); });
  // A set-up that failed at once (no socket, bad address) is finished already.
  if (setup_->finished()) finish_reconnect();
}

void IoQueueImpl::on_setup_finished(void* ctx) {
  // Inside the reactor's pass: the poller's next call (it does not sleep first) finishes.
  static_cast<IoQueueImpl*>(ctx)->poller_->mark_local_work();
}

const char* IoQueueImpl::connection_state() const {
  if (!inline_) return shared_ ? "shared" : "down";
  if (setup_) return queue_setup_step_name(setup_->step());
  return inline_->is_open() ? "open" : "down";
}

void IoQueueImpl::finish_reconnect() {
  std::unique_ptr<QueueSetup> s = std::move(setup_);
  const uint64_t ep = setup_epoch_;
  if (s->step() != QueueSetup::Step::kDone) {
    ctrl_->connection_lost(ep, "reconnect: " + s->error());
    return;
  }
  std::unique_ptr<Queue> q = s->take();
  s.reset();
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
      if (ctrl_->may_hold())
        held_.push_back(cid);
      else
        failed_.push_back(cid), poller_->mark_local_work();
    }
  }
  scratch_.clear();
  if (held_.capacity() < depth_) held_.reserve(depth_);
  ctrl_->count_resent(retried, fresh);
}

void IoQueueImpl::on_inline_done(void* ctx, uint64_t cid, const Completion& c) {
  auto* self = static_cast<IoQueueImpl*>(ctx);
  if (!c.ok() && host_made(c.status)) {
    if (!self->closing_ && !self->inline_->is_open() && self->ctrl_->may_hold()) {
      Request& r = self->requests_[cid];
      if (r.retries < kMaxRetries) {
        ++r.retries;
        self->held_.push_back(uint16_t(cid));  // sent again once reconnected
        return;
      }
    }
    if (self->closing_ || self->ctrl_->state() == ControllerState::kClosed) {
      self->deliver(uint16_t(cid), aborted_completion());  // the queue or controller is deleted
      return;
    }
  }
  self->deliver(uint16_t(cid), c);
}

// ---- ControllerImpl: losses, attempts, failure (the controller thread) ----

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

}  // namespace sens::host
