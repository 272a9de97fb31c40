#pragma once
// The data pattern of `sens perf --verify`. Every 512-byte sector of the namespace has one
// content per run, a function of its byte offset and the run's seed only, so whichever write
// to a block lands last (or a read racing a rewrite) yields the same bytes, while stale data
// of another run, zeros, misplaced or torn blocks all fail the check:
//   word 0: the sector's byte offset   word 1: the seed   words 2..63: mix(seed, offset)
#include <cstdint>
#include <string>

namespace sens::host {

inline constexpr uint32_t kPatternSector = 512;

// Fills buf (len a multiple of 512) with the pattern of [offset, offset + len).
void fill_pattern(void* buf, uint64_t offset, uint32_t len, uint64_t seed);

struct Mismatch {
  uint64_t offset = 0;  // byte offset (in the namespace) of the first bad word
  uint64_t expected = 0, actual = 0;
  uint32_t bad_sectors = 0;
  std::string describe(uint64_t seed) const;  // names where the bad data came from, if it can
};

// Checks buf against the pattern. Returns true when it matches; otherwise fills *first with
// the first bad word and the number of bad sectors.
bool check_pattern(const void* buf, uint64_t offset, uint32_t len, uint64_t seed, Mismatch* first);

}  // namespace sens::host
