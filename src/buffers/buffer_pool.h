#pragma once
// Per-reactor I/O buffers, bounded. Commands take a buffer of their transfer's size class
// when they need one and give it back when their last PDU has left, so memory follows the
// I/O in flight, not the number of connections or their queue depth. A command that finds
// the pool at its bound waits (FIFO) and is resumed when a buffer comes back; nothing fails.
// Used by one reactor thread only: no locks.
//
// Two layouts (--buffers):
// - naive: each buffer from aligned_alloc, 4 KiB pages, as most stacks do.
// - tyche: the three parts of Tyche (cache-aware buffers):
//   * Allocator: each size class carves its buffers from its own region of 2 MiB pages,
//     consecutive buffers a conflict-free stride apart (see conflict_free_stride), so their
//     heads fall on successive cache colours instead of all on one; freed buffers are reused
//     last-in first-out, while their lines are still cached.
//   * Manager: knows the cache geometry (sysfs) and counts the bytes in use per L2 colour.
//   * Throttler: buffers for data the host sends (R2T writes) are held within a byte budget
//     derived from the cache; over it a command waits for its buffer (so its R2T leaves
//     later), it never fails.
//
// Fair shares (issue 29): a connection takes its buffers through an Account attached to the
// pool. Each account has a reserve of one largest buffer that the pool holds back for it (up
// to half the pool across all accounts), so a connection can always run one command however
// busy the others are; and no account holds more than `share_bytes`. A waiter over its share
// is parked on its account, out of the FIFO, so it never blocks those under theirs.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffers/cache_geometry.h"
#include "buffers/region.h"

namespace sens::buffers {

enum class Layout : uint8_t { kNaive, kTyche };
const char* layout_name(Layout layout);
bool parse_layout(const std::string& text, Layout* out);

struct PoolOptions {
  uint64_t limit_bytes = 256ull << 20;  // the most this pool ever takes from the system
  uint32_t max_buffer = 128 * 1024;     // the largest buffer (rounded up to a power of two)
  Layout layout = Layout::kNaive;
  CacheGeometry geometry;       // tyche: the caches to colour for (CacheGeometry::detect())
  uint64_t receive_budget = 0;  // tyche: bytes of receive buffers in use at once; 0: none
  bool huge_pages = true;       // tyche: ask for 2 MiB pages
  bool spread_heads = false;    // tyche: buffers hot at their start (conflict_free_stride)
  // The most one Account may hold (at least one largest buffer); 0: no cap.
  uint64_t share_bytes = 0;
};

// The default receive budget of a reactor: half its L2 plus its share of the L3 (the last
// level shared by `sharing` CPUs), at least `floor` bytes.
uint64_t default_receive_budget(const CacheGeometry& g, uint64_t floor);

class BufferPool {
 public:
  // Someone waiting for a buffer of `bytes`. `ready` runs (on the pool's thread) once a
  // buffer is set aside for it in `buf`; the waiter owns it from then on.
  struct Account;
  struct Waiter {
    Waiter* next = nullptr;
    uint32_t bytes = 0;
    bool receive = false;  // a buffer for data from the network (throttled under tyche)
    uint8_t* buf = nullptr;
    bool queued = false;
    void (*ready)(Waiter*) = nullptr;
    Account* account = nullptr;  // whose share it counts against (null: nobody's)
  };
  // One user's (a connection's) part of the pool. Attach it before use and detach it once it
  // holds nothing; pass it to get(), put() and in Waiter::account.
  struct Account {
    uint64_t in_use = 0;            // bytes it holds
    Waiter* parked_head = nullptr;  // its waiters over its share, first come first
    Waiter* parked_tail = nullptr;
    bool attached = false;
  };

  struct Stats {
    uint64_t allocated_bytes = 0;  // carved from the system (free or in use)
    uint64_t in_use_bytes = 0;
    uint64_t receive_in_use_bytes = 0;
    uint64_t gets = 0;
    uint64_t waits = 0;  // gets that found the pool at its bound (or over the receive budget)
    uint64_t waiting = 0;
    uint64_t throttled = 0;     // waits of receive buffers that found the budget spent
    uint64_t share_capped = 0;  // gets refused because their account was at its share
    uint64_t reserve_gets = 0;  // buffers served from an account's reserve
    uint64_t accounts = 0;      // attached
    uint64_t held_back = 0;     // bytes held back for reserves not in use (now)
  };

