// QoS against a real `sens target` with `sens perf`: a namespace limited in the config holds
// perf near its limit with no error; a limit set live over the RPC takes effect, a host's
// limit too, and lifting it restores the speed; save_config and load_config carry the limits;
// two reactors share one; a stop or a host gone does not wait on throttled commands; bad
// inputs (config and RPC) are refused with the reason. Bounds are loose (the machine is shared):
// mainly an upper bound, and progress with no error.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "rpc_target.h"

namespace sens::testing {
namespace {

using nlohmann::json;
constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";
constexpr const char* kHost =
    "nqn.2014-08.org.nvmexpress:uuid:0000000a-0000-0000-0000-00000000000a";

struct PerfRun {
  double iops = 0, bw = 0;
  uint64_t errors = 1;
  std::string out;
};

PerfRun perf_run(uint16_t port, const std::string& seconds, const std::string& bs = "4k",
                 const std::string& rw = "randread", bool host = false) {
  std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) +
                     " subnqn:" + kNqn + (host ? std::string(" hostnqn:") + kHost : "");
  RunResult r = run_command({SENS_BINARY, "perf", "-r", trid, "--rw", rw, "--bs", bs, "--qd", "16",
                             "--time", seconds, "--size", "16M", "-q", "--json", "-"},
                            60000);
  PerfRun p;
  p.out = r.out + r.err;
  EXPECT_EQ(r.code, 0) << p.out;
  size_t brace = r.out.find('{');
  if (brace == std::string::npos) return p;
  json j = json::parse(r.out.substr(brace), nullptr, false);
  if (j.is_discarded()) return p;
  p.iops = j.value("iops", 0.0);
  p.bw = j.value("bw_bytes", 0.0);
  p.errors = j.value("errors", uint64_t(1));
  return p;
}

std::string config_with_qos(RpcTarget& t, const std::string& qos) {
  std::string cfg = t.dir.file("t.json");
  EXPECT_TRUE(write_file(cfg, R"({"subsystems":[{"nqn":")" + std::string(kNqn) +
                                  R"(","namespaces":["ram:64M"],"qos":)" + qos + "}]}"));
  return cfg;
}

TEST(Qos, ANamespaceLimitedInTheConfigHoldsPerfNearItsLimit) {
  RpcTarget t;
  ASSERT_EQ(
      t.start({"--config", config_with_qos(t, R"({"namespaces": {"1": {"total_iops": 2000}}})")}),
      "");
  PerfRun p = perf_run(t.port, "1");
  EXPECT_EQ(p.errors, 0u) << p.out;
  // 2000 a second plus the 20 the bucket holds at the start; progress at all under a noisy
  // machine is the lower bound's point.
  EXPECT_LE(p.iops, 2000 * 1.2) << p.out;
  EXPECT_GE(p.iops, 2000 * 0.5) << p.out;
  json stats = t.ok({"stats_get"});
  EXPECT_GT(stats["qos"]["throttled"].get<uint64_t>(), 100u) << stats["qos"];
  EXPECT_GT(stats["qos"]["delay_us"].get<uint64_t>(), 0u);
  EXPECT_EQ(t.ok({"qos_get", "--nqn", kNqn}),
            json::parse(R"({"namespaces": {"1": {"total_iops": 2000}}})"));
}

TEST(Qos, ABandwidthLimitCountsBytes) {
  RpcTarget t;
  ASSERT_EQ(
      t.start({"--config", config_with_qos(t, R"({"namespaces": {"1": {"read_mibps": 8}}})")}), "");
  PerfRun p = perf_run(t.port, "1", "64k");
  EXPECT_EQ(p.errors, 0u) << p.out;
  EXPECT_LE(p.bw, 8 * 1.2 * (1 << 20)) << p.out;
  EXPECT_GE(p.bw, 8 * 0.5 * (1 << 20)) << p.out;
  // Writes are not read-limited.
  PerfRun w = perf_run(t.port, "0.5", "64k", "randwrite");
  EXPECT_EQ(w.errors, 0u) << w.out;
  EXPECT_GT(w.bw, 8 * 2.0 * (1 << 20)) << w.out;
}

