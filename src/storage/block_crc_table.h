#pragma once
// The CRC32C of each 4 KiB block of a RAM namespace, kept by whoever changes the block (while
// its bytes are in cache), so that a data digest over whole blocks comes from the table, not
// from a second, cache-missing pass over the data (issue 31). 4 bytes per 4 KiB.
//
// Entries are stored XORed with the CRC of a zero block, so that the table's zero-filled
// (untouched, unbacked) memory already describes the namespace's unwritten, zero blocks.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "common/crc32c_combine.h"

namespace sens::storage {

class BlockCrcTable {
 public:
  static constexpr uint64_t kBlock = 4096;

  // For a device of `device_bytes` (a partial last block has no entry: reads touching it
  // take the data path). Check ok(): the allocation may fail.
  explicit BlockCrcTable(uint64_t device_bytes);
  bool ok() const { return blocks_ == 0 || entries_ != nullptr; }
  uint64_t bytes() const { return blocks_ * sizeof(uint32_t); }

  // Whether block `index` has an entry.
  bool covers(uint64_t index) const { return index < blocks_; }
  // Block `index` now holds the 4 KiB at `block` (call with the bytes just written, in cache).
  void refresh(uint64_t index, const uint8_t* block);
  // Block `index` now reads as zeroes.
  void set_zero(uint64_t index) { entries_.get()[index] = 0; }

  // The CRC32C of the whole blocks [offset, offset + length): false (nothing set) unless the
  // range starts and ends on block boundaries within the table and is not empty.
  bool digest(uint64_t offset, uint64_t length, uint32_t* crc) const;

 private:
  struct FreeDeleter {
    void operator()(uint32_t* p) const { std::free(p); }
  };
  uint64_t blocks_;
  std::unique_ptr<uint32_t, FreeDeleter> entries_;  // calloc'd: pages cost nothing until set
  uint32_t zero_block_crc_;
  Crc32cFixedCombine join_;  // appends one block's CRC to a running one
};

}  // namespace sens::storage
