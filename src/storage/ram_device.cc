// ram: an anonymous private mapping (a buffers::Region). Untouched pages cost nothing (they
// read as the shared zero page), so a large namespace is free until written. The region is
// 2 MiB aligned with transparent huge pages: a first write then faults in 2 MiB at a time, not
// 4 KiB (with 4 KiB pages the first pass over a fresh namespace ran at half speed here, all of
// it in page faults), and the namespace costs one TLB entry per 2 MiB.
//
// Every change to the bytes (write, write zeroes, deallocate) goes through execute() below,
// which also refreshes the changed 4 KiB blocks' CRC32C in a BlockCrcTable, under the block's
// stripe lock, while the bytes are in cache. A zero-copy read's data digest over whole blocks
// then comes from the table (mapped_digest()), not from another pass over cold memory. The
// table is kept only from the first keep_block_crcs() (a connection with data digests reads
// the namespace): a CRC per write costs ~5% of 4 KiB randwrite QD32 to those who never use
// digests (bench/ab.sh), so they do not pay it.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "buffers/region.h"
#include "common/log.h"
#include "common/units.h"
#include "storage/backends.h"
#include "storage/block_crc_table.h"
#include "storage/memory_pages.h"
#include "storage/stripe_locks.h"

namespace sens::storage {

namespace {

constexpr uint32_t kBlockSize = 512;

class RamDevice;

// Completes every request inside submit(): the memcpy is the device access.
class RamQueue final : public Queue {
 public:
  explicit RamQueue(RamDevice& device) : device_(device) {}
  void submit(Request* req) override;

 private:
  RamDevice& device_;
};

class RamDevice final : public Device {
 public:
  RamDevice(std::unique_ptr<buffers::Region> region, std::unique_ptr<BlockCrcTable> crcs,
            uint64_t size, bool read_only)
      : region_(std::move(region)),
        base_(region_->base()),
        size_(size),
        read_only_(read_only),
        page_size_(uint64_t(sysconf(_SC_PAGESIZE))),
        crcs_(std::move(crcs)) {}

  uint64_t size() const override { return size_; }
  uint32_t block_size() const override { return kBlockSize; }
  bool read_only() const override { return read_only_; }
  bool discard_zeroes() const override { return true; }  // zero_range() below
  std::string describe() const override {
    return "ram " + format_size(size_) + (read_only_ ? " (read-only)" : "");
  }
  std::unique_ptr<Queue> make_queue(unsigned depth) override {
    (void)depth;
    return std::make_unique<RamQueue>(*this);
  }
  const uint8_t* mapped(uint64_t offset, uint32_t len) const override {
    if (offset > size_ || len > size_ - offset) return nullptr;
    return base_ + offset;
  }
  bool mapped_digest(const uint8_t* bytes, uint64_t len, uint32_t* crc) const override {
    if (!crcs_ready_.load(std::memory_order_acquire)) return false;
    const uintptr_t at = reinterpret_cast<uintptr_t>(bytes), base = uintptr_t(base_);
    if (at < base || at - base > size_) return false;  // not this namespace's memory
    return crcs_->digest(at - base, len, crc);
  }

  // Starts the table: the flag first, then every block's CRC under its stripe lock, so that a
  // write on another thread either lands before the block is read here or, taking the lock
  // after, sees the flag and refreshes the entry itself.
  void keep_block_crcs() override {
    if (crcs_kept_.load(std::memory_order_acquire)) return;
    if (crcs_kept_.exchange(true, std::memory_order_acq_rel)) return;
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t index = 0; crcs_->covers(index); ++index)
      locks_.each_chunk(index * BlockCrcTable::kBlock, BlockCrcTable::kBlock,
                        [&](uint64_t off, uint64_t) { refresh_crc(off); });
    crcs_ready_.store(true, std::memory_order_release);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    LOG_INFO("%s: keeping block CRCs for data digests from now on (%s table, computed in %lld ms)",
             describe().c_str(), format_size(crcs_->bytes()).c_str(), static_cast<long long>(ms));
  }

  // What ram_memory_pages() reports: reads smaps and sysfs, so never on the data path.
  void memory_pages(MemoryPages* out) const {
    out->kind = buffers::page_kind_name(region_->kind());
    out->advised = region_->kind() == buffers::PageKind::kTransparent;
    out->thp_enabled = buffers::thp_enabled_mode();
    const buffers::Region::Backing b = region_->backing();
    out->known = b.known;
    out->thp_eligible = b.thp_eligible;
    out->resident_bytes = b.resident_bytes;
    out->huge_bytes = b.huge_bytes;
    out->address = reinterpret_cast<uintptr_t>(base_);
    out->block_crc_bytes = crcs_->bytes();
    out->block_crcs_kept = crcs_kept_.load(std::memory_order_relaxed);
  }

  int execute(const Request& req) {
    int rc = check_request(req, size_, kBlockSize, read_only_);
    if (rc != 0) return rc;
    switch (req.op) {
      // Several reactors share the namespace: each chunk is copied under its stripe lock, so
      // no read sees a block that a write on another thread has half changed.
      case Op::kRead: {
        auto* dst = static_cast<uint8_t*>(req.buf);
        locks_.each_chunk(req.offset, req.length, [&](uint64_t off, uint64_t len) {
          std::memcpy(dst + (off - req.offset), base_ + off, len);
        });
        return 0;
      }
      case Op::kWrite: {
        auto* src = static_cast<const uint8_t*>(req.buf);
        locks_.each_chunk(req.offset, req.length, [&](uint64_t off, uint64_t len) {
          std::memcpy(base_ + off, src + (off - req.offset), len);
          if (crcs_kept_.load(std::memory_order_relaxed)) refresh_crc(off);
        });
        return 0;
      }
      case Op::kFlush:
        return 0;  // memory has no cache to flush
      case Op::kWriteZeroes:
      case Op::kDiscard:
        zero_locked(req.offset, req.length);
        return 0;
    }
    return -EINVAL;
  }

