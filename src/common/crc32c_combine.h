#pragma once
// CRC32C arithmetic without the data: the CRC of A followed by B from the CRCs of A and B and
// B's length (what zlib's crc32_combine does for CRC-32, here for the Castagnoli polynomial).
// Works on finished digests (crc32c() of common/crc32c.h): the pre- and post-inversions cancel.
#include <cstdint>

namespace sens {

// crc32c(A + B) from crc32c(A), crc32c(B) and B's length in bytes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// The same for one fixed length of B, with tables (4 KiB) so that each combine is four
// lookups: for joining the CRCs of equal blocks on the data path.
class Crc32cFixedCombine {
 public:
  explicit Crc32cFixedCombine(uint64_t len_b);
  uint32_t combine(uint32_t crc_a, uint32_t crc_b) const {
    return table_[0][crc_a & 0xFF] ^ table_[1][(crc_a >> 8) & 0xFF] ^
           table_[2][(crc_a >> 16) & 0xFF] ^ table_[3][crc_a >> 24] ^ crc_b;
  }

 private:
  uint32_t table_[4][256];  // table_[k][b]: byte b at byte position k, shifted by len_b bytes
};

}  // namespace sens
