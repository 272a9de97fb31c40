// sens_limit (bench/limit) keeps working: bench/run.py divides every point by its numbers, so
// a silently broken limit program would corrupt every "fraction of limit". No thresholds: the
// machine decides the numbers, the test only that they exist and are well-formed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.h"

namespace sens::testing {
namespace {

// Pinned as the bench runs it when there are two cores; unpinned otherwise.
std::vector<std::string> core_args() {
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) return {"--target-core", "0", "--client-core", "1"};
  return {"--target-core", "-1", "--client-core", "-1"};
}

nlohmann::json run_limit(const std::vector<std::string>& options) {
  TempDir dir;
  std::vector<std::string> argv = {SENS_LIMIT_BINARY,      "--time", "0.3", "--json",
                                   dir.file("limit.json"), "-q"};
  argv.insert(argv.end(), options.begin(), options.end());
  for (auto& a : core_args()) argv.push_back(a);
  RunResult r = run_command(argv, 10000);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  auto j = nlohmann::json::parse(read_file(dir.file("limit.json")), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << read_file(dir.file("limit.json"));
  return j.is_discarded() ? nlohmann::json::object() : j;
}

void expect_measured(const nlohmann::json& j, unsigned qd, const char* rw) {
  for (const char* k : {"iops", "lat_avg_us", "lat_p50_us", "lat_p99_us", "total_ios", "runtime_s",
                        "target", "client"})
    ASSERT_TRUE(j.contains(k)) << "lacks " << k << ": " << j.dump();
  EXPECT_EQ(j["qd"], qd);
  EXPECT_EQ(j["rw"], rw);
  EXPECT_GT(j["iops"].get<double>(), 0);
  EXPECT_GT(j["total_ios"].get<uint64_t>(), 0u);
  EXPECT_GT(j["lat_avg_us"].get<double>(), 0);
  EXPECT_LE(j["lat_p50_us"].get<double>(), j["lat_p99_us"].get<double>());
  EXPECT_GT(j["runtime_s"].get<double>(), 0.2);
}

TEST(Limit, ReadsAtQd1AndQd8) {
  expect_measured(run_limit({"--qd", "1"}), 1, "read");
  expect_measured(run_limit({"--qd", "8", "--queues", "2"}), 8, "read");
}

TEST(Limit, WritesSleepingInEpoll) {
  auto j = run_limit({"--qd", "8", "--rw", "write", "--bs", "16k", "--poll", "epoll"});
  expect_measured(j, 8, "write");
  EXPECT_EQ(j["request_bytes"], 72 + 16384);
  EXPECT_EQ(j["answer_bytes"], 24);
}

// The secure modes' ceilings (issue 31): the digests on the wire, and TLS 1.3 records on
// every connection (with epoll, so a record batch waiting for room must wake the loop).
TEST(Limit, DigestsAndTlsCarryTheSameShapes) {
  auto d = run_limit({"--qd", "8", "--security", "digest"});
  expect_measured(d, 8, "read");
  EXPECT_EQ(d["security"], "digest");
  EXPECT_EQ(d["request_bytes"], 72 + 4);
  EXPECT_EQ(d["answer_bytes"], 24 + 4 + 4096 + 4 + 24 + 4);
  auto t = run_limit({"--qd", "8", "--queues", "2", "--security", "tls"});
  expect_measured(t, 8, "read");
  EXPECT_EQ(t["security"], "tls");
  expect_measured(run_limit({"--qd", "8", "--rw", "write", "--bs", "16k", "--poll", "epoll",
                             "--security", "tls"}),
                  8, "write");
}

// How far apart the two cores are (a VM's vCPUs on one chiplet or two): alone, and in every
// run's JSON, so that a bench compares only runs made under the same placement.
TEST(Limit, MeasuresTheCoresRoundTrip) {
  const bool two_cores = sysconf(_SC_NPROCESSORS_ONLN) >= 2;
  auto run = run_limit({"--qd", "4"});
  ASSERT_TRUE(run.contains("core_round_trip_ns")) << run.dump();
  if (!two_cores) {
    EXPECT_TRUE(run["core_round_trip_ns"].is_null());
    return;
  }
  EXPECT_GT(run["core_round_trip_ns"].get<double>(), 0);
  TempDir dir;
  RunResult r = run_command({SENS_LIMIT_BINARY, "--core-round-trip", "--json",
                             dir.file("link.json"), "--target-core", "0", "--client-core", "1"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("core 0 and core 1: a cache line's round trip takes "), std::string::npos)
      << r.out;
  auto j = nlohmann::json::parse(read_file(dir.file("link.json")), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_GT(j["core_round_trip_ns"].get<double>(), 0);
  EXPECT_EQ(j["client_core"], 1);
  // A JSON file that cannot be written (a full disk) fails the run and says so.
  r = run_command({SENS_LIMIT_BINARY, "--core-round-trip", "--json", "/dev/full", "-q"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("sens_limit: cannot write /dev/full"), std::string::npos) << r.err;
  // One core for both: nothing to measure, and said so.
  r = run_command(
      {SENS_LIMIT_BINARY, "--core-round-trip", "--target-core", "1", "--client-core", "1"});
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--core-round-trip needs two different cores"), std::string::npos) << r.err;
}

TEST(Limit, RefusesBadOptions) {
  for (std::vector<std::string> bad : {std::vector<std::string>{"--qd", "0"},
                                       {"--rw", "trim"},
                                       {"--bs", "4q"},
                                       {"--poll", "spin"},
                                       {"--security", "ipsec"},
                                       {"--client-core", "4096"}}) {
    std::vector<std::string> argv = {SENS_LIMIT_BINARY, "--time", "0.1"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    RunResult r = run_command(argv);
    EXPECT_EQ(r.code, 2) << bad[0] << " " << bad[1] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace sens::testing
