// WorkerThread: the jobs a reactor hands off run in order, one at a time, on another thread;
// stop() waits for the running one and drops the rest; a post after stop() runs again.
#include "common/worker_thread.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace sens {
namespace {

TEST(WorkerThread, RunsJobsInOrderOneAtATimeOffTheCaller) {
  WorkerThread w("test-worker");
  std::vector<int> order;
  std::atomic<int> running{0}, most{0};
  std::promise<void> last;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> off_caller{true};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(w.post([&, i] {
      int now = ++running;
      most = std::max(most.load(), now);
      if (std::this_thread::get_id() == caller) off_caller = false;
      order.push_back(i);  // only the worker touches it, one job at a time
      --running;
      if (i == 49) last.set_value();
    }));
  }
  ASSERT_EQ(last.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  w.stop();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(most.load(), 1);
  EXPECT_TRUE(off_caller.load());
  EXPECT_EQ(w.pending(), 0u);
}

TEST(WorkerThread, StopWaitsForTheRunningJobAndDropsTheRest) {
  WorkerThread w("test-worker");
  std::promise<void> started;
  std::atomic<bool> release{false}, first_done{false}, second_ran{false};
  ASSERT_TRUE(w.post([&] {
    started.set_value();
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    first_done = true;
  }));
  ASSERT_TRUE(w.post([&] { second_ran = true; }));
  started.get_future().wait();
  EXPECT_EQ(w.pending(), 2u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release = true;
  });
  w.stop();  // returns only once the first job is done
  EXPECT_TRUE(first_done.load());
  EXPECT_FALSE(second_ran.load());
  releaser.join();
  // The next post starts the thread again.
  std::promise<void> again;
  ASSERT_TRUE(w.post([&] { again.set_value(); }));
  EXPECT_EQ(again.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

// A worker given a nice value runs its jobs that much below the thread that started it, which
// keeps its own.
TEST(WorkerThread, RunsAtItsNiceValue) {
  const int caller_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  WorkerThread w("test-nice", WorkerPlacement{7, {}});
  std::promise<int> seen;
  ASSERT_TRUE(
      w.post([&] { seen.set_value(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()))); }));
  auto f = seen.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), std::min(19, caller_nice + 7));
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), caller_nice);
}

// A worker started from a thread pinned to one core runs on the cores it was given, not on
// that core.
TEST(WorkerThread, RunsOnTheCoresItWasGiven) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "one core";
  std::promise<std::vector<int>> seen;
  WorkerThread w("test-cpus", WorkerPlacement{0, cpus});
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    ASSERT_TRUE(w.post([&] {
      cpu_set_t now;
      std::vector<int> got;
      if (sched_getaffinity(0, sizeof now, &now) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &now)) got.push_back(c);
      seen.set_value(got);
    }));
  });
  pinned.join();
  auto f = seen.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), cpus);
}

}  // namespace
}  // namespace sens
