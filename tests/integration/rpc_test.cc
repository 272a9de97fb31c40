// The management socket as an operator uses it: `sens rpc` (and raw JSON-RPC) against a
// running `sens target` child, with a raw NVMe/TCP host connected to see what the changes do
// to it: hot-added and removed namespaces (Namespace Attribute Changed AEN, log page 04h,
// Invalid Namespace after removal, commands already running completing), resizes, hosts,
// coalescing, stats, save_config, SIGHUP; and refusals that change nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "auth/dhchap.h"
#include "child_process.h"
#include "raw_client.h"
#include "rpc_target.h"
#include "wire/nvme_build.h"

namespace sens::testing {
namespace {

using nlohmann::json;
constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";

// One JSON-RPC exchange on a fresh connection, bytes as given ("" when none came back).
std::string raw_exchange(const std::string& sock, const std::string& bytes, bool shut = false) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, sock.data(), sock.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
  if (shut) ::shutdown(fd, SHUT_WR);
  std::string in;
  char buf[4096];
  while (in.find('\n') == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, size_t(n));
  }
  ::close(fd);
  return in;
}

nvme::Sqe io_cmd(uint8_t op, uint32_t nsid, uint64_t slba, uint32_t len, uint32_t block = 512) {
  return nvme::make_io(op, nsid, slba, len / block, nvme::Xfer::kTransport, len);
}

// Enables Namespace Attribute Changed notices and posts one AER; returns its cid.
uint16_t arm_ns_notice(RawClient& admin) {
  EXPECT_TRUE(admin.exec(nvme::make_set_features(0x0B, 1u << 8)).ok());
  auto aer = nvme::make_async_event();
  aer.cid = admin.next_cid();
  EXPECT_TRUE(admin.send_bytes(admin.capsule_bytes(aer)));
  return aer.cid;
}

// The Changed Namespace List (log page 04h): the nsids before the first zero.
std::vector<uint32_t> changed_list(RawClient& admin) {
  std::vector<uint32_t> page(1024, 0xEEEEEEEE);
  Result r =
      admin.exec(nvme::make_get_log_page(0x04, 0xFFFFFFFF, 4096, 0), nullptr, 0, page.data(), 4096);
  EXPECT_TRUE(r.ok()) << r.describe();
  std::vector<uint32_t> out;
  for (uint32_t v : page) {
    if (v == 0) break;
    out.push_back(v);
  }
  return out;
}

std::vector<uint32_t> active_list(RawClient& admin) {
  std::vector<uint32_t> page(1024, 0);
  EXPECT_TRUE(admin.exec(nvme::make_identify(0x02, 0, 0), nullptr, 0, page.data(), 4096).ok());
  std::vector<uint32_t> out;
  for (uint32_t v : page) {
    if (v == 0) break;
    out.push_back(v);
  }
  return out;
}

uint64_t nsze(RawClient& admin, uint32_t nsid) {
  std::vector<uint8_t> id(4096, 0xEE);
  EXPECT_TRUE(admin.exec(nvme::make_identify(0x00, nsid, 0), nullptr, 0, id.data(), 4096).ok());
  uint64_t v;
  std::memcpy(&v, id.data(), 8);
  return v;
}

TEST(Rpc, HelpListsEveryMethodAndEachMethodItsParameters) {
  RunResult r = run_command({SENS_BINARY, "rpc", "--help"}, 5000);
  EXPECT_EQ(r.code, 0);
  for (const char* m : {"namespace_add", "namespace_remove", "namespace_resize", "host_allow",
                        "save_config", "stats_reset", "coalescing_set", "framework_wait_init"})
    EXPECT_NE(r.out.find(m), std::string::npos) << m << " missing from:\n" << r.out;
  r = run_command({SENS_BINARY, "rpc", "namespace_add", "--help"}, 5000);
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--spec"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Example"), std::string::npos) << r.out;
  // No target there: exit 3 and a message that says so.
  r = run_command({SENS_BINARY, "rpc", "--socket", "/nonexistent/s.sock", "stats_get"}, 5000);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("cannot connect"), std::string::npos) << r.err;
  // A missing required parameter is a command-line error (2).
  r = run_command({SENS_BINARY, "rpc", "namespace_add", "--nqn", "x"}, 5000);
  EXPECT_EQ(r.code, 2);
}

