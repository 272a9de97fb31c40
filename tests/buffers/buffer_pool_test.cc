// The buffer pool in both layouts: the bound, FIFO waiters and reuse (both); under tyche the
// placement of buffers on successive cache colours, the per-colour accounting, and the
// receive budget that makes R2T data wait (never fail) and resumes it as buffers drain.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "buffers/buffer_pool.h"

namespace sens::buffers {
namespace {

class PoolLayouts : public ::testing::TestWithParam<Layout> {
 protected:
  PoolOptions options(uint64_t limit, uint32_t max_buffer) const {
    PoolOptions o;
    o.limit_bytes = limit;
    o.max_buffer = max_buffer;
    o.layout = GetParam();
    o.geometry = CacheGeometry::typical();
    return o;
  }
};

TEST_P(PoolLayouts, BoundFifoAndReuse) {
  BufferPool pool(options(64 * 1024, 16 * 1024));
  EXPECT_EQ(pool.class_bytes(0), 4096u);
  EXPECT_EQ(pool.class_bytes(1), 4096u);
  EXPECT_EQ(pool.class_bytes(4096), 4096u);
  EXPECT_EQ(pool.class_bytes(4097), 8192u);
  EXPECT_EQ(pool.class_bytes(5000), 8192u);
  EXPECT_EQ(pool.class_bytes(8192), 8192u);
  EXPECT_EQ(pool.class_bytes(8193), 16384u);
  EXPECT_EQ(pool.class_bytes(16384), 16384u);
  EXPECT_EQ(pool.class_bytes(16385), 16384u) << "capped at the largest class";
  EXPECT_EQ(pool.class_bytes(UINT32_MAX), 16384u);
  std::vector<uint8_t*> held;
  for (int i = 0; i < 4; ++i) {
    uint8_t* b = pool.get(16 * 1024);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
    held.push_back(b);
  }
  EXPECT_EQ(pool.get(4096), nullptr) << "beyond the bound";
  struct W : BufferPool::Waiter {
    int* order;
    int id;
  };
  int order[2] = {-1, -1}, served = 0;
  W a, b;
  for (W* w : {&a, &b}) {
    w->bytes = w == &a ? 16 * 1024 : 4096;
    w->id = w == &a ? 0 : 1;
    w->order = order;
    w->ready = [](BufferPool::Waiter* x) {
      auto* me = static_cast<W*>(x);
      me->order[me->id] = me->order[0] == -1 && me->order[1] == -1 ? 0 : 1;
    };
    pool.wait(w);
  }
  EXPECT_EQ(pool.stats().waiting, 2u);
  EXPECT_EQ(pool.get(4096), nullptr) << "no overtaking the waiters";
  pool.put(held.back(), 16 * 1024);
  held.pop_back();
  served = (order[0] != -1) + (order[1] != -1);
  EXPECT_EQ(served, 1) << "the first waiter gets the 16 KiB buffer";
  EXPECT_EQ(order[0], 0);
  ASSERT_NE(a.buf, nullptr);
  // The second waiter (4 KiB) needs a cached 16 KiB buffer to be given back to the system.
  pool.put(held.back(), 16 * 1024);
  held.pop_back();
  EXPECT_EQ(order[1], 1);
  ASSERT_NE(b.buf, nullptr);
  EXPECT_LE(pool.stats().allocated_bytes, 64u * 1024);
  pool.put(a.buf, 16 * 1024);
  pool.put(b.buf, 4096);
  for (auto* h : held) pool.put(h, 16 * 1024);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PoolLayouts, ::testing::Values(Layout::kNaive, Layout::kTyche),
                         [](const auto& info) { return std::string(layout_name(info.param)); });

PoolOptions tyche(uint64_t limit, uint32_t max_buffer, uint64_t budget = 0) {
  PoolOptions o;
  o.limit_bytes = limit;
  o.max_buffer = max_buffer;
  o.layout = Layout::kTyche;
  o.geometry = CacheGeometry::typical();  // L2 1 MiB 16-way: 16 colours of 4 KiB
  o.receive_budget = budget;
  return o;
}

TEST(TychePool, ConsecutiveWayMultiplesStartOnSuccessiveColours) {
  BufferPool pool(tyche(64ull << 20, 128 * 1024));
  const CacheGeometry geometry = CacheGeometry::typical();
  const CacheLevel& l2 = *geometry.level(2);
  ASSERT_EQ(pool.colour_in_use().size(), 16u);
  if (std::string(pool.page_kind()) == "4k")
    GTEST_SKIP() << "no 2 MiB pages: colours are the kernel's";
  EXPECT_EQ(pool.stride_of_class(64 * 1024), 68u * 1024) << "one way plus one colour";
  EXPECT_EQ(pool.stride_of_class(4096), 4096u) << "4 KiB buffers tile the colours already";
  std::vector<uint8_t*> held;
  std::set<uint32_t> starts;
  for (int i = 0; i < 16; ++i) {
    uint8_t* b = pool.get(64 * 1024);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
    starts.insert(l2.colour_of(reinterpret_cast<uintptr_t>(b), 4096));
    held.push_back(b);
  }
  EXPECT_EQ(starts.size(), 16u) << "16 heads on 16 colours (naive: all on colour 0)";
  // Every colour carries the same bytes: 16 buffers x 64 KiB over 16 colours.
  for (uint64_t c : pool.colour_in_use()) EXPECT_EQ(c, 64u * 1024);
  // Last in, first out: the buffer given back last is the next one handed out.
  pool.put(held[3], 64 * 1024);
  pool.put(held[7], 64 * 1024);
  EXPECT_EQ(pool.get(64 * 1024), held[7]);
  EXPECT_EQ(pool.get(64 * 1024), held[3]);
  for (auto* h : held) pool.put(h, 64 * 1024);
  for (uint64_t c : pool.colour_in_use()) EXPECT_EQ(c, 0u);
}

TEST(TychePool, ReceiveBudgetDefersAndResumesNeverFails) {
  // 64 KiB of R2T data at once; reads (not receive) are not held to it.
  BufferPool pool(tyche(1 << 20, 16 * 1024, 64 * 1024));
  std::vector<uint8_t*> rx;
  for (int i = 0; i < 4; ++i) {
    uint8_t* b = pool.get(16 * 1024, true);
    ASSERT_NE(b, nullptr);
    rx.push_back(b);
  }
  EXPECT_EQ(pool.stats().receive_in_use_bytes, 64u * 1024);
  EXPECT_EQ(pool.get(16 * 1024, true), nullptr) << "over the budget: wait";
  EXPECT_EQ(pool.stats().throttled, 1u);
  uint8_t* read_buf = pool.get(16 * 1024, false);
  EXPECT_NE(read_buf, nullptr) << "the budget is for received data only";
  struct W : BufferPool::Waiter {
    int served = 0;
  } w;
  w.bytes = 16 * 1024;
  w.receive = true;
  w.ready = [](BufferPool::Waiter* x) { ++static_cast<W*>(x)->served; };
  pool.wait(&w);
  EXPECT_EQ(w.served, 0);
  EXPECT_EQ(pool.get(16 * 1024, true), nullptr) << "behind a waiter, and over the budget";
  EXPECT_EQ(pool.stats().throttled, 2u) << "a get queued behind others counts if over budget";
  pool.put(read_buf, 16 * 1024, false);
  EXPECT_EQ(w.served, 0) << "a read buffer coming back does not free budget";
  pool.put(rx.back(), 16 * 1024, true);
  rx.pop_back();
  EXPECT_EQ(w.served, 1) << "resumed as received data drains";
  ASSERT_NE(w.buf, nullptr);
  pool.put(w.buf, 16 * 1024, true);
  for (auto* b : rx) pool.put(b, 16 * 1024, true);
  EXPECT_EQ(pool.stats().receive_in_use_bytes, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
}

TEST(TychePool, BudgetAdmitsAtLeastTheLargestBuffer) {
  BufferPool pool(tyche(1 << 20, 128 * 1024, 4096));
  EXPECT_EQ(pool.receive_budget(), 128u * 1024);
  uint8_t* b = pool.get(128 * 1024, true);
  ASSERT_NE(b, nullptr) << "a budget under one buffer would stall forever";
  pool.put(b, 128 * 1024, true);
}

TEST(TychePool, DefaultBudgetFromTheCaches) {
  // Half the L2 (512 KiB) + the L3 shared by 2 CPUs (16 MiB).
  EXPECT_EQ(default_receive_budget(CacheGeometry::typical(), 0), (512ull << 10) + (16ull << 20));
  EXPECT_EQ(default_receive_budget(CacheGeometry{}, 1 << 20), 1u << 20) << "no caches known";
}

TEST(Layouts, Names) {
  Layout l;
  EXPECT_TRUE(parse_layout("tyche", &l));
  EXPECT_EQ(l, Layout::kTyche);
  EXPECT_TRUE(parse_layout("naive", &l));
  EXPECT_EQ(l, Layout::kNaive);
  EXPECT_FALSE(parse_layout("Tyche", &l));
  EXPECT_FALSE(parse_layout("", &l));
}

}  // namespace
}  // namespace sens::buffers
