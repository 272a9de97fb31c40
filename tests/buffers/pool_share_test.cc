// Fair shares of the buffer pool (issue 29): every attached account has a reserve of one
// largest buffer it can always use, no account holds more than the share, and a waiter over
// its share is parked so that it never blocks those under theirs. Exact byte counts.
#include <gtest/gtest.h>

#include <vector>

#include "buffers/buffer_pool.h"

namespace sens::buffers {
namespace {

constexpr uint32_t kBuf = 128 * 1024;  // the largest buffer: the reserve of an account

struct TestWaiter : BufferPool::Waiter {
  int served = 0;
  explicit TestWaiter(BufferPool::Account* a, uint32_t want = kBuf) {
    account = a;
    bytes = want;
    ready = [](BufferPool::Waiter* w) { ++static_cast<TestWaiter*>(w)->served; };
  }
};

BufferPool make_pool(uint64_t limit, uint64_t share) {
  PoolOptions o;
  o.limit_bytes = limit;
  o.max_buffer = kBuf;
  o.share_bytes = share;
  return BufferPool(o);
}

// Takes buffers of kBuf for `a` until the pool says no; returns how many.
int take_all(BufferPool& pool, BufferPool::Account* a, std::vector<uint8_t*>* held) {
  int n = 0;
  while (uint8_t* b = pool.get(kBuf, false, a)) {
    held->push_back(b);
    ++n;
  }
  return n;
}

TEST(PoolShare, ReserveHeldBackForAnIdleAccount) {
  BufferPool pool = make_pool(1 << 20, 0);  // 8 buffers, no share cap
  BufferPool::Account a, b;
  pool.attach(&a);
  pool.attach(&b);
  EXPECT_EQ(pool.stats().held_back, 2u * kBuf);
  std::vector<uint8_t*> held_a, held_b;
  // A takes its reserve, then all but B's reserve.
  EXPECT_EQ(take_all(pool, &a, &held_a), 7);
  EXPECT_EQ(a.in_use, 7u * kBuf);
  EXPECT_EQ(pool.stats().held_back, uint64_t(kBuf));
  TestWaiter wa(&a);
  pool.wait(&wa);
  EXPECT_EQ(wa.served, 0);
  // B overtakes A's waiter: its reserve was held back for it.
  uint8_t* bb = pool.get(4096, false, &b);
  ASSERT_NE(bb, nullptr);
  EXPECT_EQ(pool.stats().reserve_gets, 2u);  // A's first and B's
  EXPECT_EQ(pool.get(kBuf, false, &b), nullptr) << "beyond its reserve B waits behind A";
  pool.put(bb, 4096, false, &b);
  EXPECT_EQ(wa.served, 0) << "B's reserve is held back again, not given to A";
  pool.put(held_a.back(), kBuf, false, &a);
  held_a.pop_back();
  EXPECT_EQ(wa.served, 1) << "A's own buffer back: its waiter is served";
  held_a.push_back(wa.buf);
  for (uint8_t* p : held_a) pool.put(p, kBuf, false, &a);
  EXPECT_EQ(a.in_use, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  EXPECT_EQ(pool.stats().held_back, 2u * kBuf);
  pool.detach(&a);
  pool.detach(&b);
  EXPECT_EQ(pool.stats().held_back, 0u);
  EXPECT_EQ(pool.stats().accounts, 0u);
}

TEST(PoolShare, AccountOverItsShareIsParkedAndBlocksNobody) {
  BufferPool pool = make_pool(1 << 20, 512 * 1024);  // share: 4 buffers
  BufferPool::Account a, b;
  pool.attach(&a);
  pool.attach(&b);
  std::vector<uint8_t*> held_a, held_b;
  EXPECT_EQ(take_all(pool, &a, &held_a), 4);
  EXPECT_EQ(pool.stats().share_capped, 1u);
  TestWaiter wa1(&a), wa2(&a);
  pool.wait(&wa1);
  pool.wait(&wa2);
  EXPECT_EQ(pool.stats().waiting, 2u);
  // A's waiters are parked: B takes what is left (all but nothing held back: A's reserve is
  // in use, B's own reserve is B's).
  EXPECT_EQ(take_all(pool, &b, &held_b), 4);
  EXPECT_EQ(pool.stats().in_use_bytes, uint64_t(1) << 20);
  // B is at its share too now: its waiter is parked as well.
  TestWaiter wb(&b);
  pool.wait(&wb);
  // A gives one back: exactly one of its parked waiters rejoins and is served.
  pool.put(held_a.back(), kBuf, false, &a);
  held_a.pop_back();
  EXPECT_EQ(wa1.served, 1);
  EXPECT_EQ(wa2.served, 0);
  EXPECT_EQ(wb.served, 0);
  EXPECT_EQ(a.in_use, 4u * kBuf);
  // Cancelling a parked waiter takes it off its account's list.
  pool.cancel(&wa2);
  EXPECT_EQ(pool.stats().waiting, 1u);
  pool.put(wa1.buf, kBuf, false, &a);
  EXPECT_EQ(wa2.served, 0);
  EXPECT_EQ(wb.served, 0) << "B is at its share: the freed buffer stays free";
  pool.put(held_b.back(), kBuf, false, &b);
  held_b.pop_back();
  EXPECT_EQ(wb.served, 1);
  held_b.push_back(wb.buf);
  for (uint8_t* p : held_a) pool.put(p, kBuf, false, &a);
  for (uint8_t* p : held_b) pool.put(p, kBuf, false, &b);
  EXPECT_EQ(pool.stats().waiting, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

TEST(PoolShare, WaitersUnderTheirShareAreServedInOrder) {
  BufferPool pool = make_pool(1 << 20, 512 * 1024);
  BufferPool::Account a, b, c;
  for (auto* x : {&a, &b, &c}) pool.attach(x);
  std::vector<uint8_t*> held_a, held_b;
  EXPECT_EQ(take_all(pool, &a, &held_a), 4);
  // Held back: C's reserve. B gets 3 (its reserve and two shared).
  EXPECT_EQ(take_all(pool, &b, &held_b), 3);
  TestWaiter wb(&b), wc_big(&c, kBuf), wc_small(&c, 4096);
  pool.wait(&wb);  // FIFO (B is under its share, beyond its reserve)
  EXPECT_EQ(wb.served, 0);
  pool.wait(&wc_big);  // within C's reserve: served at once
  EXPECT_EQ(wc_big.served, 1);
  pool.wait(&wc_small);  // beyond C's reserve: FIFO, after B
  EXPECT_EQ(wc_small.served, 0);
  pool.put(held_a.back(), kBuf, false, &a);
  held_a.pop_back();
  EXPECT_EQ(wb.served, 1) << "first come first served";
  EXPECT_EQ(wc_small.served, 0);
  pool.put(held_a.back(), kBuf, false, &a);
  held_a.pop_back();
  EXPECT_EQ(wc_small.served, 1);
  pool.put(wb.buf, kBuf, false, &b);
  pool.put(wc_big.buf, kBuf, false, &c);
  pool.put(wc_small.buf, 4096, false, &c);
  for (uint8_t* p : held_a) pool.put(p, kBuf, false, &a);
  for (uint8_t* p : held_b) pool.put(p, kBuf, false, &b);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  EXPECT_EQ(a.in_use + b.in_use + c.in_use, 0u);
}

TEST(PoolShare, MoreReservesThanHalfThePoolHoldBackHalf) {
  BufferPool pool = make_pool(512 * 1024, 0);  // 4 buffers, 6 accounts
  std::vector<BufferPool::Account> accounts(6);
  for (auto& x : accounts) pool.attach(&x);
  EXPECT_EQ(pool.stats().held_back, 256u * 1024);
  // Unaccounted users share the other half.
  uint8_t* p1 = pool.get(kBuf);
  uint8_t* p2 = pool.get(kBuf);
  ASSERT_NE(p1, nullptr);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(pool.get(kBuf), nullptr);
  // Reserves are served while there is room at all, then they wait (in their own queue,
  // ahead of the FIFO) for any buffer to come back.
  std::vector<uint8_t*> r;
  for (int i = 0; i < 2; ++i) r.push_back(pool.get(kBuf, false, &accounts[size_t(i)]));
  EXPECT_NE(r[0], nullptr);
  EXPECT_NE(r[1], nullptr);
  EXPECT_EQ(pool.get(kBuf, false, &accounts[2]), nullptr);
  TestWaiter shared(nullptr), reserve(&accounts[2]);
  pool.wait(&shared);
  pool.wait(&reserve);
  pool.put(p1, kBuf);
  EXPECT_EQ(reserve.served, 1);
  EXPECT_EQ(shared.served, 0);
  pool.put(reserve.buf, kBuf, false, &accounts[2]);
  EXPECT_EQ(shared.served, 0) << "accounts 2..5 hold back half the pool again";
  pool.put(r[0], kBuf, false, &accounts[0]);
  EXPECT_EQ(shared.served, 0);
  pool.detach(&accounts[5]);
  pool.detach(&accounts[4]);
  pool.detach(&accounts[3]);
  EXPECT_EQ(pool.stats().held_back, 2u * kBuf);  // accounts 0 and 2 (1 uses its reserve)
  EXPECT_EQ(shared.served, 0);
  pool.detach(&accounts[2]);
  EXPECT_EQ(pool.stats().held_back, uint64_t(kBuf));
  EXPECT_EQ(shared.served, 1) << "a detached account's reserve is free for the others";
  pool.put(shared.buf, kBuf);
  pool.put(p2, kBuf);
  pool.put(r[1], kBuf, false, &accounts[1]);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

}  // namespace
}  // namespace sens::buffers