// A socket path given with --rpc must be usable: one in a missing directory, or one a running
// target answers on, stops the start with the reason (exit 1).
TEST(Rpc, AGivenSocketPathMustBeFree) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  for (const std::string& path : {std::string("/nonexistent/dir/s.sock"), t.sock}) {
    RunResult r;
    // (A free port may be taken by a test running beside this one before the target binds it:
    // then another; the socket path is checked once the target listens.)
    for (int attempt = 0; attempt < 5; ++attempt) {
      r = run_command(
          {SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(free_port()),
           "--discovery-port", "0", "--rpc", path},
          10000);
      if (r.err.find("cannot listen") == std::string::npos) break;
    }
    EXPECT_EQ(r.code, 1) << path << ": " << r.err;
    EXPECT_NE(r.err.find("RPC socket " + path), std::string::npos) << r.err;
  }
  EXPECT_EQ(t.ok({"log_get_level"}), "info");  // the first target still serves
}

TEST(Rpc, HotAddIoRemoveWithTheHostConnected) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  json ready = t.ok({"--wait", "5", "framework_wait_init"});
  EXPECT_EQ(ready["ready"], true);
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  uint16_t aer = arm_ns_notice(s.admin);

  json added = t.ok({"namespace_add", "--nqn", kNqn, "--spec", "ram:32M"});
  ASSERT_EQ(added["nsid"], 2) << added.dump();
  Result e = s.admin.await(aer, nullptr, 0, nullptr, 0, 5000);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(e.cqe.dw0, 0x00040002u);  // notice, namespace attribute changed, log page 04h
  EXPECT_EQ(changed_list(s.admin), std::vector<uint32_t>{2});
  EXPECT_EQ(changed_list(s.admin), std::vector<uint32_t>{});  // reading cleared it
  EXPECT_EQ(active_list(s.admin), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(nsze(s.admin, 2), 32u * 1024 * 1024 / 512);

  // I/O on the new namespace, data verified.
  auto data = pattern(8192, 7);
  ASSERT_TRUE(s.io.exec(io_cmd(nvme::io_op::kWrite, 2, 16, 8192), data.data(), 8192).ok());
  std::vector<uint8_t> back(8192);
  ASSERT_TRUE(
      s.io.exec(io_cmd(nvme::io_op::kRead, 2, 16, 8192), nullptr, 0, back.data(), 8192).ok());
  EXPECT_EQ(first_difference(data, back), -1);

  json subs = t.ok({"subsystem_list"});
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0]["namespaces"].size(), 2u);
  ASSERT_EQ(subs[0]["controllers"].size(), 1u);
  EXPECT_EQ(subs[0]["controllers"][0]["queues"].size(), 2u);

  // A write held at its R2T (its data not sent) is running when the namespace goes: it
  // completes; the remove says a command was still running.
  auto w = io_cmd(nvme::io_op::kWrite, 2, 64, 8192);
  w.cid = s.io.next_cid();
  ASSERT_TRUE(s.io.send_bytes(s.io.capsule_bytes(w)));
  Pdu r2t;
  ASSERT_EQ(s.io.recv_pdu(&r2t), RecvStatus::kOk);
  ASSERT_EQ(r2t.type(), uint8_t(pdu::Type::kR2T));
  aer = arm_ns_notice(s.admin);
  json removed = t.ok({"namespace_remove", "--nqn", kNqn, "--nsid", "2", "--drain_ms", "300"});
  EXPECT_EQ(removed["removed"], true);
  EXPECT_NE(removed.value("note", "").find("1 command"), std::string::npos) << removed.dump();
  auto h2c = s.io.h2c_bytes(w.cid, r2t.as<pdu::R2T>().ttag, 0, data.data(), 8192, true);
  ASSERT_TRUE(s.io.send_bytes(h2c));
  Result wr = s.io.await(w.cid, nullptr, 0, nullptr, 0, 5000);
  EXPECT_TRUE(wr.ok()) << wr.describe();
  // Later commands: Invalid Namespace; the namespace reads as inactive.
  Result gone = s.io.exec(io_cmd(nvme::io_op::kRead, 2, 16, 4096), nullptr, 0, back.data(), 4096);
  EXPECT_EQ(gone.status(), nvme::status::kInvalidNamespace) << gone.describe();
  e = s.admin.await(aer, nullptr, 0, nullptr, 0, 5000);
  ASSERT_TRUE(e.ok()) << e.describe();
  EXPECT_EQ(changed_list(s.admin), std::vector<uint32_t>{2});
  EXPECT_EQ(active_list(s.admin), std::vector<uint32_t>{1});
  EXPECT_EQ(nsze(s.admin, 2), 0u);
  // Namespace 1 never noticed.
  EXPECT_EQ(write_read(s.io, 0, 4096, 3, false), "");
  // The nsid is free again once the device closed.
  EXPECT_EQ(t.ok({"namespace_add", "--nqn", kNqn, "--spec", "null:1G", "--nsid", "2"})["nsid"], 2);
  ASSERT_TRUE(t.child.signal(SIGTERM));
  EXPECT_EQ(t.child.wait(10000), 0);
}

