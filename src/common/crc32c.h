#pragma once
// CRC32C (Castagnoli) as NVMe/TCP digests use it: ~crc32c(~0, bytes), stored little-endian.
#include <sys/uio.h>
#include <cstddef>
#include <cstdint>

namespace sens {

// Continues a running CRC; start with kCrc32cInit and finish with crc32c_finish().
inline constexpr uint32_t kCrc32cInit = 0xFFFFFFFFu;
uint32_t crc32c_update(uint32_t crc, const void* data, size_t len);
inline uint32_t crc32c_finish(uint32_t crc) {
  return ~crc;
}

// The digest of one contiguous buffer.
inline uint32_t crc32c(const void* data, size_t len) {
  return crc32c_finish(crc32c_update(kCrc32cInit, data, len));
}
// The digest of scattered bytes, in order.
uint32_t crc32c(const iovec* iov, size_t iovcnt);

}  // namespace sens
