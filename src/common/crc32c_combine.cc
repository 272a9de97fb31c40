#include "common/crc32c_combine.h"

namespace sens {

namespace {

// Polynomials over GF(2) modulo the Castagnoli polynomial, bit-reflected as CRC32C keeps its
// register: bit 31 is x^0, bit 0 is x^31.
constexpr uint32_t kReflectedPoly = 0x82F63B78u;
constexpr uint32_t kOne = 1u << 31;  // x^0

uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = kOne; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kReflectedPoly : b >> 1;  // b *= x
  }
  return product;
}

// x^(8 * bytes) mod P: appending `bytes` zero bytes multiplies the register by it.
uint32_t shift_by_bytes(uint64_t bytes) {
  // square = x^(2^k) mod P, starting at x^8 (one byte); multiply in the bits of `bytes`.
  uint32_t square = multiply_mod_poly(kOne >> 1, kOne >> 1);  // x^2
  square = multiply_mod_poly(square, square);                 // x^4
  square = multiply_mod_poly(square, square);                 // x^8
  uint32_t result = kOne;
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = multiply_mod_poly(result, square);
    square = multiply_mod_poly(square, square);
  }
  return result;
}

}  // namespace

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multiply_mod_poly(shift_by_bytes(len_b), crc_a) ^ crc_b;
}

Crc32cFixedCombine::Crc32cFixedCombine(uint64_t len_b) {
  const uint32_t shift = shift_by_bytes(len_b);
  for (int k = 0; k < 4; ++k)
    for (uint32_t b = 0; b < 256; ++b) table_[k][b] = multiply_mod_poly(shift, b << (8 * k));
}

}  // namespace sens
