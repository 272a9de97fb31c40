// An RBD image's I/O queue (rbd_queue.h): operations handed to librbd's asynchronous C API,
// handed back on a lock-free list, completed on the reactor that submitted them.
#include "storage/rbd_queue.h"

#if SENS_HAVE_RBD

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/units.h"
#include "storage/backends.h"
#include "storage/operation_slots.h"
#include "storage/rbd_record.h"
#include "storage/retry_backoff.h"

namespace sens::storage {

namespace {

class RbdQueue final : public Queue {
 public:
  RbdQueue(const RbdQueueParams& p, unsigned depth)
      : device_(p.device),
        image_(p.image),
        name_(p.name),
        lease_(p.write_lease),
        slots_(std::clamp(depth, 1u, p.max_depth)) {
    for (Operation& op : slots_.operations()) op.queue = this;
  }

  // The reactor waits on poll_fd_, an epoll set of the completions' eventfd and the retry
  // timer's timerfd: readable when either is.
  int init() {
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return -errno;
    timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_fd_ < 0) return -errno;
    poll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (poll_fd_ < 0) return -errno;
    for (int fd : {event_fd_, timer_fd_}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(poll_fd_, EPOLL_CTL_ADD, fd, &ev) < 0) return -errno;
    }
    return 0;
  }

  ~RbdQueue() override {
    // librbd may still write into the callers' buffers and will hand the operations back:
    // wait for every one (rados_osd_op_timeout bounds it), calling nobody back.
    while (issued_ > 0) {
      pollfd p{event_fd_, POLLIN, 0};
      ::poll(&p, 1, 1000);
      uint64_t count;
      (void)!::read(event_fd_, &count, sizeof count);
      for (Operation* op = done_.exchange(nullptr, std::memory_order_acquire); op != nullptr;) {
        Operation* next = op->next;
        if (op->in_librbd) --issued_;
        op = next;
      }
    }
    // (operations waiting for a retry are not in librbd: nothing owes them a callback)
    for (int fd : {poll_fd_, timer_fd_, event_fd_})
      if (fd >= 0) ::close(fd);
  }

  void submit(Request* req) override {
    int rc = check_request(*req, device_.size(), device_.block_size(), device_.read_only());
    if (rc != 0) {
      req->result = rc;
      if (req->on_complete) req->on_complete(req);
      return;
    }
    if (Operation* op = slots_.admit(req)) start(op, req);  // else it waits its turn
  }

  int reap() override {
    uint64_t count;
    // Cleared before the list is taken: an operation pushed after this signals again.
    (void)!::read(event_fd_, &count, sizeof count);
    Operation* list = done_.exchange(nullptr, std::memory_order_acquire);
    // The list is newest first: reverse it, so completions run in the order librbd gave them.
    Operation* ordered = nullptr;
    while (list != nullptr) {
      Operation* next = list->next;
      list->next = ordered;
      ordered = list;
      list = next;
    }
    int finished = 0;
    while (ordered != nullptr) {
      Operation* op = ordered;
      ordered = op->next;
      finished += handle_completion(op);
    }
    if (retrying_) retry_due();
    return finished;
  }

  int event_fd() const override { return poll_fd_; }
  bool ready() const override { return done_.load(std::memory_order_relaxed) != nullptr; }
  unsigned inflight() const override { return slots_.requests(); }
  uint64_t waited() const override { return slots_.waited(); }
  uint64_t retried() const override { return retried_; }
  uint64_t cache_flushes() const override { return cache_flushes_; }

 private:
  enum class Step : uint8_t { kMain, kFuaFlush };

  struct Operation {
    RbdQueue* queue = nullptr;
    Request* req = nullptr;
    ssize_t result = 0;  // librbd's return value (set on its thread)
    Step step = Step::kMain;
    bool in_librbd = false;     // handed to librbd (its callback owes us this operation)
    Operation* next = nullptr;  // free list, or the done list
    RetryBackoff backoff;       // librbd's refusals of this step so far
    Nanos retry_at = 0;         // while on the retry list
    Operation* retry_next = nullptr;
  };

