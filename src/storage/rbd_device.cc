// rbd: a Ceph RBD image through librbd's asynchronous C API. One cluster handle and one open
// image per device, shared by every queue (librbd is thread-safe); each queue (one per reactor)
// has a fixed set of operations, at most `qd` of them in librbd at once, and a lock-free list
// on which librbd's callback thread hands finished operations back. The list's first entry
// signals the queue's eventfd, so the reactor that submitted an I/O runs its completion.
//
// The image's shared record (NVMe reservations, one state for every gateway) and this gateway's
// lease on it are in rbd_record.h. Writes are handed to librbd only while the lease holds.
#include "storage/backends.h"
#include "storage/operation_slots.h"
#include "storage/rbd_record.h"
#include "storage/retry_backoff.h"

#if SENS_HAVE_RBD

#include <openssl/evp.h>
#include <poll.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/units.h"

namespace sens::storage {

bool rbd_supported() {
  return true;
}

namespace {

constexpr uint32_t kRbdBlockSize = 512;  // as the kernel's rbd driver: any 512-byte multiple

std::string errno_text(int negative_errno) {
  return rbd_errno_text(negative_errno);
}

// SHA-256 of `seed`, first 16 bytes: an identity any gateway computes the same way.
void digest16(const std::string& seed, uint8_t out[16]) {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(seed.data(), seed.size(), md, &len, EVP_sha256(), nullptr);
  std::memcpy(out, md, 16);
}

class RbdDevice final : public Device {
 public:
  RbdDevice(RbdSpec spec, rados_t cluster, rados_ioctx_t io, rbd_image_t image, uint64_t size,
            bool read_only, bool volatile_cache, bool discard_zeroes, std::string identity)
      : spec_(std::move(spec)),
        cluster_(cluster),
        io_(io),
        image_(image),
        size_(size),
        read_only_(read_only),
        volatile_cache_(volatile_cache),
        discard_zeroes_(discard_zeroes),
        identity_(std::move(identity)) {
    digest16("sens-rbd-nguid:" + identity_, nguid_);
    digest16("sens-rbd-uuid:" + identity_, uuid_);
    uuid_[6] = uint8_t((uuid_[6] & 0x0F) | 0x80);  // RFC 9562 version 8 (name hashed, SHA-256)
    uuid_[8] = uint8_t((uuid_[8] & 0x3F) | 0x80);
  }
  ~RbdDevice() override {
    if (record_) record_->stop(cluster_);
    record_.reset();
    for (rados_ioctx_t io : record_io_)
      if (io) rados_ioctx_destroy(io);
    rbd_close(image_);  // waits for anything librbd still has in flight
    rados_ioctx_destroy(io_);
    rados_shutdown(cluster_);
  }

