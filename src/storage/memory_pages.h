#pragma once
// How the kernel backs a RAM namespace's memory, for `sens target`'s start-up line and the
// stats: read from /proc/self/smaps and sysfs, so never on the data path.
#include <cstdint>
#include <string>

#include "storage/device.h"

namespace sens::storage {

struct MemoryPages {
  const char* kind = "";         // the region's page kind ("transparent", "4k")
  bool advised = false;          // madvise(MADV_HUGEPAGE) succeeded on the mapping
  std::string thp_enabled;       // the system's THP mode (always, madvise, never; "" unknown)
  bool known = false;            // smaps had the mapping (the fields below are measured)
  bool thp_eligible = false;     // smaps' THPeligible: a first write may take a 2 MiB page
  uint64_t resident_bytes = 0;   // memory held now (unwritten blocks hold none)
  uint64_t huge_bytes = 0;       // of that, on 2 MiB pages
  uintptr_t address = 0;         // where the bytes start (to find them in /proc/PID/smaps)
  uint64_t block_crc_bytes = 0;  // the CRC32C table of its 4 KiB blocks (4 B per block)
  bool block_crcs_kept = false;  // kept since a connection with data digests read it
};

// False (nothing set) unless `device` is a RAM namespace.
bool ram_memory_pages(const Device& device, MemoryPages* out);

// One line ("pages: ..."): what was asked, what the kernel says it will do, what it has done.
std::string describe_memory_pages(const MemoryPages& p);

}  // namespace sens::storage