TEST(Rpc, ResizeAFileNamespaceTellsTheHost) {
  RpcTarget t;
  std::string img = t.dir.file("vol.img");
  ASSERT_EQ(run_command({"/usr/bin/truncate", "-s", "64M", img}).code, 0);
  ASSERT_EQ(t.start({"--ns", "file:" + img}), "");
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  // (the target's namespaces are: ram:64M then the file, as --ns lists them; a regular
  // file has 4 KiB blocks)
  EXPECT_EQ(nsze(s.admin, 2), (64u << 20) / 4096);
  uint16_t aer = arm_ns_notice(s.admin);
  json r = t.ok({"namespace_resize", "--nqn", kNqn, "--nsid", "2", "--size", "128M"});
  EXPECT_EQ(r["size_bytes"], 128u << 20);
  ASSERT_TRUE(s.admin.await(aer, nullptr, 0, nullptr, 0, 5000).ok());
  EXPECT_EQ(changed_list(s.admin), std::vector<uint32_t>{2});
  EXPECT_EQ(nsze(s.admin, 2), (128u << 20) / 4096);
  // The new blocks take I/O.
  auto data = pattern(4096, 9);
  uint64_t last = (128u << 20) / 4096 - 1;
  Result w = s.io.exec(io_cmd(nvme::io_op::kWrite, 2, last, 4096, 4096), data.data(), 4096);
  EXPECT_TRUE(w.ok()) << w.describe();
  // Grown outside (the operator's truncate), then resized without a size.
  ASSERT_EQ(run_command({"/usr/bin/truncate", "-s", "192M", img}).code, 0);
  EXPECT_EQ(t.ok({"namespace_resize", "--nqn", kNqn, "--nsid", "2"})["size_bytes"], 192u << 20);
  // A RAM namespace has a fixed size: refused, and nothing changed.
  EXPECT_NE(t.refused({"namespace_resize", "--nqn", kNqn, "--nsid", "1", "--size", "1G"})
                .find("fixed size"),
            std::string::npos);
  EXPECT_EQ(nsze(s.admin, 1), 64u * 2048);
}

