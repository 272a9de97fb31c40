// Adversarial TLS (issue 29): a `sens target` child with a TLS listener gets a real ClientHello
// (made by OpenSSL through the host's own TLS code, with the PSK identity of a configured
// host) cut at every byte offset, each cut closed, half-closed or left stalled; then garbage
// as the first bytes on the TLS port (random bytes, plain NVMe/TCP, HTTP, oversized and
// out-of-order records, a ClientHello with a byte flipped). Meanwhile and afterwards a
// well-behaved `sens perf --tls --verify` host keeps working; at the end the target has no
// connection left open, no descriptor more than before, and stops cleanly.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "auth/tls_psk.h"
#include "child_process.h"
#include "raw_client.h"
#include "rpc_target.h"
#include "transport/tls.h"
#include "../wait_until.h"

namespace sens::testing {
namespace {

using nlohmann::json;
using Bytes = std::vector<uint8_t>;
constexpr const char* kSub = "nqn.2026-11.io.sens-target:ram0";  // the target's default NQN

std::string psk_text(uint8_t seed) {
  auth::ConfiguredPsk p;
  p.transform = 1;
  for (size_t i = 0; i < 32; ++i) p.key.push_back(uint8_t(seed + 7 * i));
  return auth::format_tls_psk(p);
}

// The first flight of a host that holds `key`: the ClientHello record(s) OpenSSL writes, as
// the host library builds its TLS context (src/host/controller.cc), caught on a socketpair.
Bytes make_client_hello(const std::string& key_text, std::string* error) {
  auto key = auth::parse_tls_psk(key_text, error);
  if (!key) return {};
  transport::TlsPsk psk;
  psk.hash = key->cipher_hash();
  auth::Bytes retained = auth::retained_psk(*key, kHostNqn);
  const std::string digest = auth::psk_digest(psk.hash, retained, kHostNqn, kSub);
  psk.identity = auth::psk_identity(psk.hash, kHostNqn, kSub, digest);
  psk.key = auth::tls_psk(psk.hash, retained, digest);
  auto ctx = transport::TlsContext::client(std::move(psk), error);
  if (!ctx) return {};
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return {};
  Bytes out;
  {
    transport::TlsChannel channel(*ctx, sv[0]);
    if (channel.handshake() != transport::TlsChannel::Io::kWantRead) {
      *error = "the client handshake did not stop for the server: " + channel.error();
    } else {
      uint8_t buf[4096];
      ssize_t n;
      while ((n = ::recv(sv[1], buf, sizeof buf, 0)) > 0) out.insert(out.end(), buf, buf + n);
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return out;
}

int tcp_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// Reads until the peer closes (true) or `timeout_ms` passes (false); what came is appended.
bool closed_by_peer(int fd, int timeout_ms, Bytes* got = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - std::chrono::steady_clock::now())
                       .count());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) continue;
    uint8_t buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n > 0 && got) got->insert(got->end(), buf, buf + n);
  }
}

size_t open_fds(pid_t pid) {
  size_t n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

class TlsCut : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(write_file(t_.dir.file("psk"), psk_text(3) + "\n"));
    tls_port_ = free_port();
    ASSERT_EQ(t_.start({"--tls-listen", "127.0.0.1:" + std::to_string(tls_port_), "--tls",
                        t_.dir.file("psk")}),
              "");
    ASSERT_TRUE(t_.child.wait_for_text(t_.dir.file("out"), "TLS 1.3", 10000));
  }
  void TearDown() override {
    for (int fd : stalled_) ::close(fd);
  }
  int open_connections() {
    RunResult r = t_.rpc({"stats_get"});
    if (r.code != 0) return -1;
    json j = json::parse(r.out, nullptr, false);
    if (!j.contains("reactors")) return -1;
    int n = 0;
    for (auto& reactor : j["reactors"]) n += reactor.value("open_connections", 0);
    return n;
  }
  // `sens perf` over TLS with every read verified, as a child (its output in NAME.out).
  bool start_perf(Child& perf, const std::string& name, int seconds) {
    const std::string trid =
        "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(tls_port_) + " subnqn:" + kSub;
    return perf.start(
        {SENS_BINARY, "perf", "-r", trid, "--tls", t_.dir.file("psk"), "--rw", "randrw", "--bs",
         "4k", "--qd", "8", "--time", std::to_string(seconds), "--verify", "-q", "--size", "16M"},
        t_.dir.file(name + ".out"), t_.dir.file(name + ".err"));
  }
  void expect_perf_ok(Child& perf, const std::string& name) {
    EXPECT_EQ(perf.wait(120000), 0) << read_file(t_.dir.file(name + ".err"));
    EXPECT_NE(read_file(t_.dir.file(name + ".out")).find(" 0 failed"), std::string::npos)
        << read_file(t_.dir.file(name + ".out"));
  }
  // Sends `bytes` on a fresh connection, then closes (0), half-closes and waits for the
  // target to close too (1), or leaves the connection open (2; closed by TearDown).
  void attack(const Bytes& bytes, int how, const std::string& what) {
    int fd = tcp_connect(tls_port_);
    ASSERT_GE(fd, 0) << what << ": connect: " << std::strerror(errno);
    send_all(fd, bytes.data(), bytes.size());  // the target may close early: that is fine
    if (how == 0) {
      ::close(fd);
    } else if (how == 1) {
      ::shutdown(fd, SHUT_WR);
      EXPECT_TRUE(closed_by_peer(fd, 10000)) << what << ": the target kept the connection";
      ::close(fd);
    } else {
      stalled_.push_back(fd);
    }
  }

  RpcTarget t_;
  uint16_t tls_port_ = 0;
  std::vector<int> stalled_;
};

