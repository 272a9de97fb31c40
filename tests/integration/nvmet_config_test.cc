// Moving over from the Linux target: `sens target` serves a subsystem named as Linux takes it
// (no "nqn." prefix, as blktests' "blktests-subsystem-1") with a warning, refuses it with
// --strict-nqn, and starts from the file `nvmetcli save` writes (a file namespace in a temp dir)
// with verified I/O from `sens perf` and the discovery log on the I/O port, as Linux serves it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

constexpr const char* kName = "blktests-subsystem-1";

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// `sens target` with the arguments args(*this) on free ports (retried if another process takes
// one first); "" or why it did not start.
struct Target {
  TempDir dir;
  Child child;
  uint16_t port = 0, dport = 0;
  std::string start(std::vector<std::string> (*args)(const Target&)) {
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      dport = free_port();
      if (!port || !dport || dport == port) continue;
      std::vector<std::string> argv = {SENS_BINARY, "target"};
      auto extra = args(*this);
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "listening on", 5000)) return "";
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free port: " + why;
  }
  std::string trid() const {
    return "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) + " subnqn:" + kName;
  }
  void stop() {
    child.signal(SIGTERM);
    EXPECT_EQ(child.wait(10000), 0);
  }
};

RunResult perf_verify(const Target& t) {
  return run_command({SENS_BINARY, "perf", "-r", t.trid(), "--rw", "randrw", "--bs", "16k", "--qd",
                      "8", "--time", "0.5", "--size", "8M", "--verify", "-q"},
                     30000);
}

// The subsystem NQNs of the discovery log page read through `port` (a discovery or an I/O
// listener: both serve the discovery subsystem).
std::vector<std::string> discovered(uint16_t port, std::string* error) {
  RawClient d;
  std::vector<std::string> nqns;
  if (!d.connect(port) || !d.ic(0)) return *error = d.last_error(), nqns;
  Result r = d.connect_queue(0, nvme::kDiscoveryNqn, 0xFFFF, 0);
  if (!r.ok()) return *error = "connect: " + r.describe(), nqns;
  if (!(r = d.enable()).ok()) return *error = "enable: " + r.describe(), nqns;
  nvme::DiscoveryLogHeader hdr{};
  r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, 1024, 0), nullptr, 0, &hdr,
             sizeof(hdr));
  if (!r.ok() || hdr.numrec == 0 || hdr.numrec > 16) return *error = "log header", nqns;
  const uint32_t rest = uint32_t(hdr.numrec) * 1024;
  std::vector<nvme::DiscoveryLogEntry> entries(hdr.numrec);
  r = d.exec(nvme::make_get_log_page(nvme::log_page::kDiscovery, 0, rest, 1024), nullptr, 0,
             entries.data(), rest);
  if (!r.ok()) return *error = "log entries: " + r.describe(), nqns;
  for (auto& e : entries)
    if (e.subtype == nvme::kSubtypeNvme)
      nqns.push_back(std::string(nvme::fixed_string(e.subnqn, sizeof(e.subnqn))));
  return nqns;
}

TEST(LinuxNames, SubsystemWithoutNqnPrefixServesVerifiedIo) {
  Target t;
  ASSERT_EQ(t.start([](const Target& t) -> std::vector<std::string> {
    return {"--listen",
            "127.0.0.1:" + std::to_string(t.port),
            "--discovery-port",
            std::to_string(t.dport),
            "--nqn",
            kName,
            "--ns",
            "ram:32M"};
  }),
            "");
  // Taken, with one warning at start.
  std::string err = read_file(t.dir.file("err"));
  EXPECT_EQ(count(err, "[warn] subsystem NQN 'blktests-subsystem-1' does not start with 'nqn.'"),
            1u)
      << err;
  EXPECT_NE(read_file(t.dir.file("out")).find("subsystem blktests-subsystem-1"), std::string::npos);

  // The discovery log names it, Connect takes it, and sens perf verifies I/O through it.
  std::string why;
  EXPECT_EQ(discovered(t.dport, &why), std::vector<std::string>{kName}) << why;
  RunResult r = perf_verify(t);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  t.stop();
  EXPECT_EQ(count(read_file(t.dir.file("err")), "does not start with 'nqn.'"), 1u)
      << "warned once, at start";
}

TEST(LinuxNames, StrictNqnRefusesIt) {
  RunResult r = run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:4999", "--nqn", kName,
                             "--ns", "ram:1M", "--strict-nqn"},
                            5000);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("sens target: subsystem NQN 'blktests-subsystem-1' does not start with "
                       "'nqn.' (--strict-nqn)"),
            std::string::npos)
      << r.err;
  // The same from the JSON config.
  TempDir dir;
  ASSERT_TRUE(write_file(dir.file("c.json"),
                         R"({"listen": ["127.0.0.1:4999"], "strict_nqn": true,
                             "subsystems": [{"nqn": "blktests-subsystem-1",
                                             "namespaces": ["ram:1M"]}]})"));
  r = run_command({SENS_BINARY, "target", "--config", dir.file("c.json")}, 5000);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("(--strict-nqn)"), std::string::npos) << r.err;
}