TEST(Qos, ALimitSetLiveTakesEffectAndLiftingItRestoresSpeed) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  json set = t.ok({"qos_set", "--nqn", kNqn, "--nsid", "1", "--read_iops", "1000"});
  EXPECT_EQ(set["limits"], json::parse(R"({"read_iops": 1000})"));
  PerfRun limited = perf_run(t.port, "1");
  EXPECT_EQ(limited.errors, 0u) << limited.out;
  EXPECT_LE(limited.iops, 1000 * 1.2) << limited.out;
  EXPECT_GE(limited.iops, 1000 * 0.5) << limited.out;
  // Another key keeps the first; save_config carries both.
  t.ok({"qos_set", "--nqn", kNqn, "--nsid", "1", "--write_mibps", "50"});
  json saved = t.ok({"save_config"});
  EXPECT_EQ(saved["subsystems"][0]["qos"],
            json::parse(R"({"namespaces": {"1": {"read_iops": 1000, "write_mibps": 50}}})"));
  // Lifted: faster than the limit again.
  t.ok({"qos_set", "--nqn", kNqn, "--nsid", "1", "--clear", "true"});
  EXPECT_EQ(t.ok({"qos_get", "--nqn", kNqn}), json::object());
  PerfRun free = perf_run(t.port, "0.5");
  EXPECT_EQ(free.errors, 0u) << free.out;
  EXPECT_GT(free.iops, 1000 * 2.0) << free.out;
  // A host's limit: that host is held, another host is not.
  t.ok({"qos_set", "--nqn", kNqn, "--host", kHost, "--total_iops", "500"});
  PerfRun host = perf_run(t.port, "1", "4k", "randread", true);
  EXPECT_EQ(host.errors, 0u) << host.out;
  EXPECT_LE(host.iops, 500 * 1.2) << host.out;
  EXPECT_GE(host.iops, 500 * 0.5) << host.out;
  PerfRun other = perf_run(t.port, "0.5");
  EXPECT_GT(other.iops, 500 * 2.0) << other.out;
}