TEST_F(TlsCut, ClientHelloCutAtEveryByteAndGarbageLeaveTheTargetServing) {
  std::string error;
  const Bytes hello = make_client_hello(psk_text(3), &error);
  ASSERT_FALSE(hello.empty()) << error;
  // One handshake record carries the whole ClientHello.
  ASSERT_GE(hello.size(), 5u + 4u);
  ASSERT_EQ(hello[0], 0x16);
  ASSERT_EQ(hello[5], 0x01);  // ClientHello
  ASSERT_EQ(hello.size(), 5u + (size_t(hello[3]) << 8 | hello[4]));
  // The whole hello is a good one: the target answers it with its ServerHello.
  {
    int fd = tcp_connect(tls_port_);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, hello.data(), hello.size()));
    Bytes answer;
    closed_by_peer(fd, 2000, &answer);  // it waits for the client's Finished: no close
    ::close(fd);
    ASSERT_GE(answer.size(), 6u);
    EXPECT_EQ(answer[0], 0x16);
    EXPECT_EQ(answer[5], 0x02) << "not a ServerHello";
  }
  ASSERT_TRUE(wait_until([&] { return open_connections() == 0; }, std::chrono::seconds(10)));
  const size_t fds_before = open_fds(t_.child.pid());
  ASSERT_GT(fds_before, 0u);

  Child during;
  ASSERT_TRUE(start_perf(during, "during", 6));
  const auto started = std::chrono::steady_clock::now();
  // Every cut of the hello: closed, half-closed (the target must close at the EOF) or stalled
  // (the set-up deadline closes it), in turn.
  for (size_t cut = 0; cut < hello.size(); ++cut)
    attack(Bytes(hello.begin(), hello.begin() + long(cut)), int(cut % 3),
           "hello cut at " + std::to_string(cut));
  // The whole hello, then nothing (the server's Finished is never answered), or junk after it.
  attack(hello, 2, "whole hello, stalled");
  Bytes junk_after = hello;
  for (int i = 0; i < 64; ++i) junk_after.push_back(uint8_t(i * 37));
  attack(junk_after, 1, "hello then junk");

  std::mt19937 rng(29);
  Bytes random_bytes(512);
  for (auto& b : random_bytes) b = uint8_t(rng());
  Bytes icreq(128, 0);  // a plain NVMe/TCP ICReq: type 0, hlen 128, plen 128
  icreq[2] = 128;
  icreq[4] = 128;
  const std::string http = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  Bytes huge_record = {0x16, 0x03, 0x01, 0xFF, 0xFF};  // longer than any record may be
  huge_record.resize(4096, 0xAB);
  Bytes app_data_first = {0x17, 0x03, 0x03, 0x00, 0x20};  // application data before a hello
  app_data_first.resize(5 + 32, 0x55);
  Bytes bad_hs_length = hello;  // the handshake message claims 16 MiB
  bad_hs_length[6] = bad_hs_length[7] = bad_hs_length[8] = 0xFF;
  Bytes sslv2 = {0x80, 0x2E, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10};
  sslv2.resize(48, 0x01);
  const std::vector<std::pair<std::string, Bytes>> garbage = {
      {"random bytes", random_bytes},
      {"a plain NVMe/TCP ICReq", icreq},
      {"an HTTP request", Bytes(http.begin(), http.end())},
      {"a 64 KiB record header", huge_record},
      {"application data first", app_data_first},
      {"a hello claiming 16 MiB", bad_hs_length},
      {"an SSLv2 hello", sslv2},
      {"one zero byte", Bytes(1, 0)},
  };
  for (auto& [what, bytes] : garbage)
    for (int how : {0, 1, 2}) attack(bytes, how, what);
  // The hello with one byte flipped, at a sample of offsets (every 5th).
  for (size_t at = 0; at < hello.size(); at += 5) {
    Bytes flipped = hello;
    flipped[at] ^= 0x5A;
    attack(flipped, 1, "hello with byte " + std::to_string(at) + " flipped");
  }
  const double attack_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("%zu-byte ClientHello: %zu connections in %.1f s, %zu left stalled\n", hello.size(),
              hello.size() + 2 + garbage.size() * 3 + (hello.size() + 4) / 5, attack_s,
              stalled_.size());
  expect_perf_ok(during, "during");

  // The stalled connections: the target closes each at its set-up deadline (10 s).
  for (int fd : stalled_) EXPECT_TRUE(closed_by_peer(fd, 20000)) << "a stalled connection stayed";
  for (int fd : stalled_) ::close(fd);
  stalled_.clear();
  EXPECT_TRUE(wait_until([&] { return open_connections() == 0; }, std::chrono::seconds(10)))
      << open_connections() << " connections still open";
  EXPECT_TRUE(
      wait_until([&] { return open_fds(t_.child.pid()) <= fds_before; }, std::chrono::seconds(10)))
      << open_fds(t_.child.pid()) << " descriptors open, " << fds_before << " before";

  // And a host after all that.
  Child after;
  ASSERT_TRUE(start_perf(after, "after", 1));
  expect_perf_ok(after, "after");
  t_.child.signal(SIGTERM);
  EXPECT_EQ(t_.child.wait(20000), 0) << read_file(t_.dir.file("err"));
}

}  // namespace
}  // namespace sens::testing
