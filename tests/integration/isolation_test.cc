// Issue 29 against a real `sens target` child and raw hosts on real sockets: a host that stops
// reading cannot starve another host of the same reactor's buffer pool (fair shares), and a
// host that stops halfway (not reading, no H2CData after an R2T, a PDU cut short) loses that
// connection after --stall-timeout, counted in the stats, while the others go on.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";  // the default subsystem
constexpr const char* kQuietHost =
    "nqn.2014-08.org.nvmexpress:uuid:5e115e11-0000-4000-8000-000000000002";
constexpr uint8_t kQuietHostId[16] = {0x5e, 0x11, 0x5e, 0x11, 0, 0, 0x40, 0,
                                      0x80, 0,    0,    0,    0, 0, 0,    2};
constexpr uint32_t k128k = 128 * 1024;

// A `sens target` child (one reactor: every connection shares one pool) with --stats-json.
struct Target {
  TempDir dir;
  Child child;
  uint16_t port = 0;

  std::string start(std::vector<std::string> extra) {
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      if (!port) continue;
      std::vector<std::string> argv = {SENS_BINARY,        "target",
                                       "--listen",         "127.0.0.1:" + std::to_string(port),
                                       "--discovery-port", "0",
                                       "--cores",          "1",
                                       "--stats-json",     dir.file("stats.json")};
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "listening on", 5000)) return "";
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free port: " + why;
  }

  // The first reactor's stats, fresh (SIGUSR1 writes them).
  nlohmann::json reactor_stats() {
    const std::string path = dir.file("stats.json");
    std::remove(path.c_str());
    if (!child.signal(SIGUSR1)) return {};
    auto deadline = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < deadline) {
      if (file_exists(path)) {
        auto j = nlohmann::json::parse(read_file(path), nullptr, false);
        if (!j.is_discarded()) return j["reactors"][0];
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return {};
  }
  uint64_t stalled(const char* kind) {
    auto r = reactor_stats();
    if (!r.is_object() || !r.contains("stalled_connections")) return UINT64_MAX;
    return r["stalled_connections"].value(kind, UINT64_MAX);
  }
};

// Sends `n` reads of 128 KiB on `c` and reads nothing back.
bool send_reads_unread(RawClient& c, int n, uint64_t first_lba) {
  for (int i = 0; i < n; ++i) {
    nvme::Sqe sqe = nvme::make_io(nvme::io_op::kRead, 1, first_lba + uint64_t(i) * 256, 256,
                                  nvme::Xfer::kTransport, k128k);
    sqe.cid = c.next_cid();
    if (!c.send_bytes(c.capsule_bytes(sqe))) return false;
  }
  return true;
}

// A second host on the same reactor: `rounds` verified 128 KiB write + read pairs.
std::string quiet_host_io(uint16_t port, int rounds, int* done) {
  Session quiet;
  quiet.hostnqn = kQuietHost;
  quiet.hostid = kQuietHostId;
  std::string e = quiet.open(port, kNqn);
  if (!e.empty()) return "quiet host: " + e;
  for (*done = 0; *done < rounds; ++*done) {
    e = write_read(quiet.io, 4096 + uint64_t(*done % 8) * 256, k128k, uint32_t(*done), false);
    if (!e.empty()) return "quiet host, round " + std::to_string(*done) + ": " + e;
  }
  return "";
}

// The target with a 1 s stall timeout (and `extra`), and `s` connected to it (admin and one
// I/O queue). Call through ASSERT_NO_FATAL_FAILURE.
void start_with_stall_timeout(Target& t, Session& s, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--ns", "ram:16M", "--stall-timeout", "1s"};
  args.insert(args.end(), extra.begin(), extra.end());
  ASSERT_EQ(t.start(args), "");
  ASSERT_EQ(s.open(t.port, kNqn), "");
}

// After the target ended one connection: it logged `reason` (if given), and another host on
// the same reactor is still served.
void expect_only_that_connection_ended(Target& t, const char* reason) {
  if (reason) {
    EXPECT_NE(read_file(t.dir.file("err")).find(reason), std::string::npos)
        << read_file(t.dir.file("err"));
  }
  int done = 0;
  EXPECT_EQ(quiet_host_io(t.port, 3, &done), "");
}