  uint64_t size() const override { return size_.load(std::memory_order_relaxed); }
  uint32_t block_size() const override { return kRbdBlockSize; }
  // rbd_resize with a size; without one, the size the image has now (`rbd resize` elsewhere).
  std::string resize(uint64_t bytes) override {
    if (bytes % kRbdBlockSize) return "the size must be a multiple of 512 bytes";
    if (bytes) {
      if (read_only_) return "the namespace is read-only";
      if (int rc = rbd_resize(image_, bytes); rc < 0)
        return std::string("rbd_resize: ") + std::strerror(-rc);
    }
    uint64_t now = 0;
    if (int rc = rbd_get_size(image_, &now); rc < 0)
      return std::string("rbd_get_size: ") + std::strerror(-rc);
    size_ = now - now % kRbdBlockSize;
    return "";
  }
  bool read_only() const override { return read_only_; }
  bool volatile_cache() const override { return volatile_cache_; }
  bool discard_zeroes() const override { return discard_zeroes_; }
  std::string describe() const override {
    std::string text = "rbd " + spec_.pool + "/" + spec_.image + " (" + format_size(size()) +
                       ", image id " + identity_.substr(identity_.rfind('/') + 1);
    if (volatile_cache_) text += ", rbd_cache on";
    if (read_only_) text += ", read-only";
    if (record_) text += ", reservations shared in " + record_->describe();
    return text + ")";
  }
  bool stable_identity(uint8_t nguid[16], uint8_t uuid[16]) const override {
    std::memcpy(nguid, nguid_, 16);
    std::memcpy(uuid, uuid_, 16);
    return true;
  }
  std::unique_ptr<Queue> make_queue(unsigned depth) override;
  int sync() override {
    int rc = rbd_flush(image_);
    if (rc < 0) return rc;
    syncs_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  uint64_t syncs() const override { return syncs_.load(std::memory_order_relaxed); }
  SharedRecord* shared_record() override { return record_.get(); }
  // Writes go to librbd only while this holds (null: no record, never the case once open).
  const RecordLease* write_lease() const { return record_ ? record_->lease() : nullptr; }

  // The reservation record (see RbdSharedRecord); "" or why it cannot be had.
  std::string open_record(const std::string& image_id) {
    std::string what;
    for (rados_ioctx_t& io : record_io_) {
      int rc = rados_ioctx_create(cluster_, spec_.pool.c_str(), &io);
      if (rc < 0) return "cannot open pool '" + spec_.pool + "' again: " + errno_text(rc);
    }
    record_ = std::make_unique<RbdSharedRecord>(record_io_[0], record_io_[1], record_io_[2],
                                                spec_.pool, "sens_resv." + image_id,
                                                Nanos(spec_.op_timeout_s) * kSecond);
    int rc = record_->start(&what);
    if (rc < 0) {
      record_->stop(cluster_);
      record_.reset();
      return what + ": " + errno_text(rc);
    }
    return "";
  }

  rbd_image_t image() const { return image_; }
  const RbdSpec& spec() const { return spec_; }

 private:
  RbdSpec spec_;
  rados_t cluster_;
  rados_ioctx_t io_;
  rbd_image_t image_;
  std::atomic<uint64_t> size_;  // changes with resize()
  bool read_only_;
  bool volatile_cache_;
  bool discard_zeroes_;
  std::string identity_;  // "FSID/POOL_ID/IMAGE_ID"
  uint8_t nguid_[16]{}, uuid_[16]{};
  std::atomic<uint64_t> syncs_{0};
  rados_ioctx_t record_io_[3] = {nullptr, nullptr, nullptr};  // see RbdSharedRecord
  std::unique_ptr<RbdSharedRecord> record_;
};

class RbdQueue final : public Queue {
 public:
  RbdQueue(RbdDevice& device, unsigned depth)
      : device_(device),
        lease_(device.write_lease()),
        slots_(std::clamp(depth, 1u, device.spec().qd)) {
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
    rbd_image_t image = device_.image();
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
            "rbd %s/%s: librbd refused an operation for %.1f s (%s): failing it (%llu more "
            "since the last line)",
            device_.spec().pool.c_str(), device_.spec().image.c_str(),
            double(RetryBackoff::kGiveUpAfter) / kSecond, errno_text(int(res)).c_str(),
            static_cast<unsigned long long>(held));
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

  RbdDevice& device_;
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

class FailedQueue final : public Queue {
 public:
  explicit FailedQueue(int error) : error_(error) {}
  void submit(Request* req) override {
    req->result = error_;
    if (req->on_complete) req->on_complete(req);
  }

