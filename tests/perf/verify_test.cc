// The --verify pattern: a function of (offset, seed) only, and every kind of bad data caught.
#include "perf/verify.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace sens::host {
namespace {

constexpr uint64_t kSeed = 0xABCDEF12345ull;

TEST(VerifyPattern, RoundTripsAndDependsOnOffsetOnly) {
  std::vector<uint64_t> a(8192 / 8), b(4096 / 8);
  fill_pattern(a.data(), 1 << 20, 8192, kSeed);
  EXPECT_TRUE(check_pattern(a.data(), 1 << 20, 8192, kSeed, nullptr));
  // The second half of an 8 KiB write equals a 4 KiB write at its offset: sizes don't matter.
  fill_pattern(b.data(), (1 << 20) + 4096, 4096, kSeed);
  EXPECT_EQ(std::memcmp(a.data() + 512, b.data(), 4096), 0);
  // The words encode the sector's offset and the seed.
  EXPECT_EQ(a[0], uint64_t(1) << 20);
  EXPECT_EQ(a[1], kSeed);
  EXPECT_EQ(a[64], (uint64_t(1) << 20) + 512);
}

TEST(VerifyPattern, DetectsAFlippedBit) {
  std::vector<uint64_t> a(4096 / 8);
  fill_pattern(a.data(), 0, 4096, kSeed);
  reinterpret_cast<uint8_t*>(a.data())[3000] ^= 0x10;
  Mismatch m;
  EXPECT_FALSE(check_pattern(a.data(), 0, 4096, kSeed, &m));
  EXPECT_EQ(m.offset, 3000u / 8 * 8);
  EXPECT_EQ(m.bad_sectors, 1u);
  EXPECT_NE(m.expected, m.actual);
}

TEST(VerifyPattern, NamesMisplacedStaleAndUnwrittenData) {
  std::vector<uint64_t> a(1024 / 8);
  Mismatch m;
  // Data of another LBA (a misdirected write or read).
  fill_pattern(a.data(), 8192, 1024, kSeed);
  EXPECT_FALSE(check_pattern(a.data(), 4096, 1024, kSeed, &m));
  EXPECT_EQ(m.offset, 4096u);
  EXPECT_EQ(m.bad_sectors, 2u);
  EXPECT_NE(m.describe(kSeed).find("data of the sector at 8192"), std::string::npos)
      << m.describe(kSeed);
  // Data written by an earlier run (another seed).
  fill_pattern(a.data(), 4096, 1024, kSeed + 1);
  EXPECT_FALSE(check_pattern(a.data(), 4096, 1024, kSeed, &m));
  EXPECT_NE(m.describe(kSeed).find("another run"), std::string::npos) << m.describe(kSeed);
  // Never written: zeros.
  std::memset(a.data(), 0, 1024);
  EXPECT_FALSE(check_pattern(a.data(), 4096, 1024, kSeed, &m));
  EXPECT_EQ(m.bad_sectors, 2u);
  std::vector<uint64_t> z(1024 / 8, 0);
  z[0] = 4096;  // only the offset word right: the seed word says "never written"
  EXPECT_FALSE(check_pattern(z.data(), 4096, 512, kSeed, &m));
  EXPECT_NE(m.describe(kSeed).find("never written"), std::string::npos) << m.describe(kSeed);
}

TEST(VerifyPattern, TornBlockCountsEverySector) {
  std::vector<uint64_t> a(4096 / 8);
  fill_pattern(a.data(), 0, 4096, kSeed);
  std::memset(reinterpret_cast<uint8_t*>(a.data()) + 2048, 0, 2048);  // second half lost
  Mismatch m;
  EXPECT_FALSE(check_pattern(a.data(), 0, 4096, kSeed, &m));
  EXPECT_EQ(m.offset, 2048u);
  EXPECT_EQ(m.bad_sectors, 4u);
}

}  // namespace
}  // namespace sens::host
