// sens_cachebuf: what the placement of I/O buffers costs in the cache (issue 12, Tyche).
//
// N buffers of one size are laid out three ways, and the hot head of each (its first --touch
// bytes, where a receive lands and a parser looks first) is read over and over:
//   aligned-4k    N x aligned_alloc(size, size) on 4 KiB pages: the physical colour of each
//                 page is whatever the kernel gave;
//   aligned-huge  N buffers packed back to back at size-aligned offsets in a 2 MiB-page
//                 Region: every buffer whose size is a multiple of an L2 way starts on the
//                 same sets, the conflict Tyche describes;
//   tyche         N buffers in a 2 MiB-page Region, conflict_free_stride() apart.
// The lines of all heads are visited in one random cycle of dependent loads (each line holds
// the address of the next), so neither out-of-order execution nor the prefetcher can hide a
// miss: ns per line is the average latency of wherever the line was found.
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "buffers/cache_geometry.h"
#include "buffers/region.h"
#include "common/units.h"
#include "tools/cli.h"

namespace {

using sens::buffers::CacheGeometry;
using sens::buffers::CacheLevel;
using sens::buffers::Region;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kLine = 64;
constexpr uint32_t kPage = 4096;
constexpr const char* kLayoutNames[] = {"aligned-4k", "aligned-huge", "tyche"};
constexpr int kLayouts = 3;

struct Options {
  std::vector<uint64_t> sizes;
  uint64_t touch = 4096;  // 0: the whole buffer
  uint64_t max_bytes = 1ull << 30;
  uint64_t min_n = 4, max_n = 4096;
  double target_ms = 50;
  int repeats = 3;
  uint64_t seed = 1;
  int core = -1;  // -1: the CPU it starts on
  bool no_pin = false;
  bool quick = false;
  std::string json_path;
};

// N buffers of one layout, allocated once for the largest N of the sweep; a point with a
// smaller N uses the first N, so every N of a size measures the same memory.
struct Layout {
  const char* name = "";
  uint64_t stride = 0;  // distance between buffer starts (0: separate allocations)
  std::unique_ptr<Region> region;
  std::vector<uint8_t*> bufs;
  std::vector<uint8_t*> owned;  // aligned_alloc'd, freed by the destructor

  Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
  ~Layout() {
    for (uint8_t* b : owned) std::free(b);
  }
};

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "sens_cachebuf: %s\n", msg.c_str());
  return 2;
}

std::string kib(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
    std::snprintf(buf, sizeof buf, "%llu MiB", (unsigned long long)(bytes >> 20));
  else
    std::snprintf(buf, sizeof buf, "%llu KiB", (unsigned long long)(bytes >> 10));
  return buf;
}

// Guest-physical addresses from /proc/self/pagemap (root only: others read PFN 0). They say
// which L2 sets a 4 KiB page really falls into, which the virtual address cannot tell.
class Pagemap {
 public:
  Pagemap() : fd_(open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) {}
  ~Pagemap() {
    if (fd_ >= 0) close(fd_);
  }
  // The physical address of `p` (its page must be present), or nullopt.
  std::optional<uint64_t> physical(const void* p) const {
    if (fd_ < 0) return std::nullopt;
    const uint64_t v = reinterpret_cast<uintptr_t>(p);
    uint64_t entry = 0;
    if (pread(fd_, &entry, sizeof entry, off_t(v / kPage * sizeof entry)) != sizeof entry)
      return std::nullopt;
    const uint64_t pfn = entry & ((1ull << 55) - 1);
    if (!(entry >> 63) || pfn == 0) return std::nullopt;
    return pfn * kPage + v % kPage;
  }

 private:
  int fd_;
};

// The touched lines of the first `n` buffers, linked into one cycle in a random order.
// Returns the number of lines.
uint64_t build_ring(const std::vector<uint8_t*>& bufs, uint64_t n, uint64_t touch, uint64_t seed,
                    void** start) {
  std::vector<uint8_t*> lines;
  lines.reserve(n * (touch / kLine));
  for (uint64_t b = 0; b < n; ++b)
    for (uint64_t off = 0; off < touch; off += kLine) lines.push_back(bufs[b] + off);
  std::mt19937_64 rng(seed);
  std::shuffle(lines.begin(), lines.end(), rng);
  for (size_t i = 0; i < lines.size(); ++i)
    *reinterpret_cast<void**>(lines[i]) = lines[(i + 1) % lines.size()];
  *start = lines.front();
  return lines.size();
}

