#include "buffers/cache_geometry.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

namespace sens::buffers {

namespace {

bool read_line(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f || !std::getline(f, *out)) return false;
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
  return true;
}

bool read_number(const std::string& path, uint64_t* out) {
  std::string s;
  if (!read_line(path, &s) || s.empty()) return false;
  size_t pos = 0;
  try {
    *out = std::stoull(s, &pos);
  } catch (...) {
    return false;
  }
  return pos == s.size();
}

// "48K", "2048K", "32M" (sysfs writes K), or plain bytes.
bool read_size(const std::string& path, uint64_t* out) {
  std::string s;
  if (!read_line(path, &s) || s.empty()) return false;
  uint64_t mult = 1;
  const char last = s.back();
  if (last == 'K' || last == 'M' || last == 'G') {
    mult = last == 'K' ? 1024 : last == 'M' ? 1024 * 1024 : 1024ull * 1024 * 1024;
    s.pop_back();
  }
  size_t pos = 0;
  try {
    *out = std::stoull(s, &pos) * mult;
  } catch (...) {
    return false;
  }
  return pos == s.size() && !s.empty();
}

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 20) && b % (1ull << 20) == 0)
    std::snprintf(buf, sizeof(buf), "%llu MiB", (unsigned long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof(buf), "%llu KiB", (unsigned long long)(b >> 10));
  else
    std::snprintf(buf, sizeof(buf), "%llu B", (unsigned long long)b);
  return buf;
}

}  // namespace

uint32_t count_cpu_list(const std::string& list) {
  uint32_t n = 0;
  std::stringstream ss(list);
  std::string part;
  while (std::getline(ss, part, ',')) {
    unsigned a = 0, b = 0;
    char dash = 0;
    int got = std::sscanf(part.c_str(), "%u%c%u", &a, &dash, &b);
    if (got == 1) {
      ++n;
    } else if (got == 3 && dash == '-' && b >= a) {
      n += b - a + 1;
    } else {
      return 0;
    }
  }
  return n;
}

const CacheLevel* CacheGeometry::level(int n) const {
  for (const auto& l : levels)
    if (l.level == n) return &l;
  return nullptr;
}

std::string CacheGeometry::describe() const {
  std::string s;
  for (const auto& l : levels) {
    if (!s.empty()) s += ", ";
    s += "L" + std::to_string(l.level) + " " + format_bytes(l.size_bytes) + " " +
         std::to_string(l.ways) + "-way " + std::to_string(l.sets) + " sets";
  }
  return s.empty() ? "unknown" : s;
}

CacheGeometry CacheGeometry::from_sysfs(const std::string& dir, std::string* error) {
  CacheGeometry g;
  for (int i = 0; i < 16; ++i) {
    const std::string d = dir + "/index" + std::to_string(i);
    std::string type;
    if (!read_line(d + "/type", &type)) {
      if (i == 0) {
        *error = dir + ": no index0/type (no cache information)";
        return {};
      }
      break;
    }
    if (type == "Instruction") continue;
    CacheLevel l;
    uint64_t level = 0, ways = 0, sets = 0, line = 0;
    if (!read_number(d + "/level", &level) || !read_size(d + "/size", &l.size_bytes) ||
        !read_number(d + "/ways_of_associativity", &ways) ||
        !read_number(d + "/number_of_sets", &sets) ||
        !read_number(d + "/coherency_line_size", &line)) {
      *error = d + ": missing or malformed level/size/ways/sets/line";
      return {};
    }
    if (level < 1 || level > 8 || ways == 0 || sets == 0 || line == 0 || line > 4096 ||
        (line & (line - 1)) || ways > 1024 || sets > (1u << 30) ||
        l.size_bytes != ways * sets * line) {
      *error = d + ": inconsistent geometry (size " + std::to_string(l.size_bytes) +
               " != " + std::to_string(ways) + " ways x " + std::to_string(sets) + " sets x " +
               std::to_string(line) + " B)";
      return {};
    }
    l.level = int(level);
    l.ways = uint32_t(ways);
    l.sets = uint32_t(sets);
    l.line = uint32_t(line);
    std::string shared;
    if (read_line(d + "/shared_cpu_list", &shared)) l.sharing_cpus = count_cpu_list(shared);
    if (l.sharing_cpus == 0) l.sharing_cpus = 1;
    g.levels.push_back(l);
  }
  std::sort(g.levels.begin(), g.levels.end(),
            [](const CacheLevel& a, const CacheLevel& b) { return a.level < b.level; });
  if (g.levels.empty()) *error = dir + ": no data or unified cache listed";
  return g;
}

CacheGeometry CacheGeometry::typical() {
  CacheGeometry g;
  g.levels.push_back({1, 48 * 1024, 12, 64, 64, 1});
  g.levels.push_back({2, 1024 * 1024, 16, 1024, 64, 1});
  g.levels.push_back({3, 32ull * 1024 * 1024, 16, 32768, 64, 2});
  return g;
}

CacheGeometry CacheGeometry::detect(std::string* error) {
  CacheGeometry g = from_sysfs("/sys/devices/system/cpu/cpu0/cache", error);
  return g.levels.empty() ? typical() : g;
}

uint64_t conflict_free_stride(const CacheGeometry& g, uint64_t bytes, uint32_t unit,
                              uint64_t page_bytes, bool spread_heads) {
  const uint64_t units = std::max<uint64_t>((bytes + unit - 1) / unit, 1);
  auto conflicts = [&](uint64_t n) {
    for (const auto& l : g.levels) {
      // Only colours inside one page are the allocator's to choose: with a way larger than
      // the page, the higher index bits come from wherever the kernel put the page.
      if (l.way_bytes() > page_bytes) continue;
      const uint64_t c = l.colours(unit);
      if (c <= 1) continue;
      const uint64_t common = std::gcd(n, c);
      if (spread_heads ? common != 1 : common == c) return true;  // starts skip colours
    }
    return false;
  };
  for (uint64_t n = units; n < units + 4096; ++n)
    if (!conflicts(n)) return n * unit;
  return units * unit;
}

}  // namespace sens::buffers
