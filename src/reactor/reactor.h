#pragma once
// One event loop per core (Seastar-style shared-nothing): epoll for readiness, an intrusive
// timer heap with nanosecond deadlines (epoll_pwait2), and a mailbox for the rare cross-thread
// message (a new connection from the acceptor). Nothing on the data path locks or allocates.
#include <sys/epoll.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"

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

// Something that wants to run once the reactor has handled every ready event of a pass (a
// connection flushing what the pass queued: the eager and adaptive coalescing policies).
class PassEndHandler {
 public:
  virtual ~PassEndHandler() = default;
  virtual void on_pass_end() = 0;

 private:
  friend class Reactor;
  bool pass_end_queued_ = false;
};

// Runs at the start of every pass, right after the poll: drains lists other threads fill
// without a lock (a shared connection's send-lists on its owner, completion lists on a
// poller). Returns true when it found work, which counts as an event for hybrid polling.
class PassHook {
 public:
  virtual ~PassHook() = default;
  virtual bool on_pass() = 0;
};

// Asked right before the reactor blocks: before_sleep() publishes "asleep" (other threads
// then wake() it) and returns false if work arrived meanwhile, so the reactor polls instead.
// after_sleep() withdraws it. Both run on the reactor's thread.
class SleepGuard {
 public:
  virtual ~SleepGuard() = default;
  virtual bool before_sleep() = 0;
  virtual void after_sleep() = 0;
};

// How a reactor waits for events (--poll).
enum class PollMode : uint8_t {
  kOff,       // always sleep in epoll (a cross-core wake-up costs ~25-30 us here)
  kAdaptive,  // spin on zero-timeout polls while events are expected soon, then sleep
  kAlways,    // never sleep (SPDK-style: one core per reactor)
};
const char* poll_mode_name(PollMode m);
bool parse_poll_mode(std::string_view name, PollMode* out);

struct ReactorStats {
  uint64_t wakeups = 0;  // epoll_pwait2 calls that returned events or fired timers
  uint64_t polls = 0;    // epoll_pwait2 calls
  uint64_t timers_fired = 0;
  uint64_t sleeps = 0;      // polls that could block (a timeout other than zero)
  uint64_t spins = 0;       // zero-timeout polls by hybrid polling's choice that found nothing
  uint64_t yields = 0;      // spinning polls that first yielded the CPU (reactors > CPUs)
  Histogram timer_late_ns;  // how long after its deadline each timer fired
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
  // The same, for a handler about to be destroyed: events of the current pass not yet
  // dispatched to it are dropped too (a message run mid-pass may destroy a handler whose event
  // comes later in the same batch).
  void remove(int fd, EventHandler* handler);

  // Arms (or re-arms) `timer` to fire at `deadline` on this reactor's thread.
  void arm(Timer& timer, Nanos deadline);
  void cancel(Timer& timer);

  // Runs `fn` at the end of the current loop iteration, before the next poll (for flushes
  // that want every event of this iteration first). Must be called on the reactor's thread.
  void defer(std::function<void()> fn);

  // Runs `h.on_pass_end()` once, after this pass has handled every ready event, timer and
  // deferred function (the next pass, if called between passes). Queuing it twice in one pass
  // runs it once. A handler must cancel_pass_end() itself before it is destroyed.
  void at_pass_end(PassEndHandler& h);
  void cancel_pass_end(PassEndHandler& h);

  // The share of recent time (about the last 200 us) this reactor spent handling events
  // rather than waiting for them, 0..1. Spinning polls count as waiting.
  double busy_fraction() const { return busy_; }
  // When the current pass's poll returned: a timestamp that costs no clock read.
  Nanos pass_start() const { return pass_start_; }

  // Hybrid polling: `max_spin` bounds one adaptive spin. `outstanding` counts work the owner
  // expects an answer for (commands in flight), shown in the stats: a count that never drops
  // back to 0 on an idle reactor is a stuck command.
  void set_poll(PollMode mode, Nanos max_spin);
  PollMode poll_mode() const { return poll_mode_; }
  // When this process has more active reactors than the CPUs it may use, a spinning reactor
  // yields the CPU (sched_yield) before each zero-timeout poll: on a crowded CPU a spinner
  // would take the time of the thread that produces its event (a shared connection's owner,
  // another connection's reactor); with nobody else runnable the yield returns at once.
  // Active: running or spinning, or asleep with work outstanding (it is woken soon, and a
  // thread woken but not yet running cannot count itself); an idle reactor (an admin queue's,
  // say) is not. (Not busy_fraction(), the share of time a reactor spends handling events.)
  static int active_reactors();
  static int usable_cpus();  // CPUs in the affinity mask of the first thread that asks
  // Work handed to a peer: when it ends an idle spell (nothing was outstanding), adaptive
  // polling counts its spin window from this pass, as if an event had just arrived, so a
  // host that submits from a timer or after a quiet spell spins for the answer.
  // Any new work also restarts the spin window when the pass that sends it ends: the answer
  // is due a response time after the send, however long the owner worked before sending (fio
  // queues commands between passes, after handling the completions that freed them).
  void add_outstanding(int64_t delta) {
    if (delta > 0 && outstanding_ <= 0 && pass_start_ > last_event_) last_event_ = pass_start_;
    if (delta > 0) handed_off_ = true;
    outstanding_ += delta;
  }
  int64_t outstanding() const { return outstanding_; }

