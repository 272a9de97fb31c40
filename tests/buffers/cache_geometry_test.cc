// Cache geometry from sysfs-shaped directories (this machine's layout and others), the colour
// arithmetic, and the conflict-free stride for several geometries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "buffers/cache_geometry.h"

namespace sens::buffers {
namespace {

namespace fs = std::filesystem;

struct Index {
  const char* level;
  const char* type;
  const char* size;
  const char* ways;
  const char* sets;
  const char* line;
  const char* shared;
};

// A cpuN/cache directory with the given index entries.
std::string fake_sysfs(const std::string& name, const std::vector<Index>& entries) {
  const fs::path dir =
      fs::temp_directory_path() / ("sens-cache-" + std::to_string(getpid()) + "-" + name);
  fs::remove_all(dir);
  for (size_t i = 0; i < entries.size(); ++i) {
    const fs::path d = dir / ("index" + std::to_string(i));
    fs::create_directories(d);
    const Index& e = entries[i];
    auto put = [&](const char* file, const char* value) {
      if (value) std::ofstream(d / file) << value << "\n";
    };
    put("level", e.level);
    put("type", e.type);
    put("size", e.size);
    put("ways_of_associativity", e.ways);
    put("number_of_sets", e.sets);
    put("coherency_line_size", e.line);
    put("shared_cpu_list", e.shared);
  }
  return dir.string();
}

TEST(CacheGeometry, ReadsTheIssueMachine) {
  // The geometry the issue describes: L2 1 MiB 16-way, L3 32 MiB 16-way shared by 2 CPUs.
  std::string error;
  auto g = CacheGeometry::from_sysfs(
      fake_sysfs("zen", {{"1", "Data", "48K", "12", "64", "64", "0"},
                         {"1", "Instruction", "32K", "8", "64", "64", "0"},
                         {"2", "Unified", "1024K", "16", "1024", "64", "0"},
                         {"3", "Unified", "32768K", "16", "32768", "64", "0-1"}}),
      &error);
  ASSERT_EQ(g.levels.size(), 3u) << error;
  const CacheLevel* l2 = g.level(2);
  ASSERT_NE(l2, nullptr);
  EXPECT_EQ(l2->way_bytes(), 64u * 1024);
  EXPECT_EQ(l2->colours(4096), 16u);
  EXPECT_EQ(g.last()->level, 3);
  EXPECT_EQ(g.last()->sharing_cpus, 2u);
  EXPECT_EQ(g.last()->way_bytes(), 2u << 20) << "one 2 MiB huge page is exactly one L3 way";
  EXPECT_EQ(g.last()->colours(4096), 512u);
  EXPECT_EQ(g.describe(),
            "L1 48 KiB 12-way 64 sets, L2 1 MiB 16-way 1024 sets, L3 32 MiB "
            "16-way 32768 sets");
  // Set index = address bits 6-15 for this L2: 64 KiB apart is the same set.
  EXPECT_EQ(l2->set_of(0), l2->set_of(64 * 1024));
  EXPECT_EQ(l2->set_of(64), 1u);
  EXPECT_EQ(l2->colour_of(4096 * 17, 4096), 1u);
}

TEST(CacheGeometry, ReadsOtherShapes) {
  std::string error;
  // A VM's odd L3 (480 MiB, 491520 sets: not a power of two) and a 2 MiB L2.
  auto g = CacheGeometry::from_sysfs(
      fake_sysfs("vm", {{"1", "Data", "48K", "12", "64", "64", "0"},
                        {"2", "Unified", "2048K", "16", "2048", "64", "0"},
                        {"3", "Unified", "491520K", "16", "491520", "64", "0-1"}}),
      &error);
  ASSERT_EQ(g.levels.size(), 3u) << error;
  EXPECT_EQ(g.level(2)->colours(4096), 32u);
  EXPECT_EQ(g.level(3)->colours(4096), 7680u);
  EXPECT_EQ(g.level(3)->set_of(uint64_t(491520) * 64), 0u) << "wraps at the way, modulo";
  // 128-byte lines (as some Arm parts have) and a single level.
  auto h = CacheGeometry::from_sysfs(
      fake_sysfs("arm", {{"2", "Unified", "512K", "8", "512", "128", "0-3"}}), &error);
  ASSERT_EQ(h.levels.size(), 1u) << error;
  EXPECT_EQ(h.level(2)->way_bytes(), 64u * 1024);
  EXPECT_EQ(h.level(2)->sharing_cpus, 4u);
}

TEST(CacheGeometry, RefusesWhatDoesNotAddUp) {
  std::string error;
  auto g = CacheGeometry::from_sysfs(
      fake_sysfs("bad", {{"2", "Unified", "1024K", "16", "1000", "64", "0"}}), &error);
  EXPECT_TRUE(g.levels.empty());
  EXPECT_NE(error.find("inconsistent geometry"), std::string::npos) << error;
  g = CacheGeometry::from_sysfs(
      fake_sysfs("missing", {{"2", "Unified", "1024K", nullptr, "1024", "64", "0"}}), &error);
  EXPECT_TRUE(g.levels.empty());
  EXPECT_NE(error.find("missing or malformed"), std::string::npos) << error;
  g = CacheGeometry::from_sysfs(
      fake_sysfs("junk", {{"2", "Unified", "lots", "16", "1024", "64", "0"}}), &error);
  EXPECT_TRUE(g.levels.empty());
  g = CacheGeometry::from_sysfs("/nonexistent/cache", &error);
  EXPECT_TRUE(g.levels.empty());
  EXPECT_NE(error.find("no index0"), std::string::npos) << error;
  // detect() never leaves the caller without a geometry.
  EXPECT_FALSE(CacheGeometry::detect(&error).levels.empty());
}

TEST(CacheGeometry, CpuLists) {
  EXPECT_EQ(count_cpu_list("0"), 1u);
  EXPECT_EQ(count_cpu_list("0-1"), 2u);
  EXPECT_EQ(count_cpu_list("0-3,8,10-11"), 7u);
  EXPECT_EQ(count_cpu_list("3-1"), 0u);
  EXPECT_EQ(count_cpu_list("x"), 0u);
}

TEST(ConflictFreeStride, PadsWholeWaysOnly) {
  const CacheGeometry g = CacheGeometry::typical();  // L2 way 64 KiB, L3 way 2 MiB
  constexpr uint64_t kHuge = 2ull << 20;
  EXPECT_EQ(conflict_free_stride(g, 4096, 4096, kHuge), 4096u);
  EXPECT_EQ(conflict_free_stride(g, 16 << 10, 4096, kHuge), 16u << 10) << "tiles 4 colours";
  EXPECT_EQ(conflict_free_stride(g, 64 << 10, 4096, kHuge), 68u << 10);
  EXPECT_EQ(conflict_free_stride(g, 128 << 10, 4096, kHuge), 132u << 10);
  EXPECT_EQ(conflict_free_stride(g, 2 << 20, 4096, kHuge), (2u << 20) + 4096) << "an L3 way";
  EXPECT_EQ(conflict_free_stride(g, 3000, 4096, kHuge), 4096u) << "rounded up to the unit";
  // With 4 KiB pages no level's colour is the allocator's: no padding.
  EXPECT_EQ(conflict_free_stride(g, 64 << 10, 4096, 4096), 64u << 10);
  // The starts of successive 64 KiB buffers visit every L2 and the first L3 colours in turn.
  const uint64_t stride = conflict_free_stride(g, 64 << 10, 4096, kHuge);
  std::set<uint32_t> l2, l3;
  for (uint64_t k = 0; k < 16; ++k) l2.insert(g.level(2)->colour_of(k * stride, 4096));
  for (uint64_t k = 0; k < 512; ++k) l3.insert(g.level(3)->colour_of(k * stride, 4096));
  EXPECT_EQ(l2.size(), 16u);
  EXPECT_EQ(l3.size(), 512u);
  // A geometry with a 128 KiB L2 way: 64 KiB buffers already alternate; 128 KiB ones pad.
  CacheGeometry big;
  big.levels.push_back({2, 2048 * 1024, 16, 2048, 64, 1});
  EXPECT_EQ(conflict_free_stride(big, 64 << 10, 4096, kHuge), 64u << 10);
  EXPECT_EQ(conflict_free_stride(big, 128 << 10, 4096, kHuge), 132u << 10);
  // Heads spread: the unit count coprime with 32 colours, so 32 consecutive 64 KiB buffers
  // start on 32 colours (packed, they would alternate between 2).
  const uint64_t heads = conflict_free_stride(big, 64 << 10, 4096, kHuge, true);
  EXPECT_EQ(heads, 68u << 10);
  std::set<uint32_t> starts;
  for (uint64_t k = 0; k < 32; ++k) starts.insert(big.level(2)->colour_of(k * heads, 4096));
  EXPECT_EQ(starts.size(), 32u);
  EXPECT_EQ(conflict_free_stride(g, 16 << 10, 4096, kHuge, true), 20u << 10);
  EXPECT_EQ(conflict_free_stride(g, 4096, 4096, kHuge, true), 4096u);
}

}  // namespace
}  // namespace sens::buffers
