// null: a sink and a source of zeroes, for measuring everything but the storage.
#include <sys/mman.h>
#include <atomic>

#include <cstdlib>
#include <cstring>

#include "common/units.h"
#include "storage/backends.h"

namespace sens::storage {

const uint8_t* zero_region() {
  static const uint8_t* region = [] {
    // MAP_POPULATE on a writable mapping gives real zeroed pages; then it is made read-only so
    // nobody can dirty the zeroes that everybody shares.
    void* p = mmap(nullptr, kZeroRegionSize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    mprotect(p, kZeroRegionSize, PROT_READ);
    return static_cast<const uint8_t*>(p);
  }();
  return region;
}

namespace {

constexpr uint32_t kBlockSize = 512;

class NullDevice;

class NullQueue final : public Queue {
 public:
  explicit NullQueue(const NullDevice& device) : device_(device) {}
  void submit(Request* req) override;

 private:
  const NullDevice& device_;
};

class NullDevice final : public Device {
 public:
  NullDevice(uint64_t size, bool read_only) : size_(size), read_only_(read_only) {}

  uint64_t size() const override { return size_.load(std::memory_order_relaxed); }
  uint32_t block_size() const override { return kBlockSize; }
  bool read_only() const override { return read_only_; }
  bool discard_zeroes() const override { return true; }  // every read is zeroes
  // Nothing is stored: any size will do (a null namespace for testing a host's rescan).
  std::string resize(uint64_t bytes) override {
    if (bytes == 0) return "";  // (no backing store to take a size from)
    if (bytes % kBlockSize) return "the size must be a multiple of 512 bytes";
    size_ = bytes;
    return "";
  }
  std::string describe() const override {
    return "null " + format_size(size()) + (read_only_ ? " (read-only)" : "");
  }
  std::unique_ptr<Queue> make_queue(unsigned depth) override {
    (void)depth;
    return std::make_unique<NullQueue>(*this);
  }
  const uint8_t* mapped(uint64_t offset, uint32_t len) const override {
    uint64_t size = size_.load(std::memory_order_relaxed);
    if (offset > size || len > size - offset || len > kZeroRegionSize) return nullptr;
    return zero_region();
  }

  int execute(const Request& req) const {
    int rc = check_request(req, size(), kBlockSize, read_only_);
    if (rc == 0 && req.op == Op::kRead) std::memset(req.buf, 0, req.length);
    return rc;
  }

 private:
  std::atomic<uint64_t> size_;
  bool read_only_;
};

void NullQueue::submit(Request* req) {
  req->result = device_.execute(*req);
  if (req->on_complete) req->on_complete(req);
}

}  // namespace

std::unique_ptr<Device> open_null(uint64_t size, bool read_only) {
  return std::make_unique<NullDevice>(size, read_only);
}

}  // namespace sens::storage
