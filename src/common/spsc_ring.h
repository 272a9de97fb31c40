#pragma once
// A bounded single-producer single-consumer ring: one thread pushes, one other thread pops,
// no lock and no allocation after construction. Each side caches the other's index, so a
// push or a pop touches the shared cache line only when its cached view runs out.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sens {

template <class T>
class SpscRing {
 public:
  explicit SpscRing(size_t min_capacity) {
    size_t cap = 1;
    while (cap < min_capacity) cap <<= 1;
    mask_ = cap - 1;
    slots_ = std::make_unique<T[]>(cap);
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  size_t capacity() const { return mask_ + 1; }

  // Producer side. False when full.
  bool push(const T& v) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_cache_ > mask_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail - head_cache_ > mask_) return false;
    }
    slots_[tail & mask_] = v;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Consumer side: up to `max` items into `out`; returns how many.
  size_t pop(T* out, size_t max) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (tail_cache_ == head) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (tail_cache_ == head) return 0;
    }
    size_t n = size_t(tail_cache_ - head);
    if (n > max) n = max;
    for (size_t i = 0; i < n; ++i) out[i] = slots_[(head + i) & mask_];
    head_.store(head + n, std::memory_order_release);
    return n;
  }

  // Either side (a hint for the other): true when nothing is waiting to be popped.
  bool empty() const {
    return tail_.load(std::memory_order_acquire) == head_.load(std::memory_order_acquire);
  }

 private:
  // Producer and consumer indexes on their own cache lines, each with its cache of the other.
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t tail_cache_ = 0;  // the consumer's view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};
  uint64_t head_cache_ = 0;  // the producer's view of head_
  alignas(64) size_t mask_ = 0;
  std::unique_ptr<T[]> slots_;
};

}  // namespace sens
