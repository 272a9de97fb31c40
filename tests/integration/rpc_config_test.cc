// What a running target's configuration is made of, over the management socket: keys kept in
// files (a config's {"file": PATH}, save_config's "files"), a subsystem's own coalescing
// (saved, reloaded, inherited again), load_config (sens's JSON and nvmetcli's), and discovery
// following the listeners (a discovery listener on a new address, Discovery Log Page Change
// notices to a connected discovery controller).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "auth/tls_psk.h"
#include "raw_client.h"
#include "rpc_target.h"
#include "wire/nvme_build.h"

namespace sens::testing {
namespace {

using nlohmann::json;
constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";
constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

mode_t file_mode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_mode & 0777 : 0;
}

TEST(RpcConfig, KeysInFilesAndASubsystemsOwnCoalescingAreSavedAndStartAgain) {
  const std::string key = make_secret(1, 32, 7), ctrl = make_secret(0, 32, 8);
  RpcTarget t;
  // The host's key in a file beside the config (a relative path); the controller key inline.
  ASSERT_TRUE(write_file(t.dir.file("host.key"), key + "\n"));
  ASSERT_EQ(::chmod(t.dir.file("host.key").c_str(), 0600), 0);
  std::string cfg = t.dir.file("t.json");
  ASSERT_TRUE(write_file(cfg, R"({"coalesce": {"policy": "uniform", "pg_pdus": 8},
      "subsystems": [{"nqn": ")" + std::string(kNqn) +
                                  R"(", "namespaces": ["ram:64M"],
        "host_keys": {")" + std::string(kHostNqn) +
                                  R"(": {"file": "host.key"}},
        "ctrl_keys": {")" + std::string(kHostNqn) +
                                  R"(": ")" + ctrl + R"("},
        "coalesce": {"pg_pdus": 32}}]})"));
  ASSERT_EQ(t.start({"--config", cfg}), "");
  // The subsystem's own: the target's settings with pg_pdus replaced.
  json own = t.ok({"coalescing_get", "--nqn", kNqn});
  EXPECT_EQ(own["policy"], "uniform");
  EXPECT_EQ(own["pdus"], 32);
  EXPECT_EQ(t.ok({"coalescing_get"})["pdus"], 8);

  // redact: the key from a file is named by its file; the inline one is hidden.
  json redacted = t.ok({"save_config"});
  auto& sub = redacted["subsystems"][0];
  EXPECT_EQ(sub["host_keys"][kHostNqn], json({{"file", t.dir.file("host.key")}}))
      << redacted.dump();
  EXPECT_EQ(sub["ctrl_keys"][kHostNqn], "(secret)");
  EXPECT_EQ(sub["coalesce"]["pg_pdus"], 32);
  EXPECT_EQ(sub["coalesce"]["policy"], "uniform");

  // files: the inline key goes to its own 0600 file in keys/ beside the saved config.
  std::string saved = t.dir.file("saved.json");
  t.ok({"save_config", "--path", saved, "--secrets", "files"});
  EXPECT_EQ(file_mode(saved), 0600u);
  EXPECT_EQ(file_mode(t.dir.file("keys")), 0700u);
  json file = json::parse(read_file(saved));
  std::string ctrl_file = file["subsystems"][0]["ctrl_keys"][kHostNqn]["file"];
  EXPECT_EQ(ctrl_file.rfind(t.dir.file("keys") + "/", 0), 0u) << ctrl_file;
  EXPECT_EQ(file_mode(ctrl_file), 0600u);
  EXPECT_EQ(read_file(ctrl_file), ctrl + "\n");
  EXPECT_EQ(file.dump().find(ctrl), std::string::npos) << "a secret in the saved config";
  EXPECT_NE(t.refused({"save_config", "--secrets", "files"}).find("secrets_dir"),
            std::string::npos);  // no path, no directory: nowhere to put them
  EXPECT_NE(t.refused({"save_config", "--secrets", "plain"}).find("redact, inline or files"),
            std::string::npos);

  // A target started from the saved file has the same keys and coalescing.
  ASSERT_TRUE(t.child.signal(SIGTERM));
  ASSERT_EQ(t.child.wait(10000), 0);
  RpcTarget u;
  ASSERT_EQ(u.start({"--config", saved}), "") << read_file(u.dir.file("err"));
  EXPECT_EQ(u.ok({"coalescing_get", "--nqn", kNqn})["pdus"], 32);
  json subs = u.ok({"subsystem_list"});
  EXPECT_EQ(subs[0]["hosts_with_keys"], json::array({kHostNqn}));
  RunResult r = run_command({SENS_BINARY, "perf", "-r",
                             "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(u.port) +
                                 " subnqn:" + kNqn + " hostnqn:" + kHostNqn,
                             "--dhchap-secret", key, "--dhchap-ctrl-secret", ctrl, "--rw",
                             "randread", "--qd", "2", "--time", "0.3", "-q"},
                            20000);
  EXPECT_EQ(r.code, 0) << r.err;

  // The subsystem follows the target's coalescing again; a retune of the target's reaches it.
  json back = u.ok({"coalescing_set", "--nqn", kNqn, "--inherit", "true"});
  EXPECT_EQ(back["pdus"], 8);
  u.ok({"coalescing_set", "--pdus", "12"});
  EXPECT_EQ(u.ok({"coalescing_get", "--nqn", kNqn})["pdus"], 12);
  EXPECT_FALSE(u.ok({"save_config"})["subsystems"][0].contains("coalesce"));
  EXPECT_NE(u.refused({"coalescing_set", "--inherit", "true"}).find("needs nqn"),
            std::string::npos);
}

TEST(RpcConfig, AKeyFileThatCannotBeReadStopsTheStartWithItsName) {
  TempDir dir;
  std::string cfg = dir.file("t.json");
  ASSERT_TRUE(write_file(
      cfg, R"({"subsystems": [{"nqn": ")" + std::string(kNqn) +
               R"(", "host_keys": {"nqn.2014-08.org.example:h": {"file": "missing.key"}}}]})"));
  RunResult r = run_command({SENS_BINARY, "target", "--config", cfg, "--rpc", "none"}, 10000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.key"), std::string::npos) << r.err;
  ASSERT_TRUE(
      write_file(cfg, R"({"subsystems": [{"nqn": ")" + std::string(kNqn) +
                          R"(", "host_keys": {"nqn.2014-08.org.example:h": {"path": "k"}}}]})"));
  r = run_command({SENS_BINARY, "target", "--config", cfg, "--rpc", "none"}, 10000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("{\"file\": PATH}"), std::string::npos) << r.err;
  ASSERT_TRUE(write_file(cfg, R"({"subsystems": [{"nqn": ")" + std::string(kNqn) +
                                  R"(", "coalesce": {"pg_pdus": 0}}]})"));
  r = run_command({SENS_BINARY, "target", "--config", cfg, "--rpc", "none"}, 10000);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("pg_pdus must be in 1..1024"), std::string::npos) << r.err;
}

