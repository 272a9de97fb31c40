// ControllerImpl: bring-up (admin queue, namespaces, shared connections), I/O queue creation
// and connection set-up, qids, admin passthrough, asynchronous events, state and counters,
// shutdown. The reconnect protocol is in library_reconnect.cc.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/log.h"
#include "host/library.h"

namespace sens::host {

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
  // The last of the Controller and its queues is gone: the threads go.
  shutdown();
  shared_.clear();  // each leaves its owner thread; the last one on an owner joins it
  control_->call([this] { ctrl_.reset(); });
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

std::unique_ptr<QueueSetup> ControllerImpl::start_io_setup(Reactor& r, uint16_t qid, uint32_t depth,
                                                           bool shared_lock,
                                                           void (*on_finished)(void*), void* ctx) {
  auto s = std::make_unique<QueueSetup>(r, *ctrl_, io_queue_options(qid, depth, shared_lock),
                                        incapsule_, on_finished, ctx);
  s->start();
  return s;
}

std::string ControllerImpl::open_io(Reactor& r, uint16_t qid, uint32_t depth, bool shared_lock,
                                    std::unique_ptr<Queue>* out) {
  // The non-blocking set-up, waited for: the set-up's own deadlines end it.
  std::unique_ptr<QueueSetup> s = start_io_setup(r, qid, depth, shared_lock, nullptr, nullptr);
  while (!s->finished()) r.run_once(10 * kMilli);
  if (s->step() == QueueSetup::Step::kFailed) return s->error();
  *out = s->take();
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

void ControllerImpl::add_queue(IoQueueImpl* q) {
  std::lock_guard<std::mutex> g(queues_mu_);
  queues_.push_back(q);
}

void ControllerImpl::remove_queue(IoQueueImpl* q) {
  std::lock_guard<std::mutex> g(queues_mu_);
  auto it = std::find(queues_.begin(), queues_.end(), q);
  if (it != queues_.end()) queues_.erase(it);
}

void ControllerImpl::notify_pollers() {
  // A registered queue's poller is alive: a poller closes its queues (which leave this list,
  // under this mutex) before it goes.
  std::lock_guard<std::mutex> g(queues_mu_);
  for (IoQueueImpl* q : queues_)
    if (PollerImpl* p = q->poller()) p->request_recovery();
}

void ControllerImpl::shutdown() {
  if (shutdown_started_.exchange(true)) return;
  control_->call([this] {
    shut_ = true;
    control_->reactor().cancel(reconnect_timer_);
    control_->reactor().cancel(loss_timer_);
    state_.store(ControllerState::kClosed, std::memory_order_release);  // nothing held
  });
  // Every I/O connection goes: what was in flight or held on a shared one completes aborted,
  // on its owner thread (a queue without poller's callbacks run there, now; the others' wait
  // on their lists). The connections and the threads stay until the last queue is gone.
  for (auto& sc : shared_) {
    SharedConnection* c = sc.get();
    c->owner().thread().call([c] { c->shut_down(); });
  }
  notify_pollers();  // inline connections close on their pollers' threads
  finish_queues();
  const Nanos bound = std::min<Nanos>(2 * kSecond, Nanos(o_.abort_timeout_ms) * kMilli);
  control_->call([this, bound] {
    if (!ctrl_) return;
    ctrl_->set_timeout_cap(std::max<Nanos>(bound, kMilli));
    ctrl_->shutdown(bound);  // CC.SHN; the object stays (queues may still read its settings)
  });
  state_.store(ControllerState::kClosed, std::memory_order_release);
}

void ControllerImpl::finish_queues() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(o_.abort_timeout_ms);
  std::vector<PollerImpl*> ran;  // this thread's pollers run once at least
  for (;;) {
    PollerImpl* here = nullptr;
    bool waiting = false;
    {
      std::lock_guard<std::mutex> g(queues_mu_);
      for (IoQueueImpl* q : queues_) {
        PollerImpl* p = q->poller();
        if (!p) {
          waiting |= q->inflight() > 0;  // callbacks on an owner thread
        } else if (p->home_here()) {
          // This thread's: run here (not from inside one of its callbacks, where it resumes
          // when the callback returns).
          if (p->busy_here()) continue;
          const bool first = std::find(ran.begin(), ran.end(), p) == ran.end();
          if (!here && (first || q->inflight() > 0)) here = p;
          if (!first) waiting |= q->inflight() > 0;
        } else {
          waiting |= q->inflight() > 0;  // another thread's: its next process_completions
        }
      }
    }
    if (here) {
      // One poller per scan: its callbacks may delete queues and pollers of this thread.
      const bool first = std::find(ran.begin(), ran.end(), here) == ran.end();
      if (first) ran.push_back(here);
      here->request_recovery();
      here->process_completions(0, first ? 0 : kMilli);
      if (first || Clock::now() < deadline) continue;
    }
    if (!waiting || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
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
  PollerImpl* p = poller ? &ApiAccess::impl(*poller) : nullptr;
  auto impl = std::make_unique<IoQueueImpl>(shared_from_this(), p, depth);
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

}  // namespace sens::host
