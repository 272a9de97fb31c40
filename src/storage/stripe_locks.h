#pragma once
// Striped spin locks over a byte range, for memory backends shared by several reactor threads:
// a block is copied in or out only under the lock of the 4 KiB chunk that holds it, so a read
// never returns a block half old and half new. Each lock is held for one chunk's memcpy, never
// across a system call that can sleep long, so spinning is cheaper than sleeping.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace sens::storage {

class StripeLocks {
 public:
  static constexpr uint64_t kChunk = 4096;
  static constexpr uint64_t kStripes = 1024;  // a power of two; 2 MiB of chunks is 512

  StripeLocks() : locks_(std::make_unique<Lock[]>(kStripes)) {}

  // Runs fn(offset, length) for each piece of [offset, offset + length) that lies in one
  // chunk, with that chunk's lock held.
  template <typename Fn>
  void each_chunk(uint64_t offset, uint64_t length, Fn&& fn) {
    uint64_t end = offset + length;
    while (offset < end) {
      uint64_t piece_end = std::min(end, (offset / kChunk + 1) * kChunk);
      Lock& l = locks_[(offset / kChunk) % kStripes];
      l.lock();
      fn(offset, piece_end - offset);
      l.unlock();
      offset = piece_end;
    }
  }

  // Runs fn(offset, length) with every chunk of [offset, offset + length) locked, where the
  // range lies within one 2 MiB-aligned segment (so its stripes are distinct and ascending).
  template <typename Fn>
  void whole_segment(uint64_t offset, uint64_t length, Fn&& fn) {
    uint64_t first = offset / kChunk, last = (offset + length - 1) / kChunk;
    for (uint64_t c = first; c <= last; ++c) locks_[c % kStripes].lock();
    fn(offset, length);
    for (uint64_t c = first; c <= last; ++c) locks_[c % kStripes].unlock();
  }

 private:
  struct alignas(64) Lock {  // one per cache line: neighbouring chunks do not share a line
    std::atomic<bool> held{false};
    void lock() {
      while (held.exchange(true, std::memory_order_acquire))
        while (held.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
    void unlock() { held.store(false, std::memory_order_release); }
  };
  std::unique_ptr<Lock[]> locks_;
};

}  // namespace sens::storage
