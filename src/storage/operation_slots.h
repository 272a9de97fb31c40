#pragma once
// The bound of a device queue that hands requests to an asynchronous backend (io_uring,
// librbd): a fixed set of operations, each carrying one request through the backend, a free
// list of them, and the requests that came past the bound, waiting in arrival order. A full
// queue makes a request wait; it never fails it. Single-threaded (the queue's reactor).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "storage/device.h"

namespace sens::storage {

// Operation needs `Operation* next` (the free-list link; free to reuse while in flight) and
// `Request* req` (the request it carries).
template <typename Operation>
class OperationSlots {
 public:
  explicit OperationSlots(size_t count) : ops_(count < 1 ? 1 : count) {
    for (size_t i = 0; i + 1 < ops_.size(); ++i) ops_[i].next = &ops_[i + 1];
    free_ = &ops_[0];
  }
  OperationSlots(const OperationSlots&) = delete;
  OperationSlots& operator=(const OperationSlots&) = delete;

  // A free operation for `req`, or nullptr: then `req` waits behind the earlier waiters.
  Operation* admit(Request* req) {
    ++requests_;
    if (free_ != nullptr && waiting_head_ == nullptr) {
      Operation* op = free_;
      free_ = op->next;
      op->next = nullptr;
      return op;
    }
    req->next = nullptr;
    if (waiting_tail_ != nullptr) {
      waiting_tail_->next = req;
    } else {
      waiting_head_ = req;
    }
    waiting_tail_ = req;
    ++waited_;
    return nullptr;
  }

  // The request `op` carried has finished: returns the oldest waiting request, which takes
  // `op` over, or nullptr when none waits (`op` is free again).
  Request* release(Operation* op) {
    --requests_;
    Request* next = waiting_head_;
    if (next == nullptr) {
      op->next = free_;
      free_ = op;
      return nullptr;
    }
    waiting_head_ = next->next;
    if (waiting_head_ == nullptr) waiting_tail_ = nullptr;
    next->next = nullptr;
    return next;
  }

  // Completes the request `op` carried with `result`. `op` first goes to the oldest waiting
  // request, through `start(op, request)`, so that the completion callback, which may submit
  // more, finds the queue in order. Returns 1 (one completion, for the reap loops).
  template <typename Start>
  int finish(Operation* op, int result, Start&& start) {
    Request* req = op->req;
    if (Request* next = release(op)) {
      start(op, next);
    } else {
      op->req = nullptr;
    }
    req->result = result;
    if (req->on_complete) req->on_complete(req);
    return 1;
  }

  std::vector<Operation>& operations() { return ops_; }
  size_t size() const { return ops_.size(); }
  unsigned requests() const { return requests_; }  // admitted, not yet released
  uint64_t waited() const { return waited_; }      // requests that had to wait, ever

 private:
  std::vector<Operation> ops_;
  Operation* free_ = nullptr;
  Request* waiting_head_ = nullptr;  // oldest first
  Request* waiting_tail_ = nullptr;
  unsigned requests_ = 0;
  uint64_t waited_ = 0;
};

}  // namespace sens::storage
