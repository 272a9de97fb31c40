#include "reactor/reactor.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace sens {

namespace {
thread_local Reactor* t_current = nullptr;
// Marks the eventfd in epoll's user data; handlers are never at this address.
constexpr uint64_t kWakeupTag = 1;
std::atomic<int> g_active_reactors{0};
}  // namespace

int Reactor::active_reactors() {
  return g_active_reactors.load(std::memory_order_relaxed);
}

void Reactor::set_active(bool active) {
  if (active == active_counted_) return;
  active_counted_ = active;
  g_active_reactors.fetch_add(active ? 1 : -1, std::memory_order_relaxed);
}

int Reactor::usable_cpus() {
  // `taskset -c 1 sens perf --threads 8`: eight reactors (and their owners) on one CPU.
  static const int n = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
    return std::max(CPU_COUNT(&set), 1);
  }();
  return n;
}

Timer::~Timer() {
  if (reactor_ && armed()) reactor_->cancel(*this);
}

Reactor::Reactor(int index) : index_(index), events_(256) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epfd_ < 0 || event_fd_ < 0)
    throw std::runtime_error(std::string("reactor: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeupTag;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, event_fd_, &ev);
  // The default 50 us timer slack would swallow the 10 us coalescing timers. The reactor is
  // built on the thread that runs it (run() sets it again for the other case).
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  heap_.reserve(1024);
  deferred_.reserve(64);
  deferred_running_.reserve(64);
}

Reactor::~Reactor() {
  set_active(false);
  for (Timer* t : heap_) t->heap_index_ = -1;
  close(epfd_);
  close(event_fd_);
}

Reactor* Reactor::current() {
  return t_current;
}

void Reactor::add(int fd, uint32_t events, EventHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll add: ") + std::strerror(errno));
}

void Reactor::modify(int fd, uint32_t events, EventHandler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void Reactor::remove(int fd) {
  epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
}

void Reactor::remove(int fd, EventHandler* handler) {
  remove(fd);
  for (int i = batch_next_; i < batch_end_; ++i)
    if (events_[i].data.u64 != kWakeupTag && events_[i].data.ptr == handler)
      events_[i].data.ptr = nullptr;
}

// ---- timer heap (min-heap on deadline, intrusive index) ----
void Reactor::heap_up(int i) {
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (heap_[parent]->deadline_ <= heap_[i]->deadline_) break;
    std::swap(heap_[parent], heap_[i]);
    heap_[parent]->heap_index_ = parent;
    heap_[i]->heap_index_ = i;
    i = parent;
  }
}

void Reactor::heap_down(int i) {
  int n = int(heap_.size());
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_[l]->deadline_ < heap_[m]->deadline_) m = l;
    if (r < n && heap_[r]->deadline_ < heap_[m]->deadline_) m = r;
    if (m == i) break;
    std::swap(heap_[m], heap_[i]);
    heap_[m]->heap_index_ = m;
    heap_[i]->heap_index_ = i;
    i = m;
  }
}

void Reactor::heap_remove(int i) {
  Timer* t = heap_[i];
  int last = int(heap_.size()) - 1;
  if (i != last) {
    heap_[i] = heap_[last];
    heap_[i]->heap_index_ = i;
  }
  heap_.pop_back();
  t->heap_index_ = -1;
  if (i < int(heap_.size())) {
    heap_up(i);
    heap_down(heap_[i]->heap_index_);
  }
}

void Reactor::arm(Timer& timer, Nanos deadline) {
  timer.reactor_ = this;
  if (timer.armed()) {
    Nanos old = timer.deadline_;
    timer.deadline_ = deadline;
    if (deadline < old)
      heap_up(timer.heap_index_);
    else
      heap_down(timer.heap_index_);
    return;
  }
  timer.deadline_ = deadline;
  timer.heap_index_ = int(heap_.size());
  heap_.push_back(&timer);
  heap_up(timer.heap_index_);
}

void Reactor::cancel(Timer& timer) {
  if (timer.armed()) heap_remove(timer.heap_index_);
}

void Reactor::fire_timers() {
  if (heap_.empty()) return;
  Nanos now = clock_.now();
  while (!heap_.empty() && heap_[0]->deadline_ <= now) {
    Timer* t = heap_[0];
    stats_.timer_late_ns.record(uint64_t(now - t->deadline_));
    heap_remove(0);
    ++stats_.timers_fired;
    t->fire_();
    // A handler may send: the next timer's lateness counts from when it really runs, so that
    // a delay bounded by "timer + lateness" holds for every timer of a busy pass.
    if (!heap_.empty()) now = clock_.now();
  }
}

void Reactor::defer(std::function<void()> fn) {
  deferred_.push_back(std::move(fn));
}

void Reactor::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mailbox_mu_);
    mailbox_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  ssize_t r = write(event_fd_, &one, sizeof(one));
  (void)r;
}

