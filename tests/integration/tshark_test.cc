// Wireshark's NVMe/TCP dissector as an independent judge of the wire format: one full session
// (connect, identify, in-capsule and R2T writes, reads, disconnect) captured on loopback must
// decode without a malformed packet or an error-level expert note.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "../wait_until.h"
#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

constexpr const char* kDefaultNqn = "nqn.2026-11.io.sens-target:ram0";

std::string find_tshark() {
  for (const char* p : {"/usr/bin/tshark", "/usr/local/bin/tshark", "/bin/tshark"})
    if (access(p, X_OK) == 0) return p;
  RunResult r = run_command({"/bin/sh", "-c", "command -v tshark"}, 3000);
  std::string path = r.out.substr(0, r.out.find('\n'));
  return r.code == 0 && !path.empty() ? path : "";
}

size_t count_lines(const std::string& s) {
  size_t n = 0;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) ++n;
  return n;
}

// One session as a Linux host would run it, plus the R2T path and a digest-protected queue.
void run_session(uint16_t port, uint8_t digest) {
  SCOPED_TRACE(digest ? "with digests" : "without digests");
  Session s;
  ASSERT_EQ(s.open(port, kDefaultNqn, digest), "");
  nvme::IdentifyController idc{};
  Result r = s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  nvme::IdentifyNamespace idn{};
  r = s.admin.exec(nvme::make_identify(0, 1), nullptr, 0, &idn, sizeof(idn));
  ASSERT_TRUE(r.ok()) << r.describe();
  r = s.admin.exec(nvme::make_get_log_page(nvme::log_page::kSmart, 0xFFFFFFFF, 512, 0), nullptr, 0,
                   &idn, 512);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, 4096, 1, true), "");      // in-capsule write, C2HData read
  EXPECT_EQ(write_read(s.io, 256, 65536, 2, false), "");  // R2T + H2CData
  r = s.io.exec(nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, nvme::Xfer::kTransport, 0));
  EXPECT_TRUE(r.ok()) << r.describe();
  r = s.admin.exec(nvme::make_keep_alive());
  EXPECT_TRUE(r.ok()) << r.describe();
  r = s.io.exec(nvme::make_disconnect());
  EXPECT_TRUE(r.ok()) << r.describe();
  r = s.admin.exec(nvme::make_property_set(nvme::reg::kCc, 0x00464001, false));
  EXPECT_TRUE(r.ok()) << r.describe();
  r = s.admin.exec(nvme::make_disconnect());
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(s.io.wait_closed(2000));
  EXPECT_TRUE(s.admin.wait_closed(2000));
}

// Opens and closes a TCP connection to `port` and waits (up to `timeout`) until the capture
// file holds its packets. Loopback packets are captured in the order they are sent: once the
// probe is in the file, so is everything sent before it.
bool probe_captured(const std::string& tshark, const std::string& pcap, uint16_t port,
                    std::chrono::milliseconds timeout) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool connected = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                   getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!connected) return false;
  const std::string filter = "tcp.port == " + std::to_string(ntohs(a.sin_port));
  // Read while tshark writes: the last block may be cut short, so only the output counts.
  auto in_file = [&] {
    return !run_command({tshark, "-r", pcap, "-Y", filter}, 10000).out.empty();
  };
  return wait_until(in_file, timeout, std::chrono::milliseconds(100));
}