// Follows the ring for `steps` loads; returns where it stopped (so nothing is optimised out).
__attribute__((noinline)) void* chase(void* p, uint64_t steps) {
  uint64_t i = 0;
  for (; i + 8 <= steps; i += 8) {
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
    p = *static_cast<void**>(p);
  }
  for (; i < steps; ++i) p = *static_cast<void**>(p);
  return p;
}

void* volatile g_sink;

double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// How the heads of the first n buffers load the L2's sets, by physical address: the most
// lines any one set must hold (above the ways, the L2 cannot keep them all), and how many
// sets get any. Zero when physical addresses are unknown.
struct SetLoad {
  uint32_t peak = 0;
  uint32_t sets_used = 0;
};

std::vector<SetLoad> l2_loads(const Layout& l, const std::vector<uint64_t>& ns, uint64_t touch,
                              const CacheLevel* l2, const Pagemap& pm) {
  std::vector<SetLoad> out(ns.size());
  if (!l2) return out;
  std::vector<uint32_t> count(l2->sets, 0);
  SetLoad cur;
  uint64_t b = 0;
  for (size_t k = 0; k < ns.size(); ++k) {
    for (; b < ns[k]; ++b) {
      for (uint64_t off = 0; off < touch; off += kLine) {
        auto phys = pm.physical(l.bufs[b] + off);
        if (!phys) return std::vector<SetLoad>(ns.size());
        uint32_t& c = count[l2->set_of(*phys)];
        if (c++ == 0) ++cur.sets_used;
        cur.peak = std::max(cur.peak, c);
      }
    }
    out[k] = cur;
  }
  return out;
}

bool allocate(Layout* l, int kind, uint64_t size, uint64_t n, const CacheGeometry& g,
              std::string* error) {
  l->name = kLayoutNames[kind];
  l->bufs.reserve(n);
  if (kind == 0) {
    for (uint64_t i = 0; i < n; ++i) {
      // Aligned to its size as a naive allocator does; the 4 KiB pages under it land
      // wherever the kernel puts them (no THP, so the kernel's colours are what is measured).
      auto* b = static_cast<uint8_t*>(std::aligned_alloc(size, size));
      if (!b) {
        *error = "aligned_alloc(" + std::to_string(size) + ") failed";
        return false;
      }
      madvise(b, size, MADV_NOHUGEPAGE);
      l->owned.push_back(b);
      l->bufs.push_back(b);
    }
    return true;
  }
  // aligned-huge packs buffers at their size; tyche pads to the conflict-free stride.
  l->stride = kind == 1
                  ? size
                  : sens::buffers::conflict_free_stride(g, size, kPage, sens::buffers::kHugePage);
  l->region = Region::reserve(n * l->stride, true, error);
  if (!l->region) return false;
  for (uint64_t i = 0; i < n; ++i) l->bufs.push_back(l->region->base() + i * l->stride);
  return true;
}

struct Measured {
  double ns_per_line = 0;
  std::vector<double> runs;
};

// One warm-up pass (which also loads the lines into whatever cache holds them), then
// `passes` timed passes over the ring.
double timed_run(void* start, uint64_t lines, uint64_t passes) {
  g_sink = chase(start, lines);
  const auto t0 = SteadyClock::now();
  g_sink = chase(start, lines * passes);
  return seconds_since(t0) * 1e9 / double(lines * passes);
}

std::string format_ns(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ns < 10 ? "%.2f" : ns < 100 ? "%.1f" : "%.0f", ns);
  return buf;
}

bool parse_sizes(const std::string& text, std::vector<uint64_t>* out, std::string* error) {
  std::stringstream ss(text);
  std::string part;
  out->clear();
  while (std::getline(ss, part, ',')) {
    auto s = sens::parse_size(part);
    if (!s || *s < kPage || *s > (16ull << 20) || (*s & (*s - 1))) {
      *error = "--sizes '" + part + "': expected powers of two from 4k to 16m, comma-separated";
      return false;
    }
    out->push_back(*s);
  }
  if (out->empty()) {
    *error = "--sizes: expected at least one size";
    return false;
  }
  return true;
}

