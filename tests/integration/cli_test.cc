// `sens target` as users run it: a child process on free ports, its discovery controller, its
// signals (SIGUSR1 writes --stats-json, SIGTERM stops with exit 0) and its refusal of bad
// input (exit 2 and a precise message on stderr).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kDefaultNqn = "nqn.2026-11.io.sens-target:ram0";

std::string trimmed(const char* s, size_t n) {
  std::string out(s, n);
  while (!out.empty() && (out.back() == ' ' || out.back() == '\0')) out.pop_back();
  return out;
}

// A `sens target` child on two free ports (retried if another process takes one first).
struct RunningTarget {
  TempDir dir;
  Child child;
  uint16_t port = 0, dport = 0;

  std::string start(const std::vector<std::string>& extra) {
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      dport = free_port();
      if (!port || !dport || port == dport) continue;
      std::vector<std::string> argv = {SENS_BINARY,        "target",
                                       "--listen",         "127.0.0.1:" + std::to_string(port),
                                       "--discovery-port", std::to_string(dport)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "listening on", 5000)) return "";
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free ports: " + why;
  }
};

void expect_stats_keys(const nlohmann::json& j) {
  for (const char* k : {"pdus_sent", "send_calls", "flushes", "pdus_per_flush", "r2t_delay_us"})
    EXPECT_TRUE(j.contains(k)) << "stats JSON lacks '" << k << "': " << j.dump();
  if (!j.contains("flushes")) return;
  for (const char* k : {"capacity", "control_capacity", "timer", "control_timer", "byte_cap",
                        "socket_full", "close"})
    EXPECT_TRUE(j["flushes"].contains(k)) << "flushes lacks '" << k << "': " << j["flushes"].dump();
}

