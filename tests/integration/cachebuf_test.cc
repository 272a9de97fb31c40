// sens_cachebuf (bench/cache) keeps working: docs/results.md quotes its numbers for issue 12.
// No thresholds: the machine decides the numbers, the test only that every layout and size
// was measured and that bad options are refused.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "child_process.h"

namespace sens::testing {
namespace {

const std::vector<std::string> kLayouts = {"aligned-4k", "aligned-huge", "tyche"};
const std::vector<uint64_t> kSizes = {4096, 16384, 65536, 131072};

TEST(Cachebuf, QuickRunMeasuresEveryLayoutAndSize) {
  TempDir dir;
  RunResult r =
      run_command({SENS_CACHEBUF_BINARY, "--quick", "--json", dir.file("c.json")}, 120000);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("L2"), std::string::npos) << "no cache geometry in: " << r.out;
  auto j = nlohmann::json::parse(read_file(dir.file("c.json")), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON: " << read_file(dir.file("c.json"));
  for (const char* k : {"geometry", "options", "sizes", "points", "knees", "text"})
    ASSERT_TRUE(j.contains(k)) << "lacks " << k;
  EXPECT_FALSE(j["geometry"]["describe"].get<std::string>().empty());

  // Every (size, layout) has points, all with a positive ns/line, over the same N as the others.
  std::map<std::pair<uint64_t, std::string>, std::set<uint64_t>> ns;
  for (const auto& p : j["points"]) {
    ASSERT_TRUE(p.contains("ns_per_line")) << p.dump();
    EXPECT_GT(p["ns_per_line"].get<double>(), 0) << p.dump();
    EXPECT_GT(p["lines"].get<uint64_t>(), 0u) << p.dump();
    EXPECT_EQ(p["runs_ns_per_line"].size(), 3u) << p.dump();
    ns[{p["size"].get<uint64_t>(), p["layout"].get<std::string>()}].insert(p["n"].get<uint64_t>());
  }
  for (uint64_t size : kSizes) {
    for (const auto& layout : kLayouts) {
      auto it = ns.find({size, layout});
      ASSERT_NE(it, ns.end()) << "no points for " << size << " " << layout;
      EXPECT_GE(it->second.size(), 2u) << size << " " << layout;
      const auto& first = ns[std::make_pair(size, kLayouts[0])];
      EXPECT_EQ(it->second, first) << size << " " << layout;
    }
  }
  EXPECT_EQ(j["knees"].size(), kSizes.size() * kLayouts.size());
  // The huge-page layouts report what pages their region got.
  for (const auto& s : j["sizes"])
    for (const char* layout : {"aligned-huge", "tyche"})
      EXPECT_TRUE(s["layouts"][layout].contains("page_kind")) << s.dump();
}

TEST(Cachebuf, RefusesBadOptions) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"--sizes", "3k"},
                                       {"--touch", "100"},
                                       {"--max-bytes", "lots"},
                                       {"--min-n", "0"},
                                       {"--core", "4096"}}) {
    std::vector<std::string> argv = {SENS_CACHEBUF_BINARY, "--quick"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    RunResult r = run_command(argv);
    EXPECT_EQ(r.code, 2) << bad[0] << " " << bad[1] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
  RunResult r = run_command({SENS_CACHEBUF_BINARY, "--no-such-option"});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--no-such-option"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sens::testing
