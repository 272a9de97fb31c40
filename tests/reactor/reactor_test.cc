#include "reactor/reactor.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace sens {
namespace {

TEST(Reactor, TimersFireInDeadlineOrder) {
  Reactor r;
  std::vector<int> order;
  Timer a([&] { order.push_back(1); }), b([&] { order.push_back(2); }),
      c([&] { order.push_back(3); });
  Nanos now = r.now();
  r.arm(c, now + 300 * kMicro);
  r.arm(a, now + 100 * kMicro);
  r.arm(b, now + 200 * kMicro);
  Nanos stop = now + 50 * kMilli;
  while (order.size() < 3 && r.now() < stop) r.run_once(10 * kMilli);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(Reactor, RearmMovesAndCancelStops) {
  Reactor r;
  int fired = 0;
  Timer t([&] { ++fired; });
  r.arm(t, r.now() + 10 * kSecond);
  r.arm(t, r.now() + 100 * kMicro);  // moved earlier
  Nanos stop = r.now() + 50 * kMilli;
  while (!fired && r.now() < stop) r.run_once(10 * kMilli);
  EXPECT_EQ(fired, 1);
  r.arm(t, r.now() + 100 * kMicro);
  r.cancel(t);
  EXPECT_FALSE(t.armed());
  r.run_once(2 * kMilli);
  EXPECT_EQ(fired, 1);
}

// The coalescing timers are 5-50 us: the loop must wake for them, not at 1 ms granularity.
// One wait can be stretched by a preemption on a loaded machine (the suite runs two tests
// at once on two cores), so the fastest of several waits is checked: a loop that rounds to
// milliseconds never gets under the bound, however quiet the machine.
TEST(Reactor, MicrosecondTimerIsNotRoundedToMilliseconds) {
  Reactor r;
  Nanos fastest = 0;
  for (int attempt = 0; attempt < 20 && (fastest == 0 || fastest >= 900 * kMicro); ++attempt) {
    Nanos fired_at = 0;
    Timer t([&] { fired_at = r.now(); });
    Nanos start = r.now();
    r.arm(t, start + 20 * kMicro);
    while (!fired_at && r.now() < start + 100 * kMilli) r.run_once(100 * kMilli);
    ASSERT_GT(fired_at, 0);
    EXPECT_GE(fired_at - start, 20 * kMicro);
    if (fastest == 0 || fired_at - start < fastest) fastest = fired_at - start;
  }
  EXPECT_LT(fastest, 900 * kMicro);  // well under a millisecond tick
}

// run_once(-1) waits without a limit of its own, but still wakes for the next timer.
TEST(Reactor, UnlimitedWaitStillWakesForTimers) {
  Reactor r;
  Nanos fired_at = 0;
  Timer t([&] { fired_at = r.now(); });
  Nanos start = r.now();
  r.arm(t, start + 2 * kMilli);
  r.run_once(-1);
  ASSERT_GT(fired_at, 0);
  EXPECT_GE(fired_at - start, 2 * kMilli);
  r.arm(t, r.now() - kMilli);  // already due: no wait at all
  fired_at = 0;
  r.run_once(-1);
  EXPECT_GT(fired_at, 0);
}

TEST(Reactor, PostFromAnotherThreadWakesTheLoop) {
  Reactor r;
  std::atomic<int> got{0};
  std::thread loop([&] { r.run(); });
  std::thread other([&] { r.post([&] { got = 42; }); });
  other.join();
  for (int i = 0; i < 200 && got.load() != 42; ++i) usleep(1000);
  r.stop();
  loop.join();
  EXPECT_EQ(got.load(), 42);
}

class Counter : public EventHandler {
 public:
  void on_event(uint32_t) override { ++events; }
  int events = 0;
};

TEST(Reactor, DispatchesReadinessAndRunsDeferredWork) {
  Reactor r;
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Counter h;
  r.add(sv[0], EPOLLIN, &h);
  ASSERT_EQ(write(sv[1], "x", 1), 1);
  bool deferred = false;
  r.defer([&] { deferred = true; });
  r.run_once(10 * kMilli);
  EXPECT_EQ(h.events, 1);
  EXPECT_TRUE(deferred);
  r.remove(sv[0]);
  close(sv[0]);
  close(sv[1]);
}

// A pass-end handler runs once per pass, after the events and the deferred work of the pass.
struct PassEnd : PassEndHandler {
  std::vector<std::string>* log;
  explicit PassEnd(std::vector<std::string>* l) : log(l) {}
  void on_pass_end() override { log->push_back("pass_end"); }
};

struct Logger : EventHandler {
  std::vector<std::string>* log;
  PassEndHandler* then = nullptr;
  Reactor* r = nullptr;
  int fd = -1;
  explicit Logger(std::vector<std::string>* l) : log(l) {}
  void on_event(uint32_t) override {
    char c;
    while (recv(fd, &c, 1, MSG_DONTWAIT) == 1) {
    }
    log->push_back("event");
    r->at_pass_end(*then);
    r->at_pass_end(*then);  // twice in one pass: runs once
    r->defer([this] { log->push_back("deferred"); });
  }
};

TEST(Reactor, PassEndRunsOnceAfterEventsAndDeferredWork) {
  Reactor r;
  std::vector<std::string> log;
  PassEnd pe(&log);
  int a[2], b[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
  Logger la(&log), lb(&log);
  la.then = lb.then = &pe;
  la.r = lb.r = &r;
  la.fd = a[0];
  lb.fd = b[0];
  r.add(a[0], EPOLLIN, &la);
  r.add(b[0], EPOLLIN, &lb);
  ASSERT_EQ(write(a[1], "x", 1), 1);
  ASSERT_EQ(write(b[1], "x", 1), 1);
  r.run_once(10 * kMilli);
  EXPECT_EQ(log, (std::vector<std::string>{"event", "event", "deferred", "deferred", "pass_end"}));
  // Cancelled before its pass ends: it does not run (a connection closing).
  log.clear();
  r.at_pass_end(pe);
  r.cancel_pass_end(pe);
  r.run_once(0);
  EXPECT_TRUE(log.empty());
  // Queued between passes: the next pass does not sleep before running it.
  r.at_pass_end(pe);
  Nanos t0 = r.now();
  r.run_once(500 * kMilli);
  EXPECT_EQ(log, (std::vector<std::string>{"pass_end"}));
  EXPECT_LT(r.now() - t0, 100 * kMilli);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}

TEST(Reactor, PollModesDecideBetweenSpinningAndSleeping) {
  {
    Reactor r;  // off: a wait is a sleep, never a spin
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli);
    r.add_outstanding(1);
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli);
  }
  {
    Reactor r;
    r.set_poll(PollMode::kAlways, 50 * kMicro);
    EXPECT_EQ(r.poll_wait(5 * kMilli), 0);
    EXPECT_EQ(r.poll_wait(-1), 0);
    for (int i = 0; i < 10; ++i) r.run_once(5 * kMilli);
    EXPECT_EQ(r.stats().sleeps, 0u);
    EXPECT_EQ(r.stats().spins, 10u);
  }
  {
    Reactor r;
    r.set_poll(PollMode::kAdaptive, 2 * kMilli);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Counter h;
    r.add(sv[0], EPOLLIN | EPOLLET, &h);
    ASSERT_EQ(write(sv[1], "x", 1), 1);
    r.run_once(5 * kMilli);  // an event
    r.add_outstanding(1);
    EXPECT_EQ(r.poll_wait(5 * kMilli), 0);
    r.run_once(5 * kMilli);
    EXPECT_EQ(r.stats().spins, 1u);
    // Past max_spin with nothing: sleep (idle connections must not burn a core).
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli);
    r.add_outstanding(-1);
    close(sv[0]);
    close(sv[1]);
  }
  {
    // A submission that ends a quiet spell (from a timer, say) opens a spin window of its own:
    // the answer is due, though the last event is long past.
    Reactor r;
    r.set_poll(PollMode::kAdaptive, 2 * kMilli);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Counter h;
    r.add(sv[0], EPOLLIN | EPOLLET, &h);
    ASSERT_EQ(write(sv[1], "x", 1), 1);
    r.run_once(5 * kMilli);  // an event: the budget is min(2 ms, 2 x the gap between events)
    ASSERT_EQ(write(sv[1], "y", 1), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r.run_once(5 * kMilli);  // a second event 2 ms later: the gap is ~2 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli) << "quiet: sleep";
    int fired = 0;
    Timer t([&] {
      ++fired;
      r.add_outstanding(1);  // a paced submission
    });
    r.arm(t, r.now());
    r.run_once(5 * kMilli);
    ASSERT_EQ(fired, 1);
    EXPECT_EQ(r.poll_wait(5 * kMilli), 0) << "an answer is due: spin";
    r.add_outstanding(1);  // more work moves the window only once a pass has sent it
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli) << "past max_spin: sleep";
    r.add_outstanding(-2);
    close(sv[0]);
    close(sv[1]);
  }
  {
    // Work queued between passes (fio queues commands after handling the completions that
    // freed them) opens the window when the pass that sends it ends, however long the owner
    // worked since the last event.
    Reactor r;
    r.set_poll(PollMode::kAdaptive, 2 * kMilli);
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    Counter h;
    r.add(sv[0], EPOLLIN | EPOLLET, &h);
    ASSERT_EQ(write(sv[1], "x", 1), 1);
    r.run_once(5 * kMilli);
    r.add_outstanding(1);  // commands in flight
    ASSERT_EQ(write(sv[1], "y", 1), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    r.run_once(5 * kMilli);  // a completion 2 ms later: the budget is min(2 ms, 2 x ~2 ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the owner's own work
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli) << "nothing sent since: sleep";
    r.add_outstanding(1);  // a command queued between passes
    r.run_once(0);         // the pass that sends it
    EXPECT_EQ(r.poll_wait(5 * kMilli), 0) << "its answer is due: spin";
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    EXPECT_EQ(r.poll_wait(5 * kMilli), 5 * kMilli) << "past max_spin: sleep";
    r.add_outstanding(-2);
    close(sv[0]);
    close(sv[1]);
  }
}

