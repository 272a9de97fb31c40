// file: a regular file or a block device through O_DIRECT and one io_uring per queue. Requests
// are only prepared by submit(); kick() hands the batch to the kernel with one system call.
#include <fcntl.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/units.h"
#include "storage/backends.h"
#include "storage/operation_slots.h"

namespace sens::storage {

namespace {

constexpr uint32_t kRegularFileBlockSize = 4096;
constexpr unsigned kMaxRingEntries = 4096;

class FileDevice final : public Device {
 public:
  FileDevice(int fd, std::string path, uint64_t size, uint32_t block_size, bool read_only,
             bool is_block_device, bool direct)
      : fd_(fd),
        path_(std::move(path)),
        size_(size),
        block_size_(block_size),
        read_only_(read_only),
        is_block_device_(is_block_device),
        direct_(direct) {}
  ~FileDevice() override { ::close(fd_); }

  uint64_t size() const override { return size_.load(std::memory_order_relaxed); }
  uint32_t block_size() const override { return block_size_; }
  bool read_only() const override { return read_only_; }
  bool volatile_cache() const override { return true; }
  std::string resize(uint64_t bytes) override;
  // A regular file's discard is FALLOC_FL_PUNCH_HOLE, and a hole reads as zeroes (where the
  // filesystem cannot punch holes, the range is written with zeroes instead). A block device
  // turns PUNCH_HOLE into Write Zeroes with unmap when the hardware has that command, but
  // when it does not the discard does nothing (the blocks keep their data, which is allowed and
  // far cheaper than writing zeroes), and which of the two happens is not known up front.
  bool discard_zeroes() const override { return !is_block_device_; }
  std::string describe() const override {
    std::string text = "file " + path_ + " (" + format_size(size()) + ", " +
                       std::to_string(block_size_) + " B blocks";
    if (!direct_) text += ", buffered: no O_DIRECT here";
    if (read_only_) text += ", read-only";
    return text + ")";
  }
  std::unique_ptr<Queue> make_queue(unsigned depth) override;
  int sync() override {
    if (::fdatasync(fd_) != 0) return -errno;
    syncs_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  uint64_t syncs() const override { return syncs_.load(std::memory_order_relaxed); }

  int fd() const { return fd_; }
  bool is_block_device() const { return is_block_device_; }

 private:
  int fd_;
  std::string path_;
  std::atomic<uint64_t> size_;  // changes with resize() (read by every reactor)
  uint32_t block_size_;
  bool read_only_;
  bool is_block_device_;
  bool direct_;
  std::atomic<uint64_t> syncs_{0};  // any reactor (or the main thread) may sync
};

std::string FileDevice::resize(uint64_t bytes) {
  if (bytes % block_size_)
    return "the size must be a multiple of the block size (" + std::to_string(block_size_) +
           " bytes)";
  if (is_block_device_) {
    if (bytes)
      return "a block device's size is its own: resize the device, then ask without a size";
    uint64_t now = 0;
    if (ioctl(fd_, BLKGETSIZE64, &now) != 0)
      return std::string("BLKGETSIZE64: ") + std::strerror(errno);
    size_ = now - now % block_size_;
    return "";
  }
  if (bytes) {
    if (read_only_) return "the namespace is read-only";
    if (::ftruncate(fd_, off_t(bytes)) != 0)
      return "truncate " + path_ + ": " + std::strerror(errno);
    size_ = bytes;
    return "";
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return "stat " + path_ + ": " + std::strerror(errno);
  uint64_t now = uint64_t(st.st_size);
  if (now < block_size_) return path_ + " is smaller than one block now";
  size_ = now - now % block_size_;
  return "";
}

// A request goes through the ring carried by an Operation. There are at most `depth` of them, and
// each has at most one entry prepared or in the kernel at a time, so a ring of `depth` entries
// never runs out. Requests past the depth wait in a FIFO (linked through Request::next, so
// nothing is allocated) and take over the operations that completions free, in order.
class FileQueue final : public Queue {
 public:
  FileQueue(FileDevice& device, unsigned depth)
      : device_(device), slots_(std::clamp(depth, 1u, kMaxRingEntries)) {}

  // Returns 0 or -errno.
  int init() {
    int rc = io_uring_queue_init(unsigned(slots_.size()), &ring_, 0);
    if (rc < 0) return rc;
    ring_ready_ = true;
    event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (event_fd_ < 0) return -errno;
    return io_uring_register_eventfd(&ring_, event_fd_);
  }

  ~FileQueue() override {
    // The kernel may still write into the callers' buffers: wait for every entry it was given,
    // but call nobody back, since the callers are being torn down too. Waiting requests never
    // reached the kernel and are simply dropped.
    if (ring_ready_) {
      while (owed_cqes_ > 0) {
        int rc = io_uring_submit_and_wait(&ring_, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
        io_uring_cqe* cqe = nullptr;
        while (owed_cqes_ > 0 && io_uring_peek_cqe(&ring_, &cqe) == 0) {
          io_uring_cqe_seen(&ring_, cqe);
          --owed_cqes_;
        }
      }
      io_uring_queue_exit(&ring_);
    }
    if (event_fd_ >= 0) ::close(event_fd_);
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

  void kick() override { submit_prepared(); }

  int reap() override {
    uint64_t count;
    // Cleared before draining: a completion posted after this read signals the eventfd again.
    (void)!::read(event_fd_, &count, sizeof count);
    retry_signalled_ = false;
    int finished = 0;
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      auto* op = static_cast<Operation*>(io_uring_cqe_get_data(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --owed_cqes_;
      finished += handle_completion(op, res);
    }
    // Next steps, retries and waiting requests started above: one system call for them all.
    submit_prepared();
    return finished;
  }

  int event_fd() const override { return event_fd_; }
  bool ready() const override { return io_uring_cq_ready(&ring_) > 0 || retry_signalled_; }
  unsigned inflight() const override { return slots_.requests(); }
  uint64_t waited() const override { return slots_.waited(); }
  uint64_t retried() const override { return retried_; }
  uint64_t cache_flushes() const override { return cache_flushes_; }

 private:
  uint64_t cache_flushes_ = 0;
  enum class Step : uint8_t {
    kMain,      // the request's own operation
    kZeroFill,  // zeroing by writes, where the filesystem cannot zero a range
    kSync,      // fdatasync after a FUA Write Zeroes, so the zeroes are durable on completion
  };

  struct Operation {
    Request* req = nullptr;
    uint64_t done = 0;  // bytes transferred so far (reads, writes, zero fill)
    Step step = Step::kMain;
    Operation* next = nullptr;  // in the free list or the stalled list
  };

  void start(Operation* op, Request* req) {
    op->req = req;
    op->done = 0;
    op->step = Step::kMain;
    prepare(op);
  }

  // Hands what the ring holds to the kernel. A transient refusal (-EAGAIN, -EBUSY) leaves the
  // entries in the ring; the eventfd is then signalled so that the caller's reap() retries, even
  // when nothing is in flight whose completion would wake it.
  void submit_prepared() {
    while (stalled_head_ != nullptr && io_uring_sq_space_left(&ring_) > 0) {
      Operation* op = stalled_head_;
      stalled_head_ = op->next;
      if (stalled_head_ == nullptr) stalled_tail_ = nullptr;
      prepare(op);
    }
    if (io_uring_sq_ready(&ring_) == 0) return;
    int rc = io_uring_submit(&ring_);
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
      LOG_ERROR("io_uring_submit: %s", std::strerror(-rc));
      return;  // a broken ring: the next kick() or reap() tries again
    }
    if (io_uring_sq_ready(&ring_) > 0 && !retry_signalled_) {
      ++retried_;
      uint64_t one = 1;
      (void)!::write(event_fd_, &one, sizeof one);
      retry_signalled_ = true;
    }
  }

  void prepare(Operation* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      // Cannot happen while each operation holds at most one entry of a ring as deep as their
      // number; should it, the operation waits for room instead of failing.
      op->next = nullptr;
      if (stalled_tail_ != nullptr) {
        stalled_tail_->next = op;
      } else {
        stalled_head_ = op;
      }
      stalled_tail_ = op;
      return;
    }
    Request& r = *op->req;
    int fd = device_.fd();
    uint64_t offset = r.offset + op->done;
    uint64_t remaining = r.length - op->done;  // reads and writes: at most kMaxTransfer
    switch (op->step) {
      case Step::kZeroFill:
        io_uring_prep_write(sqe, fd, zero_region(),
                            unsigned(std::min<uint64_t>(remaining, kZeroRegionSize)), offset);
        if (r.fua) {
          sqe->rw_flags = RWF_DSYNC;
          ++cache_flushes_;
        }
        break;
      case Step::kSync:
        io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
        ++cache_flushes_;
        break;
      case Step::kMain:
        switch (r.op) {
          case Op::kRead:
            io_uring_prep_read(sqe, fd, static_cast<uint8_t*>(r.buf) + op->done,
                               unsigned(remaining), offset);
            break;
          case Op::kWrite:
            io_uring_prep_write(sqe, fd, static_cast<uint8_t*>(r.buf) + op->done,
                                unsigned(remaining), offset);
            if (r.fua) {
              sqe->rw_flags = RWF_DSYNC;
              ++cache_flushes_;
            }
            break;
          case Op::kFlush:
            io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
            ++cache_flushes_;
            break;
          // fallocate takes a 64-bit length (in sqe->addr): one entry for any range.
          case Op::kWriteZeroes:
            io_uring_prep_fallocate(sqe, fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
                                    off_t(r.offset), off_t(r.length));
            break;
          case Op::kDiscard:
            io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                    off_t(r.offset), off_t(r.length));
            break;
        }
        break;
    }
    io_uring_sqe_set_data(sqe, op);
    ++owed_cqes_;
  }

  // Returns 1 when the request finished, 0 when it goes on with another step.
  int handle_completion(Operation* op, int res) {
    Request& r = *op->req;
    if (res == -EAGAIN || res == -EBUSY) {  // the kernel had no room for it now: again
      ++retried_;
      prepare(op);
      return 0;
    }
    bool transfer = op->step == Step::kZeroFill || r.op == Op::kRead || r.op == Op::kWrite;
    if (transfer) {
      if (res < 0) return finish(op, res);
      if (res == 0) return finish(op, -EIO);  // no progress: never report success
      op->done += uint64_t(res);
      if (op->done < r.length) {  // a short transfer: go on with the remainder
        prepare(op);
        return 0;
      }
      return finish(op, 0);
    }
    if (op->step != Step::kMain) return finish(op, res);  // kSync
    if (res == 0 && r.op == Op::kWriteZeroes && r.fua) {
      // fallocate's zeroes may still be only in the filesystem's unwritten metadata or in the
      // device's volatile cache: the fdatasync that follows makes them durable. The zero-fill
      // fallback below needs none, its writes are RWF_DSYNC.
      op->step = Step::kSync;
      prepare(op);
      return 0;
    }
    if (res == -EOPNOTSUPP && (r.op == Op::kWriteZeroes || r.op == Op::kDiscard)) {
      // Discarded blocks of a block device may read as anything, so nothing more is owed.
      if (r.op == Op::kDiscard && device_.is_block_device()) return finish(op, 0);
      op->step = Step::kZeroFill;
      op->done = 0;
      prepare(op);
      return 0;
    }
    return finish(op, res);
  }

  // Completes the request; its operation goes to the first waiting request, if any.
  int finish(Operation* op, int result) {
    return slots_.finish(op, result, [this](Operation* o, Request* next) { start(o, next); });
  }

  FileDevice& device_;
  io_uring ring_{};
  bool ring_ready_ = false;
  int event_fd_ = -1;
  OperationSlots<Operation> slots_;
  Operation* stalled_head_ = nullptr;  // operations owed an entry the ring did not have
  Operation* stalled_tail_ = nullptr;
  unsigned owed_cqes_ = 0;  // entries prepared whose completion has not been reaped
  uint64_t retried_ = 0;
  bool retry_signalled_ = false;  // the eventfd was written to retry a refused submission
};

std::unique_ptr<Queue> FileDevice::make_queue(unsigned depth) {
  auto queue = std::make_unique<FileQueue>(*this, depth);
  int rc = queue->init();
  if (rc < 0) {
    LOG_ERROR("file %s: cannot set up io_uring: %s", path_.c_str(), std::strerror(-rc));
    return std::make_unique<FailedQueue>(rc);
  }
  return queue;
}

}  // namespace

std::unique_ptr<Device> open_file(const std::string& path, bool read_only, std::string* error) {
  const std::string spec = "file:" + path;
  int flags = (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
  bool direct = true;
  int fd = ::open(path.c_str(), flags | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {  // a filesystem without O_DIRECT (e.g. an old tmpfs)
    direct = false;
    fd = ::open(path.c_str(), flags);
  }
  if (fd < 0) {
    *error = spec + ": cannot open " + (read_only ? "read-only" : "read-write") + ": " +
             std::strerror(errno);
    if (errno == ENOENT) *error += " (create it first, e.g. truncate -s 1G " + path + ")";
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    *error = spec + ": cannot stat: " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  uint64_t size = 0;
  uint32_t block_size = 0;
  bool is_block_device = S_ISBLK(st.st_mode);
  if (S_ISREG(st.st_mode)) {
    block_size = kRegularFileBlockSize;
    size = uint64_t(st.st_size);
  } else if (is_block_device) {
    int logical_block = 0;
    if (ioctl(fd, BLKSSZGET, &logical_block) != 0 || ioctl(fd, BLKGETSIZE64, &size) != 0) {
      *error = spec + ": cannot read the block device's geometry: " + std::strerror(errno);
      ::close(fd);
      return nullptr;
    }
    block_size = uint32_t(logical_block);
  } else {
    *error = spec + ": not a regular file or a block device";
    ::close(fd);
    return nullptr;
  }
  if (size == 0) {
    *error = spec + ": is empty (give it a size first, e.g. truncate -s 1G " + path + ")";
    ::close(fd);
    return nullptr;
  }
  if (size < block_size) {
    *error = spec + ": is " + std::to_string(size) + " bytes, smaller than one " +
             std::to_string(block_size) + "-byte block";
    ::close(fd);
    return nullptr;
  }
  size -= size % block_size;  // a partial last block cannot be addressed
  return std::make_unique<FileDevice>(fd, path, size, block_size, read_only, is_block_device,
                                      direct);
}

}  // namespace sens::storage
