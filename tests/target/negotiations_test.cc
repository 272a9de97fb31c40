// The target's cap on DH-HMAC-CHAP negotiations (negotiations.h): slots at once, a waiting
// line in arrival order and bounded, slots and waits that time out.
#include "target/negotiations.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "../wait_until.h"

namespace sens::target {
namespace {

using namespace std::chrono_literals;
using Ticket = Negotiations::Ticket;

struct Woken {
  std::mutex mu;
  std::vector<std::pair<int, bool>> order;  // (who, granted)
  Negotiations::Wake wake(int who) {
    return [this, who](bool granted) {
      std::lock_guard<std::mutex> lock(mu);
      order.emplace_back(who, granted);
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return order.size();
  }
};

TEST(Negotiations, CapWaitsInOrderThenRefuses) {
  Negotiations n(2, 10s, 1);
  Woken woken;
  std::vector<std::shared_ptr<Ticket>> t;
  for (uint32_t i = 0; i < 2 + 2 * Negotiations::kWaitingPerSlot + 1; ++i)
    t.push_back(std::make_shared<Ticket>());
  EXPECT_EQ(n.acquire(t[0], [&] { return woken.wake(0); }), Negotiations::Admit::kNow);
  EXPECT_EQ(n.acquire(t[1], [&] { return woken.wake(1); }), Negotiations::Admit::kNow);
  EXPECT_EQ(t[0]->state(), Ticket::kHeld);
  for (size_t i = 2; i < t.size() - 1; ++i)
    EXPECT_EQ(n.acquire(t[i], [&, i] { return woken.wake(int(i)); }), Negotiations::Admit::kQueued)
        << i;
  EXPECT_EQ(n.acquire(t.back(), [&] { return woken.wake(-1); }), Negotiations::Admit::kRefused);
  EXPECT_EQ(t.back()->state(), Ticket::kIdle);
  auto s = n.stats();
  EXPECT_EQ(s.active, 2u);
  EXPECT_EQ(s.waiting, 2 * Negotiations::kWaitingPerSlot);
  EXPECT_EQ(s.refused, 1u);
  // A slot given back goes to the first in line, then the next.
  n.release(*t[1]);
  n.release(*t[0]);
  ASSERT_EQ(woken.size(), 2u);
  EXPECT_EQ(woken.order[0], std::make_pair(2, true));
  EXPECT_EQ(woken.order[1], std::make_pair(3, true));
  EXPECT_EQ(t[2]->state(), Ticket::kHeld);
  EXPECT_EQ(t[0]->state(), Ticket::kIdle);
  n.stop_waiting();                                            // the rest are refused
  EXPECT_EQ(woken.size(), 2 * Negotiations::kWaitingPerSlot);  // every waiter, once
  EXPECT_FALSE(woken.order.back().second);
}

TEST(Negotiations, HeldSlotsAndWaitsTimeOut) {
  Negotiations n(1, 200ms, 1);
  Woken woken;
  auto holder = std::make_shared<Ticket>(), waiter = std::make_shared<Ticket>(),
       late = std::make_shared<Ticket>();
  ASSERT_EQ(n.acquire(holder, [&] { return woken.wake(0); }), Negotiations::Admit::kNow);
  ASSERT_EQ(n.acquire(waiter, [&] { return woken.wake(1); }), Negotiations::Admit::kQueued);
  // The holder never finishes: at its deadline it loses the slot to the waiter.
  ASSERT_TRUE(wait_until([&] { return woken.size() == 1; }, 2000ms));
  EXPECT_EQ(holder->state(), Ticket::kExpired);
  EXPECT_EQ(woken.order[0], std::make_pair(1, true));
  EXPECT_EQ(waiter->state(), Ticket::kHeld);
  // An expired ticket given back becomes idle and takes nothing from the new holder.
  n.release(*holder);
  EXPECT_EQ(holder->state(), Ticket::kIdle);
  EXPECT_EQ(n.stats().active, 1u);
  // A wait longer than the timeout is refused.
  ASSERT_EQ(n.acquire(late, [&] { return woken.wake(2); }), Negotiations::Admit::kQueued);
  ASSERT_TRUE(wait_until([&] { return woken.size() >= 2; }, 2000ms));
  // (the waiter expiring may hand its slot to `late` in the same pass)
  auto s = n.stats();
  EXPECT_GE(s.timed_out, 2u);
  EXPECT_LE(s.active, 1u);
}

TEST(Negotiations, WorkersRunTheDhSteps) {
  Negotiations n(4, 1s, 2);
  std::atomic<int> ran{0};
  std::thread::id main = std::this_thread::get_id();
  std::atomic<bool> off_thread{true};
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(n.worker().post([&] {
      if (std::this_thread::get_id() == main) off_thread = false;
      ++ran;
    }));
  ASSERT_TRUE(wait_until([&] { return ran.load() == 8; }, 2000ms));
  EXPECT_TRUE(off_thread.load());
}

}  // namespace
}  // namespace sens::target