TEST(Reactor, SpinningYieldsTheCpuOnlyWhenActiveReactorsOutnumberCpus) {
  const int cpus = Reactor::usable_cpus();
  ASSERT_GE(cpus, 1);
  const int before = Reactor::active_reactors();
  ASSERT_EQ(before, 0) << "no reactor of an earlier test is left";
  Reactor r;
  r.set_poll(PollMode::kAlways, 50 * kMicro);
  r.run_once(5 * kMilli);  // a spin; r now counts as active
  EXPECT_EQ(Reactor::active_reactors(), 1);
  std::vector<std::unique_ptr<Reactor>> others;
  while (Reactor::active_reactors() < cpus) {
    others.push_back(std::make_unique<Reactor>());
    others.back()->run_once(0);
  }
  r.run_once(5 * kMilli);
  EXPECT_EQ(r.stats().yields, 0u) << "as many active reactors as CPUs: spin without yielding";
  others.push_back(std::make_unique<Reactor>());
  others.back()->run_once(0);
  r.run_once(5 * kMilli);
  r.run_once(5 * kMilli);
  EXPECT_EQ(r.stats().yields, 2u) << "one active reactor more than CPUs: each spin yields first";
  EXPECT_EQ(r.stats_json()["yields"], 2);
  // A reactor asleep with nothing outstanding stops counting (an idle admin queue); one
  // asleep with an answer outstanding still counts (it is about to be woken).
  Reactor& idle = *others.back();
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    idle.run_once(2 * kSecond);
    woke = true;
  });
  const Nanos deadline = r.now() + kSecond;
  while (Reactor::active_reactors() > cpus && r.now() < deadline) std::this_thread::yield();
  EXPECT_EQ(Reactor::active_reactors(), cpus);
  r.run_once(5 * kMilli);
  EXPECT_EQ(r.stats().yields, 2u) << "the idle sleeper left the CPU to the others";
  idle.wake();
  sleeper.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(Reactor::active_reactors(), cpus + 1) << "awake again";
  idle.add_outstanding(1);
  std::thread waiter([&] { idle.run_once(20 * kMilli); });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(Reactor::active_reactors(), cpus + 1) << "asleep with work outstanding: still active";
  waiter.join();
  idle.add_outstanding(-1);
  others.clear();
  EXPECT_EQ(Reactor::active_reactors(), 1) << "destroyed reactors stop counting";
}

