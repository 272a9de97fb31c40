#include "target/buffer_pool.h"

#include <cstdlib>

namespace sens::target {

BufferPool::BufferPool(uint64_t limit_bytes, uint32_t max_buffer) : limit_(limit_bytes) {
  int shift = kMinShift;
  while ((1u << shift) < max_buffer && shift < 31) ++shift;
  classes_ = shift - int(kMinShift) + 1;
  free_.resize(size_t(classes_));
  // The bound must admit at least one largest buffer, or a command could wait forever.
  if (limit_ < (uint64_t(1) << shift)) limit_ = uint64_t(1) << shift;
}

BufferPool::~BufferPool() {
  for (auto& list : free_)
    for (uint8_t* b : list) std::free(b);
}

int BufferPool::class_of(uint32_t bytes) const {
  int cls = 0;
  while (cls < classes_ - 1 && (1u << (kMinShift + cls)) < bytes) ++cls;
  return cls;
}

uint32_t BufferPool::class_bytes(uint32_t bytes) const {
  return 1u << (kMinShift + class_of(bytes));
}

uint8_t* BufferPool::take(int cls) {
  uint32_t size = 1u << (kMinShift + cls);
  auto& list = free_[size_t(cls)];
  if (!list.empty()) {
    uint8_t* b = list.back();
    list.pop_back();
    stats_.in_use_bytes += size;
    return b;
  }
  while (stats_.allocated_bytes + size > limit_)
    if (!release_one_other(cls)) return nullptr;
  // Warm-up only: once the pool has grown to the working set, buffers are recycled.
  auto* b = static_cast<uint8_t*>(std::aligned_alloc(4096, size));
  if (!b) return nullptr;
  stats_.allocated_bytes += size;
  stats_.in_use_bytes += size;
  return b;
}

bool BufferPool::release_one_other(int except) {
  for (int c = classes_ - 1; c >= 0; --c) {
    if (c == except || free_[size_t(c)].empty()) continue;
    std::free(free_[size_t(c)].back());
    free_[size_t(c)].pop_back();
    stats_.allocated_bytes -= 1u << (kMinShift + c);
    return true;
  }
  return false;
}

uint8_t* BufferPool::get(uint32_t bytes) {
  if (bytes > max_buffer()) return nullptr;
  ++stats_.gets;
  if (head_) {  // others wait already: no overtaking
    ++stats_.waits;
    return nullptr;
  }
  uint8_t* b = take(class_of(bytes));
  if (!b) ++stats_.waits;
  return b;
}

void BufferPool::wait(Waiter* w) {
  if (w->queued) return;
  w->queued = true;
  w->next = nullptr;
  w->buf = nullptr;
  if (tail_)
    tail_->next = w;
  else
    head_ = w;
  tail_ = w;
  ++stats_.waiting;
  serve_waiters();  // the pool may have room already (e.g. only others were cached)
}

void BufferPool::cancel(Waiter* w) {
  if (!w->queued) return;
  Waiter* prev = nullptr;
  for (Waiter* p = head_; p; prev = p, p = p->next) {
    if (p != w) continue;
    (prev ? prev->next : head_) = p->next;
    if (tail_ == p) tail_ = prev;
    break;
  }
  w->queued = false;
  w->next = nullptr;
  --stats_.waiting;
}

void BufferPool::put(uint8_t* buf, uint32_t bytes) {
  if (!buf) return;
  int cls = class_of(bytes);
  stats_.in_use_bytes -= 1u << (kMinShift + cls);
  free_[size_t(cls)].push_back(buf);
  serve_waiters();
}

void BufferPool::serve_waiters() {
  while (head_) {
    Waiter* w = head_;
    uint8_t* b = take(class_of(w->bytes));
    if (!b) return;
    head_ = w->next;
    if (!head_) tail_ = nullptr;
    w->next = nullptr;
    w->queued = false;
    w->buf = b;
    --stats_.waiting;
    w->ready(w);  // may put() or wait() again: the loop re-reads head_
  }
}

}  // namespace sens::target