// A graceful stop does not wait for throttled commands to earn their tokens: the limits
// are lifted once the stop has begun, so commands already started are answered at once.
TEST(Qos, AStopDoesNotWaitForThrottledCommands) {
  RpcTarget t;
  ASSERT_EQ(
      t.start({"--config", config_with_qos(t, R"({"namespaces": {"1": {"total_iops": 5}}})")}), "");
  std::string trid =
      "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:" + kNqn;
  Child perf;
  ASSERT_TRUE(perf.start({SENS_BINARY, "perf", "-r", trid, "--rw", "randread", "--qd", "32",
                          "--time", "20", "--size", "16M", "-q"},
                         t.dir.file("perf.out"), t.dir.file("perf.err")));
  // 32 commands outstanding at 5 a second: most wait (for up to 6 s each).
  for (int i = 0; i < 50; ++i) {
    json stats = t.ok({"stats_get"});
    if (stats["qos"]["throttled"].get<uint64_t>() >= 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(t.ok({"stats_get"})["qos"]["throttled"].get<uint64_t>(), 20u);
  auto begin = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.child.signal(SIGTERM));
  EXPECT_EQ(t.child.wait(15000), 0) << read_file(t.dir.file("err"));
  auto took = std::chrono::steady_clock::now() - begin;
  EXPECT_LT(took, std::chrono::seconds(3)) << read_file(t.dir.file("err"));
  EXPECT_EQ(read_file(t.dir.file("err")).find("unanswered"), std::string::npos)
      << read_file(t.dir.file("err"));
  perf.kill_now();
}

// A host that goes away with commands throttled: they leave their limiter's queue with the
// connection, and the target serves the next host (unlimited again) with no error.
TEST(Qos, AHostThatGoesAwayWhileThrottledLeavesNothingBehind) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  t.ok({"qos_set", "--nqn", kNqn, "--nsid", "1", "--total_iops", "5"});
  std::string trid =
      "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:" + kNqn;
  Child perf;
  ASSERT_TRUE(perf.start({SENS_BINARY, "perf", "-r", trid, "--rw", "randwrite", "--qd", "32",
                          "--queues", "2", "--time", "20", "--size", "16M", "-q"},
                         t.dir.file("perf.out"), t.dir.file("perf.err")));
  for (int i = 0; i < 50; ++i) {
    if (t.ok({"stats_get"})["qos"]["throttled"].get<uint64_t>() >= 40) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  perf.kill_now();  // gone with ~60 commands waiting for tokens
  for (int i = 0; i < 50; ++i) {
    if (t.ok({"stats_get"})["reactors"][0]["open_connections"].get<uint64_t>() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  json stats = t.ok({"stats_get"});
  EXPECT_EQ(stats["reactors"][0]["open_connections"], 0) << stats["reactors"][0];
  EXPECT_GE(stats["qos"]["throttled"].get<uint64_t>(), 40u);
  t.ok({"qos_set", "--nqn", kNqn, "--nsid", "1", "--clear", "true"});
  PerfRun p = perf_run(t.port, "0.5");
  EXPECT_EQ(p.errors, 0u) << p.out;
  EXPECT_GT(p.iops, 100) << p.out;
  EXPECT_TRUE(t.child.running());
}

// Two reactors each enforce half of a limit: a host whose two queues land on both holds the
// whole limit. A file applied with load_config sets limits too.
TEST(Qos, TwoReactorsShareALimitAndLoadConfigSetsOne) {
  RpcTarget t;
  ASSERT_EQ(t.start({"--cores", "2"}), "");
  std::string cfg = config_with_qos(t, R"({"namespaces": {"1": {"total_iops": 2000}}})");
  json changes = t.ok({"load_config", "--path", cfg});
  EXPECT_NE(changes.dump().find("qos limits set"), std::string::npos) << changes;
  EXPECT_EQ(t.ok({"qos_get", "--nqn", kNqn}),
            json::parse(R"({"namespaces": {"1": {"total_iops": 2000}}})"));
  std::string trid =
      "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:" + kNqn;
  RunResult r = run_command({SENS_BINARY, "perf", "-r", trid, "--rw", "randread", "--qd", "16",
                             "--queues", "2", "--time", "1", "--size", "16M", "-q", "--json", "-"},
                            60000);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  json j = json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.value("errors", uint64_t(1)), 0u) << r.out;
  EXPECT_LE(j.value("iops", 0.0), 2000 * 1.2) << r.out;
  EXPECT_GE(j.value("iops", 0.0), 2000 * 0.5) << r.out;
  json stats = t.ok({"stats_get"});
  ASSERT_EQ(stats["reactors"].size(), 2u);
  for (auto& reactor : stats["reactors"])  // both reactors held their half
    EXPECT_GT(reactor["qos"]["throttled"].get<uint64_t>(), 0u) << stats["reactors"];
}

// --qos on the command line: the limits land in the subsystem (--dump-config shows them);
// a bad one stops the start with the reason.
TEST(Qos, TheCommandLineOption) {
  RunResult r = run_command(
      {SENS_BINARY, "target", "--ns", "ram:16M", "--qos", "ns=1,read_iops=2000,total_mibps=100",
       "--qos", std::string("host=") + kHost + ",write_iops=50", "--dump-config"},
      10000);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["subsystems"][0]["qos"],
            json::parse(R"({"namespaces": {"1": {"read_iops": 2000, "total_mibps": 100}},
                            "hosts": {")" +
                        std::string(kHost) + R"(": {"write_iops": 50}}})"));
  r = run_command(
      {SENS_BINARY, "target", "--ns", "ram:16M", "--qos", "ns=1,read_iops=-5", "--dump-config"},
      10000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--qos 'ns=1,read_iops=-5': 'read_iops=-5': expected KEY=N"),
            std::string::npos)
      << r.err;
}

TEST(Qos, BadInputsAreRefused) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  EXPECT_NE(t.refused({"qos_set", "--nqn", kNqn, "--nsid", "1"}).find("no limit given"),
            std::string::npos);
  EXPECT_NE(t.refused({"qos_set", "--nqn", kNqn, "--read_iops", "5"}).find("nsid"),
            std::string::npos);
  EXPECT_NE(
      t.refused({"qos_set", "--nqn", kNqn, "--nsid", "1", "--host", kHost, "--read_iops", "5"})
          .find("nsid"),
      std::string::npos);
  EXPECT_NE(t.refused({"qos_set", "--nqn", kNqn, "--nsid", "0", "--read_iops", "5"})
                .find("nsid must be 1..1024"),
            std::string::npos);
  EXPECT_NE(t.refused({"qos_set", "--nqn", kNqn, "--host", "host1", "--read_iops", "5"})
                .find("not a host NQN"),
            std::string::npos);
  EXPECT_NE(t.refused({"qos_set", "--nqn", kNqn, "--nsid", "1", "--total_mibps", "2000000"})
                .find("'total_mibps' must be an integer 0..1000000"),
            std::string::npos);
  EXPECT_NE(
      t.refused({"qos_set", "--nqn", "nqn.2026-01.io.x:nope", "--nsid", "1", "--read_iops", "5"})
          .find("no subsystem"),
      std::string::npos);
  EXPECT_NE(t.refused({"qos_get", "--nqn", "nqn.2026-01.io.x:nope"}).find("no subsystem"),
            std::string::npos);
  EXPECT_EQ(t.ok({"qos_get", "--nqn", kNqn}), json::object());  // nothing changed
  // A bad config stops the start with the key named.
  RpcTarget u;
  std::string cfg = config_with_qos(u, R"({"namespaces": {"1": {"read_iop": 5}}})");
  RunResult r = run_command(
      {SENS_BINARY, "target", "--config", cfg, "--listen", "127.0.0.1:0", "--discovery-port", "0"},
      10000);
  EXPECT_EQ(r.code, 2) << r.out;  // (a configuration error, as for every bad key)
  EXPECT_NE(r.err.find("subsystem key 'qos' namespace '1': unknown key 'read_iop'"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace sens::testing
