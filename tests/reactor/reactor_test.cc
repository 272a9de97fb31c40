#include "reactor/reactor.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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
TEST(Reactor, MicrosecondTimerIsNotRoundedToMilliseconds) {
  Reactor r;
  Nanos fired_at = 0;
  Timer t([&] { fired_at = r.now(); });
  Nanos start = r.now();
  r.arm(t, start + 20 * kMicro);
  while (!fired_at && r.now() < start + 100 * kMilli) r.run_once(100 * kMilli);
  ASSERT_GT(fired_at, 0);
  EXPECT_GE(fired_at - start, 20 * kMicro);
  EXPECT_LT(fired_at - start, 900 * kMicro);  // well under a millisecond tick
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

}  // namespace
}  // namespace sens
