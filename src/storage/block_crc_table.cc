#include "storage/block_crc_table.h"

#include "common/crc32c.h"

namespace sens::storage {

namespace {

uint32_t zero_block_crc() {
  static const uint8_t zeroes[BlockCrcTable::kBlock] = {};
  return crc32c(zeroes, sizeof zeroes);
}

}  // namespace

BlockCrcTable::BlockCrcTable(uint64_t device_bytes)
    : blocks_(device_bytes / kBlock),
      entries_(blocks_ ? static_cast<uint32_t*>(std::calloc(blocks_, sizeof(uint32_t))) : nullptr),
      zero_block_crc_(zero_block_crc()),
      join_(kBlock) {}

void BlockCrcTable::refresh(uint64_t index, const uint8_t* block) {
  entries_.get()[index] = crc32c(block, kBlock) ^ zero_block_crc_;
}

bool BlockCrcTable::digest(uint64_t offset, uint64_t length, uint32_t* crc) const {
  if (length == 0 || offset % kBlock != 0 || length % kBlock != 0) return false;
  const uint64_t first = offset / kBlock, count = length / kBlock;
  if (first > blocks_ || count > blocks_ - first) return false;
  const uint32_t* e = entries_.get() + first;
  uint32_t running = e[0] ^ zero_block_crc_;
  for (uint64_t i = 1; i < count; ++i) running = join_.combine(running, e[i] ^ zero_block_crc_);
  *crc = running;
  return true;
}

}  // namespace sens::storage