TEST(Rpc, RefusalsSayWhyAndChangeNothing) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  json before = t.ok({"subsystem_list"});
  EXPECT_NE(t.refused({"namespace_add", "--nqn", "nqn.2026-01.io.x:nope", "--spec", "ram:1M"})
                .find("no subsystem"),
            std::string::npos);
  EXPECT_NE(
      t.refused({"namespace_add", "--nqn", kNqn, "--spec", "ram:1M", "--nsid", "1"}).find("exists"),
      std::string::npos);
  EXPECT_NE(t.refused({"namespace_add", "--nqn", kNqn, "--spec", "file:/nonexistent/x.img"})
                .find("/nonexistent/x.img"),
            std::string::npos);
  EXPECT_NE(t.refused({"namespace_add", "--nqn", kNqn, "--spec", "bogus:1G"}).find("bogus"),
            std::string::npos);
  EXPECT_NE(t.refused({"namespace_remove", "--nqn", kNqn, "--nsid", "9"}).find("does not exist"),
            std::string::npos);
  EXPECT_NE(t.refused({"subsystem_create", "--nqn", kNqn}).find("exists"), std::string::npos);
  EXPECT_NE(t.refused({"host_allow", "--nqn", kNqn, "--host", "nqn.2014-08.org.x:h1", "--key",
                       "DHHC-1:00:short:"})
                .find("key"),
            std::string::npos);
  EXPECT_NE(t.refused({"coalescing_set", "--policy", "fastest"}).find("policy"), std::string::npos);
  EXPECT_NE(t.refused({"coalescing_set", "--pdus", "0"}).find("pdus must be in 1..1024"),
            std::string::npos);
  EXPECT_NE(t.refused({"controller_disconnect", "--cntlid", "77"}).find("no controller"),
            std::string::npos);
  // Raw JSON-RPC: each malformed request gets its error code, the connection stays usable.
  auto code = [&](const std::string& line) {
    json j = json::parse(raw_exchange(t.sock, line + "\n"), nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"]["code"].get<int>() : 0;
  };
  EXPECT_EQ(code("{not json"), -32700);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1})"), -32600);
  EXPECT_EQ(code(R"({"jsonrpc":2,"id":1,"method":"stats_get"})"), -32600);  // (ended the target)
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1e999})"), -32700);               // (ended it too)
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":"no_such"})"), -32601);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":"namespace_add","params":{"nqn":1}})"),
            -32602);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":"stats_get","params":{"bogus":1}})"), -32602);
  EXPECT_EQ(code(R"({"jsonrpc":"2.0","id":1,"method":"namespace_resize",)"
                 R"("params":{"nqn":"x","nsid":1,"size":"lots"}})"),
            -32602);
  EXPECT_EQ(t.ok({"subsystem_list"}), before);
}

TEST(Rpc, GarbageHalfRequestsAndConcurrentClients) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  // Garbage then a good request on one connection: an error, then the answer.
  std::string two = raw_exchange(
      t.sock, "garbage\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"log_get_level\"}\n");
  EXPECT_NE(two.find("-32700"), std::string::npos) << two;
  // Half a request, then the client goes: the server drops it and serves the next.
  EXPECT_EQ(raw_exchange(t.sock, "{\"jsonrpc\":\"2.0\",\"id\":1,\"meth", true), "");
  // A line past the limit: refused and the connection closed.
  std::string huge(2 << 20, ' ');
  EXPECT_NE(raw_exchange(t.sock, huge).find("longer than"), std::string::npos);
  // A batch: two answers in one array.
  json batch =
      json::parse(raw_exchange(t.sock, R"([{"jsonrpc":"2.0","id":1,"method":"log_get_level"},)"
                                       R"({"jsonrpc":"2.0","id":2,"method":"coalescing_get"}])"
                                       "\n"));
  ASSERT_TRUE(batch.is_array());
  EXPECT_EQ(batch.size(), 2u);
  // Concurrent clients adding and removing their own namespaces, and reading stats.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 5; ++k) {
        std::string nsid = std::to_string(10 + i);
        if (t.rpc({"namespace_add", "--nqn", kNqn, "--spec", "null:64M", "--nsid", nsid}).code ||
            t.rpc({"stats_get"}).code ||
            t.rpc({"namespace_remove", "--nqn", kNqn, "--nsid", nsid}).code)
          ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(t.ok({"subsystem_list"})[0]["namespaces"].size(), 1u);
}