TEST(Tshark, CapturedSessionDissectsCleanly) {
  const std::string tshark = find_tshark();
  if (tshark.empty())
    GTEST_SKIP() << "tshark is not installed (make deps, or apt-get install tshark)";

  TempDir dir;
  Child target;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 5 && !port; ++attempt) {
    uint16_t p = free_port();
    ASSERT_TRUE(target.start({SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(p),
                              "--discovery-port", "0", "--ns", "ram:16M"},
                             dir.file("target.out"), dir.file("target.err")));
    if (target.wait_for_text(dir.file("target.out"), "listening on", 5000))
      port = p;
    else
      target.kill_now();
  }
  ASSERT_NE(port, 0) << read_file(dir.file("target.err"));

  const std::string pcap = dir.file("session.pcapng");
  Child capture;
  ASSERT_TRUE(
      capture.start({tshark, "-i", "lo", "-f", "tcp port " + std::to_string(port), "-w", pcap},
                    dir.file("tshark.out"), dir.file("tshark.err")));
  ASSERT_TRUE(capture.wait_for_text(dir.file("tshark.err"), "Capturing on", 10000))
      << "tshark did not start capturing: " << read_file(dir.file("tshark.err"));
  // The filter is live once a probe connection shows up in the file (one that came too early
  // never will: probe again).
  auto probed = [&] { return probe_captured(tshark, pcap, port, std::chrono::milliseconds(1000)); };
  ASSERT_TRUE(wait_until(probed, std::chrono::milliseconds(20000), std::chrono::milliseconds(0)))
      << "tshark captures nothing on port " << port;

  run_session(port, 0);
  run_session(port, pdu::kDigestHeader | pdu::kDigestData);

  ASSERT_TRUE(probe_captured(tshark, pcap, port, std::chrono::milliseconds(10000)))
      << "the capture did not catch up with the sessions";
  ASSERT_TRUE(capture.signal(SIGINT));
  int code = capture.wait(10000);
  ASSERT_EQ(code, 0) << "tshark exit: " << read_file(dir.file("tshark.err"));
  target.signal(SIGTERM);
  EXPECT_EQ(target.wait(5000), 0);

  const std::string decode = "tcp.port==" + std::to_string(port) + ",nvme-tcp";
  // The dissector verifies header and data digests only when asked; a bad one is an
  // error-level expert note.
  RunResult bad = run_command(
      {tshark, "-r", pcap, "-d", decode, "-o", "nvme-tcp.check_hdgst:TRUE", "-o",
       "nvme-tcp.check_ddgst:TRUE", "-Y", "_ws.malformed || _ws.expert.severity == error"},
      20000);
  ASSERT_EQ(bad.code, 0) << bad.err;
  EXPECT_EQ(bad.out, "") << "malformed or erroneous packets:\n" << bad.out;

  // Digests were really checked (status 1 = good) on the second session.
  RunResult good = run_command({tshark, "-r", pcap, "-d", decode, "-o", "nvme-tcp.check_hdgst:TRUE",
                                "-o", "nvme-tcp.check_ddgst:TRUE", "-Y",
                                "nvme-tcp.hdgst.status == 1 && nvme-tcp.ddgst.status == 1"},
                               20000);
  ASSERT_EQ(good.code, 0) << good.err;
  EXPECT_GT(count_lines(good.out), 0u) << "no PDU with verified digests";

  RunResult all = run_command({tshark, "-r", pcap, "-d", decode, "-Y", "nvme-tcp"}, 20000);
  ASSERT_EQ(all.code, 0) << all.err;
  size_t lines = count_lines(all.out);
  EXPECT_GT(lines, 10u) << all.out;

  // The PDU types the session must show: every one the target sends and the host sends.
  RunResult types = run_command(
      {tshark, "-r", pcap, "-d", decode, "-Y", "nvme-tcp", "-T", "fields", "-e", "nvme-tcp.type"},
      20000);
  ASSERT_EQ(types.code, 0) << types.err;
  std::set<std::string> seen;
  std::string cur;
  for (char ch : types.out + "\n") {
    if (ch == '\n' || ch == ',') {
      if (!cur.empty()) seen.insert(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  std::string seen_list;
  for (auto& t : seen) seen_list += " " + t;
  std::printf("tshark decoded %zu NVMe/TCP packets; PDU types:%s\n", lines, seen_list.c_str());
  if (const char* keep = std::getenv("SENS_KEEP_PCAP")) {
    RunResult cp = run_command({"/bin/cp", pcap, keep}, 5000);
    EXPECT_EQ(cp.code, 0) << cp.err;
  }
  for (const char* t : {"0", "1", "4", "5", "6", "7", "9"})
    EXPECT_TRUE(seen.count(t)) << "no PDU of type " << t << " decoded; types seen:\n" << types.out;
}

}  // namespace
}  // namespace sens::testing
