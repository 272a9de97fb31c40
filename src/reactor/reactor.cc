#include "reactor/reactor.h"

#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace sens {

namespace {
thread_local Reactor* t_current = nullptr;
// Marks the eventfd in epoll's user data; handlers are never at this address.
constexpr uint64_t kWakeupTag = 1;
}  // namespace

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
    heap_remove(0);
    ++stats_.timers_fired;
    t->fire_();
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

void Reactor::run_once(Nanos max_wait) {
  t_current = this;
  Nanos wait = max_wait;  // < 0: no limit
  if (!deferred_.empty()) wait = 0;
  if (!heap_.empty()) {
    Nanos until = std::max<Nanos>(heap_[0]->deadline_ - clock_.now(), 0);
    if (wait < 0 || until < wait) wait = until;
  }
  timespec ts{time_t(wait / kSecond), long(wait % kSecond)};
  ++stats_.polls;
  int n =
      epoll_pwait2(epfd_, events_.data(), int(events_.size()), wait < 0 ? nullptr : &ts, nullptr);
  if (n > 0) ++stats_.wakeups;
  for (int i = 0; i < n; ++i) {
    if (events_[i].data.u64 == kWakeupTag) {
      drain_mailbox();
      continue;
    }
    static_cast<EventHandler*>(events_[i].data.ptr)->on_event(events_[i].events);
  }
  fire_timers();
  // Deferred work may defer more; run what was queued, then what it queued, until quiet.
  while (!deferred_.empty()) {
    deferred_running_.swap(deferred_);
    for (auto& fn : deferred_running_) fn();
    deferred_running_.clear();
  }
}

void Reactor::run(Nanos busy_poll_ns) {
  t_current = this;
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  Nanos last_event = clock_.now();
  while (!stop_.load(std::memory_order_relaxed)) {
    uint64_t before = stats_.wakeups + stats_.timers_fired;
    bool spin = busy_poll_ns > 0 && clock_.now() - last_event < busy_poll_ns;
    run_once(spin ? 0 : 100 * kMilli);
    if (stats_.wakeups + stats_.timers_fired != before) last_event = clock_.now();
  }
}

void Reactor::stop() {
  stop_.store(true);
  uint64_t one = 1;
  ssize_t r = write(event_fd_, &one, sizeof(one));
  (void)r;
}

}  // namespace sens