TEST(RpcConfig, LoadConfigAppliesAFileOverTheRunningTarget) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  uint16_t extra = free_port();
  std::string file = t.dir.file("more.json");
  ASSERT_TRUE(write_file(file, R"({"listen": ["127.0.0.1:)" + std::to_string(t.port) +
                                   R"(", "127.0.0.1:)" + std::to_string(extra) + R"("],
        "subsystems": [{"nqn": ")" +
                                   kNqn + R"(", "namespaces": ["ram:64M"]},
                       {"nqn": "nqn.2026-12.io.example:loaded", "namespaces": ["null:1G"],
                        "coalesce": {"policy": "off"}}]})"));
  json r = t.ok({"load_config", "--path", file});
  std::string changes = r["changes"].dump();
  EXPECT_NE(changes.find("subsystem nqn.2026-12.io.example:loaded created"), std::string::npos)
      << changes;
  EXPECT_NE(changes.find("listener 127.0.0.1:" + std::to_string(extra) + " added"),
            std::string::npos)
      << changes;
  EXPECT_EQ(t.ok({"subsystem_list"}).size(), 2u);
  EXPECT_EQ(t.ok({"coalescing_get", "--nqn", "nqn.2026-12.io.example:loaded"})["policy"], "off");
  Session s;
  ASSERT_EQ(s.open(extra, "nqn.2026-12.io.example:loaded"), "");  // through the new listener
  EXPECT_NE(t.refused({"load_config", "--path", t.dir.file("none.json")}).find("cannot open"),
            std::string::npos);
  ASSERT_TRUE(write_file(file, R"({"subsystems": [{"nqn": "x", "bogus": 1}]})"));
  EXPECT_NE(t.refused({"load_config", "--path", file}).find("unknown subsystem key 'bogus'"),
            std::string::npos);
  EXPECT_EQ(t.ok({"subsystem_list"}).size(), 2u);  // a refused file changes nothing
}

