// CRC32C combine against ISA-L's CRC of the concatenated bytes.
#include "common/crc32c_combine.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/crc32c.h"

namespace sens {
namespace {

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t len) {
  std::vector<uint8_t> v(len);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

TEST(Crc32cCombine, MatchesTheCrcOfConcatenationsOfRandomLengths) {
  std::mt19937_64 rng(31);
  for (int round = 0; round < 500; ++round) {
    // Lengths from 0 to 64 KiB, small ones often (the edge cases of the shift).
    size_t len_a = rng() % 4 == 0 ? rng() % 16 : rng() % 65536;
    size_t len_b = rng() % 4 == 0 ? rng() % 16 : rng() % 65536;
    auto a = random_bytes(rng, len_a);
    auto b = random_bytes(rng, len_b);
    std::vector<uint8_t> ab(a);
    ab.insert(ab.end(), b.begin(), b.end());
    ASSERT_EQ(crc32c_combine(crc32c(a.data(), a.size()), crc32c(b.data(), b.size()), len_b),
              crc32c(ab.data(), ab.size()))
        << "len_a " << len_a << " len_b " << len_b;
  }
}

TEST(Crc32cCombine, ManyPiecesInOrder) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<uint8_t> all;
    uint32_t combined = crc32c(static_cast<const void*>(nullptr), 0);  // of no bytes
    for (int piece = 0, n = 1 + int(rng() % 20); piece < n; ++piece) {
      auto p = random_bytes(rng, rng() % 10000);
      combined = crc32c_combine(combined, crc32c(p.data(), p.size()), p.size());
      all.insert(all.end(), p.begin(), p.end());
    }
    ASSERT_EQ(combined, crc32c(all.data(), all.size()));
  }
}

TEST(Crc32cCombine, FixedLengthTablesAgreeWithTheGeneralCombine) {
  std::mt19937_64 rng(4096);
  for (uint64_t len : {1ull, 7ull, 512ull, 4096ull, 65536ull, 1ull << 33}) {
    Crc32cFixedCombine fixed(len);
    for (int i = 0; i < 1000; ++i) {
      uint32_t a = uint32_t(rng()), b = uint32_t(rng());
      ASSERT_EQ(fixed.combine(a, b), crc32c_combine(a, b, len)) << len;
    }
  }
  // And against the data, for 4 KiB blocks (the RAM namespace's table).
  Crc32cFixedCombine block(4096);
  auto bytes = random_bytes(rng, 16 * 4096);
  uint32_t crc = crc32c(bytes.data(), 4096);
  for (size_t i = 1; i < 16; ++i) crc = block.combine(crc, crc32c(bytes.data() + i * 4096, 4096));
  EXPECT_EQ(crc, crc32c(bytes.data(), bytes.size()));
}

}  // namespace
}  // namespace sens
