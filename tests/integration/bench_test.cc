// `bench/run.py --quick` produces well-formed results: the physical limit, the JSON of every
// point (the median of its repetitions, as a fraction of the limit), the CSV and the plots.
// No timing thresholds: the numbers themselves are for docs/results.md.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "child_process.h"

namespace sens::testing {
namespace {

TEST(Bench, QuickSweepWritesJsonCsvAndPlots) {
  TempDir dir;
  RunResult r =
      run_command({"/usr/bin/env", "python3", std::string(SENS_SOURCE_DIR) + "/bench/run.py",
                   "--quick", "--sens", SENS_BINARY, "--out", dir.path(), "--policies",
                   "off,adaptive", "--reps", "2", "--time", "0.5", "--limit-time", "0.3"},
                  300000);
  ASSERT_EQ(r.code, 0) << r.out << r.err;

  std::ifstream in(dir.file("results.json"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "results.json is not JSON";
  ASSERT_TRUE(j.contains("meta") && j.contains("points") && j.contains("limits"));
  // Policies sens does not know yet are skipped with the reason, never failed.
  const auto& meta = j["meta"];
  const auto& policies = meta["policies"];
  // (Two policies, two short reps: the pipeline is what is tested; `make bench` measures.)
  for (const char* policy : {"off", "adaptive"}) {
    bool run = std::find(policies.begin(), policies.end(), policy) != policies.end();
    EXPECT_NE(run, meta["policies_skipped"].contains(policy)) << policy << ": " << meta.dump();
  }
  EXPECT_EQ(meta["reps"], 2);

  // The ceiling, measured before the grid: at least 4 KiB reads, busy-polling, at QD1.
  bool qd1_read = false;
  for (const auto& l : j["limits"]) {
    EXPECT_GT(l["iops"].get<double>(), 0) << l.dump();
    EXPECT_EQ(l["reps"].size(), 2u) << l.dump();
    qd1_read |= l["rw"] == "read" && l["bs"] == 4096 && l["qd"] == 1 && l["poll"] == "busy";
  }
  EXPECT_TRUE(qd1_read) << j["limits"].dump();

  const auto& points = j["points"];
  ASSERT_EQ(points.size(), 5 * policies.size())
      << "quick: 4 KiB reads at 1x1, 1x32, 4x32 and R2T writes at 1x32, 4x8, per policy";
  for (const auto& p : points) {
    for (const char* k : {"policy", "workload", "queues", "qd", "iops", "lat_avg_us", "lat_p99_us",
                          "target_usr_s_per_mio", "target_sys_s_per_mio", "host_usr_s_per_mio",
                          "target_send_calls_per_io", "r2t_delay_us", "target_flushes", "reps",
                          "iops_min", "iops_max", "limit", "fraction_of_limit"})
      ASSERT_TRUE(p.contains(k)) << "point lacks " << k << ": " << p.dump();
    EXPECT_GT(p["iops"].get<double>(), 0) << p.dump();
    EXPECT_GT(p["total_ios"].get<uint64_t>(), 0u);
    // The point is the median of its reps, each of which is kept.
    EXPECT_EQ(p["reps"].size(), 2u) << p.dump();
    EXPECT_LE(p["iops_min"].get<double>(), p["iops"].get<double>());
    EXPECT_GE(p["iops_max"].get<double>(), p["iops"].get<double>());
    EXPECT_GT(p["fraction_of_limit"].get<double>(), 0) << p.dump();
    EXPECT_NEAR(p["fraction_of_limit"].get<double>(),
                p["iops"].get<double>() / p["limit"]["iops"].get<double>(), 1e-9);
  }
  for (const char* policy : {"off", "adaptive"}) {
    bool seen = false;
    for (const auto& p : points) seen |= p["policy"] == policy;
    EXPECT_TRUE(seen) << policy;
  }

  std::ifstream csv(dir.file("results.csv"));
  std::string header, line;
  ASSERT_TRUE(std::getline(csv, header));
  EXPECT_NE(header.find("iops"), std::string::npos);
  size_t rows = 0, columns = std::count(header.begin(), header.end(), ',');
  while (std::getline(csv, line)) {
    ++rows;
    EXPECT_EQ(size_t(std::count(line.begin(), line.end(), ',')), columns) << line;
  }
  EXPECT_EQ(rows, points.size());

  for (const char* png : {"iops-ram-4k-randread.png", "latency-ram-4k-randread.png",
                          "iops-ram-16k-randwrite-r2t.png", "cpu-ram.png"}) {
    std::ifstream f(dir.file(png), std::ios::binary);
    ASSERT_TRUE(f) << png << " was not written";
    char magic[8] = {};
    f.read(magic, 8);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << png;
  }
}

}  // namespace
}  // namespace sens::testing
