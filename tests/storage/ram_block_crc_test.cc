// A RAM namespace's table of 4 KiB block CRCs (issue 31): after every kind of change (a
// partial write, whole-block writes, Write Zeroes, Deallocate) the digest that mapped_digest()
// gives for any run of whole blocks equals the CRC32C of the bytes themselves.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "storage/device.h"
#include "storage_test_util.h"

namespace sens::storage {
namespace {

using testing::fill_pattern;
using testing::run_io;

constexpr uint64_t kBlock = 4096;
constexpr uint64_t kDeviceBytes = 64 * kBlock + 1024;  // a partial last block: no table entry

// Every run of 1..8 whole blocks: the table's digest is the bytes' CRC32C. Returns the first
// mismatch ("" if none).
std::string check_table(const Device& dev) {
  const uint64_t blocks = dev.size() / kBlock;
  for (uint64_t first = 0; first < blocks; ++first)
    for (uint64_t count = 1; count <= 8 && first + count <= blocks; ++count) {
      const uint8_t* bytes = dev.mapped(first * kBlock, uint32_t(count * kBlock));
      if (!bytes) return "mapped() refused block " + std::to_string(first);
      uint32_t from_table = 0;
      if (!dev.mapped_digest(bytes, count * kBlock, &from_table))
        return "no table digest for blocks " + std::to_string(first) + "+" + std::to_string(count);
      if (from_table != crc32c(bytes, count * kBlock))
        return "wrong table digest for blocks " + std::to_string(first) + "+" +
               std::to_string(count);
    }
  return "";
}

class RamBlockCrc : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    dev_ = Device::open("ram:" + std::to_string(kDeviceBytes), &error);
    ASSERT_NE(dev_, nullptr) << error;
    queue_ = dev_->make_queue(8);
    dev_->keep_block_crcs();
  }
  void write(uint64_t offset, uint64_t length, uint64_t seed) {
    std::vector<uint8_t> buf(length);
    fill_pattern(buf.data(), length, seed, offset);
    ASSERT_EQ(run_io(*queue_, Op::kWrite, offset, length, buf.data()), 0);
  }
  std::unique_ptr<Device> dev_;
  std::unique_ptr<Queue> queue_;
};

TEST_F(RamBlockCrc, FreshNamespaceIsAllZeroBlocks) {
  EXPECT_EQ(check_table(*dev_), "");
}

TEST_F(RamBlockCrc, WholeBlockWrites) {
  write(0, kBlock, 1);
  write(5 * kBlock, 3 * kBlock, 2);
  write(20 * kBlock, 32 * kBlock, 3);
  EXPECT_EQ(check_table(*dev_), "");
}

TEST_F(RamBlockCrc, PartialWritesRecomputeTheirBlocks) {
  write(0, kBlock * 8, 1);
  write(512, 512, 2);                 // inside one block
  write(3 * kBlock - 1024, 2048, 3);  // across a block boundary
  write(6 * kBlock + 512, 2 * kBlock, 4);
  EXPECT_EQ(check_table(*dev_), "");
}

TEST_F(RamBlockCrc, WriteZeroesAndDeallocate) {
  write(0, 64 * kBlock, 5);
  ASSERT_EQ(run_io(*queue_, Op::kWriteZeroes, 2 * kBlock, 3 * kBlock, nullptr), 0);  // whole
  ASSERT_EQ(run_io(*queue_, Op::kWriteZeroes, 8 * kBlock + 512, 1024, nullptr), 0);  // partial
  EXPECT_EQ(check_table(*dev_), "");
  ASSERT_EQ(run_io(*queue_, Op::kDiscard, 10 * kBlock + 1536, 5 * kBlock, nullptr), 0);  // edges
  ASSERT_EQ(run_io(*queue_, Op::kDiscard, 32 * kBlock, 16 * kBlock, nullptr), 0);  // whole pages
  EXPECT_EQ(check_table(*dev_), "");
  write(40 * kBlock + 512, 512, 6);  // written again after being given back
  EXPECT_EQ(check_table(*dev_), "");
}

TEST_F(RamBlockCrc, RandomMixOfEverything) {
  std::mt19937_64 rng(31);
  const uint64_t sectors = kDeviceBytes / 512;
  for (int i = 0; i < 300; ++i) {
    uint64_t first = rng() % sectors, count = 1 + rng() % std::min<uint64_t>(40, sectors - first);
    switch (rng() % 4) {
      case 0:
      case 1:
        write(first * 512, count * 512, rng());
        break;
      case 2:
        ASSERT_EQ(run_io(*queue_, Op::kWriteZeroes, first * 512, count * 512, nullptr), 0);
        break;
      case 3:
        ASSERT_EQ(run_io(*queue_, Op::kDiscard, first * 512, count * 512, nullptr), 0);
        break;
    }
  }
  EXPECT_EQ(check_table(*dev_), "");
}

// Until someone reads with data digests, writes keep no table (no cost) and the device gives
// no digest; the first keep_block_crcs() computes every block's CRC from the bytes.
TEST(RamBlockCrcLate, FirstUseComputesTheTableFromEarlierWrites) {
  std::string error;
  auto dev = Device::open("ram:" + std::to_string(kDeviceBytes), &error);
  ASSERT_NE(dev, nullptr) << error;
  auto queue = dev->make_queue(8);
  std::vector<uint8_t> buf(20 * kBlock);
  fill_pattern(buf.data(), buf.size(), 9, 0);
  ASSERT_EQ(run_io(*queue, Op::kWrite, 3 * kBlock + 512, buf.size(), buf.data()), 0);
  ASSERT_EQ(run_io(*queue, Op::kWriteZeroes, 5 * kBlock, 2 * kBlock, nullptr), 0);
  uint32_t crc = 0;
  EXPECT_FALSE(dev->mapped_digest(dev->mapped(0, uint32_t(kBlock)), kBlock, &crc));
  dev->keep_block_crcs();
  EXPECT_EQ(check_table(*dev), "");
  ASSERT_EQ(run_io(*queue, Op::kWrite, 30 * kBlock, 512, buf.data()), 0);  // kept from now on
  dev->keep_block_crcs();                                                  // a no-op now
  EXPECT_EQ(check_table(*dev), "");
}

TEST_F(RamBlockCrc, RangesNotMadeOfWholeKeptBlocksAreRefused) {
  uint32_t crc = 0;
  const uint8_t* start = dev_->mapped(0, uint32_t(kBlock));
  ASSERT_NE(start, nullptr);
  EXPECT_FALSE(dev_->mapped_digest(start + 512, kBlock, &crc));          // unaligned start
  EXPECT_FALSE(dev_->mapped_digest(start, kBlock + 512, &crc));          // unaligned length
  EXPECT_FALSE(dev_->mapped_digest(start, 0, &crc));                     // empty
  EXPECT_FALSE(dev_->mapped_digest(start, 65 * kBlock, &crc));           // into the partial block
  EXPECT_FALSE(dev_->mapped_digest(start + 64 * kBlock, kBlock, &crc));  // the partial block
  uint8_t elsewhere[kBlock] = {};
  EXPECT_FALSE(dev_->mapped_digest(elsewhere, kBlock, &crc));  // not the namespace's memory
  // Other devices keep no table.
  std::string error;
  auto null_dev = Device::open("null:1M", &error);
  ASSERT_NE(null_dev, nullptr) << error;
  const uint8_t* nb = null_dev->mapped(0, uint32_t(kBlock));
  if (nb) {
    EXPECT_FALSE(null_dev->mapped_digest(nb, kBlock, &crc));
  }
}

}  // namespace
}  // namespace sens::storage
