// CRC32C as NVMe/TCP digests use it, against published vectors (RFC 3720 B.4 and the usual
// "123456789" check value).
#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace sens {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  uint8_t buf[32];
  std::fill(std::begin(buf), std::end(buf), 0x00);
  EXPECT_EQ(crc32c(buf, 32), 0x8A9136AAu);
  std::fill(std::begin(buf), std::end(buf), 0xFF);
  EXPECT_EQ(crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = uint8_t(i);
  EXPECT_EQ(crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(buf, 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(buf, 0), 0u);
}

TEST(Crc32c, UpdateChainsLikeOneBuffer) {
  const char* s = "123456789";
  for (size_t cut = 0; cut <= 9; ++cut) {
    uint32_t crc = crc32c_update(kCrc32cInit, s, cut);
    crc = crc32c_update(crc, s + cut, 9 - cut);
    EXPECT_EQ(crc32c_finish(crc), 0xE3069283u) << cut;
  }
}

TEST(Crc32c, IovecMatchesContiguous) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> data(rng() % 20000);
    for (auto& b : data) b = uint8_t(rng());
    std::vector<iovec> iov;
    size_t off = 0;
    while (off < data.size() || iov.size() < 2) {
      const size_t n = std::min<size_t>(data.size() - off, rng() % 3 == 0 ? 0 : rng() % 5000);
      iov.push_back({data.data() + off, n});  // zero-length pieces included on purpose
      off += n;
      if (iov.size() > 64) {
        iov.push_back({data.data() + off, data.size() - off});
        off = data.size();
      }
    }
    EXPECT_EQ(crc32c(iov.data(), iov.size()), crc32c(data.data(), data.size())) << round;
  }
  EXPECT_EQ(crc32c(static_cast<const iovec*>(nullptr), 0), 0u);
}

}  // namespace
}  // namespace sens
