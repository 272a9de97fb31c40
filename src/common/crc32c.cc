#include "common/crc32c.h"

#include <isa-l/crc.h>

namespace sens {

// ISA-L's crc32_iscsi() is the reflected CRC32C without the final inversion; it picks
// the fastest kernel (PCLMUL/SSE4.2) for this CPU at run time.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t len) {
  return crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(len),
                     crc);
}

uint32_t crc32c(const iovec* iov, size_t iovcnt) {
  uint32_t crc = kCrc32cInit;
  for (size_t i = 0; i < iovcnt; ++i) crc = crc32c_update(crc, iov[i].iov_base, iov[i].iov_len);
  return crc32c_finish(crc);
}

}  // namespace sens