  BufferPool(uint64_t limit_bytes, uint32_t max_buffer);  // naive, as before
  explicit BufferPool(const PoolOptions& options);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 4 KiB-aligned buffer of at least `bytes`, or nullptr when the pool is at its bound (or
  // others already wait: first come, first served; or `account` is at its share). A get
  // within the account's reserve overtakes the waiters. `receive`: see Waiter.
  uint8_t* get(uint32_t bytes, bool receive = false, Account* account = nullptr);
  // Waits for a buffer of `w->bytes` (after get() returned nullptr). Cancel with cancel().
  void wait(Waiter* w);
  void cancel(Waiter* w);
  void put(uint8_t* buf, uint32_t bytes, bool receive = false, Account* account = nullptr);
  void attach(Account* account);
  void detach(Account* account);  // after it has put everything back and cancelled its waits
  uint64_t reserve_bytes() const { return max_buffer(); }
  uint64_t share_bytes() const { return share_; }  // 0: no cap

  // The capacity a buffer for `bytes` really has (its size class).
  uint32_t class_bytes(uint32_t bytes) const;
  uint32_t max_buffer() const { return 1u << (kMinShift + classes_ - 1); }
  uint64_t limit() const { return limit_; }  // the bound (bytes)
  const Stats& stats() const { return stats_; }
  Layout layout() const { return options_.layout; }
  uint64_t receive_budget() const { return options_.receive_budget; }
  // tyche: the page kind its regions got ("hugetlb", "transparent", "4k"; "" for naive).
  const char* page_kind() const;
  // The distance between consecutive buffers of a class (tyche), or the class size (naive).
  uint64_t stride_of_class(uint32_t bytes) const;
  // Bytes in use per colour of the L2 (tyche; empty for naive).
  const std::vector<uint64_t>& colour_in_use() const { return colour_in_use_; }
  uint32_t colour_unit() const { return kColourUnit; }
  // Huge-page-backed bytes of the regions (reads /proc/self/smaps: stats only).
  uint64_t huge_bytes() const;

 private:
  static constexpr uint32_t kMinShift = 12;      // 4 KiB
  static constexpr uint32_t kColourUnit = 4096;  // buffers stay 4 KiB aligned (O_DIRECT)

  struct Class {  // tyche
    std::unique_ptr<Region> region;
    uint64_t stride = 0;
    uint64_t carved = 0;              // bytes of the region carved so far
    std::vector<uint8_t*> discarded;  // carved, handed back to the kernel, reusable
  };

  // The smallest class that holds `bytes` (the largest for more): inline, as get() and put()
  // run for every I/O that takes a buffer.
  int class_of(uint32_t bytes) const {
    const int cls =
        bytes <= (1u << kMinShift) ? 0 : int(std::bit_width(bytes - 1)) - int(kMinShift);
    return std::min(cls, classes_ - 1);
  }
  // nullptr at the bound, over the budget, or into the reserves others hold back
  uint8_t* take(int cls, bool receive, Account* account);
  bool within_reserve(const Account* a, uint32_t size) const {
    return a && a->attached && a->in_use + size <= reserve_bytes();
  }
  bool over_share(const Account* a, uint32_t size) const {
    return a && share_ && a->in_use + size > share_;
  }
  // Bytes of reserves not in use that the pool keeps free: at most half the pool (past that
  // many connections a reserve is a best effort, and the others still have half to share).
  uint64_t held_back() const { return std::min(unused_reserve_, limit_ / 2); }
  void charge(Account* a, uint32_t size, bool take);
  // Waiter lists: the reserve queue (served first), the FIFO, an account's parked list.
  static void push(Waiter*& head, Waiter*& tail, Waiter* w);
  static Waiter* pop(Waiter*& head, Waiter*& tail);
  static bool unlink(Waiter*& head, Waiter*& tail, Waiter* w);
  void enqueue(Waiter* w);  // onto the list its account's state calls for
  bool serve(Waiter*& head, Waiter*& tail, bool reserve_queue);
  uint8_t* carve(int cls);             // new memory for a buffer of the class
  void drop(int cls, uint8_t* b);      // gives a cached buffer's memory back
  bool release_one_other(int except);  // frees a cached buffer of another class
  bool over_budget(int cls, bool receive) const;
  void account_colours(const uint8_t* b, uint32_t size, bool in_use);
  void serve_waiters();

  PoolOptions options_;
  uint64_t limit_;
  int classes_;
  std::vector<std::vector<uint8_t*>> free_;  // per class, reused last in first out
  std::vector<Class> tyche_;                 // per class, tyche only
  std::vector<uint64_t> colour_in_use_;      // per L2 colour, tyche only
  const CacheLevel* l2_ = nullptr;
  Waiter* head_ = nullptr;  // the FIFO
  Waiter* tail_ = nullptr;
  Waiter* reserve_head_ = nullptr;  // waiters within their reserve (only when oversubscribed)
  Waiter* reserve_tail_ = nullptr;
  uint64_t share_ = 0;
  uint64_t unused_reserve_ = 0;  // sum over accounts of the reserve they do not use
  Stats stats_;
};

}  // namespace sens::buffers