  // librbd's callback thread: the operation goes back to its queue's list.
  static void on_librbd_done(rbd_completion_t c, void* arg) {
    auto* op = static_cast<Operation*>(arg);
    op->result = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    op->queue->push_done(op);
  }

  // Any thread. A lock-free push (a Treiber stack: the reactor takes the whole list at once);
  // only the push onto an empty list writes the eventfd, so a busy queue costs one write per
  // batch rather than one per I/O.
  void push_done(Operation* op) {
    Operation* head = done_.load(std::memory_order_relaxed);
    do {
      op->next = head;
    } while (!done_.compare_exchange_weak(head, op, std::memory_order_release,
                                          std::memory_order_relaxed));
    if (head == nullptr) {
      uint64_t one = 1;
      (void)!::write(event_fd_, &one, sizeof one);
    }
  }

  void start(Operation* op, Request* req) {
    op->req = req;
    op->step = Step::kMain;
    op->backoff.reset();
    issue(op);
  }

  static bool changes_data(Op o) {
    return o == Op::kWrite || o == Op::kWriteZeroes || o == Op::kDiscard;
  }

  // Hands the operation's next step to librbd. A refusal comes back through the done list
  // (never a callback from inside submit()).
  void issue(Operation* op) {
    Request& r = *op->req;
    // The fence (rbd_record.h): no write goes to librbd once this gateway's lease on the
    // shared reservations lapsed, whenever the command was admitted (an R2T write waits for
    // its data). The clock is read here, not the reactor's pass clock: a process stopped
    // mid-pass resumes with an old pass clock. (A vDSO read, no system call.)
    if (op->step == Step::kMain && changes_data(r.op) && lease_ &&
        !lease_->fresh(monotonic_now())) {
      op->in_librbd = false;
      op->result = -ESTALE;  // Namespace Not Ready: the host retries once the lease is back
      push_done(op);
      return;
    }
    rbd_image_t image = image_;
    rbd_completion_t c = nullptr;
    int rc = rbd_aio_create_completion(op, &RbdQueue::on_librbd_done, &c);
    if (rc == 0) {
      if (op->step == Step::kFuaFlush) {
        ++cache_flushes_;
        rc = rbd_aio_flush(image, c);
      } else {
        switch (r.op) {
          case Op::kRead:
            rc = rbd_aio_read(image, r.offset, size_t(r.length), static_cast<char*>(r.buf), c);
            break;
          case Op::kWrite:
            rc = rbd_aio_write(image, r.offset, size_t(r.length), static_cast<const char*>(r.buf),
                               c);
            break;
          case Op::kFlush:
            ++cache_flushes_;
            rc = rbd_aio_flush(image, c);
            break;
          case Op::kWriteZeroes:
            rc = rbd_aio_write_zeroes(image, r.offset, size_t(r.length), c, 0, 0);
            break;
          case Op::kDiscard:
            rc = rbd_aio_discard(image, r.offset, r.length, c);
            break;
        }
      }
      if (rc < 0) rbd_aio_release(c);
    }
    if (rc < 0) {
      op->in_librbd = false;
      op->result = rc;
      push_done(op);
      return;
    }
    op->in_librbd = true;
    ++issued_;
  }

