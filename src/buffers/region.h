#pragma once
// Address space for I/O buffers, reserved up front and backed by 2 MiB pages when the system
// gives them: explicit hugetlbfs pages if enough are free, else transparent huge pages
// (madvise), else plain 4 KiB pages. Inside a 2 MiB page the low 21 address bits are the
// physical ones, which is what lets an allocator choose the cache sets its buffers fall
// into; with 4 KiB pages it can choose only bits 6-11.
#include <cstdint>
#include <memory>
#include <string>

namespace sens::buffers {

enum class PageKind : uint8_t {
  kHugetlb,      // MAP_HUGETLB: reserved 2 MiB pages
  kTransparent,  // MADV_HUGEPAGE: the kernel backs aligned 2 MiB ranges with huge pages
  kSmall,        // 4 KiB pages: colour control stops at the page
};
const char* page_kind_name(PageKind kind);

inline constexpr uint64_t kHugePage = 2ull << 20;

class Region {
 public:
  // Reserves `bytes` (rounded up to 2 MiB) of address space, 2 MiB aligned; memory is taken
  // only as it is touched. `want_huge` false gives small pages (the naive layout's baseline).
  // `explicit_pages` false never uses hugetlb pages, which the mapping takes at once (a RAM
  // namespace must cost nothing until written): transparent huge pages only.
  // Returns nullptr with `error` set when even the reservation fails.
  static std::unique_ptr<Region> reserve(uint64_t bytes, bool want_huge, std::string* error,
                                         bool explicit_pages = true);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  PageKind kind() const { return kind_; }
  // Hands [p, p + n) back to the kernel (it reads as zeroes when touched again).
  void discard(uint8_t* p, uint64_t n);
  // Bytes of this region that the kernel backs with huge pages now (from /proc/self/smaps;
  // 0 if it cannot tell). For the stats, not the data path.
  uint64_t huge_bytes() const;
  // What /proc/self/smaps says of this region now (reads the file: not for the data path).
  struct Backing {
    bool known = false;           // the region's mappings were found in smaps
    bool thp_eligible = false;    // THPeligible: a fault here may take a 2 MiB page
    uint64_t resident_bytes = 0;  // Rss: memory the region holds now
    uint64_t huge_bytes = 0;      // AnonHugePages: of that, on 2 MiB pages
  };
  Backing backing() const;

 private:
  Region(uint8_t* map, uint64_t map_len, uint8_t* base, uint64_t size, PageKind kind)
      : map_(map), map_len_(map_len), base_(base), size_(size), kind_(kind) {}
  uint8_t* map_;
  uint64_t map_len_;
  uint8_t* base_;
  uint64_t size_;
  PageKind kind_;
};

// The system's transparent huge page mode, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"; "" if unknown).
std::string thp_enabled_mode();

// Free explicit huge pages the kernel has (HugePages_Free in /proc/meminfo), 0 if unknown.
uint64_t free_hugetlb_pages();

}  // namespace sens::buffers