 private:
  int error_;
};

std::unique_ptr<Queue> RbdDevice::make_queue(unsigned depth) {
  auto queue = std::make_unique<RbdQueue>(*this, depth);
  int rc = queue->init();
  if (rc < 0) {
    LOG_ERROR("rbd %s/%s: cannot create an eventfd: %s", spec_.pool.c_str(), spec_.image.c_str(),
              std::strerror(-rc));
    return std::make_unique<FailedQueue>(rc);
  }
  return queue;
}

std::string conf_get(rados_t cluster, const char* key) {
  char buf[512];
  if (rados_conf_get(cluster, key, buf, sizeof buf) != 0) return "";
  return buf;
}

}  // namespace

std::unique_ptr<Device> open_rbd(const RbdSpec& s, bool read_only, std::string* error) {
  const std::string name = "rbd:" + s.pool + "/" + s.image;
  rados_t cluster = nullptr;
  int rc = rados_create(&cluster, s.id.empty() ? nullptr : s.id.c_str());
  if (rc < 0) {
    *error = name + ": cannot create a cluster handle: " + errno_text(rc);
    return nullptr;
  }
  auto fail = [&](std::string why) -> std::unique_ptr<Device> {
    rados_shutdown(cluster);
    *error = name + ": " + why;
    return nullptr;
  };
  rc = rados_conf_read_file(cluster, s.conf.empty() ? nullptr : s.conf.c_str());
  if (rc < 0) {
    if (s.conf.empty())
      return fail("no Ceph configuration found (" + errno_text(rc) +
                  "): give conf=PATH or set CEPH_CONF (librados looks at $CEPH_CONF, "
                  "/etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf)");
    return fail("cannot read the Ceph configuration '" + s.conf + "': " + errno_text(rc));
  }
  rados_conf_parse_env(cluster, nullptr);  // CEPH_ARGS, as the ceph tools take it
  // A gateway must not wait 300 s for a dead monitor (client_mount_timeout), nor forever for
  // a dead OSD (rados_osd_op_timeout 0): the spec's timeouts, which override the file's.
  const std::string mon_timeout = std::to_string(s.timeout_s);
  const std::string osd_timeout = std::to_string(s.op_timeout_s);
  for (auto [key, value] : {std::pair{"client_mount_timeout", mon_timeout.c_str()},
                            std::pair{"rados_mon_op_timeout", mon_timeout.c_str()},
                            std::pair{"rados_osd_op_timeout", osd_timeout.c_str()}}) {
    rc = rados_conf_set(cluster, key, value);
    if (rc < 0) return fail(std::string("cannot set ") + key + ": " + errno_text(rc));
  }
  std::string mon_host = conf_get(cluster, "mon_host");
  std::string user = "client." + (s.id.empty() ? std::string("admin") : s.id);
  rc = rados_connect(cluster);
  if (rc < 0) {
    if (rc == -ETIMEDOUT || rc == -ENOTCONN)
      return fail("cannot reach the cluster's monitors (mon_host " +
                  (mon_host.empty() ? std::string("unset") : mon_host) + ") within " +
                  std::to_string(s.timeout_s) + " s: " + errno_text(rc) +
                  " (is the cluster up? timeout=S sets the wait)");
    if (rc == -EACCES || rc == -EPERM)
      return fail("the cluster refused " + user + ": " + errno_text(rc) +
                  " (wrong key or keyring?)");
    if (rc == -ENOENT)
      return fail("cannot connect as " + user + ": " + errno_text(rc) +
                  " (no keyring for it? set keyring in the configuration)");
    return fail("cannot connect to the cluster (mon_host " + mon_host + ") as " + user + ": " +
                errno_text(rc));
  }
  rados_ioctx_t io = nullptr;
  rc = rados_ioctx_create(cluster, s.pool.c_str(), &io);
  if (rc < 0) {
    if (rc == -ENOENT) return fail("pool '" + s.pool + "' does not exist");
    return fail("cannot open pool '" + s.pool + "': " + errno_text(rc));
  }
  auto fail_io = [&](std::string why) {
    rados_ioctx_destroy(io);
    return fail(std::move(why));
  };
  rbd_image_t image = nullptr;
  rc = read_only ? rbd_open_read_only(io, s.image.c_str(), &image, nullptr)
                 : rbd_open(io, s.image.c_str(), &image, nullptr);
  if (rc < 0) {
    if (rc == -ENOENT)
      return fail_io("image '" + s.image + "' does not exist in pool '" + s.pool +
                     "' (rbd create --size 10G " + s.pool + "/" + s.image + ")");
    return fail_io("cannot open image '" + s.image + "': " + errno_text(rc));
  }
  auto fail_image = [&](std::string why) {
    rbd_close(image);
    return fail_io(std::move(why));
  };
  uint64_t size = 0;
  rc = rbd_get_size(image, &size);
  if (rc < 0) return fail_image("cannot read the image size: " + errno_text(rc));
  size -= size % kRbdBlockSize;
  if (size == 0) return fail_image("the image is smaller than one 512-byte block");
  char id[128] = {};
  rc = rbd_get_id(image, id, sizeof id);
  if (rc < 0) return fail_image("cannot read the image id: " + errno_text(rc));
  char fsid[64] = {};
  rc = rados_cluster_fsid(cluster, fsid, sizeof fsid);
  if (rc < 0) return fail_image("cannot read the cluster fsid: " + errno_text(rc));
  std::string identity =
      std::string(fsid) + "/" + std::to_string(rados_ioctx_get_id(io)) + "/" + id;
  // What the image's client configuration says (the file, CEPH_ARGS): a write-back cache
  // makes FLUSH matter; discards skipped within objects leave old data.
  bool cache = conf_get(cluster, "rbd_cache") == "true";
  bool discard_zeroes = conf_get(cluster, "rbd_skip_partial_discard") == "false";
  auto device = std::make_unique<RbdDevice>(s, cluster, io, image, size, read_only, cache,
                                            discard_zeroes, identity);
  // Reservations are shared by every gateway of this image: without the record, refuse rather
  // than serve with reservations the other gateways would not see.
  if (std::string why = device->open_record(id); !why.empty()) {
    *error = name + ": " + why;
    return nullptr;  // the device's destructor closes the image and the cluster handle
  }
  return device;
}

}  // namespace sens::storage

#else  // no librbd in this build

namespace sens::storage {

bool rbd_supported() {
  return false;
}

std::unique_ptr<Device> open_rbd(const RbdSpec&, bool, std::string* error) {
  *error = "this sens was built without librbd";
  return nullptr;
}

}  // namespace sens::storage

#endif
