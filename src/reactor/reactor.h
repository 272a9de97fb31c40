#pragma once
// One event loop per core (Seastar-style shared-nothing): epoll for readiness, an intrusive
// timer heap with nanosecond deadlines (epoll_pwait2), and a mailbox for the rare cross-thread
// message (a new connection from the acceptor). Nothing on the data path locks or allocates.
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/clock.h"

namespace sens {

class Reactor;

// Something that waits on a file descriptor.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void on_event(uint32_t events) = 0;  // EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP
};

// A one-shot timer owned by its user (no allocation to arm it).
class Timer {
 public:
  explicit Timer(std::function<void()> fire) : fire_(std::move(fire)) {}
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  bool armed() const { return heap_index_ >= 0; }
  Nanos deadline() const { return deadline_; }

 private:
  friend class Reactor;
  std::function<void()> fire_;
  Nanos deadline_ = 0;
  int heap_index_ = -1;
  Reactor* reactor_ = nullptr;
};

struct ReactorStats {
  uint64_t wakeups = 0;  // epoll_pwait2 calls that returned events or fired timers
  uint64_t polls = 0;    // epoll_pwait2 calls
  uint64_t timers_fired = 0;
};

class Reactor {
 public:
  explicit Reactor(int index = 0);
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  int index() const { return index_; }
  const Clock& clock() const { return clock_; }
  Nanos now() const { return clock_.now(); }

  void add(int fd, uint32_t events, EventHandler* handler);
  void modify(int fd, uint32_t events, EventHandler* handler);
  void remove(int fd);

  // Arms (or re-arms) `timer` to fire at `deadline` on this reactor's thread.
  void arm(Timer& timer, Nanos deadline);
  void cancel(Timer& timer);

  // Runs `fn` at the end of the current loop iteration, before the next poll (for flushes
  // that want every event of this iteration first). Must be called on the reactor's thread.
  void defer(std::function<void()> fn);

  // Thread-safe: runs `fn` on the reactor's thread soon (wakes it if asleep).
  void post(std::function<void()> fn);

  // Runs until stop(). `busy_poll_ns` > 0 spins with zero-timeout polls for that long after the
  // last event before sleeping (trades CPU for latency).
  void run(Nanos busy_poll_ns = 0);
  void stop();  // thread-safe
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

  // One iteration: poll (waiting at most `max_wait`, or until the next timer), dispatch. For
  // tests and for owners that drive the loop themselves. `max_wait` < 0: no limit but the
  // timers (an untimed epoll wait arms no kernel timer).
  void run_once(Nanos max_wait);

  const ReactorStats& stats() const { return stats_; }

  // The reactor running on the calling thread, if any.
  static Reactor* current();

 private:
  void heap_up(int i);
  void heap_down(int i);
  void heap_remove(int i);
  void fire_timers();
  void drain_mailbox();

  int index_;
  int epfd_ = -1;
  int event_fd_ = -1;
  MonotonicClock clock_;
  std::vector<Timer*> heap_;
  std::vector<std::function<void()>> deferred_, deferred_running_;
  std::mutex mailbox_mu_;
  std::vector<std::function<void()>> mailbox_, mailbox_running_;
  std::atomic<bool> stop_{false};
  ReactorStats stats_;
  std::vector<epoll_event> events_;
};

}  // namespace sens