bool wait_for_file(const std::string& path, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (file_exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return file_exists(path);
}

TEST(CliTarget, DiscoveryIoStatsAndSignals) {
  RunningTarget t;
  const std::string stats = t.dir.file("stats.json");
  ASSERT_EQ(t.start({"--ns", "ram:16M", "--stats-json", stats}), "");
  std::string out = read_file(t.dir.file("out"));
  EXPECT_NE(out.find("listening on 127.0.0.1:" + std::to_string(t.port) + " (I/O)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("listening on 127.0.0.1:" + std::to_string(t.dport) + " (discovery)"),
            std::string::npos)
      << out;

  // The discovery controller.
  RawClient d;
  ASSERT_TRUE(d.connect(t.dport)) << d.last_error();
  ASSERT_TRUE(d.ic(0)) << d.last_error();
  Result r = d.connect_queue(0, nvme::kDiscoveryNqn, 0xFFFF, 0);
  ASSERT_TRUE(r.ok()) << r.describe();
  const uint16_t dcntlid = uint16_t(r.cqe.dw0);
  ASSERT_TRUE(d.enable().ok());
  nvme::IdentifyController idc{};
  r = d.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(idc.cntrltype, 2) << "discovery controller";
  EXPECT_EQ(std::string(nvme::fixed_string(idc.subnqn, sizeof(idc.subnqn))), nvme::kDiscoveryNqn);

  // Get Log Page 0x70 in two steps: the header, then the entries at offset 1024.
  nvme::DiscoveryLogHeader hdr{};
  r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, 1024, 0), nullptr, 0, &hdr,
             sizeof(hdr));
  ASSERT_TRUE(r.ok()) << r.describe();
  ASSERT_GE(hdr.numrec, 1u);
  ASSERT_LE(hdr.numrec, 8u);
  EXPECT_EQ(hdr.recfmt, 0);
  const uint32_t rest = uint32_t(hdr.numrec) * 1024;
  std::vector<nvme::DiscoveryLogEntry> entries(hdr.numrec);
  r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, rest, 1024), nullptr, 0,
             entries.data(), rest);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, rest);
  bool found = false;
  for (auto& e : entries) {
    if (e.subtype != nvme::kSubtypeNvme) continue;
    found = true;
    EXPECT_EQ(e.trtype, nvme::kTrtypeTcp);
    EXPECT_EQ(e.adrfam, nvme::kAdrfamIpv4);
    EXPECT_EQ(std::string(nvme::fixed_string(e.subnqn, sizeof(e.subnqn))), kDefaultNqn);
    EXPECT_EQ(trimmed(e.trsvcid, sizeof(e.trsvcid)), std::to_string(t.port));
    EXPECT_EQ(trimmed(e.traddr, sizeof(e.traddr)), "127.0.0.1");
    EXPECT_EQ(e.tsas[0], 0) << "no security";
  }
  EXPECT_TRUE(found) << "the I/O subsystem is not in the discovery log";
  // The header re-read gives the same generation counter.
  nvme::DiscoveryLogHeader hdr2{};
  r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, 1024, 0), nullptr, 0, &hdr2,
             sizeof(hdr2));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(hdr2.genctr, hdr.genctr);
  // A discovery controller has no I/O queues.
  RawClient dio;
  ASSERT_TRUE(dio.connect(t.dport));
  ASSERT_TRUE(dio.ic(0)) << dio.last_error();
  r = dio.connect_queue(1, nvme::kDiscoveryNqn, dcntlid);
  EXPECT_FALSE(r.ok()) << "an I/O queue on the discovery controller: " << r.describe();

  // The I/O subsystem it names works.
  Session s;
  ASSERT_EQ(s.open(t.port, kDefaultNqn), "");
  EXPECT_EQ(write_read(s.io, 0, 65536, 1, false), "");
  EXPECT_EQ(write_read(s.io, 512, 4096, 2, true), "");

  // SIGUSR1: the stats file appears while the target runs.
  ASSERT_FALSE(file_exists(stats));
  ASSERT_TRUE(t.child.signal(SIGUSR1));
  // Written to a temporary file and renamed into place: complete once it exists.
  ASSERT_TRUE(wait_for_file(stats, 3000)) << "no " << stats << " after SIGUSR1";
  nlohmann::json j = nlohmann::json::parse(read_file(stats), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_file(stats);
  expect_stats_keys(j);
  EXPECT_GT(j.value("pdus_sent", 0), 0);
  EXPECT_TRUE(s.io.still_open(0)) << "SIGUSR1 disturbed a connection";
  EXPECT_EQ(write_read(s.io, 1024, 4096, 3, true), "");

  // SIGTERM: exit 0, stats written at exit.
  ASSERT_EQ(std::remove(stats.c_str()), 0);
  ASSERT_TRUE(t.child.signal(SIGTERM));
  int code = t.child.wait(5000);
  EXPECT_EQ(code, 0) << read_file(t.dir.file("err"));
  EXPECT_TRUE(s.io.wait_closed(1000)) << "connection left open after exit";
  ASSERT_TRUE(file_exists(stats)) << "no stats at exit";
  j = nlohmann::json::parse(read_file(stats), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_file(stats);
  expect_stats_keys(j);
  EXPECT_GT(j.value("pdus_sent", 0), 0);
  EXPECT_GT(j.value("send_calls", 0), 0);
}

TEST(CliTarget, SigintStopsToo) {
  RunningTarget t;
  ASSERT_EQ(t.start({"--ns", "null:1M", "--coalesce", "off"}), "");
  Session s;
  ASSERT_EQ(s.open(t.port, kDefaultNqn), "");
  ASSERT_TRUE(t.child.signal(SIGINT));
  EXPECT_EQ(t.child.wait(5000), 0) << read_file(t.dir.file("err"));
}

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::string config;               // written to a file passed with --config when not empty
  std::vector<std::string> expect;  // substrings of stderr
};