// nlohmann::json copies, compares and prints values recursively: a request nested 200,000
// levels deep (400 KB, under the line limit) in its params, its id or a batch would overflow
// the server thread's stack. Each is refused, and the server goes on.
TEST(Rpc, DeeplyNestedRequestsAreRefusedAndTheServerStays) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const std::string& line :
       {R"({"jsonrpc":"2.0","id":1,"method":"stats_get","params":)" + deep + "}",
        R"({"jsonrpc":"2.0","id":)" + deep + R"(,"method":"stats_get"})",
        R"({"jsonrpc":"2.0","id":1,"method":"subsystem_list","params":{"nqn":)" + deep + "}}",
        "[" + deep + "]"}) {
    json j = json::parse(raw_exchange(t.sock, line + "\n"), nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << line.substr(0, 80);
    EXPECT_EQ(j["error"]["code"], -32600);
    EXPECT_NE(j["error"]["message"].get<std::string>().find("nested deeper than 32"),
              std::string::npos)
        << j.dump();
  }
  // As deep as a request gets (a batch, a request, its params, a list): served.
  json answer =
      json::parse(raw_exchange(t.sock, R"([{"jsonrpc":"2.0","id":1,"method":"subsystem_create",)"
                                       R"("params":{"nqn":"nqn.2026-12.io.x:a","namespaces":)"
                                       R"(["null:1M"]}}])"
                                       "\n"),
                  nullptr, false);
  ASSERT_TRUE(answer.is_array()) << answer.dump();
  EXPECT_TRUE(answer[0].contains("result")) << answer.dump();
  EXPECT_EQ(t.ok({"subsystem_list"}).size(), 2u);
}

// Bytes that are not UTF-8: the parser's error message quotes them, and printing that answer
// threw (nlohmann refuses to write invalid UTF-8), which ended the target. Answered -32700 or
// -32602 with the bad bytes replaced, and the server goes on.
TEST(Rpc, InvalidUtf8IsRefusedAndTheServerStays) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  for (const std::string& line :
       {std::string(R"({"jsonrpc":"2.0","id":1,"method":"subsystem_list","params":{"nqn":"x)") +
            "\xcd\x8d\x9e\x92" + R"("}})",
        std::string("\xff\xfe{}"), std::string(R"({"jsonrpc":"2.0","id":"\xc3"})")}) {
    json j = json::parse(raw_exchange(t.sock, line + "\n"), nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << line;
    EXPECT_EQ(j["error"]["code"], -32700) << j.dump();
  }
  EXPECT_EQ(t.ok({"subsystem_list"}).size(), 1u);
}

TEST(Rpc, HostsComeAndGoAndTheListDecides) {
  RpcTarget t;
  const std::string a = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-000000000001";
  const std::string b = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-000000000002";
  ASSERT_EQ(t.start({"--allow-host", a}), "");
  Session refused;
  refused.hostnqn = b;
  EXPECT_NE(refused.open(t.port, kNqn), "");
  t.ok({"host_allow", "--nqn", kNqn, "--host", b});
  Session s;
  s.hostnqn = b;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  EXPECT_EQ(write_read(s.io, 0, 4096, 1, false), "");
  t.ok({"host_disallow", "--nqn", kNqn, "--host", b});
  EXPECT_TRUE(s.io.wait_closed(5000));
  EXPECT_TRUE(s.admin.wait_closed(5000));
  Session again;
  again.hostnqn = b;
  EXPECT_NE(again.open(t.port, kNqn), "");
  json subs = t.ok({"subsystem_list"});
  EXPECT_EQ(subs[0]["allowed_hosts"], json::array({a}));
  EXPECT_EQ(subs[0]["allow_any_host"], false);
}

