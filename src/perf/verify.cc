#include "perf/verify.h"

#include <cstdio>
#include <cstring>

namespace sens::host {

namespace {

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser: cheap, every bit counts
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t word_at(uint64_t word_offset, uint64_t sector_offset, uint64_t seed) {
  if (word_offset == sector_offset) return sector_offset;
  if (word_offset == sector_offset + 8) return seed;
  return mix(seed ^ word_offset);
}

}  // namespace

void fill_pattern(void* buf, uint64_t offset, uint32_t len, uint64_t seed) {
  auto* w = static_cast<uint64_t*>(buf);
  for (uint32_t s = 0; s < len; s += kPatternSector) {
    const uint64_t sector = offset + s;
    w[s / 8] = sector;
    w[s / 8 + 1] = seed;
    for (uint32_t i = 16; i < kPatternSector; i += 8) w[(s + i) / 8] = mix(seed ^ (sector + i));
  }
}

bool check_pattern(const void* buf, uint64_t offset, uint32_t len, uint64_t seed, Mismatch* first) {
  const auto* w = static_cast<const uint64_t*>(buf);
  bool ok = true;
  uint32_t bad = 0;
  for (uint32_t s = 0; s < len; s += kPatternSector) {
    const uint64_t sector = offset + s;
    for (uint32_t i = 0; i < kPatternSector; i += 8) {
      const uint64_t want = word_at(sector + i, sector, seed);
      const uint64_t got = w[(s + i) / 8];
      if (got == want) continue;
      if (ok && first) {
        first->offset = sector + i;
        first->expected = want;
        first->actual = got;
      }
      ok = false;
      ++bad;
      break;  // one count per sector
    }
  }
  if (!ok && first) first->bad_sectors = bad;
  return ok;
}

std::string Mismatch::describe(uint64_t seed) const {
  char buf[256];
  const uint64_t sector = offset - offset % kPatternSector;
  int n = std::snprintf(buf, sizeof(buf),
                        "offset %llu (sector at %llu): expected 0x%016llx, read 0x%016llx",
                        (unsigned long long)offset, (unsigned long long)sector,
                        (unsigned long long)expected, (unsigned long long)actual);
  std::string s(buf, size_t(n));
  if (offset == sector && actual % kPatternSector == 0 && actual != 0)
    s += " (data of the sector at " + std::to_string(actual) + ")";
  else if (offset == sector + 8 && actual != seed)
    s += actual == 0 ? " (never written)"
                     : " (written by another run, seed " + std::to_string(actual) + ")";
  if (bad_sectors > 1) s += "; " + std::to_string(bad_sectors) + " bad sectors in the block";
  return s;
}

}  // namespace sens::host