// (a) One host stops reading on two I/O queues full of 128 KiB reads; before fair shares
// they pinned the whole pool and the other host's commands waited for ever.
TEST(Isolation, HostThatStopsReadingDoesNotStarveAnother) {
  Target t;
  // A 2 MiB pool (16 buffers of 128 KiB) and small socket buffers, so that a few unread
  // reads pin buffers; the stall deadline stays at its default (30 s), out of the way.
  ASSERT_EQ(t.start({"--ns", "ram:64M", "--buffer-pool", "2M", "--sock-buf", "4096"}), "");
  Session stalled;
  stalled.io.set_rcvbuf(4096);
  ASSERT_EQ(stalled.open(t.port, kNqn, 0, 0, 127), "");
  RawClient q2;
  q2.set_rcvbuf(4096);
  ASSERT_TRUE(q2.connect(t.port)) << q2.last_error();
  ASSERT_TRUE(q2.ic()) << q2.last_error();
  Result c = q2.connect_queue(2, kNqn, stalled.cntlid, 0, 0, 127);
  ASSERT_TRUE(c.ok()) << c.describe();
  ASSERT_TRUE(send_reads_unread(stalled.io, 64, 0));
  ASSERT_TRUE(send_reads_unread(q2, 64, 64 * 256));
  // Wait until the stalled queues hold what they can.
  uint64_t in_use = 0;
  for (int i = 0; i < 100 && in_use < (1u << 20); ++i) {
    in_use = t.reactor_stats()["buffer_pool"].value("in_use_bytes", uint64_t(0));
    if (in_use < (1u << 20)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(in_use, 1u << 20) << "the stalled host did not pin buffers: the test proves nothing";

  int done = 0;
  EXPECT_EQ(quiet_host_io(t.port, 50, &done), "");
  EXPECT_EQ(done, 50);
  auto r = t.reactor_stats();
  EXPECT_GT(r["buffer_pool"].value("share_capped", uint64_t(0)), 0u) << r["buffer_pool"].dump();
  EXPECT_LE(r["buffer_pool"].value("in_use_bytes", uint64_t(0)), uint64_t(2) << 20);
  // The stalled host is not ended before its deadline (30 s): it only waits.
  EXPECT_TRUE(stalled.admin.still_open(0));
  EXPECT_EQ(t.stalled("send"), 0u);
}

// (b) A host with KATO=0 (nothing else would ever end it) stops four bytes into a capsule.
TEST(Isolation, PduLeftUnfinishedEndsTheConnectionAfterTheStallTimeout) {
  Target t;
  Session s;  // admin Connect with KATO=0
  ASSERT_NO_FATAL_FAILURE(start_with_stall_timeout(t, s));
  auto capsule =
      s.io.capsule_bytes(nvme::make_io(nvme::io_op::kRead, 1, 0, 8, nvme::Xfer::kTransport, 4096));
  ASSERT_TRUE(s.io.send_bytes(capsule.data(), 4));
  auto start = Clock::now();
  EXPECT_TRUE(s.io.still_open(700)) << "ended before the stall timeout";
  EXPECT_TRUE(s.io.wait_closed(3000)) << "a connection with half a PDU stayed open";
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_GE(ms, 900);
  EXPECT_EQ(t.stalled("pdu"), 1u);
  // Only that connection: another host still works.
  expect_only_that_connection_ended(t, "a PDU stayed unfinished");
}

// (c) A write's R2T comes; the host never sends the H2CData.
TEST(Isolation, H2cDataThatNeverComesEndsTheConnection) {
  Target t;
  Session s;
  ASSERT_NO_FATAL_FAILURE(start_with_stall_timeout(t, s));
  nvme::Sqe w = nvme::make_io(nvme::io_op::kWrite, 1, 0, 8, nvme::Xfer::kTransport, 4096);
  w.cid = s.io.next_cid();
  ASSERT_TRUE(s.io.send_bytes(s.io.capsule_bytes(w)));
  Pdu r2t;
  ASSERT_EQ(s.io.recv_pdu(&r2t), RecvStatus::kOk) << s.io.last_error();
  ASSERT_EQ(r2t.type(), uint8_t(pdu::Type::kR2T));
  EXPECT_TRUE(s.io.still_open(700)) << "ended before the stall timeout";
  EXPECT_TRUE(s.io.wait_closed(3000)) << "a connection owing H2CData stayed open";
  EXPECT_EQ(t.stalled("h2c"), 1u);
  EXPECT_EQ(t.stalled("pdu"), 0u);
  expect_only_that_connection_ended(t, nullptr);
}

// (d) The host stops reading: the target's sends make no progress.
TEST(Isolation, SendWithoutProgressEndsTheConnection) {
  Target t;
  Session s;
  s.io.set_rcvbuf(4096);
  ASSERT_NO_FATAL_FAILURE(start_with_stall_timeout(t, s, {"--sock-buf", "4096"}));
  ASSERT_TRUE(send_reads_unread(s.io, 8, 0));
  // Reading would let the sends go on: just wait past the deadline, then look.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(t.stalled("send"), 1u);
  EXPECT_TRUE(s.io.wait_closed(3000)) << "a connection that stopped reading stayed open";
  expect_only_that_connection_ended(t, "a send made no progress");
}

// A host that is slow but moving is not ended: a PDU sent a byte every 300 ms, with a 1 s
// stall timeout, arrives whole and its command completes.
TEST(Isolation, SlowButMovingPduIsNotEnded) {
  Target t;
  Session s;
  ASSERT_NO_FATAL_FAILURE(start_with_stall_timeout(t, s));
  nvme::Sqe sqe = nvme::make_io(nvme::io_op::kRead, 1, 0, 8, nvme::Xfer::kTransport, 4096);
  sqe.cid = s.io.next_cid();
  auto capsule = s.io.capsule_bytes(sqe);
  // 72 bytes: the first 64 at once, then one byte every 300 ms (2.4 s in all).
  ASSERT_TRUE(s.io.send_bytes(capsule.data(), 64));
  for (size_t i = 64; i < capsule.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(s.io.send_bytes(capsule.data() + i, 1)) << "ended at byte " << i;
  }
  std::vector<uint8_t> back(4096);
  Result r = s.io.await(sqe.cid, nullptr, 0, back.data(), 4096);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(t.stalled("pdu"), 0u);
}

}  // namespace
}  // namespace sens::testing