// A listener added live takes connections; removed, it takes no more and the connections
// made through it stay. A namespace moved to another ANA group says so in Identify.
TEST(Rpc, ListenersComeAndGoAndNamespacesChangeAnaGroup) {
  RpcTarget t;
  ASSERT_EQ(t.start(), "");
  json added = t.ok({"listener_add", "--address", "127.0.0.1", "--port", "0"});
  uint16_t port = added["port"];
  ASSERT_NE(port, 0);
  bool listed = false;
  for (auto& l : t.ok({"listener_list"})) listed |= l["port"] == port;
  EXPECT_TRUE(listed);
  Session s;
  ASSERT_EQ(s.open(port, kNqn), "");
  EXPECT_EQ(write_read(s.io, 0, 4096, 11, false), "");
  EXPECT_NE(t.refused({"listener_add", "--address", "127.0.0.1", "--port", std::to_string(t.port)}),
            "");  // the port is taken
  t.ok({"listener_remove", "--address", "127.0.0.1", "--port", std::to_string(port)});
  RawClient late;
  EXPECT_FALSE(late.connect(port, 1000)) << "the removed listener still accepts";
  EXPECT_EQ(write_read(s.io, 8, 4096, 12, false), "");  // the connection made there stays

  t.ok({"namespace_set_ana_group", "--nqn", kNqn, "--nsid", "1", "--group", "2"});
  nvme::IdentifyNamespace id{};
  ASSERT_TRUE(s.admin.exec(nvme::make_identify(0x00, 1, 0), nullptr, 0, &id, sizeof id).ok());
  EXPECT_EQ(id.anagrpid, 2u);
  EXPECT_EQ(write_read(s.io, 16, 4096, 13, false), "");  // group 2 is optimized here too
  std::string saved = t.ok({"save_config"})["subsystems"][0]["namespaces"][0];
  EXPECT_NE(saved.find("anagrpid=2"), std::string::npos) << saved;
}