TEST(Reactor, IdleReactorIsNotBusyAndTimerLatenessIsRecorded) {
  Reactor r;
  r.set_poll(PollMode::kAdaptive, 50 * kMicro);
  int fired = 0;
  Timer t([&] { ++fired; });
  for (int i = 0; i < 5; ++i) {
    r.arm(t, r.now() + 1 * kMilli);
    while (fired == i) r.run_once(-1);
  }
  EXPECT_EQ(r.stats().timer_late_ns.count(), 5u);
  EXPECT_LT(r.stats().timer_late_ns.max(), uint64_t(20 * kMilli));
  EXPECT_LT(r.busy_fraction(), 0.5) << "a reactor that waits for timers is mostly idle";
  EXPECT_GE(r.stats().sleeps, 5u);
  const auto j = r.stats_json();
  EXPECT_EQ(j["timer_late_us"]["count"], 5);
  EXPECT_EQ(j["poll"], "adaptive");
}

TEST(Reactor, PollModeNames) {
  PollMode m = PollMode::kOff;
  for (PollMode q : {PollMode::kOff, PollMode::kAdaptive, PollMode::kAlways}) {
    ASSERT_TRUE(parse_poll_mode(poll_mode_name(q), &m));
    EXPECT_EQ(m, q);
  }
  EXPECT_FALSE(parse_poll_mode("busy", &m));
  EXPECT_EQ(m, PollMode::kAlways);
}

}  // namespace
}  // namespace sens