// A discovery controller held open (a Linux host's persistent discovery connection): armed
// for Discovery Log Page Change notices.
struct DiscoveryConnection {
  RawClient c;
  std::string open(uint16_t port) {
    if (!c.connect(port) || !c.ic()) return "no discovery connection";
    if (Result r = c.connect_queue(0, kDiscoveryNqn); !r.ok()) return "Connect: " + r.describe();
    if (Result r = c.enable(); !r.ok()) return "CC.EN: " + r.describe();
    nvme::IdentifyController id{};
    if (Result r = c.exec(nvme::make_identify(0x01, 0, 0), nullptr, 0, &id, sizeof id); !r.ok())
      return "Identify: " + r.describe();
    if (!(id.oaes & (1u << 31))) return "OAES does not offer Discovery Log Page Change";
    if (Result r = c.exec(nvme::make_set_features(0x0B, 1u << 31)); !r.ok())
      return "Set Features: " + r.describe();
    return "";
  }
  uint16_t arm() {
    auto aer = nvme::make_async_event();
    aer.cid = c.next_cid();
    EXPECT_TRUE(c.send_bytes(c.capsule_bytes(aer)));
    return aer.cid;
  }
  // The discovery log's entries: "ADDR:PORT subtype" each. RAE clear: notices may come again.
  std::vector<std::string> entries() {
    std::vector<uint8_t> page(16 * 1024, 0);
    Result r = c.exec(nvme::make_get_log_page(0x70, 0, uint32_t(page.size()), 0), nullptr, 0,
                      page.data(), uint32_t(page.size()));
    EXPECT_TRUE(r.ok()) << r.describe();
    auto& hdr = *reinterpret_cast<nvme::DiscoveryLogHeader*>(page.data());
    std::vector<std::string> out;
    for (uint64_t i = 0; i < hdr.numrec && (i + 2) * 1024 <= page.size(); ++i) {
      auto& e = *reinterpret_cast<nvme::DiscoveryLogEntry*>(page.data() + 1024 * (i + 1));
      std::string addr(e.traddr, sizeof e.traddr), port(e.trsvcid, sizeof e.trsvcid);
      addr = addr.substr(0, addr.find(' '));
      port = port.substr(0, port.find(' '));
      out.push_back(addr + ":" + port + (e.subtype == nvme::kSubtypeNvme ? " nvme" : " discovery"));
    }
    return out;
  }
};

TEST(RpcConfig, DiscoveryFollowsTheListenersAndTellsTheHost) {
  RpcTarget t;
  t.dport = free_port();
  ASSERT_EQ(t.start(), "");
  DiscoveryConnection d;
  ASSERT_EQ(d.open(t.dport), "");
  auto before = d.entries();
  uint16_t aer = d.arm();
  // An address the target did not listen on: 127.0.0.2 (all of 127/8 is this machine).
  json added = t.ok({"listener_add", "--address", "127.0.0.2", "--port", "0"});
  uint16_t port = added["port"];
  Result e = d.c.await(aer, nullptr, 0, nullptr, 0, 5000);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(e.cqe.dw0, 0x0070F002u);  // Notice, Discovery Log Page Change, 70h
  auto after = d.entries();
  EXPECT_EQ(after.size(), before.size() + 2) << ::testing::PrintToString(after);
  std::string io = "127.0.0.2:" + std::to_string(port) + " nvme",
              disc = "127.0.0.2:" + std::to_string(t.dport) + " discovery";
  EXPECT_NE(std::find(after.begin(), after.end(), io), after.end());
  EXPECT_NE(std::find(after.begin(), after.end(), disc), after.end());
  // Discovery answers on the new address too (RawClient dials 127.0.0.1: a socket of our own).
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(t.dport);
  a.sin_addr.s_addr = htonl(0x7F000002);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << "no discovery listener on 127.0.0.2";
  ::close(fd);

  // Removed: its discovery listener goes with it (no I/O listener is left on the address),
  // and the host is told again (it read the log with RAE clear, so the notice is unmasked).
  aer = d.arm();
  t.ok({"listener_remove", "--address", "127.0.0.2", "--port", std::to_string(port)});
  e = d.c.await(aer, nullptr, 0, nullptr, 0, 5000);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(d.entries(), before);
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_NE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0)
      << "the discovery listener on 127.0.0.2 stayed";
  ::close(fd);
  // A subsystem created live is a discovery change too.
  aer = d.arm();
  t.ok({"subsystem_create", "--nqn", "nqn.2026-12.io.example:new", "--namespaces", "null:1G"});
  ASSERT_TRUE(d.c.await(aer, nullptr, 0, nullptr, 0, 5000).ok());
  EXPECT_EQ(d.entries().size(), before.size() + 1);
}