const BadInput kBadInputs[] = {
    {"UnknownNamespaceKind", {"--ns", "bogus:1"}, "", {"unknown namespace kind 'bogus'"}},
    {"NamespaceSizeNotASize", {"--ns", "ram:abc"}, "", {"'abc' is not a size"}},
    {"ListenWithoutPort", {"--listen", "127.0.0.1"}, "", {"'127.0.0.1'", "ADDR:PORT"}},
    {"ListenAddressNotAnIp",
     {"--listen", "999.1.1.1:4420"},
     "",
     {"'999.1.1.1' is not a numeric IPv4/IPv6 address"}},
    {"UnknownCoalescingPolicy", {"--coalesce", "wild"}, "", {"--coalesce", "wild"}},
    {"NamespaceIdOutOfRange", {"--ns", "ram:1M,nsid=0"}, "", {"nsid='0'", "1..1024"}},
    {"NamespaceIdGivenTwice",
     {"--ns", "ram:1M,nsid=2", "--ns", "ram:1M,nsid=2"},
     "",
     {"nsid 2 given twice"}},
    {"AllowAnyHostNotABool",
     {},
     R"({"subsystems": [{"nqn": "nqn.2026-12.io.x:a", "namespaces": ["ram:1M"],)"
     R"( "allow_any_host": "yes"}]})",
     {"subsystem key 'allow_any_host': expected true or false"}},
    {"InlineDataNotMultipleOf16",
     {"--inline-data", "100"},
     "",
     {"--inline-data must be a multiple of 16"}},
    {"ConfigWithUnknownKey",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "bogus_key": 1})",
     {"unknown config key 'bogus_key'"}},
    {"ConfigWithInvalidJson", {}, R"({"listen": [)", {"config file", "bad.json", "parse error"}},
    {"MaxConnectionsZero",
     {"--max-connections", "0"},
     "",
     {"--max-connections must be in 1..1000000"}},
    {"BufferPoolNotASize", {"--buffer-pool", "lots"}, "", {"--buffer-pool: 'lots' is not a size"}},
    {"BufferPoolBelowFourLargestIos",
     {"--buffer-pool", "256k"},
     "",
     {"--buffer-pool must be at least 4 x --max-io"}},
    {"ConfigBufferPoolTooSmall",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "buffer_pool": "64k"})",
     {"--buffer-pool must be at least 4 x --max-io"}},
    {"UnknownPollMode", {"--poll", "sometimes"}, "", {"--poll", "sometimes"}},
    {"PollMaxUsNotANumber", {"--poll-max-us", "soon"}, "", {"--poll-max-us", "soon"}},
    {"ConfigUnknownPollMode",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "poll": "busy"})",
     {"config key 'poll': expected \"off\", \"adaptive\" or \"always\""}},
    {"ConfigUnknownCoalescingPolicy",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "coalesce": {"policy": "greedy"}})",
     {"coalesce key 'policy': expected \"off\", \"eager\", \"uniform\", \"semantic\" or "
      "\"adaptive\""}},
    {"CntlidRangeNotARange",
     {"--cntlid-range", "100"},
     "",
     {"--cntlid-range", "'100' is not MIN-MAX"}},
    {"CntlidRangeReversed", {"--cntlid-range", "9-5"}, "", {"'9-5': MIN is above MAX"}},
    {"CntlidRangeZero",
     {"--cntlid-range", "0-5"},
     "",
     {"'0-5' is not MIN-MAX with both in 1..65519"}},
    {"CntlidRangeNotDigits", {"--cntlid-range", "1-x"}, "", {"'1-x' is not MIN-MAX"}},
    {"CntlidRangeNegative", {"--cntlid-range", "-3"}, "", {"'-3' is not MIN-MAX"}},
    {"CntlidRangeAboveFFEF", {"--cntlid-range", "1-65520"}, "", {"1..65519"}},
    {"ConfigCntlidRangeReversed",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "cntlid_min": 10, "cntlid_max": 5})",
     {"--cntlid-range must be MIN-MAX with 1 <= MIN <= MAX <= 65519 (have 10-5)"}},
    {"ConfigCntlidMaxNotANumber",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "cntlid_max": "lots"})",
     {"config key 'cntlid_max': expected 1..65519"}},
    {"ConfigMaxConnectionsNotANumber",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "max_connections": [1]})",
     {"max_connections"}},
    // issue 29: fair pool shares and stall deadlines
    {"PoolShareZero",
     {"--pool-share", "0"},
     "",
     {"--pool-share must be a percentage in 1..100 (have 0)"}},
    {"PoolShareOver100",
     {"--pool-share", "101"},
     "",
     {"--pool-share must be a percentage in 1..100 (have 101)"}},
    {"PoolShareNotANumber", {"--pool-share", "half"}, "", {"--pool-share", "half"}},
    {"ConfigPoolShareTooLarge",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "pool_share": 150})",
     {"--pool-share must be a percentage in 1..100 (have 150)"}},
    {"StallTimeoutNotADuration",
     {"--stall-timeout", "soon"},
     "",
     {"--stall-timeout: 'soon' is not a duration (e.g. 30s, 500ms)"}},
    {"StallTimeoutBadUnit",
     {"--stall-timeout", "5m"},
     "",
     {"--stall-timeout: '5m' is not a duration"}},
    {"StallTimeoutTooShort",
     {"--stall-timeout", "50ms"},
     "",
     {"--stall-timeout must be 0 (never) or in 100ms..3600s (have 50 ms)"}},
    {"StallTimeoutTooLong",
     {"--stall-timeout", "3601s"},
     "",
     {"--stall-timeout must be 0 (never) or in 100ms..3600s (have 3601000 ms)"}},
    {"ConfigStallTimeoutNotANumber",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "stall_timeout_ms": "soon"})",
     {"config key 'stall_timeout_ms'"}},
    {"DhchapNiceNegative",
     {"--dhchap-nice", "-1"},
     "",
     {"--dhchap-nice must be in 0..19, have -1"}},
    {"DhchapNiceOver19", {"--dhchap-nice", "20"}, "", {"--dhchap-nice must be in 0..19, have 20"}},
    {"ConfigDhchapNiceTooLarge",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "dhchap_nice": 4000000000})",
     {"config key 'dhchap_nice': must be in 0..19, have 4000000000"}},
    {"ConfigDhchapNiceNegative",
     {},
     R"({"listen": ["127.0.0.1:LISTEN"], "dhchap_nice": -3})",
     {"config key 'dhchap_nice'"}},
};