// The methods the other tests do not reach: subsystems created and deleted live (with a host
// connected to the deleted one), allow_any_host, controllers listed and disconnected, ANA set
// per listener, the log level, and the method list.
TEST(Rpc, SubsystemsControllersAnaAndTheRest) {
  RpcTarget t;
  t.dport = free_port();
  ASSERT_EQ(t.start(), "");
  // The discovery log: its generation counter moves with the subsystems it lists.
  auto discover = [&] {
    return run_command({SENS_BINARY, "discover", "-a", "127.0.0.1", "-s", std::to_string(t.dport)},
                       10000)
        .out;
  };
  std::string before = discover();
  ASSERT_NE(before.find("Generation counter 1\n"), std::string::npos) << before;
  const std::string two = "nqn.2026-12.io.example:two";
  t.ok({"subsystem_create", "--nqn", two, "--namespaces", "ram:16M", "--namespaces", "null:1G"});
  std::string after = discover();
  EXPECT_NE(after.find("Generation counter 2\n"), std::string::npos) << after;
  EXPECT_NE(after.find(two), std::string::npos) << after;
  Session s;
  ASSERT_EQ(s.open(t.port, two), "");
  EXPECT_EQ(write_read(s.io, 0, 4096, 21, false), "");
  json ctrls = t.ok({"controller_list", "--nqn", two});
  ASSERT_EQ(ctrls.size(), 1u);
  EXPECT_EQ(ctrls[0]["cntlid"], s.cntlid);
  EXPECT_EQ(ctrls[0]["hostnqn"], kHostNqn);
  EXPECT_EQ(ctrls[0]["queues"].size(), 2u);
  EXPECT_NE(ctrls[0]["address"].get<std::string>().find("127.0.0.1:"), std::string::npos);
  // Any host, then only listed ones: the connected host, not listed, goes.
  t.ok({"subsystem_allow_any_host", "--nqn", two, "--allow", "false"});
  EXPECT_TRUE(s.admin.wait_closed(5000));
  Session refused;
  EXPECT_NE(refused.open(t.port, two), "");
  t.ok({"subsystem_allow_any_host", "--nqn", two, "--allow", "true"});
  Session again;
  ASSERT_EQ(again.open(t.port, two), "");
  // Disconnected by the operator.
  t.ok({"controller_disconnect", "--cntlid", std::to_string(again.cntlid)});
  EXPECT_TRUE(again.io.wait_closed(5000));
  // ANA through the listener: a host connected there sees the group inaccessible.
  Session s1;
  ASSERT_EQ(s1.open(t.port, kNqn), "");
  json r = t.ok({"listener_set_ana", "--address", "127.0.0.1", "--port", std::to_string(t.port),
                 "--group", "1", "--state", "inaccessible"});
  EXPECT_EQ(r["groups_changed"], 1);
  std::vector<uint8_t> back(4096);
  Result io = s1.io.exec(io_cmd(nvme::io_op::kRead, 1, 0, 4096), nullptr, 0, back.data(), 4096);
  EXPECT_EQ(io.status(), 0x302) << io.describe();  // Asymmetric Access Inaccessible
  bool seen = false;
  for (auto& l : t.ok({"listener_list"}))
    if (l["port"] == t.port) seen = l["ana"]["1"] == "inaccessible";
  EXPECT_TRUE(seen);
  // Deleted with a host connected: its connections close, its name is free again.
  Session doomed;
  ASSERT_EQ(doomed.open(t.port, two), "");
  t.ok({"subsystem_delete", "--nqn", two});
  EXPECT_TRUE(doomed.io.wait_closed(5000));
  EXPECT_EQ(t.ok({"subsystem_list"}).size(), 1u);
  EXPECT_NE(t.refused({"subsystem_delete", "--nqn", two}).find("no subsystem"), std::string::npos);
  EXPECT_NE(t.refused({"subsystem_create", "--nqn", two}).find("no namespace"), std::string::npos);
  t.ok({"subsystem_create", "--nqn", two, "--namespaces", "null:1G"});
  EXPECT_EQ(t.ok({"subsystem_list", "--nqn", two})[0]["namespaces"].size(), 1u);
  // The log level, and the method list.
  EXPECT_EQ(t.ok({"log_set_level", "--level", "debug"}), "debug");
  EXPECT_EQ(t.ok({"log_get_level"}), "debug");
  EXPECT_NE(t.refused({"log_set_level", "--level", "chatty"}).find("error, warn, info"),
            std::string::npos);
  json methods = t.ok({"rpc_get_methods"});
  EXPECT_GE(methods.size(), 25u);
  for (auto& m : methods) EXPECT_FALSE(m["help"].get<std::string>().empty()) << m.dump();
}

// A key rotated live: a host connected with the old key keeps working; new connections need
// the new one.
TEST(Rpc, KeyRotationKeepsConnectedHostsAndTheNextAuthenticationUsesTheNewKey) {
  const std::string old_key = make_secret(1, 32, 4), new_key = make_secret(0, 32, 5);
  RpcTarget t;
  ASSERT_EQ(t.start({"--host-key", std::string(kHostNqn) + "=" + old_key}), "");
  const std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) +
                           " subnqn:" + kNqn + " hostnqn:" + kHostNqn;
  // (only the long run writes and verifies; the short ones read)
  auto perf = [&](const std::string& key, const std::string& seconds) {
    bool verify = seconds == "3";
    std::vector<std::string> argv = {SENS_BINARY,
                                     "perf",
                                     "-r",
                                     trid,
                                     "--dhchap-secret",
                                     key,
                                     "--rw",
                                     verify ? "randrw" : "randread",
                                     "--bs",
                                     "4k",
                                     "--qd",
                                     "4",
                                     "--time",
                                     seconds,
                                     "-q"};
    if (verify) argv.push_back("--verify");
    return argv;
  };
  Child running;
  ASSERT_TRUE(running.start(perf(old_key, "3"), t.dir.file("perf.out"), t.dir.file("perf.err")));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  t.ok({"host_allow", "--nqn", kNqn, "--host", kHostNqn, "--key", new_key});
  EXPECT_NE(run_command(perf(old_key, "0.3"), 20000).code, 0) << "the old key still works";
  RunResult fresh = run_command(perf(new_key, "0.3"), 20000);
  EXPECT_EQ(fresh.code, 0) << fresh.err;
  EXPECT_EQ(running.wait(20000), 0) << read_file(t.dir.file("perf.err"));
  json subs = t.ok({"subsystem_list"});
  EXPECT_EQ(subs[0]["hosts_with_keys"], json::array({kHostNqn}));
}