 private:
  // Zeroes [offset, offset + length) one 2 MiB segment at a time, the segment's stripes held.
  void zero_locked(uint64_t offset, uint64_t length) {
    constexpr uint64_t kSegment = 2ull << 20;
    uint64_t end = offset + length;
    while (offset < end) {
      uint64_t seg_end = std::min(end, (offset / kSegment + 1) * kSegment);
      locks_.whole_segment(offset, seg_end - offset,
                           [&](uint64_t off, uint64_t len) { zero_range(off, len); });
      offset = seg_end;
    }
  }

  // The block holding byte `offset` changed (its stripe lock held): its CRC, of the whole
  // block, just written and so in cache.
  void refresh_crc(uint64_t offset) {
    const uint64_t index = offset / BlockCrcTable::kBlock;
    if (crcs_->covers(index)) crcs_->refresh(index, base_ + index * BlockCrcTable::kBlock);
  }

  // [offset, offset + length) now reads as zeroes (the stripe locks held): blocks wholly
  // inside are the zero block, the edge blocks are recomputed.
  void zeroed_crcs(uint64_t offset, uint64_t length) {
    const uint64_t end = offset + length;
    for (uint64_t index = offset / BlockCrcTable::kBlock;
         index * BlockCrcTable::kBlock < end && crcs_->covers(index); ++index) {
      const uint64_t start = index * BlockCrcTable::kBlock;
      if (start >= offset && start + BlockCrcTable::kBlock <= end)
        crcs_->set_zero(index);
      else
        crcs_->refresh(index, base_ + start);
    }
  }

  // Whole pages go back to the kernel (and read as zeroes again); only the edges are written.
  void zero_range(uint64_t offset, uint64_t length) {
    uint64_t end = offset + length;
    uint64_t first_page = (offset + page_size_ - 1) / page_size_ * page_size_;
    uint64_t last_page = end / page_size_ * page_size_;
    if (first_page < last_page &&
        madvise(base_ + first_page, last_page - first_page, MADV_DONTNEED) == 0) {
      std::memset(base_ + offset, 0, first_page - offset);
      std::memset(base_ + last_page, 0, end - last_page);
    } else {
      std::memset(base_ + offset, 0, length);
    }
    if (crcs_kept_.load(std::memory_order_relaxed)) zeroed_crcs(offset, length);
  }

  std::unique_ptr<buffers::Region> region_;
  uint8_t* base_;  // region_->base()
  uint64_t size_;
  bool read_only_;
  uint64_t page_size_;
  StripeLocks locks_;
  std::unique_ptr<BlockCrcTable> crcs_;
  // Set once; read under a stripe lock by writers (the lock orders it with the first pass).
  std::atomic<bool> crcs_kept_{false};
  std::atomic<bool> crcs_ready_{false};  // the first pass is done: mapped_digest() answers
};

void RamQueue::submit(Request* req) {
  req->result = device_.execute(*req);
  if (req->on_complete) req->on_complete(req);
}

}  // namespace

std::unique_ptr<Device> open_ram(uint64_t size, bool read_only, std::string* error) {
  std::string why;
  auto region = buffers::Region::reserve(size, true, &why, /*explicit_pages=*/false);
  if (!region) {
    *error = "ram:" + format_size(size) + ": " + why;
    return nullptr;
  }
  auto crcs = std::make_unique<BlockCrcTable>(size);
  if (!crcs->ok()) {
    *error = "ram:" + format_size(size) + ": cannot allocate the block CRC table (" +
             format_size(crcs->bytes()) + ")";
    return nullptr;
  }
  return std::make_unique<RamDevice>(std::move(region), std::move(crcs), size, read_only);
}

bool ram_memory_pages(const Device& device, MemoryPages* out) {
  auto* ram = dynamic_cast<const RamDevice*>(&device);
  if (!ram) return false;
  ram->memory_pages(out);
  return true;
}

std::string describe_memory_pages(const MemoryPages& p) {
  std::string s = "pages: ";
  if (!p.known)
    s += "not found in /proc/self/smaps";
  else if (p.advised && p.thp_eligible)
    s += "transparent huge pages, 2 MiB as first written when the kernel has one free";
  else if (p.advised)
    s += "4 KiB (MADV_HUGEPAGE given, but the kernel does not take huge pages here)";
  else
    s += "4 KiB (madvise(MADV_HUGEPAGE) refused)";
  s += " (THP enabled: " + (p.thp_enabled.empty() ? std::string("unknown") : p.thp_enabled) +
       ", THPeligible " + (p.thp_eligible ? "1" : "0") + "); now " + format_size(p.huge_bytes) +
       " of " + format_size(p.resident_bytes) + " resident on huge pages; block CRC table " +
       format_size(p.block_crc_bytes) + " (4 B per 4 KiB, for data digests; " +
       (p.block_crcs_kept ? "kept" : "kept from the first read with data digests") + ")";
  return s;
}

}  // namespace sens::storage
