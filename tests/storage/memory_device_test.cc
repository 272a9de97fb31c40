// Device::open() specs and the memory backends (ram, null).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "storage/device.h"
#include "storage_test_util.h"

namespace sens::storage {
namespace {

using testing::fill_pattern;
using testing::run_io;
using testing::TempFile;

std::string open_error(const std::string& spec) {
  std::string error;
  auto dev = Device::open(spec, &error);
  EXPECT_EQ(dev, nullptr) << spec;
  return error;
}

TEST(DeviceSpec, UnknownKind) {
  EXPECT_EQ(open_error("disk:1G"),
            "unknown namespace kind 'disk' in 'disk:1G' (expected ram:SIZE, null:SIZE, "
            "file:PATH or rbd:POOL/IMAGE)");
  EXPECT_NE(open_error("").find("empty namespace spec"), std::string::npos);
  EXPECT_NE(open_error("/dev/sda").find("unknown namespace kind '/dev/sda'"), std::string::npos);
}

TEST(DeviceSpec, MissingSize) {
  EXPECT_EQ(open_error("ram"), "ram:: missing size (e.g. ram:1G)");
  EXPECT_EQ(open_error("ram:"), "ram:: missing size (e.g. ram:1G)");
  EXPECT_EQ(open_error("null:"), "null:: missing size (e.g. null:1G)");
}

TEST(DeviceSpec, GarbageSize) {
  EXPECT_EQ(open_error("ram:lots"), "ram:lots: 'lots' is not a size (e.g. 512, 4k, 64M, 1G, 1GiB)");
  EXPECT_EQ(open_error("null:12q"), "null:12q: '12q' is not a size (e.g. 512, 4k, 64M, 1G, 1GiB)");
  EXPECT_NE(open_error("ram:-1G").find("is not a size"), std::string::npos);
}

TEST(DeviceSpec, ZeroOrUnalignedSize) {
  EXPECT_EQ(open_error("ram:0"), "ram:0: size must be greater than zero");
  EXPECT_EQ(open_error("null:0k"), "null:0k: size must be greater than zero");
  EXPECT_EQ(open_error("ram:1000"),
            "ram:1000: size 1000 B is not a multiple of the 512-byte block size");
}

TEST(DeviceSpec, FileErrors) {
  EXPECT_EQ(open_error("file:"),
            "file: missing path (e.g. file:/dev/nvme0n1 or file:/var/tmp/disk.img)");
  std::string missing = open_error("file:/tmp/sens-no-such-dir/disk.img");
  EXPECT_NE(missing.find("file:/tmp/sens-no-such-dir/disk.img: cannot open read-write: No such "
                         "file or directory"),
            std::string::npos)
      << missing;

  TempFile empty(0);
  ASSERT_FALSE(empty.path().empty());
  EXPECT_NE(open_error(empty.spec()).find(empty.spec() + ": is empty"), std::string::npos);

  TempFile tiny(100);
  EXPECT_EQ(open_error(tiny.spec()),
            tiny.spec() + ": is 100 bytes, smaller than one 4096-byte block");

  EXPECT_NE(open_error("file:/tmp").find("file:/tmp: cannot open read-write: Is a directory"),
            std::string::npos);
  std::string error;
  EXPECT_EQ(Device::open("file:/tmp", &error, /*read_only=*/true), nullptr);
  EXPECT_EQ(error, "file:/tmp: not a regular file or a block device");
}

TEST(RamDevice, OpenSizeDescribe) {
  std::string error;
  auto dev = Device::open("ram:64M", &error);
  ASSERT_NE(dev, nullptr) << error;
  EXPECT_EQ(dev->size(), 64ull << 20);
  EXPECT_EQ(dev->block_size(), 512u);
  EXPECT_EQ(dev->describe(), "ram 64 MiB");
  EXPECT_FALSE(dev->read_only());
  EXPECT_FALSE(dev->volatile_cache());
  EXPECT_EQ(dev->sync(), 0);
  EXPECT_TRUE(dev->discard_zeroes());
  // Untouched memory reads as zeroes, straight from the mapping.
  const uint8_t* bytes = dev->mapped(0, 4096);
  ASSERT_NE(bytes, nullptr);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(bytes[i], 0);
  EXPECT_NE(dev->mapped(dev->size() - 512, 512), nullptr);
  EXPECT_EQ(dev->mapped(dev->size() - 512, 1024), nullptr);
  EXPECT_EQ(dev->mapped(dev->size() + 512, 0), nullptr);
}

TEST(RamDevice, LargeSizeCostsNothingUntilWritten) {
  std::string error;
  auto dev = Device::open("ram:1T", &error);  // NORESERVE: only address space
  ASSERT_NE(dev, nullptr) << error;
  EXPECT_EQ(dev->describe(), "ram 1 TiB");
  auto q = dev->make_queue(4);
  std::vector<uint8_t> buf(512, 0x5a), back(512);
  ASSERT_EQ(run_io(*q, Op::kWrite, dev->size() - 512, 512, buf.data()), 0);
  ASSERT_EQ(run_io(*q, Op::kRead, dev->size() - 512, 512, back.data()), 0);
  EXPECT_EQ(back, buf);
}

// The mapping starts on a 2 MiB boundary and carries MADV_HUGEPAGE (smaps flag "hg"), so a
// fresh namespace faults in 2 MiB at a time; a size that is no whole number of pages still
// reads and writes to its last byte.
TEST(RamDevice, HugePageAlignedAndAdvised) {
  std::string error;
  auto dev = Device::open("ram:2049K", &error);
  ASSERT_NE(dev, nullptr) << error;
  ASSERT_EQ(dev->size(), 2049u * 1024);
  const uint8_t* base = dev->mapped(0, 512);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (2u << 20), 0u);
  auto q = dev->make_queue(4);
  std::vector<uint8_t> buf(512), back(512);
  fill_pattern(buf.data(), buf.size(), 7, 0);
  ASSERT_EQ(run_io(*q, Op::kWrite, dev->size() - 512, 512, buf.data()), 0);
  ASSERT_EQ(run_io(*q, Op::kRead, dev->size() - 512, 512, back.data()), 0);
  EXPECT_EQ(back, buf);

