#include "buffers/buffer_pool.h"

#include <algorithm>
#include <cstdlib>

#include "common/log.h"

namespace sens::buffers {

const char* layout_name(Layout layout) {
  return layout == Layout::kTyche ? "tyche" : "naive";
}

bool parse_layout(const std::string& text, Layout* out) {
  if (text == "naive") {
    *out = Layout::kNaive;
  } else if (text == "tyche") {
    *out = Layout::kTyche;
  } else {
    return false;
  }
  return true;
}

uint64_t default_receive_budget(const CacheGeometry& g, uint64_t floor) {
  uint64_t budget = 0;
  if (const CacheLevel* l2 = g.level(2)) budget += l2->size_bytes / 2;
  const CacheLevel* llc = g.last();
  if (llc && llc->level > 2) budget += llc->size_bytes / std::max<uint32_t>(llc->sharing_cpus, 1);
  return std::max(budget, floor);
}

BufferPool::BufferPool(uint64_t limit_bytes, uint32_t max_buffer)
    : BufferPool(PoolOptions{limit_bytes, max_buffer}) {}

BufferPool::BufferPool(const PoolOptions& options)
    : options_(options), limit_(options.limit_bytes) {
  int shift = kMinShift;
  while ((1u << shift) < options_.max_buffer && shift < 31) ++shift;
  classes_ = shift - int(kMinShift) + 1;
  free_.resize(size_t(classes_));
  // The bound must admit at least one largest buffer, or a command could wait forever; so
  // must the receive budget.
  const uint64_t largest = uint64_t(1) << shift;
  limit_ = std::max(limit_, largest);
  if (options_.receive_budget) options_.receive_budget = std::max(options_.receive_budget, largest);
  if (options_.layout != Layout::kTyche) return;

  l2_ = options_.geometry.level(2);
  if (l2_) colour_in_use_.assign(l2_->colours(kColourUnit), 0);
  tyche_.resize(size_t(classes_));
  for (int c = 0; c < classes_; ++c) {
    const uint64_t size = uint64_t(1) << (kMinShift + c);
    Class& k = tyche_[size_t(c)];
    std::string error;
    // Address space for as many buffers as the bound allows, at the padded stride (only
    // touched memory costs anything).
    const uint64_t page = options_.huge_pages ? kHugePage : kColourUnit;
    k.stride =
        conflict_free_stride(options_.geometry, size, kColourUnit, page, options_.spread_heads);
    k.region = Region::reserve((limit_ / size + 1) * k.stride, options_.huge_pages, &error);
    if (!k.region) {
      LOG_WARN("tyche buffers: %s; class %llu B falls back to aligned_alloc", error.c_str(),
               (unsigned long long)size);
      continue;
    }
    // With 4 KiB pages the colour above the page is the kernel's choice: no padding helps.
    if (k.region->kind() == PageKind::kSmall) k.stride = size;
  }
}

BufferPool::~BufferPool() {
  for (int c = 0; c < classes_; ++c)
    for (uint8_t* b : free_[size_t(c)])
      if (tyche_.empty() || !tyche_[size_t(c)].region) std::free(b);
  // Tyche buffers go with their regions.
}

const char* BufferPool::page_kind() const {
  for (const Class& k : tyche_)
    if (k.region) return page_kind_name(k.region->kind());
  return "";
}

uint64_t BufferPool::stride_of_class(uint32_t bytes) const {
  const int c = class_of(bytes);
  if (!tyche_.empty() && tyche_[size_t(c)].region) return tyche_[size_t(c)].stride;
  return uint64_t(1) << (kMinShift + c);
}

uint64_t BufferPool::huge_bytes() const {
  uint64_t total = 0;
  for (const Class& k : tyche_)
    if (k.region) total += k.region->huge_bytes();
  return total;
}

int BufferPool::class_of(uint32_t bytes) const {
  int cls = 0;
  while (cls < classes_ - 1 && (1u << (kMinShift + cls)) < bytes) ++cls;
  return cls;
}

uint32_t BufferPool::class_bytes(uint32_t bytes) const {
  return 1u << (kMinShift + class_of(bytes));
}

bool BufferPool::over_budget(int cls, bool receive) const {
  if (!receive || options_.receive_budget == 0) return false;
  return stats_.receive_in_use_bytes + (1u << (kMinShift + cls)) > options_.receive_budget;
}

void BufferPool::account_colours(const uint8_t* b, uint32_t size, bool in_use) {
  if (colour_in_use_.empty()) return;
  const uint64_t addr = reinterpret_cast<uintptr_t>(b);
  for (uint32_t off = 0; off < size; off += kColourUnit) {
    uint64_t& c = colour_in_use_[l2_->colour_of(addr + off, kColourUnit)];
    c = in_use ? c + kColourUnit : c - kColourUnit;
  }
}

uint8_t* BufferPool::carve(int cls) {
  const uint32_t size = 1u << (kMinShift + cls);
  if (!tyche_.empty() && tyche_[size_t(cls)].region) {
    Class& k = tyche_[size_t(cls)];
    if (!k.discarded.empty()) {
      uint8_t* b = k.discarded.back();
      k.discarded.pop_back();
      return b;
    }
    if (k.carved + size <= k.region->size()) {
      uint8_t* b = k.region->base() + k.carved;
      k.carved += k.stride;
      return b;
    }
    return nullptr;  // cannot happen within the bound; the caller waits
  }
  return static_cast<uint8_t*>(std::aligned_alloc(4096, size));
}

void BufferPool::drop(int cls, uint8_t* b) {
  const uint32_t size = 1u << (kMinShift + cls);
  if (!tyche_.empty() && tyche_[size_t(cls)].region) {
    tyche_[size_t(cls)].region->discard(b, size);
    tyche_[size_t(cls)].discarded.push_back(b);
  } else {
    std::free(b);
  }
  stats_.allocated_bytes -= size;
}

uint8_t* BufferPool::take(int cls, bool receive) {
  if (over_budget(cls, receive)) return nullptr;
  const uint32_t size = 1u << (kMinShift + cls);
  auto& list = free_[size_t(cls)];
  uint8_t* b = nullptr;
  if (!list.empty()) {
    b = list.back();
    list.pop_back();
  } else {
    while (stats_.allocated_bytes + size > limit_)
      if (!release_one_other(cls)) return nullptr;
    // Warm-up only: once the pool has grown to the working set, buffers are recycled.
    b = carve(cls);
    if (!b) return nullptr;
    stats_.allocated_bytes += size;
  }
  stats_.in_use_bytes += size;
  if (receive) stats_.receive_in_use_bytes += size;
  account_colours(b, size, true);
  return b;
}

bool BufferPool::release_one_other(int except) {
  for (int c = classes_ - 1; c >= 0; --c) {
    if (c == except || free_[size_t(c)].empty()) continue;
    drop(c, free_[size_t(c)].back());
    free_[size_t(c)].pop_back();
    return true;
  }
  return false;
}

uint8_t* BufferPool::get(uint32_t bytes, bool receive) {
  if (bytes > max_buffer()) return nullptr;
  ++stats_.gets;
  const int cls = class_of(bytes);
  if (head_) {  // others wait already: no overtaking
    ++stats_.waits;
    if (over_budget(cls, receive)) ++stats_.throttled;
    return nullptr;
  }
  uint8_t* b = take(cls, receive);
  if (!b) {
    ++stats_.waits;
    if (over_budget(cls, receive)) ++stats_.throttled;
  }
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

void BufferPool::put(uint8_t* buf, uint32_t bytes, bool receive) {
  if (!buf) return;
  const int cls = class_of(bytes);
  const uint32_t size = 1u << (kMinShift + cls);
  stats_.in_use_bytes -= size;
  if (receive) stats_.receive_in_use_bytes -= size;
  account_colours(buf, size, false);
  free_[size_t(cls)].push_back(buf);
  serve_waiters();
}

void BufferPool::serve_waiters() {
  while (head_) {
    Waiter* w = head_;
    uint8_t* b = take(class_of(w->bytes), w->receive);
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

}  // namespace sens::buffers