int cachebuf_main(int argc, char** argv) {
  Options o;
  std::string sizes = "4k,16k,64k,128k", touch = "4096", max_bytes = "1g";
  CLI::App app{
      "sens_cachebuf: the cost of I/O buffer placement in the cache (issue 12). For each buffer "
      "size and count N, reads the first --touch bytes of N buffers in a random cycle of "
      "dependent loads and reports ns per cache line, for three layouts: aligned-4k "
      "(aligned_alloc, 4 KiB pages), aligned-huge (packed at size-aligned offsets in 2 MiB "
      "pages) and tyche (2 MiB pages, conflict_free_stride apart).",
      "sens_cachebuf"};
  app.add_option("--sizes", sizes, "buffer sizes, comma-separated")->capture_default_str();
  app.add_option("--touch", touch, "bytes read at the head of each buffer, or 'all'")
      ->capture_default_str();
  app.add_option("--max-bytes", max_bytes, "largest N x size of the sweep")->capture_default_str();
  app.add_option("--min-n", o.min_n, "smallest buffer count")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 20));
  app.add_option("--max-n", o.max_n, "largest buffer count (N doubles from --min-n)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 20));
  app.add_option("--time-ms", o.target_ms, "least time of one measurement")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 10000.0));
  app.add_option("--repeats", o.repeats, "measurements per point (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 99));
  app.add_option("--seed", o.seed, "seed of the random line order")->capture_default_str();
  app.add_option("--core", o.core, "CPU to run on (-1: the one it starts on)")
      ->capture_default_str();
  app.add_flag("--no-pin", o.no_pin, "do not pin (the L2 is per core: a migration empties it)");
  app.add_flag("--quick", o.quick, "a short sweep (--max-bytes 64m, 5 ms per measurement)");
  app.add_option("--json", o.json_path, "write every number as JSON to FILE ('-': stdout)");
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;

  std::string error;
  if (!parse_sizes(sizes, &o.sizes, &error)) return usage_error(error);
  if (touch == "all") {
    o.touch = 0;
  } else {
    auto t = sens::parse_size(touch);
    if (!t || *t < kLine || *t % kLine)
      return usage_error("--touch '" + touch + "': expected a multiple of 64 bytes, or all");
    o.touch = *t;
  }
  if (o.quick && app.count("--max-bytes") == 0) max_bytes = "64m";
  if (o.quick && app.count("--time-ms") == 0) o.target_ms = 5;
  auto mb = sens::parse_size(max_bytes);
  if (!mb || *mb < kPage || *mb > (64ull << 30))
    return usage_error("--max-bytes '" + max_bytes + "': expected a size from 4k to 64g");
  o.max_bytes = *mb;
  if (o.min_n > o.max_n) return usage_error("--min-n is above --max-n");
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (o.core < -1 || o.core >= cpus)
    return usage_error("--core " + std::to_string(o.core) + ": no such CPU (this machine has " +
                       std::to_string(cpus) + ")");

  if (!o.no_pin) {
    // The L2 is per core: a migration mid-measurement would start it empty.
    const int cpu = o.core >= 0 ? o.core : sched_getcpu();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (cpu < 0 || sched_setaffinity(0, sizeof set, &set) != 0)
      std::fprintf(stderr, "sens_cachebuf: warning: cannot pin to CPU %d\n", cpu);
    o.core = cpu;
  }

  std::string geo_error;
  const CacheGeometry g = CacheGeometry::detect(&geo_error);
  const CacheLevel* l2 = g.level(2);
  const Pagemap pagemap;
  const auto wall0 = SteadyClock::now();

  nlohmann::json j_points = nlohmann::json::array(), j_knees = nlohmann::json::array(),
                 j_sizes = nlohmann::json::array();
  // Everything printed also goes into the JSON ("text"); with --json - only the JSON prints.
  std::string text;
  auto emit = [&](const std::string& s) {
    text += s;
    if (o.json_path != "-") {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }
  };
  char line[512];
  emit("sens_cachebuf: " + g.describe() +
       (geo_error.empty() ? "" : " (typical; sysfs: " + geo_error + ")") + "\n");
  std::snprintf(line, sizeof line,
                "touch %s per buffer, N x size <= %s, >= %.0f ms x %d per point (median), %s\n",
                o.touch ? kib(o.touch).c_str() : "all", kib(o.max_bytes).c_str(), o.target_ms,
                o.repeats,
                o.no_pin ? "not pinned" : ("pinned to CPU " + std::to_string(o.core)).c_str());
  emit(line);
  emit(
      "ns per cache line read (random dependent loads over all heads); L2 peak: the most\n"
      "touched lines on one L2 set, from guest-physical addresses (0: unknown)\n");
  bool physical_known = true;
  std::string knees_text;

  for (const uint64_t size : o.sizes) {
    const uint64_t touch = o.touch == 0 ? size : std::min(o.touch, size);
    std::vector<uint64_t> ns;
    for (uint64_t n = o.min_n; n <= o.max_n && n * size <= o.max_bytes; n *= 2) ns.push_back(n);
    if (ns.empty()) continue;
    const uint64_t max_n = ns.back();

    Layout layouts[kLayouts];
    for (int k = 0; k < kLayouts; ++k) {
      if (!allocate(&layouts[k], k, size, max_n, g, &error)) {
        std::fprintf(stderr, "sens_cachebuf: %s: %s\n", kLayoutNames[k], error.c_str());
        return 1;
      }
      // Faults every head in now (and so the huge pages under them) so that the set loads
      // below see physical pages, and no page fault lands in a measurement.
      for (uint8_t* b : layouts[k].bufs) std::memset(b, 0, touch);
    }

    emit("\n" + kib(size) + " buffers, " + kib(touch) + " touched each:\n");
    nlohmann::json j_layouts = nlohmann::json::object();
    std::vector<SetLoad> loads[kLayouts];
    for (int k = 0; k < kLayouts; ++k) {
      const Layout& l = layouts[k];
      loads[k] = l2_loads(l, ns, touch, l2, pagemap);
      if (loads[k].back().peak == 0) physical_known = false;
      nlohmann::json jl = {{"stride", l.stride}};
      if (l.region) {
        jl["page_kind"] = sens::buffers::page_kind_name(l.region->kind());
        jl["region_bytes"] = l.region->size();
        jl["huge_bytes"] = l.region->huge_bytes();
        std::snprintf(line, sizeof line, "  %-12s stride %s, %s pages, %s of %s huge-backed\n",
                      l.name, kib(l.stride).c_str(),
                      sens::buffers::page_kind_name(l.region->kind()),
                      kib(l.region->huge_bytes()).c_str(), kib(l.region->size()).c_str());
      } else {
        jl["page_kind"] = "4k";
        std::snprintf(line, sizeof line, "  %-12s aligned_alloc(%s, %s), 4 KiB pages\n", l.name,
                      kib(size).c_str(), kib(size).c_str());
      }
      emit(line);
      j_layouts[l.name] = jl;
    }
    j_sizes.push_back({{"size", size}, {"touch", touch}, {"layouts", j_layouts}});
    std::snprintf(line, sizeof line, "%8s %6s %9s | %12s %12s %12s | %10s %10s %10s\n", "size", "N",
                  "touched", "aligned-4k", "aligned-huge", "tyche", "L2 peak 4k", "huge", "tyche");
    emit(line);

    std::vector<double> result[kLayouts];
    for (size_t i = 0; i < ns.size(); ++i) {
      const uint64_t n = ns[i];
      void* start[kLayouts];
      uint64_t lines = 0;
      for (int k = 0; k < kLayouts; ++k)
        lines = build_ring(layouts[k].bufs, n, touch, o.seed, &start[k]);
      // Passes per measurement, from one calibration pass per layout (at least one pass).
      uint64_t passes[kLayouts];
      for (int k = 0; k < kLayouts; ++k) {
        g_sink = chase(start[k], lines);
        const auto t0 = SteadyClock::now();
        g_sink = chase(start[k], lines);
        const double pass_ms = std::max(seconds_since(t0) * 1e3, 1e-6);
        passes[k] = std::max<uint64_t>(1, uint64_t(o.target_ms / pass_ms + 0.999));
      }
      // Layouts take turns, so a slow spell of the machine hits all of them alike.
      Measured m[kLayouts];
      for (int r = 0; r < o.repeats; ++r)
        for (int k = 0; k < kLayouts; ++k)
          m[k].runs.push_back(timed_run(start[k], lines, passes[k]));
      for (int k = 0; k < kLayouts; ++k) {
        std::vector<double> sorted = m[k].runs;
        std::sort(sorted.begin(), sorted.end());
        m[k].ns_per_line = sorted[sorted.size() / 2];
        result[k].push_back(m[k].ns_per_line);
        j_points.push_back({{"size", size},
                            {"n", n},
                            {"touch", touch},
                            {"touched_bytes", n * touch},
                            {"lines", lines},
                            {"layout", kLayoutNames[k]},
                            {"ns_per_line", m[k].ns_per_line},
                            {"runs_ns_per_line", m[k].runs},
                            {"passes", passes[k]},
                            {"l2_peak_lines_per_set", loads[k][i].peak},
                            {"l2_sets_used", loads[k][i].sets_used}});
      }
      std::snprintf(line, sizeof line, "%8s %6llu %9s | %12s %12s %12s | %10u %10u %10u\n",
                    kib(size).c_str(), (unsigned long long)n, kib(n * touch).c_str(),
                    format_ns(m[0].ns_per_line).c_str(), format_ns(m[1].ns_per_line).c_str(),
                    format_ns(m[2].ns_per_line).c_str(), loads[0][i].peak, loads[1][i].peak,
                    loads[2][i].peak);
      emit(line);
    }

    // Where a layout falls off a cache level: the first N whose ns/line exceeds 2x and 4x the
    // smallest N's. When the smallest N fits the L1 (it does at the default touch), 2x marks
    // leaving the L1, not the L2; so the same is also measured from the first N whose heads
    // exceed the L1, an L2 hit, whose 2x is leaving the L2.
    const CacheLevel* l1 = g.level(1);
    size_t past_l1 = 0;
    while (l1 && past_l1 + 1 < ns.size() && ns[past_l1] * touch <= l1->size_bytes) ++past_l1;
    for (int k = 0; k < kLayouts; ++k) {
      nlohmann::json jk = {{"size", size},
                           {"layout", kLayoutNames[k]},
                           {"base_n", ns.front()},
                           {"base_ns_per_line", result[k].front()},
                           {"l2_base_n", ns[past_l1]},
                           {"l2_base_ns_per_line", result[k][past_l1]}};
      std::string cells;
      auto knee = [&](const std::string& key, size_t from, double limit) {
        jk["n_" + key] = nullptr;
        jk["touched_" + key] = nullptr;
        std::string cell = "-";
        for (size_t i = from; i < ns.size(); ++i) {
          if (result[k][i] > limit) {
            jk["n_" + key] = ns[i];
            jk["touched_" + key] = ns[i] * touch;
            cell = std::to_string(ns[i]) + " (" + kib(ns[i] * touch) + ")";
            break;
          }
        }
        std::snprintf(line, sizeof line, " %18s", cell.c_str());
        cells += line;
      };
      knee("2x", 0, 2 * result[k].front());
      knee("4x", 0, 4 * result[k].front());
      knee("l2_2x", past_l1, 2 * result[k][past_l1]);
      j_knees.push_back(jk);
      std::snprintf(line, sizeof line, "%8s %-12s %7s%s %7s\n", kib(size).c_str(), kLayoutNames[k],
                    format_ns(result[k].front()).c_str(), cells.c_str(),
                    format_ns(result[k][past_l1]).c_str());
      knees_text += line;
    }
  }

  std::snprintf(line, sizeof line,
                "\nWhere ns/line first exceeds 2x and 4x the smallest N's, and 2x the first N past "
                "the L1's\n(an L2 hit: 2x of it is leaving the L2). N (bytes touched):\n"
                "%8s %-12s %7s %18s %18s %18s %7s\n",
                "size", "layout", "min-N", "2x min-N", "4x min-N", "2x past-L1", "past-L1");
  emit(line + knees_text);
  const double wall_s = seconds_since(wall0);
  std::snprintf(line, sizeof line, "\n%.1f s\n", wall_s);
  emit(line);

  if (!o.json_path.empty()) {
    nlohmann::json levels = nlohmann::json::array();
    for (const auto& l : g.levels)
      levels.push_back({{"level", l.level},
                        {"size_bytes", l.size_bytes},
                        {"ways", l.ways},
                        {"sets", l.sets},
                        {"line", l.line},
                        {"way_bytes", l.way_bytes()},
                        {"sharing_cpus", l.sharing_cpus}});
    nlohmann::json j = {
        {"geometry", {{"describe", g.describe()}, {"levels", levels}, {"error", geo_error}}},
        {"options",
         {{"sizes", o.sizes},
          {"touch", o.touch == 0 ? nlohmann::json("all") : nlohmann::json(o.touch)},
          {"max_bytes", o.max_bytes},
          {"min_n", o.min_n},
          {"max_n", o.max_n},
          {"time_ms", o.target_ms},
          {"repeats", o.repeats},
          {"seed", o.seed},
          {"core", o.core},
          {"quick", o.quick}}},
        {"layouts", {"aligned-4k", "aligned-huge", "tyche"}},
        {"physical_addresses", physical_known},
        {"sizes", j_sizes},
        {"points", j_points},
        {"knees", j_knees},
        {"wall_s", wall_s},
        {"text", text},
    };
    if (o.json_path == "-") {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      std::ofstream f(o.json_path);
      f << j.dump(1) << "\n";
      if (!f) {
        std::fprintf(stderr, "sens_cachebuf: cannot write %s\n", o.json_path.c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cachebuf_main(argc, argv);
}
