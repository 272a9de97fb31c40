#pragma once
// Per-reactor I/O buffers, bounded. Commands take a buffer of their transfer's size class
// when they need one and give it back when their last PDU has left, so memory follows the
// I/O in flight, not the number of connections or their queue depth. A command that finds
// the pool at its bound waits (FIFO) and is resumed when a buffer comes back; nothing fails.
// Used by one reactor thread only: no locks.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sens::target {

class BufferPool {
 public:
  // Someone waiting for a buffer of `bytes`. `ready` runs (on the pool's thread) once a
  // buffer is set aside for it in `buf`; the waiter owns it from then on.
  struct Waiter {
    Waiter* next = nullptr;
    uint32_t bytes = 0;
    uint8_t* buf = nullptr;
    bool queued = false;
    void (*ready)(Waiter*) = nullptr;
  };

  struct Stats {
    uint64_t allocated_bytes = 0;  // carved from the system (free or in use)
    uint64_t in_use_bytes = 0;
    uint64_t gets = 0;
    uint64_t waits = 0;  // gets that found the pool at its bound
    uint64_t waiting = 0;
  };

  // `limit_bytes`: the most this pool ever takes from the system. `max_buffer`: the largest
  // buffer (rounded up to a power of two, at least 4 KiB).
  BufferPool(uint64_t limit_bytes, uint32_t max_buffer);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 4 KiB-aligned buffer of at least `bytes`, or nullptr when the pool is at its bound (or
  // others already wait: first come, first served).
  uint8_t* get(uint32_t bytes);
  // Waits for a buffer of `w->bytes` (after get() returned nullptr). Cancel with cancel().
  void wait(Waiter* w);
  void cancel(Waiter* w);
  void put(uint8_t* buf, uint32_t bytes);

  // The capacity a buffer for `bytes` really has (its size class).
  uint32_t class_bytes(uint32_t bytes) const;
  uint32_t max_buffer() const { return 1u << (kMinShift + classes_ - 1); }
  const Stats& stats() const { return stats_; }

 private:
  static constexpr uint32_t kMinShift = 12;  // 4 KiB
  int class_of(uint32_t bytes) const;
  uint8_t* take(int cls);              // from the free list or the system; nullptr at the bound
  bool release_one_other(int except);  // frees a cached buffer of another class
  void serve_waiters();

  uint64_t limit_;
  int classes_;
  std::vector<std::vector<uint8_t*>> free_;  // per class
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
  Stats stats_;
};

}  // namespace sens::target