TEST(Rpc, CoalescingStatsSaveConfigAndReload) {
  RpcTarget u;
  std::string cfg = u.dir.file("t.json");
  ASSERT_TRUE(write_file(
      cfg, R"({"subsystems":[{"nqn":")" + std::string(kNqn) + R"(","namespaces":["ram:64M"]}]})"));
  ASSERT_EQ(u.start({"--config", cfg}), "");
  json c = u.ok({"coalescing_set", "--policy", "uniform", "--pdus", "8", "--timeout_us", "20"});
  EXPECT_EQ(c["policy"], "uniform");
  EXPECT_EQ(u.ok({"coalescing_get"})["pdus"], 8);
  Session s;
  ASSERT_EQ(s.open(u.port, kNqn), "");
  for (int i = 0; i < 20; ++i) ASSERT_EQ(write_read(s.io, uint64_t(i) * 8, 4096, i, false), "");
  json stats = u.ok({"stats_get"});
  EXPECT_GT(stats["pdus_sent"].get<uint64_t>(), 40u);
  u.ok({"stats_reset"});
  EXPECT_LT(u.ok({"stats_get"})["pdus_sent"].get<uint64_t>(), 5u);
  // save_config: the namespace added live, with its nsid; a new target starts from it.
  u.ok({"namespace_add", "--nqn", kNqn, "--spec", "null:1G", "--nsid", "5"});
  std::string saved = u.dir.file("saved.json");
  EXPECT_EQ(u.ok({"save_config", "--path", saved})["path"], saved);
  json file = json::parse(read_file(saved));
  EXPECT_EQ(file["subsystems"][0]["namespaces"], json::array({"ram:64M", "null:1G,nsid=5"}));
  EXPECT_EQ(file["coalesce"]["policy"], "uniform") << file.dump();
  // SIGHUP: the config file (edited) is applied through the same changes.
  ASSERT_TRUE(
      write_file(cfg, R"({"subsystems":[{"nqn":")" + std::string(kNqn) +
                          R"(","namespaces":["ram:64M","null:2G,nsid=3"]},)"
                          R"({"nqn":"nqn.2026-12.io.example:two","namespaces":["ram:8M"]}]})"));
  ASSERT_TRUE(u.child.signal(SIGHUP));
  ASSERT_TRUE(u.child.wait_for_text(u.dir.file("err"),
                                    "subsystem nqn.2026-12.io.example:two created", 5000))
      << read_file(u.dir.file("err"));
  json subs = u.ok({"subsystem_list"});
  ASSERT_EQ(subs.size(), 2u);
  std::vector<uint32_t> nsids;
  for (auto& ns : subs[0]["namespaces"]) nsids.push_back(ns["nsid"]);
  EXPECT_EQ(nsids, (std::vector<uint32_t>{1, 3}));  // 5 (not in the file) went, 3 came
  ASSERT_TRUE(u.child.signal(SIGTERM));
  EXPECT_EQ(u.child.wait(10000), 0);
}

}  // namespace
}  // namespace sens::testing