void PrintTo(const BadInput& b, std::ostream* os) {
  *os << b.name;
}

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, ExitsWith2AndSaysWhy) {
  const BadInput& c = GetParam();
  TempDir dir;
  const std::string listen = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::string> argv = {SENS_BINARY, "target", "--discovery-port", "0"};
  bool has_listen = false;
  for (auto& a : c.args) has_listen |= a == "--listen";
  if (!has_listen && c.config.empty()) argv.insert(argv.end(), {"--listen", listen});
  argv.insert(argv.end(), c.args.begin(), c.args.end());
  if (!c.config.empty()) {
    std::string text = c.config;
    if (auto at = text.find("127.0.0.1:LISTEN"); at != std::string::npos)
      text.replace(at, 16, listen);
    std::string path = dir.file("bad.json");
    ASSERT_TRUE(write_file(path, text));
    argv.insert(argv.end(), {"--config", path});
  }
  RunResult r = run_command(argv, 3000);
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err << "\nstdout: " << r.out;
  for (auto& e : c.expect) EXPECT_NE(r.err.find(e), std::string::npos) << "stderr: " << r.err;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << "it started: " << r.out;
}

INSTANTIATE_TEST_SUITE_P(Cases, CliBadInput, ::testing::ValuesIn(kBadInputs),
                         [](const ::testing::TestParamInfo<BadInput>& i) {
                           return std::string(i.param.name);
                         });

TEST(CliTarget, HelpExitsZeroAndDocumentsCoalesce) {
  RunResult r = run_command({SENS_BINARY, "target", "--help"}, 3000);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("--coalesce"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--stats-json"), std::string::npos) << r.out;
}

TEST(CliTarget, DumpConfigPrintsTheEffectiveConfiguration) {
  RunResult r = run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:4999", "--ns", "ram:64M",
                             "--coalesce", "uniform", "--cntlid-range", "100-199", "--dump-config"},
                            3000);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["listen"][0], "127.0.0.1:4999");
  EXPECT_EQ(j["subsystems"][0]["namespaces"][0], "ram:64M");
  EXPECT_EQ(j["coalesce"]["policy"], "uniform");
  EXPECT_EQ(j["cntlid_min"], 100);
  EXPECT_EQ(j["cntlid_max"], 199);
}

// issue 29: the share and the stall deadline reach the configuration, and a dumped
// configuration read back gives the same values (what save_config writes is what loads).
TEST(CliTarget, PoolShareAndStallTimeoutRoundTrip) {
  RunResult r = run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:4999", "--pool-share",
                             "40", "--stall-timeout", "1500ms", "--dump-config"},
                            3000);
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["pool_share"], 40);
  EXPECT_EQ(j["stall_timeout_ms"], 1500);
  TempDir dir;
  ASSERT_TRUE(write_file(dir.file("t.json"), r.out));
  RunResult back =
      run_command({SENS_BINARY, "target", "--config", dir.file("t.json"), "--dump-config"}, 3000);
  ASSERT_EQ(back.code, 0) << back.err;
  auto k = nlohmann::json::parse(back.out, nullptr, false);
  EXPECT_EQ(k["pool_share"], 40);
  EXPECT_EQ(k["stall_timeout_ms"], 1500);
  RunResult defaults =
      run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:4999", "--dump-config"}, 3000);
  auto d = nlohmann::json::parse(defaults.out, nullptr, false);
  EXPECT_EQ(d["pool_share"], 25);
  EXPECT_EQ(d["stall_timeout_ms"], 30000);
}

}  // namespace
}  // namespace sens::testing
