// A RAM namespace's pages, as `sens target` reports them at start and in stats_get, against
// what the kernel says of the same memory in /proc/PID/smaps of the target child.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "rpc_target.h"

namespace sens::testing {
namespace {

constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";  // the default subsystem
constexpr uint64_t kNamespaceBytes = 64ull << 20;                // RpcTarget's ram:64M

struct Smaps {
  bool found = false;
  bool eligible = true;  // every mapping of the range says THPeligible 1
  uint64_t rss = 0, huge = 0;
};

// Sums what /proc/PID/smaps says of the mappings overlapping [lo, hi).
Smaps smaps_of(pid_t pid, uint64_t lo, uint64_t hi) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  Smaps s;
  bool inside = false;
  while (std::getline(f, line)) {
    unsigned long long a = 0, b = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %7s", &a, &b, perms) == 3) {
      inside = a < hi && b > lo;
      s.found = s.found || inside;
      continue;
    }
    if (!inside) continue;
    unsigned long long kb = 0;
    int eligible = 0;
    if (std::sscanf(line.c_str(), "Rss: %llu kB", &kb) == 1) s.rss += kb * 1024;
    if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &kb) == 1) s.huge += kb * 1024;
    if (std::sscanf(line.c_str(), "THPeligible: %d", &eligible) == 1 && !eligible)
      s.eligible = false;
  }
  return s;
}

std::string system_thp_mode() {
  std::string line = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  size_t open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

nlohmann::json pages_of(RpcTarget& t) {
  nlohmann::json stats = t.ok({"stats_get"});
  EXPECT_EQ(stats["namespaces"].size(), 1u) << stats.dump();
  return stats["namespaces"][0]["pages"];
}

TEST(RamPages, StartLineAndStatsSayWhatSmapsSays) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  const std::string out = read_file(t.dir.file("out"));
  const size_t at = out.find("    pages: ");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string start_line = out.substr(at, out.find('\n', at) - at);

  nlohmann::json pages = pages_of(t);
  ASSERT_TRUE(pages.is_object()) << "no pages in the namespace's stats";
  const uint64_t lo = pages["address"].get<uint64_t>();
  ASSERT_NE(lo, 0u);
  Smaps before = smaps_of(t.child.pid(), lo, lo + kNamespaceBytes);
  ASSERT_TRUE(before.found) << "no mapping at the reported address";
  const std::string mode = system_thp_mode();
  EXPECT_EQ(pages["thp_enabled"], mode);
  EXPECT_TRUE(pages["smaps_found"].get<bool>());
  EXPECT_EQ(pages["thp_eligible"].get<bool>(), before.eligible);
  EXPECT_NE(
      start_line.find("THP enabled: " + mode + ", THPeligible " + (before.eligible ? "1" : "0")),
      std::string::npos)
      << start_line;
  // The namespace holds no memory until written, and the line says so.
  EXPECT_EQ(before.rss, 0u);
  EXPECT_NE(start_line.find("now 0 B of 0 B resident"), std::string::npos) << start_line;
  if (pages["madvise_hugepage"].get<bool>() && before.eligible) {
    EXPECT_NE(start_line.find("transparent huge pages"), std::string::npos) << start_line;
  } else {
    EXPECT_NE(start_line.find("4 KiB"), std::string::npos) << start_line;
  }

  // 16 MiB written: the stats now count what smaps counts for the same range.
  const std::string trid =
      "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:" + kNqn;
  RunResult w = run_command({SENS_BINARY, "perf", "-r", trid, "--rw", "write", "--bs", "128k",
                             "--size", "16M", "--prefill", "--time", "0.2", "--warmup", "0", "-q"},
                            30000);
  ASSERT_EQ(w.code, 0) << w.err << w.out;
  pages = pages_of(t);
  Smaps after = smaps_of(t.child.pid(), lo, lo + kNamespaceBytes);
  EXPECT_GE(after.rss, 16ull << 20);
  EXPECT_EQ(pages["resident_bytes"].get<uint64_t>(), after.rss);
  EXPECT_EQ(pages["huge_bytes"].get<uint64_t>(), after.huge);
  // Where the kernel said it would, it did: written 2 MiB ranges came as huge pages (a
  // fragmented machine may fall back for some, so not all of them).
  if (pages["madvise_hugepage"].get<bool>() && after.eligible) {
    EXPECT_GT(after.huge, 0u);
  }
}

}  // namespace
}  // namespace sens::testing
