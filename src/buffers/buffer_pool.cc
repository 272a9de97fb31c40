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
  if (options_.share_bytes) share_ = std::max(options_.share_bytes, largest);
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

void BufferPool::charge(Account* a, uint32_t size, bool take) {
  if (!a) return;
  const uint64_t r = reserve_bytes();
  const uint64_t unused_before = r - std::min(a->in_use, r);
  a->in_use = take ? a->in_use + size : a->in_use - size;
  const uint64_t unused_after = r - std::min(a->in_use, r);
  if (!a->attached) return;
  unused_reserve_ = unused_reserve_ - unused_before + unused_after;
  stats_.held_back = held_back();
}

uint8_t* BufferPool::take(int cls, bool receive, Account* account) {
  const uint32_t size = 1u << (kMinShift + cls);
  const bool reserve = within_reserve(account, size);
  if (reserve) {
    // Held back for it: only more reserves than half the pool leave it without room.
    if (stats_.in_use_bytes + size > limit_) return nullptr;
  } else {
    if (over_budget(cls, receive)) return nullptr;
    uint64_t unused = unused_reserve_;
    if (account && account->attached) {
      const uint64_t r = reserve_bytes();
      unused -= std::min<uint64_t>(account->in_use + size, r) - std::min(account->in_use, r);
    }
    if (stats_.in_use_bytes + size + std::min(unused, limit_ / 2) > limit_) return nullptr;
  }
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
  if (reserve) ++stats_.reserve_gets;
  charge(account, size, true);
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

uint8_t* BufferPool::get(uint32_t bytes, bool receive, Account* account) {
  if (bytes > max_buffer()) return nullptr;
  ++stats_.gets;
  const int cls = class_of(bytes);
  const uint32_t size = 1u << (kMinShift + cls);
  uint8_t* b = nullptr;
  const bool capped = over_share(account, size);
  // No overtaking those who wait, except into one's own reserve (which is held back for it).
  const bool queue_ahead = reserve_head_ || (!within_reserve(account, size) && head_);
  if (capped)
    ++stats_.share_capped;
  else if (!queue_ahead)
    b = take(cls, receive, account);
  if (!b) {
    ++stats_.waits;
    if (over_budget(cls, receive)) ++stats_.throttled;
  }
  return b;
}

void BufferPool::push(Waiter*& head, Waiter*& tail, Waiter* w) {
  w->next = nullptr;
  if (tail)
    tail->next = w;
  else
    head = w;
  tail = w;
}

BufferPool::Waiter* BufferPool::pop(Waiter*& head, Waiter*& tail) {
  Waiter* w = head;
  head = w->next;
  if (!head) tail = nullptr;
  w->next = nullptr;
  return w;
}

bool BufferPool::unlink(Waiter*& head, Waiter*& tail, Waiter* w) {
  Waiter* prev = nullptr;
  for (Waiter* p = head; p; prev = p, p = p->next) {
    if (p != w) continue;
    (prev ? prev->next : head) = p->next;
    if (tail == p) tail = prev;
    p->next = nullptr;
    return true;
  }
  return false;
}

void BufferPool::enqueue(Waiter* w) {
  const uint32_t size = class_bytes(w->bytes);
  Account* a = w->account;
  if (over_share(a, size))
    push(a->parked_head, a->parked_tail, w);  // out of everyone's way until it puts back
  else if (within_reserve(a, size))
    push(reserve_head_, reserve_tail_, w);
  else
    push(head_, tail_, w);
}

void BufferPool::wait(Waiter* w) {
  if (w->queued) return;
  w->queued = true;
  w->buf = nullptr;
  ++stats_.waiting;
  enqueue(w);
  serve_waiters();  // the pool may have room already (e.g. only others were cached)
}

void BufferPool::cancel(Waiter* w) {
  if (!w->queued) return;
  Account* a = w->account;
  if (!unlink(reserve_head_, reserve_tail_, w) && !unlink(head_, tail_, w) && a)
    unlink(a->parked_head, a->parked_tail, w);
  w->queued = false;
  w->next = nullptr;
  --stats_.waiting;
}

void BufferPool::attach(Account* a) {
  if (a->attached) return;
  a->attached = true;
  ++stats_.accounts;
  unused_reserve_ += reserve_bytes() - std::min(a->in_use, reserve_bytes());
  stats_.held_back = held_back();
}

void BufferPool::detach(Account* a) {
  if (!a->attached) return;
  while (a->parked_head) cancel(a->parked_head);
  unused_reserve_ -= reserve_bytes() - std::min(a->in_use, reserve_bytes());
  a->attached = false;
  --stats_.accounts;
  stats_.held_back = held_back();
  serve_waiters();  // its reserve is free for the others now
}

void BufferPool::put(uint8_t* buf, uint32_t bytes, bool receive, Account* account) {
  if (!buf) return;
  const int cls = class_of(bytes);
  const uint32_t size = 1u << (kMinShift + cls);
  stats_.in_use_bytes -= size;
  if (receive) stats_.receive_in_use_bytes -= size;
  charge(account, size, false);
  account_colours(buf, size, false);
  free_[size_t(cls)].push_back(buf);
  if (account && account->parked_head) {
    // Back under its share: as many of its parked waiters as now fit rejoin, in order.
    uint64_t will_hold = account->in_use;
    while (account->parked_head) {
      const uint32_t want = class_bytes(account->parked_head->bytes);
      if (share_ && will_hold + want > share_) break;
      will_hold += want;
      Waiter* w = pop(account->parked_head, account->parked_tail);
      if (within_reserve(account, want))
        push(reserve_head_, reserve_tail_, w);
      else
        push(head_, tail_, w);
    }
  }
  if (head_ || reserve_head_) serve_waiters();  // (most puts find no one waiting)
}

bool BufferPool::serve(Waiter*& head, Waiter*& tail, bool reserve_queue) {
  Waiter* w = head;
  if (!w) return false;
  const uint32_t size = class_bytes(w->bytes);
  Account* a = w->account;
  if (over_share(a, size) || within_reserve(a, size) != reserve_queue) {
    // Its account took or gave back buffers since it queued: it belongs on another list.
    enqueue(pop(head, tail));
    return true;
  }
  uint8_t* b = take(class_of(w->bytes), w->receive, a);
  if (!b) return false;
  pop(head, tail);
  w->queued = false;
  w->buf = b;
  --stats_.waiting;
  w->ready(w);  // may put() or wait() again: the caller's loop re-reads the lists
  return true;
}

void BufferPool::serve_waiters() {
  while (serve(reserve_head_, reserve_tail_, true) || serve(head_, tail_, false)) {
  }
}

}  // namespace sens::buffers
