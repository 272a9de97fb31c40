#include "buffers/region.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sens::buffers {

const char* page_kind_name(PageKind kind) {
  switch (kind) {
    case PageKind::kHugetlb:
      return "hugetlb";
    case PageKind::kTransparent:
      return "transparent";
    case PageKind::kSmall:
      return "4k";
  }
  return "?";
}

uint64_t free_hugetlb_pages() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long n = 0;
    if (std::sscanf(line.c_str(), "HugePages_Free: %llu", &n) == 1) return n;
  }
  return 0;
}

std::unique_ptr<Region> Region::reserve(uint64_t bytes, bool want_huge, std::string* error,
                                        bool explicit_pages) {
  if (bytes > UINT64_MAX - 2 * kHugePage) {  // the rounding and alignment below would wrap
    *error = "cannot reserve " + std::to_string(bytes) + " bytes: more than the address space";
    return nullptr;
  }
  const uint64_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (want_huge && explicit_pages && free_hugetlb_pages() >= size / kHugePage) {
    // Explicit pages only when enough are free: a hugetlb mapping without them would take
    // SIGBUS on first touch.
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB,
                   -1, 0);
    if (p != MAP_FAILED) {
      auto* b = static_cast<uint8_t*>(p);
      return std::unique_ptr<Region>(new Region(b, size, b, size, PageKind::kHugetlb));
    }
  }
  // One extra huge page of address space to align the start to 2 MiB.
  const uint64_t map_len = size + kHugePage;
  void* p = mmap(nullptr, map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    *error = "cannot reserve " + std::to_string(size) + " bytes: " + std::strerror(errno);
    return nullptr;
  }
  auto* map = static_cast<uint8_t*>(p);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHugePage - 1) /
                                          kHugePage * kHugePage);
  PageKind kind = PageKind::kSmall;
  if (want_huge && madvise(base, size, MADV_HUGEPAGE) == 0) kind = PageKind::kTransparent;
  if (!want_huge) madvise(base, size, MADV_NOHUGEPAGE);  // the baseline stays on 4 KiB pages
  return std::unique_ptr<Region>(new Region(map, map_len, base, size, kind));
}

Region::~Region() {
  munmap(map_, map_len_);
}

void Region::discard(uint8_t* p, uint64_t n) {
  if (kind_ != PageKind::kHugetlb) madvise(p, n, MADV_DONTNEED);
}

uint64_t Region::huge_bytes() const {
  return backing().huge_bytes;
}

Region::Backing Region::backing() const {
  Backing b;
  if (kind_ == PageKind::kHugetlb) return {true, true, size_, size_};
  std::ifstream f("/proc/self/smaps");
  std::string line;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base_), hi = lo + size_;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long long a = 0, c = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &a, &c) == 2 && line.find(':') > 12) {
      inside = a < hi && c > lo;                      // a mapping line ("start-end perms ...")
      if (inside && !b.known) b.thp_eligible = true;  // every mapping of it must be eligible
      b.known = b.known || inside;
      continue;
    }
    if (!inside) continue;
    unsigned long long kb = 0;
    int eligible = 0;
    if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &kb) == 1) b.huge_bytes += kb * 1024;
    if (std::sscanf(line.c_str(), "Rss: %llu kB", &kb) == 1) b.resident_bytes += kb * 1024;
    if (std::sscanf(line.c_str(), "THPeligible: %d", &eligible) == 1 && eligible == 0)
      b.thp_eligible = false;
  }
  return b;
}

std::string thp_enabled_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return line.substr(open + 1, close - open - 1);
}

}  // namespace sens::buffers
