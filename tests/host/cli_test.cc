// `sens perf`, `sens discover` and `sens identify` as a user runs them, against `sens target`
// on loopback: every --rw mode verified over several queues, R2T writes beyond the in-capsule
// size and maxh2cdata, digests, coalescing policies, the JSON report, a target killed mid-run,
// and bad command lines.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "../wait_until.h"
#include "child.h"

namespace sens::host {
namespace {

using testing::read_file;
using testing::run_sens;
using testing::TargetProcess;
using testing::temp_dir;

// The "verify: N blocks checked, F failed" line: N, or -1 if absent or F != 0.
long verified(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(verify: (\d+) blocks checked, (\d+) failed)")))
    return -1;
  return std::stol(m[2]) == 0 ? std::stol(m[1]) : -1;
}

std::vector<std::string> perf(const TargetProcess& t, std::vector<std::string> extra) {
  std::vector<std::string> args = {"perf", "-r", t.trid(), "--time", "1", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

class PerfModes : public ::testing::TestWithParam<const char*> {};

TEST_P(PerfModes, VerifiesOverSeveralQueues) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  const std::string bs = std::string(GetParam()).find("rand") == 0 ? "4k" : "16k";
  auto r = run_sens(perf(t, {"--rw", GetParam(), "--bs", bs, "--qd", "8", "--queues", "3",
                             "--verify", "--size", "8M"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(verified(r.output), 0) << r.output;
  EXPECT_NE(r.output.find("errors: 0"), std::string::npos) << r.output;
  if (std::string(GetParam()) == "read" || std::string(GetParam()) == "randread")
    EXPECT_NE(r.output.find("prefill: 8 MiB written"), std::string::npos) << r.output;
  else
    EXPECT_NE(r.output.find("read-back: "), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Rw, PerfModes,
                         ::testing::Values("read", "write", "randread", "randwrite", "rw",
                                           "randrw"));

// 128 KiB writes against 4 KiB in-capsule and 8 KiB maxh2cdata, digests on, policy semantic;
// the JSON report carries fio's names and the scheduler counters.
TEST(PerfCli, R2TWritesWithDigestsAndJsonReport) {
  TargetProcess t({"--inline-data", "4096", "--max-h2c-data", "8k"});
  ASSERT_TRUE(t.ready()) << t.log();
  const std::string json = temp_dir() + "/perf-r2t.json";
  auto r = run_sens(perf(t, {"--rw", "randrw", "--bs", "128k", "--qd", "4", "--queues", "2",
                             "--verify", "--hdr-digest", "--data-digest", "--json", json}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(verified(r.output), 0) << r.output;
  EXPECT_NE(r.output.find("in-capsule 4 KiB, maxh2cdata 8 KiB, digests hdr/data"),
            std::string::npos)
      << r.output;
  auto j = nlohmann::json::parse(read_file(json));
  EXPECT_GT(j["iops"].get<double>(), 0);
  EXPECT_GT(j["bw_bytes"].get<double>(), 0);
  EXPECT_EQ(j["errors"], 0);
  auto& job = j["jobs"][0];
  for (const char* dir : {"read", "write"}) {
    EXPECT_GT(job[dir]["iops"].get<double>(), 0) << dir;
    auto& pct = job[dir]["clat_ns"]["percentile"];
    for (const char* p : {"50.000000", "90.000000", "99.000000", "99.900000"})
      EXPECT_GT(pct[p].get<uint64_t>(), 0u) << dir << " " << p;
    EXPECT_LE(pct["50.000000"].get<uint64_t>(), pct["99.000000"].get<uint64_t>());
  }
  for (const char* k : {"usr_cpu", "sys_cpu", "ctx"}) EXPECT_TRUE(job.contains(k)) << k;
  EXPECT_GT(j["usr_cpu"].get<double>() + j["sys_cpu"].get<double>(), 0);
  EXPECT_GT(j["syscalls"]["send_per_io"].get<double>(), 0);
  EXPECT_GT(j["syscalls"]["recv_per_io"].get<double>(), 0);
  auto& c = j["coalesce"];
  EXPECT_GT(c["pdus_sent"].get<uint64_t>(), 0u);
  EXPECT_GT(c["send_calls"].get<uint64_t>(), 0u);
  EXPECT_TRUE(c.contains("flushes"));
  EXPECT_GE(c["pdus_per_flush"]["mean"].get<double>(), 1.0);
  EXPECT_TRUE(c.contains("r2t_delay_us"));
  // Every 128 KiB write went out as 16 H2CData PDUs plus its CapsuleCmd.
  EXPECT_GE(c["pdus_sent"].get<uint64_t>(), 17 * job["write"]["total_ios"].get<uint64_t>());
}

TEST(PerfCli, CoalescingPoliciesAndDisabledSqFlow) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  for (const char* policy : {"off", "uniform", "semantic"}) {
    const std::string json = temp_dir() + "/perf-" + policy + ".json";
    auto r = run_sens(perf(
        t, {"--rw", "randread", "--bs", "4k", "--qd", "16", "--queues", "2", "--coalesce", policy,
            "--disable-sqflow", "--json", json, "--pg-pdus", "8", "--pg-timeout-us", "20"}));
    ASSERT_EQ(r.exit_code, 0) << policy << "\n" << r.output;
    auto j = nlohmann::json::parse(read_file(json));
    EXPECT_EQ(j["options"]["coalesce"]["policy"], policy);
    EXPECT_EQ(j["options"]["coalesce"]["pg_pdus"], 8);
    auto& c = j["coalesce"];
    const double per_flush = c["pdus_per_flush"]["mean"].get<double>();
    if (std::string(policy) == "off") {
      EXPECT_EQ(per_flush, 1.0);
      EXPECT_EQ(c["pdus_sent"], c["flushes"]["immediate"]);
    } else {
      EXPECT_GT(per_flush, 1.0) << policy;  // 32 reads in flight: commands do batch
      EXPECT_LE(c["pdus_per_flush"]["max"].get<double>(), 8.0);
    }
  }
}

// 64 submitting threads over 2 shared connections, every read of a written block verified:
// the lock baseline and the send-lists both lose nothing; the report has each thread and, for
// sendlist, the owners' drain counts.
class PerfShare : public ::testing::TestWithParam<const char*> {};

TEST_P(PerfShare, SixtyFourThreadsOverTwoConnectionsVerify) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  const std::string mode = GetParam();
  const std::string json = temp_dir() + "/perf-share-" + mode + ".json";
  auto r = run_sens(perf(t, {"--rw", "randrw", "--bs", "4k", "--qd", "8", "--threads", "64",
                             "--connections", "2", "--share", mode, "--verify", "--json", json}),
                    120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("64 thread(s) x 1 queue(s), share " + mode + " over 2 connection(s)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("errors: 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", 0 failed"), std::string::npos) << r.output;
  EXPECT_GT(verified(r.output), 0) << r.output;
  auto j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j["options"]["share"], mode);
  EXPECT_EQ(j["options"]["threads"], 64);
  EXPECT_EQ(j["options"]["connections"], 2);
  ASSERT_EQ(j["threads"].size(), 64u);
  for (auto& th : j["threads"]) {
    EXPECT_GT(th["iops"].get<double>(), 0) << th.dump();
    EXPECT_GT(th["p99_us"].get<double>(), 0) << th.dump();
  }
  EXPECT_EQ(j["verify"]["failures"], 0);
  if (mode == "sendlist") {
    EXPECT_GT(j["drain"]["entries"].get<uint64_t>(), 0u) << j["drain"].dump();
    EXPECT_GE(j["drain"]["per_pass"]["mean"].get<double>(), 1.0);
    EXPECT_EQ(j["drain"]["connections"].size(), 2u);
    // An owner thread per connection, but no more than the CPUs the process may use.
    cpu_set_t cpus;
    ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
    EXPECT_EQ(j["drain"]["owners"], std::min(2, CPU_COUNT(&cpus))) << j["drain"].dump();
    EXPECT_NE(r.output.find("send-lists: "), std::string::npos) << r.output;
  } else {
    // Each submitter sends its own command under the lock: one send per command.
    EXPECT_GE(j["syscalls"]["send_per_io"].get<double>(), 0.99);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PerfShare, ::testing::Values("lock", "sendlist"));

// On one CPU (sens perf pinned to it), three sendlist connections share one owner thread, which
// drains every connection's send-lists in its passes; every read of a written block verified.
// lock keeps an owner per connection (a pass holds the connection's mutex).
TEST(PerfShareOwners, SendListConnectionsShareOneOwnerOnOneCpu) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  for (const std::string mode : {"sendlist", "lock"}) {
    const std::string json = temp_dir() + "/perf-owners-" + mode + ".json";
    // The child inherits the calling thread's affinity.
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    auto r = run_sens(perf(t, {"--rw", "randrw", "--bs", "4k", "--qd", "8", "--threads", "12",
                               "--connections", "3", "--share", mode, "--verify", "--json", json}),
                      120);
    ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("errors: 0"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(", 0 failed"), std::string::npos) << r.output;
    EXPECT_GT(verified(r.output), 0) << r.output;
    auto j = nlohmann::json::parse(read_file(json));
    EXPECT_EQ(j["verify"]["failures"], 0);
    if (mode == "sendlist") {
      EXPECT_EQ(j["drain"]["owners"], 1) << j["drain"].dump();
      ASSERT_EQ(j["drain"]["connections"].size(), 3u);
      for (auto& c : j["drain"]["connections"])  // the one owner drained all three
        EXPECT_GT(c["entries"].get<uint64_t>(), 0u) << j["drain"].dump();
      EXPECT_NE(r.output.find("1 owner thread(s)"), std::string::npos) << r.output;
    } else {
      EXPECT_EQ(j["drain"]["owners"], 3) << j["drain"].dump();
    }
  }
}

// --prefill writes the whole region before any mode (here a write mode, which --verify alone
// would not prefill), says so, and the JSON report records it.
TEST(PerfCli, PrefillWritesTheRegionFirst) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  const std::string json = temp_dir() + "/perf-prefill.json";
  auto r = run_sens(
      perf(t, {"--rw", "randwrite", "--bs", "4k", "--size", "8M", "--prefill", "--json", json}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prefill: 8 MiB written"), std::string::npos) << r.output;
  auto j = nlohmann::json::parse(read_file(json));
  EXPECT_EQ(j["options"]["prefill"], true) << j.dump();
  // Without it, a write mode starts at once.
  r = run_sens(perf(t, {"--rw", "randwrite", "--bs", "4k", "--size", "8M"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("prefill:"), std::string::npos) << r.output;
}

TEST(PerfCli, KilledTargetEndsTheRunWithAnError) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  std::thread killer([&] {
    // Mid-run: once 4 MiB of perf's I/O has gone through the target.
    const uint64_t before = t.io_bytes();
    wait_until([&] { return t.io_bytes() - before >= (4u << 20); }, std::chrono::seconds(20));
    t.stop();
  });
  auto r = run_sens({"perf", "-r", t.trid(), "--rw", "randrw", "--bs", "16k", "--qd", "8",
                     "--queues", "2", "--time", "30", "--verify"},
                    40);
  killer.join();
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(r.seconds, 10) << "should end at the kill, not at --time";
  EXPECT_NE(r.output.find("I/O error(s); first: "), std::string::npos) << r.output;
  // The I/O fails with a path error, unless the admin queue's close is seen first.
  EXPECT_TRUE(r.output.find("Host path error") != std::string::npos ||
              r.output.find("admin queue: connection closed by the controller") !=
                  std::string::npos)
      << r.output;
}

TEST(PerfCli, HungTargetTimesOutInsteadOfHanging) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  std::thread stopper([&] {
    // Mid-run: once 1 MiB of perf's reads has gone through the target.
    const uint64_t before = t.io_bytes();
    wait_until([&] { return t.io_bytes() - before >= (1u << 20); }, std::chrono::seconds(20));
    t.signal(SIGSTOP);
  });
  auto r = run_sens({"perf", "-r", t.trid(), "--rw", "randread", "--qd", "4", "--time", "20",
                     "--io-timeout", "500", "--kato", "0", "-q"},
                    30);
  stopper.join();
  t.signal(SIGCONT);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.output.find("timed out after 500 ms"), std::string::npos) << r.output;
}

TEST(PerfCli, BadCommandLines) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::string trid = "traddr:127.0.0.1 trsvcid:9 subnqn:nqn.2024-01.io.x:d";
  const Case cases[] = {
      {{"perf"}, "-r TRID is required"},
      {{"perf", "-r", trid, "--rw", "readwrite"},
       "--rw 'readwrite': expected read, write, randread, randwrite, rw or randrw"},
      {{"perf", "-r", trid, "--bs", "4q"}, "--bs '4q' is not a size"},
      {{"perf", "-r", trid, "--bs", "1000"}, "--bs 1000: must be a non-zero multiple of 512"},
      {{"perf", "-r", trid, "--coalesce", "greedy"},
       "--coalesce 'greedy': expected off, eager, uniform, semantic or adaptive"},
      {{"perf", "-r", trid, "--poll", "sometimes"},
       "--poll 'sometimes': expected off, adaptive or always"},
      {{"perf", "-r", trid, "--poll-max-us", "-1"}, "--poll-max-us must be between 0 and 1000000"},
      {{"perf", "-r", trid, "--rw", "read", "--rwmixread", "30"},
       "--rwmixread applies to rw and randrw, not read"},
      {{"perf", "-r", "traddr:127.0.0.1 hostnqn:x"}, "-r: hostnqn 'x' does not start with 'nqn.'"},
      {{"perf", "-r", trid, "--qd", "lots"}, "--qd"},
      {{"perf", "-r", trid, "--share", "maybe"},
       "--share 'maybe': expected none, lock or sendlist"},
      {{"perf", "-r", trid, "--threads", "2", "--connections", "3"},
       "--connections 3 with --share none: each of the 2 queues (threads x queues) has its own "
       "connection"},
      {{"perf", "-r", trid, "--threads", "2", "--share", "lock", "--connections", "3"},
       "--connections 3: at most threads x queues (2)"},
      {{"perf", "-r", trid, "--threads", "0"}, "--threads 0: must be 1..256"},
      {{"perf", "-r", trid, "--rate-iops", "-5"}, "--rate-iops -5: must be 0 (no limit) to 1e9"},
  };
  for (const Case& c : cases) {
    auto r = run_sens(c.args, 10);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
  // Nothing listens on port 9 of loopback: a connection error, exit 1, at once.
  auto r = run_sens({"perf", "-r", trid, "--time", "1"}, 20);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("Connection refused"), std::string::npos) << r.output;
}

// --rate-iops paces the closed loop: 64 slots over 4 queues do 200 I/Os a second, verified,
// and the reactor sleeps between them instead of spinning.
TEST(PerfCli, RateCapPacesTheLoop) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  const std::string json = temp_dir() + "/perf-rate.json";
  auto r = run_sens(perf(t, {"--rw", "randrw", "--qd", "16", "--queues", "4", "--rate-iops", "200",
                             "--verify", "--size", "4M", "--json", json}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("capped at 200 IOPS"), std::string::npos) << r.output;
  auto j = nlohmann::json::parse(read_file(json));
  EXPECT_NEAR(j["iops"].get<double>(), 200, 20) << r.output;
  EXPECT_EQ(j["options"]["rate_iops"].get<double>(), 200);
  EXPECT_GT(j["poll"]["sleeps"].get<uint64_t>(), 100u) << "paced: the host sleeps";
  const double cpu = j["cpu_user_s"].get<double>() + j["cpu_sys_s"].get<double>();
  EXPECT_LT(cpu / j["runtime_s"].get<double>(), 0.5) << r.output;
}

// --buffers tyche on both ends: every workload shape verifies (in-capsule and R2T writes,
// digests), and a receive budget of two 128 KiB buffers makes R2Ts wait without failing.
TEST(PerfCli, TycheBuffersVerifyAndThrottleR2T) {
  const std::string stats = temp_dir() + "/tyche-stats.json";
  std::remove(stats.c_str());
  TargetProcess t({"--buffers", "tyche", "--receive-budget", "256k", "--stats-json", stats});
  ASSERT_TRUE(t.ready()) << t.log();
  EXPECT_NE(t.log().find("buffers: tyche"), std::string::npos) << t.log();
  const std::vector<std::vector<std::string>> runs = {
      {"--rw", "randrw", "--bs", "4k", "--qd", "16", "--queues", "2"},
      {"--rw", "randwrite", "--bs", "128k", "--qd", "8", "--queues", "2", "--hdr-digest",
       "--data-digest"},
      {"--rw", "read", "--bs", "64k", "--qd", "4"}};
  for (const auto& extra : runs) {
    std::vector<std::string> args = extra;
    for (const char* a : {"--verify", "--size", "8M", "--buffers", "tyche"}) args.push_back(a);
    auto r = run_sens(perf(t, args));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GT(verified(r.output), 0) << r.output;
  }
  t.signal(SIGUSR1);
  ASSERT_TRUE(wait_until([&] { return !read_file(stats).empty(); }, std::chrono::seconds(5)))
      << t.log();
  nlohmann::json j;
  ASSERT_TRUE(wait_until(
      [&] {
        j = nlohmann::json::parse(read_file(stats), nullptr, false);
        return !j.is_discarded();
      },
      std::chrono::seconds(5)));
  auto& pool = j["reactors"][0]["buffer_pool"];
  EXPECT_EQ(pool["layout"], "tyche");
  EXPECT_EQ(pool["receive_budget"], 256 * 1024);
  EXPECT_GT(pool["throttled"].get<uint64_t>(), 0u) << pool.dump();
  EXPECT_EQ(pool["receive_in_use_bytes"], 0) << "every R2T buffer came back";
  EXPECT_EQ(pool["colours"].get<uint64_t>() > 0, true);
}

TEST(PerfCli, VerifyNeedsRoomForSerializedIo) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto r = run_sens(
      perf(t, {"--rw", "randrw", "--qd", "8", "--queues", "2", "--verify", "--size", "32k"}));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("--verify needs a region of at least 2 x qd x queues blocks (32 x 4 KiB), "
                    "have 8"),
      std::string::npos)
      << r.output;
}

TEST(DiscoverCli, PrintsTheLogLikeNvmeCli) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto r = run_sens({"discover", "-a", "127.0.0.1", "-s", std::to_string(t.disc_port)}, 20);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Discovery Log Number of Records"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("subtype: nvme subsystem\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trsvcid: " + std::to_string(t.port) + "\nsubnqn:  " + t.nqn + "\n" +
                          "traddr:  127.0.0.1\n"),
            std::string::npos)
      << r.output;
  auto bad = run_sens(
      {"discover", "-a", "127.0.0.1", "-s", std::to_string(t.disc_port + 0), "--hostnqn", "bogus"},
      20);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
}

TEST(IdentifyCli, PrintsIdCtrlAndNamespaces) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto r = run_sens({"identify", "-r", t.trid(), "--ns"}, 20);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("NVME Identify Controller:\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("\nsubnqn    : " + t.nqn + "\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nNVME Identify Namespace 1:\nnsze    : 0x20000\n"), std::string::npos)
      << r.output;  // 64 MiB in 512-byte blocks
  auto missing = run_sens({"identify", "-r",
                           "traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) +
                               " subnqn:nqn.2026-11.dev.sens:nosuch"},
                          20);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("Connect qid 0 to nqn.2026-11.dev.sens:nosuch"), std::string::npos)
      << missing.output;
}

}  // namespace
}  // namespace sens::host