  struct stat st;
  if (::stat("/sys/kernel/mm/transparent_hugepage", &st) != 0)
    GTEST_SKIP() << "this kernel has no transparent huge pages: the advice is moot";
  FILE* f = std::fopen("/proc/self/smaps", "r");
  ASSERT_NE(f, nullptr);
  char line[512];
  bool in_vma = false, advised = false, found = false;
  const auto addr = reinterpret_cast<uintptr_t>(base);
  while (std::fgets(line, sizeof(line), f)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping line
      in_vma = addr >= lo && addr < hi;
      found |= in_vma;
    } else if (in_vma && std::strncmp(line, "VmFlags:", 8) == 0) {
      advised = std::strstr(line, " hg") != nullptr;
    }
  }
  std::fclose(f);
  ASSERT_TRUE(found);
  EXPECT_TRUE(advised) << "no MADV_HUGEPAGE on the namespace's mapping";
}

// A size the address space cannot hold is refused with the reason, never wrapped around into
// a small mapping that the namespace's size would then overrun.
TEST(RamDevice, SizeBeyondTheAddressSpaceIsRefused) {
  const std::string err = open_error("ram:18446744073709551104");  // 2^64 - 512
  EXPECT_NE(err.find("ram:"), std::string::npos) << err;
  EXPECT_NE(err.find("cannot reserve 18446744073709551104 bytes: more than the address space"),
            std::string::npos)
      << err;
  // Large but representable, past even 57-bit (5-level paging) addresses: the kernel refuses
  // the reservation, and the error says so.
  const std::string big = open_error("ram:16000000T");
  EXPECT_NE(big.find("cannot reserve"), std::string::npos) << big;
}

TEST(RamDevice, WriteReadRoundtripWithPatterns) {
  std::string error;
  auto dev = Device::open("ram:8M", &error);
  ASSERT_NE(dev, nullptr) << error;
  auto q = dev->make_queue(8);
  struct Extent {
    uint64_t offset;
    uint32_t length;
  };
  const Extent extents[] = {{0, 512}, {512, 4096}, {65536 - 512, 8192}, {(8u << 20) - 1024, 1024}};
  for (const auto& e : extents) {
    std::vector<uint8_t> buf(e.length);
    fill_pattern(buf.data(), buf.size(), 7, e.offset);
    ASSERT_EQ(run_io(*q, Op::kWrite, e.offset, e.length, buf.data()), 0);
  }
  for (const auto& e : extents) {
    std::vector<uint8_t> want(e.length), got(e.length, 0xee);
    fill_pattern(want.data(), want.size(), 7, e.offset);
    ASSERT_EQ(run_io(*q, Op::kRead, e.offset, e.length, got.data()), 0);
    EXPECT_EQ(got, want) << "at " << e.offset;
    EXPECT_EQ(std::memcmp(dev->mapped(e.offset, e.length), want.data(), e.length), 0);
  }
  // Memory completes inside submit(): nothing is ever owed.
  EXPECT_EQ(q->inflight(), 0u);
  EXPECT_EQ(q->event_fd(), -1);
  EXPECT_FALSE(q->ready());
  Request flush;
  flush.op = Op::kFlush;
  EXPECT_EQ(testing::run_one(*q, flush), 0);
  std::vector<uint8_t> buf(512, 1);
  EXPECT_EQ(run_io(*q, Op::kWrite, 0, 512, buf.data(), /*fua=*/true), 0);
}