  // Thread-safe: runs `fn` on the reactor's thread soon (wakes it if asleep).
  void post(std::function<void()> fn);
  // Thread-safe: ends a blocking wait (or the next one) at once; one eventfd write.
  void wake();

  // Pass hooks run in the order added, on this reactor's thread.
  void add_pass_hook(PassHook* h);
  void remove_pass_hook(PassHook* h);
  void set_sleep_guard(SleepGuard* g) { sleep_guard_ = g; }
  // A mutex held from the end of each wait until the pass is done (hooks, events, timers,
  // deferred work, pass ends): threads that take it may touch what the pass touches
  // (the lock-based shared connection).
  void set_pass_mutex(std::mutex* m) { pass_mutex_ = m; }

  // Runs until stop(), polling as set_poll() says.
  void run();
  void stop();  // thread-safe
  bool stopping() const { return stop_.load(std::memory_order_relaxed); }

  // One iteration: poll (waiting at most `max_wait`, or until the next timer), dispatch. For
  // tests and for owners that drive the loop themselves. `max_wait` < 0: no limit but the
  // timers (an untimed epoll wait arms no kernel timer).
  void run_once(Nanos max_wait);
  // The wait run_once(max_wait) would use now, after hybrid polling's decision (0: spin).
  Nanos poll_wait(Nanos max_wait) const { return poll_wait(max_wait, clock_.now()); }
  Nanos poll_wait(Nanos max_wait, Nanos now) const;
  // The same before hybrid polling: 0 when work is due (deferred, pass end, a timer).
  Nanos due_wait(Nanos max_wait, Nanos now) const;
  // Hybrid polling's decision for a wait of `wait` (0: spin).
  Nanos polled_wait(Nanos wait, Nanos now) const;

  const ReactorStats& stats() const { return stats_; }
  void reset_stats() { stats_ = ReactorStats{}; }  // on the reactor's thread
  // {"polls","sleeps","spins","wakeups","timers_fired","busy","poll","timer_late_us":{...}}
  nlohmann::json stats_json() const;

  // The reactor running on the calling thread, if any.
  static Reactor* current();

 private:
  void heap_up(int i);
  void heap_down(int i);
  void heap_remove(int i);
  void fire_timers();
  int wait_events(Nanos wait, const timespec& ts);
  void drain_mailbox();
  void run_deferred_and_pass_end();
  void account(Nanos poll_start, Nanos poll_end, Nanos pass_end, bool worked);
  void set_active(bool active);

  int index_;
  int epfd_ = -1;
  int event_fd_ = -1;
  MonotonicClock clock_;
  std::vector<Timer*> heap_;
  std::vector<std::function<void()>> deferred_, deferred_running_;
  std::vector<PassEndHandler*> pass_end_, pass_end_running_;
  std::vector<PassHook*> pass_hooks_;
  SleepGuard* sleep_guard_ = nullptr;
  std::mutex* pass_mutex_ = nullptr;
  double busy_ = 0;
  Nanos last_pass_end_ = 0;
  PollMode poll_mode_ = PollMode::kOff;
  Nanos max_spin_ = 50 * kMicro;
  int64_t outstanding_ = 0;
  Nanos last_event_ = 0;     // the last pass with events (or that submitted after a quiet spell)
  Nanos last_handoff_ = 0;   // the end of the last pass that sent new work
  bool handed_off_ = false;  // work was added since the last pass ended
  Nanos pass_start_ = 0;     // when the current pass's poll returned
  double event_gap_ns_ = 0;  // EWMA of the time between passes that had events
  bool active_counted_ = false;  // counted in active_reactors()
  std::mutex mailbox_mu_;
  std::vector<std::function<void()>> mailbox_, mailbox_running_;
  std::atomic<bool> stop_{false};
  ReactorStats stats_;
  std::vector<epoll_event> events_;
  int batch_next_ = 0, batch_end_ = 0;  // the events of this pass not yet dispatched
};

}  // namespace sens