void Reactor::wake() {
  uint64_t one = 1;
  ssize_t r = write(event_fd_, &one, sizeof(one));
  (void)r;
}

void Reactor::add_pass_hook(PassHook* h) {
  pass_hooks_.push_back(h);
}

void Reactor::remove_pass_hook(PassHook* h) {
  pass_hooks_.erase(std::remove(pass_hooks_.begin(), pass_hooks_.end(), h), pass_hooks_.end());
}

void Reactor::drain_mailbox() {
  uint64_t v;
  while (read(event_fd_, &v, sizeof(v)) > 0) {
  }
  {
    std::lock_guard<std::mutex> lock(mailbox_mu_);
    mailbox_running_.swap(mailbox_);
  }
  for (auto& fn : mailbox_running_) fn();
  mailbox_running_.clear();
}

const char* poll_mode_name(PollMode m) {
  switch (m) {
    case PollMode::kOff:
      return "off";
    case PollMode::kAdaptive:
      return "adaptive";
    case PollMode::kAlways:
      return "always";
  }
  return "unknown";
}

bool parse_poll_mode(std::string_view name, PollMode* out) {
  for (PollMode m : {PollMode::kOff, PollMode::kAdaptive, PollMode::kAlways}) {
    if (name == poll_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

void Reactor::set_poll(PollMode mode, Nanos max_spin) {
  poll_mode_ = mode;
  max_spin_ = std::max<Nanos>(max_spin, 0);
}

void Reactor::at_pass_end(PassEndHandler& h) {
  if (h.pass_end_queued_) return;
  h.pass_end_queued_ = true;
  pass_end_.push_back(&h);
}

void Reactor::cancel_pass_end(PassEndHandler& h) {
  if (!h.pass_end_queued_) return;
  h.pass_end_queued_ = false;
  // Rare (a connection closing with PDUs queued): a linear search is fine.
  for (auto* list : {&pass_end_, &pass_end_running_})
    for (auto& p : *list)
      if (p == &h) p = nullptr;
}

Nanos Reactor::due_wait(Nanos max_wait, Nanos now) const {
  Nanos wait = max_wait;  // < 0: no limit
  if (!deferred_.empty() || !pass_end_.empty()) return 0;
  if (!heap_.empty()) {
    Nanos until = std::max<Nanos>(heap_[0]->deadline_ - now, 0);
    if (wait < 0 || until < wait) wait = until;
  }
  return wait;
}

Nanos Reactor::poll_wait(Nanos max_wait, Nanos now) const {
  return polled_wait(due_wait(max_wait, now), now);
}

Nanos Reactor::polled_wait(Nanos wait, Nanos now) const {
  if (wait == 0 || poll_mode_ == PollMode::kOff) return wait;
  if (poll_mode_ == PollMode::kAlways) return 0;
  // Adaptive: spin while the next event is likely to come soon: up to twice the recent time
  // between events, counted from the last event or from the end of the last pass that sent
  // new work, whichever is later (a peer answering in 10 us is worth waiting for; one
  // answering in 15 ms, a slow device or an idle host, is not), never longer than max_spin.
  Nanos budget = std::min<Nanos>(max_spin_, Nanos(2 * event_gap_ns_));
  return now - std::max(last_event_, last_handoff_) < budget ? 0 : wait;
}

int Reactor::wait_events(Nanos wait, const timespec& ts) {
  // epoll_pwait2 (Linux 5.11) takes the timeout in nanoseconds, which the microsecond
  // coalescing timers need. Where it is missing (older kernels, valgrind) epoll_wait rounds
  // the wait up to whole milliseconds: timers fire late, nothing is lost.
  static std::atomic<bool> have_pwait2{true};  // every reactor thread learns it at once
  if (have_pwait2.load(std::memory_order_relaxed)) {
    int n =
        epoll_pwait2(epfd_, events_.data(), int(events_.size()), wait < 0 ? nullptr : &ts, nullptr);
    if (n >= 0 || errno != ENOSYS) return n;
    have_pwait2.store(false, std::memory_order_relaxed);
  }
  const int ms = wait < 0 ? -1 : int(std::min<Nanos>((wait + kMilli - 1) / kMilli, INT32_MAX));
  return epoll_wait(epfd_, events_.data(), int(events_.size()), ms);
}

void Reactor::run_once(Nanos max_wait) {
  t_current = this;
  set_active(true);
  // Three clock reads per pass (here, after the poll, at the end): on a spinning reactor
  // they are a visible share of the loop.
  const Nanos poll_start = clock_.now();
  const Nanos due = due_wait(max_wait, poll_start);
  Nanos wait = polled_wait(due, poll_start);
  // Another thread may have queued work for a hook just now: it sees "asleep" or we see it.
  const bool guarded = wait != 0 && sleep_guard_;
  if (guarded && !sleep_guard_->before_sleep()) wait = 0;
  const bool spin = wait == 0 && due != 0;  // polling's choice, not work due
  timespec ts{time_t(wait / kSecond), long(wait % kSecond)};
  ++stats_.polls;
  if (wait != 0) {
    ++stats_.sleeps;
    if (outstanding_ <= 0) set_active(false);  // idle until an event
  } else if (spin && active_reactors() > usable_cpus()) {
    sched_yield();
    ++stats_.yields;
  }
  int n = wait_events(wait, ts);
  set_active(true);
  if (guarded) sleep_guard_->after_sleep();
  const Nanos poll_end = clock_.now();
  pass_start_ = poll_end;
  if (pass_mutex_) pass_mutex_->lock();
  bool hooked = false;
  for (size_t i = 0; i < pass_hooks_.size(); ++i) hooked |= pass_hooks_[i]->on_pass();
  const uint64_t fired_before = stats_.timers_fired;
  if (n > 0 || hooked) {
    ++stats_.wakeups;
    // The gap between passes with events, for adaptive polling's budget.
    const double gap = double(poll_end - last_event_);
    event_gap_ns_ = event_gap_ns_ <= 0 ? gap : event_gap_ns_ + (gap - event_gap_ns_) / 8;
    last_event_ = poll_end;
  } else if (spin) {
    ++stats_.spins;
  }
  if (n < 0) n = 0;
  batch_end_ = n;
  for (int i = 0; i < n; ++i) {
    batch_next_ = i + 1;
    if (events_[i].data.u64 == kWakeupTag) {
      drain_mailbox();
      continue;
    }
    if (events_[i].data.ptr)  // (null: its handler went earlier in this pass)
      static_cast<EventHandler*>(events_[i].data.ptr)->on_event(events_[i].events);
  }
  batch_next_ = batch_end_ = 0;
  fire_timers();
  const bool worked = n > 0 || hooked || stats_.timers_fired != fired_before ||
                      !deferred_.empty() || !pass_end_.empty();
  run_deferred_and_pass_end();
  const Nanos pass_end = clock_.now();
  if (handed_off_) {
    handed_off_ = false;
    last_handoff_ = pass_end;
  }
  account(poll_start, poll_end, pass_end, worked);
  if (pass_mutex_) pass_mutex_->unlock();
}

void Reactor::run_deferred_and_pass_end() {
  // Deferred work may defer more, and flushes may complete sends whose callbacks queue more:
  // run both until quiet.
  for (;;) {
    while (!deferred_.empty()) {
      deferred_running_.swap(deferred_);
      for (auto& fn : deferred_running_) fn();
      deferred_running_.clear();
    }
    if (pass_end_.empty()) break;
    pass_end_running_.swap(pass_end_);
    for (size_t i = 0; i < pass_end_running_.size(); ++i) {
      PassEndHandler* h = pass_end_running_[i];
      if (!h) continue;  // cancelled
      h->pass_end_queued_ = false;
      h->on_pass_end();
    }
    pass_end_running_.clear();
    if (deferred_.empty()) break;  // handlers that queue themselves again wait for the next pass
  }
}

void Reactor::account(Nanos poll_start, Nanos poll_end, Nanos pass_end, bool worked) {
  // Busy: handling a pass that had work, and whatever the owner did between two run_once()
  // calls; waiting in (or spinning on) epoll is idle.
  const Nanos prev_end = last_pass_end_;
  last_pass_end_ = pass_end;
  if (prev_end <= 0 || pass_end <= prev_end) return;
  const Nanos since = pass_end - prev_end;
  const Nanos busy = std::max<Nanos>(poll_start - prev_end, 0) + (worked ? pass_end - poll_end : 0);
  constexpr double kWindow = 200.0 * kMicro;
  const double alpha = std::min(1.0, double(since) / kWindow);
  busy_ += alpha * (std::min(double(busy) / double(since), 1.0) - busy_);
}

nlohmann::json Reactor::stats_json() const {
  const nlohmann::json late = stats_.timer_late_ns.summary(double(kMicro));
  return {{"polls", stats_.polls},
          {"sleeps", stats_.sleeps},
          {"spins", stats_.spins},
          {"yields", stats_.yields},
          {"wakeups", stats_.wakeups},
          {"timers_fired", stats_.timers_fired},
          {"busy", busy_},
          {"outstanding", outstanding_},
          {"poll", poll_mode_name(poll_mode_)},
          {"timer_late_us",
           {{"count", late.at("count")},
            {"p50", late.at("p50")},
            {"p99", late.at("p99")},
            {"max", late.at("max")}}}};
}

void Reactor::run() {
  t_current = this;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  while (!stop_.load(std::memory_order_relaxed)) run_once(100 * kMilli);
}

void Reactor::stop() {
  stop_.store(true);
  uint64_t one = 1;
  ssize_t r = write(event_fd_, &one, sizeof(one));
  (void)r;
}

}  // namespace sens