TEST(RamDevice, RefusesBadRequests) {
  std::string error;
  auto dev = Device::open("ram:1M", &error);
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(1);
  std::vector<uint8_t> buf(8192);
  EXPECT_EQ(run_io(*q, Op::kRead, 100, 512, buf.data()), -EINVAL);  // misaligned offset
  EXPECT_EQ(run_io(*q, Op::kRead, 0, 100, buf.data()), -EINVAL);    // misaligned length
  EXPECT_EQ(run_io(*q, Op::kRead, 0, 0, buf.data()), -EINVAL);      // empty
  EXPECT_EQ(run_io(*q, Op::kRead, (1 << 20) - 512, 1024, buf.data()), -EINVAL);  // past the end
  EXPECT_EQ(run_io(*q, Op::kWrite, ~0ull - 511, 1024, buf.data()), -EINVAL);     // wraps around

  auto ro = Device::open("ram:1M", &error, /*read_only=*/true);
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(ro->read_only());
  auto rq = ro->make_queue(1);
  EXPECT_EQ(run_io(*rq, Op::kWrite, 0, 512, buf.data()), -EROFS);
  EXPECT_EQ(run_io(*rq, Op::kWriteZeroes, 0, 512, nullptr), -EROFS);
  EXPECT_EQ(run_io(*rq, Op::kRead, 0, 512, buf.data()), 0);
}

// Zeroing must clear exactly [offset, offset + length): whole pages and both partial edges.
void check_zeroing(Op op) {
  std::string error;
  auto dev = Device::open("ram:1M", &error);
  ASSERT_NE(dev, nullptr);
  auto q = dev->make_queue(1);
  const uint32_t region = 64 * 1024;
  std::vector<uint8_t> ones(region, 0xab);
  ASSERT_EQ(run_io(*q, Op::kWrite, 0, region, ones.data()), 0);
  const uint64_t zero_offset = 3 * 512;          // inside the first page
  const uint32_t zero_length = 3 * 4096 + 1024;  // ends inside a later page
  ASSERT_EQ(run_io(*q, op, zero_offset, zero_length, nullptr), 0);
  std::vector<uint8_t> got(region);
  ASSERT_EQ(run_io(*q, Op::kRead, 0, region, got.data()), 0);
  for (uint64_t i = 0; i < region; ++i) {
    bool inside = i >= zero_offset && i < zero_offset + zero_length;
    ASSERT_EQ(got[i], inside ? 0 : 0xab) << "byte " << i;
  }
  // A range smaller than a page zeroes by memset alone.
  ASSERT_EQ(run_io(*q, op, 40960, 512, nullptr), 0);
  ASSERT_EQ(run_io(*q, Op::kRead, 40448, 1536, got.data()), 0);
  for (int i = 0; i < 1536; ++i) ASSERT_EQ(got[i], (i >= 512 && i < 1024) ? 0 : 0xab) << i;
}

TEST(RamDevice, WriteZeroesClearsRangeOnly) {
  check_zeroing(Op::kWriteZeroes);
}
TEST(RamDevice, DiscardClearsRangeOnly) {
  check_zeroing(Op::kDiscard);
}