// What `nvmetcli save` writes for a Linux target serving one file on 127.0.0.1:PORT, with a
// referral sens cannot carry.
std::string nvmetcli_file(uint16_t port, const std::string& image) {
  return R"({
  "hosts": [],
  "ports": [
    {
      "addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "treq": "not specified",
               "trsvcid": ")" +
         std::to_string(port) + R"(", "trtype": "tcp", "tsas": "none"},
      "ana_groups": [{"ana": {"state": "optimized"}, "grpid": 1}],
      "param": {"inline_data_size": "-1", "max_queue_size": "-1", "pi_enable": "0"},
      "portid": 1,
      "referrals": [{"addr": {"adrfam": "ipv4", "portid": "2", "traddr": "192.0.2.7",
                              "treq": "not specified", "trsvcid": "4420", "trtype": "tcp"},
                     "enable": 1, "name": "gateway-b"}],
      "subsystems": ["blktests-subsystem-1"]
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": [],
      "attr": {"allow_any_host": "1", "cntlid_max": "65519", "cntlid_min": "1",
               "model": "Linux", "pi_enable": "0", "qid_max": "128",
               "serial": "MIGRATED0001", "version": "1.3"},
      "namespaces": [
        {"ana": {"grpid": "1"}, "ana_grpid": 1,
         "device": {"nguid": "00000000-0000-0000-0000-000000000000", "path": ")" +
         image + R"(",
                    "uuid": "91ac3c8e-7a30-4a4e-9f0c-2f3c4b5d6e7f"},
         "enable": 1, "nsid": 1, "resv": {"enable": "1"}}
      ],
      "nqn": "blktests-subsystem-1"
    }
  ]
})";
}

TEST(NvmetcliConfig, StartsFromTheSavedFileAndVerifiesIo) {
  TempDir files;
  const std::string image = files.file("ns1.img");
  int fd = ::open(image.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 32 << 20), 0);
  ::close(fd);
  static std::string config;  // the file, for the argv lambda
  config = files.file("config.json");
  static std::string image_path;
  image_path = image;

  Target t;
  ASSERT_EQ(t.start([](const Target& t) -> std::vector<std::string> {
    EXPECT_TRUE(write_file(config, nvmetcli_file(t.port, image_path)));
    return {"--config", config, "--discovery-port", std::to_string(t.dport)};
  }),
            "");
  std::string out = read_file(t.dir.file("out")), err = read_file(t.dir.file("err"));
  EXPECT_NE(out.find("namespace 1: file " + image), std::string::npos) << out;
  EXPECT_NE(out.find("listening on 127.0.0.1:" + std::to_string(t.port) + " (I/O)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("listening on 127.0.0.1:" + std::to_string(t.dport) + " (discovery)"),
            std::string::npos)
      << out;
  // The referral is the one setting not carried (and the name without nqn. taken, with a word).
  EXPECT_NE(err.find("[warn] " + config +
                     ": ports[0].referrals[0]: referral 'gateway-b' to "
                     "192.0.2.7:4420"),
            std::string::npos)
      << err;
  EXPECT_EQ(count(err, "[warn] " + config + ": "), 1u) << err;
  EXPECT_EQ(count(err, "[warn] subsystem NQN 'blktests-subsystem-1'"), 1u) << err;

  // Discovery through the I/O port, as a Linux target serves it, and the discovery port.
  for (uint16_t port : {t.port, t.dport}) {
    std::string why;
    EXPECT_EQ(discovered(port, &why), std::vector<std::string>{kName}) << port << ": " << why;
  }
  // The serial and the namespace's UUID came along.
  {
    Session s;
    ASSERT_EQ(s.open(t.port, kName), "");
    nvme::IdentifyController idc{};
    Result r = s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
    ASSERT_TRUE(r.ok()) << r.describe();
    std::string sn(nvme::fixed_string(idc.sn, sizeof(idc.sn)));
    EXPECT_EQ(sn.substr(0, sn.find_last_not_of(' ') + 1), "MIGRATED0001");
    std::vector<uint8_t> ids(4096);
    r = s.admin.exec(nvme::make_identify(3, 1), nullptr, 0, ids.data(), 4096);
    ASSERT_TRUE(r.ok()) << r.describe();
    const uint8_t uuid[16] = {0x91, 0xac, 0x3c, 0x8e, 0x7a, 0x30, 0x4a, 0x4e,
                              0x9f, 0x0c, 0x2f, 0x3c, 0x4b, 0x5d, 0x6e, 0x7f};
    bool found = false;
    for (size_t at = 0; at + 4 <= ids.size() && ids[at] != 0; at += 4 + ids[at + 1])
      if (ids[at] == 3 && ids[at + 1] == 16 && at + 20 <= ids.size())
        found = std::memcmp(&ids[at + 4], uuid, 16) == 0;
    EXPECT_TRUE(found) << "no UUID descriptor with the file's uuid";
  }
  RunResult r = perf_verify(t);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  t.stop();
}

}  // namespace
}  // namespace sens::testing