  // Returns 1 when the request finished, 0 when it goes on with another step.
  int handle_completion(Operation* op) {
    if (op->in_librbd) --issued_;
    Request& r = *op->req;
    ssize_t res = op->result;
    if (res == -EAGAIN || res == -EBUSY) {  // librbd had no room for it now: again, later
      Nanos wait = 0;
      if (op->backoff.next(&wait)) {
        ++retried_;
        retry_later(op, wait);
        return 0;
      }
      if (uint64_t held = 0; refused_log_.allow(monotonic_now(), &held))
        LOG_WARN(
            "rbd %s: librbd refused an operation for %.1f s (%s): failing it (%llu more since "
            "the last line)",
            name_.c_str(), double(RetryBackoff::kGiveUpAfter) / kSecond,
            rbd_errno_text(int(res)).c_str(), static_cast<unsigned long long>(held));
      return finish(op, int(res));
    }
    if (res < 0) return finish(op, int(res));
    if (r.op == Op::kRead && op->step == Step::kMain && uint64_t(res) != r.length)
      return finish(op, -EIO);  // a short read: never report success
    if (op->step == Step::kMain && r.fua && (r.op == Op::kWrite || r.op == Op::kWriteZeroes)) {
      op->step = Step::kFuaFlush;  // FUA: durable past librbd's cache before completion
      issue(op);
      return 0;
    }
    return finish(op, 0);
  }

  // On the retry list (unordered: a handful at most), the timer set for the earliest.
  void retry_later(Operation* op, Nanos wait) {
    op->retry_at = monotonic_now() + wait;
    op->retry_next = retrying_;
    retrying_ = op;
    arm_retry_timer();
  }

  void arm_retry_timer() {
    Nanos earliest = 0;
    for (Operation* op = retrying_; op != nullptr; op = op->retry_next)
      if (earliest == 0 || op->retry_at < earliest) earliest = op->retry_at;
    itimerspec spec{};
    if (earliest) {  // absolute CLOCK_MONOTONIC; 0 would disarm it
      spec.it_value.tv_sec = time_t(earliest / kSecond);
      spec.it_value.tv_nsec = long(earliest % kSecond);
      if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  // From reap(): hands librbd again what is due, and sets the timer for the rest.
  void retry_due() {
    uint64_t expirations;
    (void)!::read(timer_fd_, &expirations, sizeof expirations);  // clears its readiness
    Nanos now = monotonic_now();
    Operation* due = nullptr;
    for (Operation** at = &retrying_; *at != nullptr;) {
      Operation* op = *at;
      if (op->retry_at <= now) {
        *at = op->retry_next;
        op->retry_next = due;
        due = op;
      } else {
        at = &op->retry_next;
      }
    }
    arm_retry_timer();
    while (due != nullptr) {
      Operation* op = due;
      due = op->retry_next;
      op->retry_next = nullptr;
      issue(op);
    }
  }

  // Completes the request; its operation goes to the first waiting request, if any.
  int finish(Operation* op, int result) {
    return slots_.finish(op, result, [this](Operation* o, Request* next) { start(o, next); });
  }

  Device& device_;
  rbd_image_t image_;
  std::string name_;  // "pool/image", for messages
  const RecordLease* lease_;
  LogThrottle refused_log_{kSecond};  // (completions run on the queue's owner thread)
  OperationSlots<Operation> slots_;
  std::atomic<Operation*> done_{nullptr};  // pushed by librbd's threads, taken by reap()
  int event_fd_ = -1;
  int timer_fd_ = -1;  // the retry timer
  int poll_fd_ = -1;   // both, for the reactor
  Operation* retrying_ = nullptr;
  unsigned issued_ = 0;  // operations librbd owes a callback for
  uint64_t retried_ = 0;
  uint64_t cache_flushes_ = 0;
};

}  // namespace

std::unique_ptr<Queue> make_rbd_queue(const RbdQueueParams& params, unsigned depth) {
  auto queue = std::make_unique<RbdQueue>(params, depth);
  int rc = queue->init();
  if (rc < 0) {
    LOG_ERROR("rbd %s: cannot create an eventfd: %s", params.name.c_str(), std::strerror(-rc));
    return std::make_unique<FailedQueue>(rc);
  }
  return queue;
}

}  // namespace sens::storage

#endif  // SENS_HAVE_RBD