// A Dataset Management range may cover up to 2^32 blocks: zeroing and discarding take 64-bit
// lengths, and clear the whole range rather than its length modulo 4 GiB. The namespace is
// NORESERVE memory, so only the few pages written cost anything.
void check_zeroing_past_4gib(Op op) {
  constexpr uint64_t kGiB = 1ull << 30;
  std::string error;
  auto dev = Device::open("ram:8G", &error);
  ASSERT_NE(dev, nullptr) << error;
  auto q = dev->make_queue(1);
  std::vector<uint8_t> ones(4096, 0xab), got(4096);
  for (uint64_t at : {uint64_t(0), 4 * kGiB + kGiB / 2, 5 * kGiB - 4096, 5 * kGiB})
    ASSERT_EQ(run_io(*q, Op::kWrite, at, 4096, ones.data()), 0) << at;
  ASSERT_EQ(run_io(*q, op, 0, 5 * kGiB, nullptr), 0);
  for (uint64_t at : {uint64_t(0), 4 * kGiB + kGiB / 2, 5 * kGiB - 4096}) {
    ASSERT_EQ(run_io(*q, Op::kRead, at, 4096, got.data()), 0);
    EXPECT_EQ(got, std::vector<uint8_t>(4096, 0)) << "at " << at;
  }
  ASSERT_EQ(run_io(*q, Op::kRead, 5 * kGiB, 4096, got.data()), 0);
  EXPECT_EQ(got, ones);  // just past the range: untouched
}

TEST(RamDevice, WriteZeroesPast4GiB) {
  check_zeroing_past_4gib(Op::kWriteZeroes);
}
TEST(RamDevice, DiscardPast4GiB) {
  check_zeroing_past_4gib(Op::kDiscard);
}

// Reads and writes go through the caller's buffer: past kMaxTransfer they are refused, not cut.
TEST(RamDevice, RefusesTransfersPast4GiB) {
  std::string error;
  auto dev = Device::open("ram:8G", &error);
  ASSERT_NE(dev, nullptr) << error;
  auto q = dev->make_queue(1);
  std::vector<uint8_t> buf(4096);
  EXPECT_EQ(run_io(*q, Op::kRead, 0, (4ull << 30) + 512, buf.data()), -EINVAL);
  EXPECT_EQ(run_io(*q, Op::kWrite, 0, (4ull << 30) + 512, buf.data()), -EINVAL);
}

TEST(NullDevice, ZeroesRangesOf4GiBAndMore) {
  std::string error;
  auto dev = Device::open("null:8G", &error);
  ASSERT_NE(dev, nullptr) << error;
  auto q = dev->make_queue(1);
  EXPECT_EQ(run_io(*q, Op::kDiscard, 0, 4ull << 30, nullptr), 0);
  EXPECT_EQ(run_io(*q, Op::kWriteZeroes, 512, (5ull << 30) + 512, nullptr), 0);
  EXPECT_EQ(run_io(*q, Op::kDiscard, 512, 8ull << 30, nullptr), -EINVAL);  // past the end
  std::vector<uint8_t> buf(4096);
  EXPECT_EQ(run_io(*q, Op::kRead, 0, (4ull << 30) + 512, buf.data()), -EINVAL);
}

TEST(NullDevice, DiscardsWritesAndReadsZeroes) {
  std::string error;
  auto dev = Device::open("null:1G", &error);
  ASSERT_NE(dev, nullptr) << error;
  EXPECT_EQ(dev->size(), 1ull << 30);
  EXPECT_EQ(dev->block_size(), 512u);
  EXPECT_EQ(dev->describe(), "null 1 GiB");
  EXPECT_TRUE(dev->discard_zeroes());  // every read is zeroes
  EXPECT_EQ(dev->sync(), 0);
  auto q = dev->make_queue(4);
  std::vector<uint8_t> buf(4096, 0x77);
  ASSERT_EQ(run_io(*q, Op::kWrite, 8192, 4096, buf.data()), 0);
  ASSERT_EQ(run_io(*q, Op::kRead, 8192, 4096, buf.data()), 0);
  for (uint8_t b : buf) ASSERT_EQ(b, 0);
  EXPECT_EQ(run_io(*q, Op::kRead, 1ull << 30, 512, buf.data()), -EINVAL);

  const uint8_t* zeroes = dev->mapped(12345 * 512, 2u << 20);
  ASSERT_NE(zeroes, nullptr);
  for (uint32_t i = 0; i < (2u << 20); i += 511) ASSERT_EQ(zeroes[i], 0);
  EXPECT_EQ(dev->mapped(0, (2u << 20) + 512), nullptr);  // larger than the shared zero region
  EXPECT_EQ(dev->mapped((1ull << 30) - 512, 1024), nullptr);

  auto ro = Device::open("null:1M", &error, true);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ro->describe(), "null 1 MiB (read-only)");
  auto rq = ro->make_queue(1);
  EXPECT_EQ(run_io(*rq, Op::kWrite, 0, 512, buf.data()), -EROFS);
}

}  // namespace
}  // namespace sens::storage
