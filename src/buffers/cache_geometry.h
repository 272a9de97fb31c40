#pragma once
// The CPU's data caches as the kernel describes them (/sys/devices/system/cpu/cpuN/cache/),
// and the arithmetic of cache colours: which sets an address falls into, and which groups
// of sets (colours) a buffer covers. Tyche's observation is that I/O buffers evict each
// other not because the cache is small but because the allocator lines their hot heads up
// on the same sets; everything here is pure arithmetic so that it can be tested for any
// geometry.
#include <cstdint>
#include <string>
#include <vector>

namespace sens::buffers {

struct CacheLevel {
  int level = 0;
  uint64_t size_bytes = 0;
  uint32_t ways = 0;
  uint32_t sets = 0;
  uint32_t line = 64;
  uint32_t sharing_cpus = 1;  // CPUs that share this cache (shared_cpu_list)

  // Bytes of one way: addresses this far apart map to the same set.
  uint64_t way_bytes() const { return uint64_t(sets) * line; }
  uint32_t set_of(uint64_t addr) const { return uint32_t((addr / line) % sets); }
  // Colours of `unit` bytes (a page, usually): how many distinct set groups a unit-aligned
  // block can start at. A way smaller than a unit still has one colour.
  uint32_t colours(uint32_t unit) const {
    return way_bytes() > unit ? uint32_t((way_bytes() + unit - 1) / unit) : 1;
  }
  uint32_t colour_of(uint64_t addr, uint32_t unit) const {
    return uint32_t((addr % way_bytes()) / unit);
  }
};

struct CacheGeometry {
  std::vector<CacheLevel> levels;  // data and unified caches, L1 first

  const CacheLevel* level(int n) const;
  // The last level (the LLC), or nullptr when none is known.
  const CacheLevel* last() const { return levels.empty() ? nullptr : &levels.back(); }
  std::string describe() const;  // "L1 48 KiB 12-way 64 sets, L2 ..."

  // Reads `dir` (a cpuN/cache directory: index0, index1, ... each with level, type, size,
  // ways_of_associativity, number_of_sets, coherency_line_size, shared_cpu_list). Skips
  // instruction caches. Returns an empty geometry and sets `error` when nothing usable is
  // there; a level with inconsistent numbers (size != ways x sets x line) is refused.
  static CacheGeometry from_sysfs(const std::string& dir, std::string* error);
  // This machine's (cpu0's), or a typical one (L2 1 MiB 16-way, L3 32 MiB 16-way) if sysfs
  // says nothing usable; `error` then says why.
  static CacheGeometry detect(std::string* error);
  static CacheGeometry typical();
};

// Counts CPUs in a shared_cpu_list such as "0-3,8,10-11"; 0 on a malformed list.
uint32_t count_cpu_list(const std::string& list);

// The distance between the starts of consecutive buffers of `bytes` that keeps them from
// all starting on one colour: `bytes` rounded up to `unit`, plus one unit when that is a
// whole number of ways of some level (then every start would fall on colour 0 and the hot
// heads of all buffers would compete for the same sets). With the extra unit consecutive
// starts walk the colours one by one (Tyche's stride-1 order); smaller buffers packed
// back to back already tile every colour. Levels whose way exceeds `page_bytes` are left
// out: inside one page the allocator cannot choose their colour.
// `spread_heads`: for buffers used mostly at their start (receive staging, where each read
// lands first): the stride's unit count is made coprime with every colour count, so that the
// heads of consecutive buffers visit every colour, not just the few a packed layout reaches
// (64 KiB buffers in a 128 KiB way: 2 of 32). It costs up to a few units per buffer.
uint64_t conflict_free_stride(const CacheGeometry& g, uint64_t bytes, uint32_t unit,
                              uint64_t page_bytes, bool spread_heads = false);

}  // namespace sens::buffers