// A host known by its PSK cannot be impersonated on the plain port with its (public) NQN, and
// a subsystem can refuse every host that does not authenticate.
TEST(RpcConfig, RequireTlsAndAuthBindSecurityToTheHost) {
  RpcTarget t;
  t.dport = free_port();
  auth::ConfiguredPsk psk;
  psk.transform = 1;
  for (int i = 0; i < 32; ++i) psk.key.push_back(uint8_t(7 + 13 * i));
  ASSERT_TRUE(write_file(t.dir.file("psk"), auth::format_tls_psk(psk) + "\n"));
  const uint16_t tls_port = free_port();
  ASSERT_EQ(t.start({"--tls-listen", "127.0.0.1:" + std::to_string(tls_port), "--tls",
                     t.dir.file("psk")}),
            "");
  const std::string other = "nqn.2014-08.org.example:other-host";
  Session before;  // connected in plain before the requirement
  ASSERT_EQ(before.open(t.port, kNqn), "");

  json r =
      t.ok({"subsystem_set_security", "--nqn", kNqn, "--host", kHostNqn, "--require_tls", "true"});
  EXPECT_EQ(r["require_tls"], json::array({kHostNqn}));
  EXPECT_TRUE(before.admin.wait_closed(5000)) << "a plain controller of the host stayed";
  Session plain;
  std::string why = plain.open(t.port, kNqn);
  EXPECT_NE(why.find("admin Connect"), std::string::npos) << "impersonated on the plain port";
  Session someone;
  someone.hostnqn = other;
  EXPECT_EQ(someone.open(t.port, kNqn), "");  // hosts without the requirement still may
  // Over TLS the host connects and verifies I/O.
  RunResult perf = run_command({SENS_BINARY, "perf", "-r",
                                "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(tls_port) +
                                    " subnqn:" + kNqn + " hostnqn:" + kHostNqn,
                                "--tls", t.dir.file("psk"), "--rw", "randrw", "--qd", "4", "--time",
                                "0.3", "--verify", "-q"},
                               30000);
  EXPECT_EQ(perf.code, 0) << perf.err;
  // Its discovery log lists only the TLS port for it.
  DiscoveryConnection d;
  ASSERT_EQ(d.open(t.dport), "");
  auto entries = d.entries();
  EXPECT_EQ(
      std::count(entries.begin(), entries.end(), "127.0.0.1:" + std::to_string(tls_port) + " nvme"),
      1);
  EXPECT_EQ(
      std::count(entries.begin(), entries.end(), "127.0.0.1:" + std::to_string(t.port) + " nvme"),
      0)
      << ::testing::PrintToString(entries);

  // Authentication of every host: the unkeyed host's controller goes, and it is refused.
  EXPECT_NE(t.refused({"subsystem_set_security", "--nqn", kNqn, "--host", other, "--require_auth",
                       "true"})
                .find("has no DH-HMAC-CHAP key"),
            std::string::npos);
  t.ok({"subsystem_set_security", "--nqn", kNqn, "--require_auth", "true"});
  EXPECT_TRUE(someone.admin.wait_closed(5000));
  Session again;
  again.hostnqn = other;
  EXPECT_NE(again.open(t.port, kNqn), "");
  json saved = t.ok({"save_config"})["subsystems"][0];
  EXPECT_EQ(saved["require_tls"], json::array({kHostNqn}));
  EXPECT_EQ(saved["require_auth"], true);
  json listed = t.ok({"subsystem_list"})[0];
  EXPECT_EQ(listed["require_auth"], true);
  // Off again: the host connects in plain.
  t.ok({"subsystem_set_security", "--nqn", kNqn, "--require_auth", "false"});
  t.ok({"subsystem_set_security", "--nqn", kNqn, "--host", kHostNqn, "--require_tls", "false"});
  Session back;
  EXPECT_EQ(back.open(t.port, kNqn), "");
  EXPECT_NE(t.rpc({"subsystem_set_security", "--nqn", kNqn}).code, 0);  // nothing to set
  const std::string log = read_file(t.dir.file("err")) + read_file(t.dir.file("out"));
  EXPECT_NE(log.find("must connect to '" + std::string(kNqn) + "' over TLS"), std::string::npos);
}

TEST(RpcConfig, RequireTlsWithoutATlsListenerStopsTheStart) {
  TempDir dir;
  std::string cfg = dir.file("t.json");
  ASSERT_TRUE(write_file(cfg, R"({"subsystems": [{"nqn": ")" + std::string(kNqn) +
                                  R"(", "namespaces": ["ram:8M"], "require_tls": true}]})"));
  RunResult r = run_command({SENS_BINARY, "target", "--config", cfg, "--rpc", "none"}, 10000);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("require_tls, but the target has no TLS listener"), std::string::npos)
      << r.err;
  ASSERT_TRUE(write_file(
      cfg, R"({"subsystems": [{"nqn": ")" + std::string(kNqn) + R"(", "require_auth": [42]}]})"));
  r = run_command({SENS_BINARY, "target", "--config", cfg, "--rpc", "none"}, 10000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected true, false or a list of host NQNs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace sens::testing
