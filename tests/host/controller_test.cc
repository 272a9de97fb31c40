// The host library against the project's target (`sens target`, a child process on loopback):
// bring-up, I/O of every kind through the async API, R2T splitting, digests, SQ flow control
// disabled, keep alive, discovery, timeouts and connect errors.
#include "host/controller.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <vector>

#include "child.h"
#include "perf/verify.h"
#include "wire/nvme_build.h"

namespace sens::host {
namespace {

using testing::TargetProcess;

struct Waiter {
  bool done = false;
  Completion c;
};
void on_done(void* ctx, uint64_t, const Completion& c) {
  auto* w = static_cast<Waiter*>(ctx);
  w->done = true;
  w->c = c;
}

class ControllerTest : public ::testing::Test {
 protected:
  std::string connect(TargetProcess& t, ControllerOptions co = {}) {
    if (!t.ready()) return "target did not start: " + t.log();
    std::string err;
    auto trid = parse_trid(t.trid(), &err);
    if (!trid) return err;
    ctrl_ = std::make_unique<Controller>(reactor_);
    if (err = ctrl_->connect(*trid, co); !err.empty()) return err;
    if (err = ctrl_->namespace_info(0, &ns_); !err.empty()) return err;
    return ctrl_->create_io_queues();
  }
  // One I/O, waited for (bounded by the queue's own timeout).
  Completion io(size_t q, uint8_t opcode, uint64_t offset, void* buf, uint32_t len) {
    const uint32_t lbas = len ? len / ns_.block_size : 1;
    nvme::Sqe sqe =
        nvme::make_io(opcode, ns_.nsid, offset / ns_.block_size,
                      opcode == nvme::io_op::kFlush ? 0 : lbas, nvme::Xfer::kTransport, len);
    DataDir dir = opcode == nvme::io_op::kRead    ? DataDir::kControllerToHost
                  : opcode == nvme::io_op::kWrite ? DataDir::kHostToController
                                                  : DataDir::kNone;
    Waiter w;
    if (!ctrl_->io_queue(q).submit(sqe, buf, len, dir, on_done, &w, 0)) {
      w.c.status = 0xFFFF;
      return w.c;
    }
    const Nanos deadline = reactor_.now() + 60 * kSecond;
    while (!w.done && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
    return w.c;
  }
  void write_read_back(size_t q, uint64_t offset, uint32_t len) {
    std::vector<uint8_t> out(len), in(len, 0);
    fill_pattern(out.data(), offset, len, 42);
    Completion c = io(q, nvme::io_op::kWrite, offset, out.data(), len);
    ASSERT_TRUE(c.ok()) << describe(c) << " " << ctrl_->io_queue(q).error();
    c = io(q, nvme::io_op::kRead, offset, in.data(), len);
    ASSERT_TRUE(c.ok()) << describe(c) << " " << ctrl_->io_queue(q).error();
    EXPECT_TRUE(check_pattern(in.data(), offset, len, 42, nullptr)) << "len " << len;
  }

  Reactor reactor_;
  std::unique_ptr<Controller> ctrl_;
  NamespaceInfo ns_;
};

TEST_F(ControllerTest, BringUpAndEveryIoKind) {
  TargetProcess t;
  ControllerOptions co;
  co.io_queues = 2;
  co.io_depth = 16;
  ASSERT_EQ(connect(t, co), "");
  EXPECT_EQ(std::string(nvme::fixed_string(ctrl_->identify().subnqn, 256)), t.nqn);
  EXPECT_EQ((ctrl_->cap() & 0xFFFF) + 1, 1024u);  // CAP.MQES: the target's --queue-size
  EXPECT_GE(ctrl_->vs(), 0x10200u);
  EXPECT_EQ(ns_.nsid, 1u);
  EXPECT_EQ(ns_.bytes(), 64ull << 20);
  ASSERT_EQ(ctrl_->io_queue_count(), 2u);
  const uint32_t incapsule = ctrl_->io_incapsule_bytes();
  EXPECT_EQ(incapsule, 8192u);  // the target's default --inline-data

  write_read_back(0, 0, 4096);             // in-capsule
  write_read_back(1, 1 << 20, 65536);      // R2T
  write_read_back(1, 2 << 20, incapsule);  // the largest in-capsule write
  EXPECT_EQ(ctrl_->io_queue(0).counters().incapsule_writes, 1u);
  EXPECT_EQ(ctrl_->io_queue(1).counters().incapsule_writes, 1u);
  EXPECT_EQ(ctrl_->io_queue(1).counters().r2ts, 1u);

  std::vector<uint8_t> buf(8192, 0xEE);
  EXPECT_TRUE(io(0, nvme::io_op::kFlush, 0, nullptr, 0).ok());
  EXPECT_TRUE(io(0, nvme::io_op::kWriteZeroes, 0, nullptr, 0).ok());  // LBA 0, one block
  ASSERT_TRUE(io(0, nvme::io_op::kRead, 0, buf.data(), 4096).ok());
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + ns_.block_size, [](uint8_t b) { return !b; }));
  EXPECT_FALSE(std::all_of(buf.begin(), buf.begin() + 4096, [](uint8_t b) { return !b; }));

  // An LBA past the end comes back as the controller's error, and the queue lives on.
  Completion c = io(0, nvme::io_op::kRead, ns_.bytes(), buf.data(), 4096);
  EXPECT_EQ(c.status, nvme::status::kLbaOutOfRange) << describe(c);
  EXPECT_TRUE(ctrl_->io_queue(0).is_open());

  ctrl_->shutdown();
  EXPECT_FALSE(ctrl_->io_queue(0).is_open());
  EXPECT_FALSE(ctrl_->admin_queue()->is_open());
}

TEST_F(ControllerTest, ManyInFlightAcrossQueues) {
  TargetProcess t;
  ControllerOptions co;
  co.io_queues = 3;
  co.io_depth = 32;
  ASSERT_EQ(connect(t, co), "");
  // 3 x 32 writes in flight, then 3 x 32 reads, each checked.
  constexpr uint32_t kLen = 16384;
  std::vector<uint8_t> bufs(3 * 32 * kLen);
  std::vector<Waiter> w(3 * 32);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 96; ++i) {
      uint8_t* b = bufs.data() + size_t(i) * kLen;
      const uint64_t off = uint64_t(i) * kLen;
      if (pass == 0)
        fill_pattern(b, off, kLen, 7);
      else
        std::memset(b, 0, kLen);
      nvme::Sqe sqe =
          nvme::make_io(pass ? nvme::io_op::kRead : nvme::io_op::kWrite, 1, off / ns_.block_size,
                        kLen / ns_.block_size, nvme::Xfer::kTransport, kLen);
      w[i] = {};
      ASSERT_TRUE(ctrl_->io_queue(i % 3).submit(
          sqe, b, kLen, pass ? DataDir::kControllerToHost : DataDir::kHostToController, on_done,
          &w[i], i));
    }
    const Nanos deadline = reactor_.now() + 30 * kSecond;
    auto all = [&] { return std::all_of(w.begin(), w.end(), [](auto& x) { return x.done; }); };
    while (!all() && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
    ASSERT_TRUE(all());
    for (int i = 0; i < 96; ++i) ASSERT_TRUE(w[i].c.ok()) << i << ": " << describe(w[i].c);
  }
  for (int i = 0; i < 96; ++i)
    EXPECT_TRUE(
        check_pattern(bufs.data() + size_t(i) * kLen, uint64_t(i) * kLen, kLen, 7, nullptr));
}

class DigestTest : public ControllerTest, public ::testing::WithParamInterface<int> {};

// In-capsule limited to 4 KiB and maxh2cdata to 8 KiB: a 128 KiB write is one R2T answered
// with 16 H2CData PDUs.
TEST_P(DigestTest, R2TWritesBeyondInCapsuleAndMaxh2cdata) {
  TargetProcess t({"--inline-data", "4096", "--max-h2c-data", "8k"});
  ControllerOptions co;
  co.hdr_digest = GetParam() & 1;
  co.data_digest = GetParam() & 2;
  ASSERT_EQ(connect(t, co), "");
  Queue& q = ctrl_->io_queue(0);
  EXPECT_EQ(q.maxh2cdata(), 8192u);
  EXPECT_EQ(q.digests().header, co.hdr_digest);
  EXPECT_EQ(q.digests().data, co.data_digest);
  EXPECT_EQ(ctrl_->io_incapsule_bytes(), 4096u);
  write_read_back(0, 0, 131072);
  EXPECT_EQ(q.counters().r2ts, 1u);
  EXPECT_EQ(q.counters().h2c_pdus, 16u);
  write_read_back(0, 1 << 20, 4096);  // in-capsule, with digests
  EXPECT_EQ(q.counters().incapsule_writes, 1u);
  write_read_back(0, 2 << 20, 8192 + 512);  // two PDUs, the second short
  EXPECT_EQ(q.counters().h2c_pdus, 18u);
}

INSTANTIATE_TEST_SUITE_P(NoneHeaderDataBoth, DigestTest, ::testing::Values(0, 1, 2, 3));

TEST_F(ControllerTest, DisabledSqFlowControlLetsReadsEndWithSuccess) {
  TargetProcess t;
  ControllerOptions co;
  co.disable_sqflow = true;
  ASSERT_EQ(connect(t, co), "");
  write_read_back(0, 0, 65536);
  write_read_back(0, 65536, 4096);
  EXPECT_EQ(ctrl_->io_queue(0).counters().c2h_success, 2u);  // no CapsuleResp for the reads
}

TEST_F(ControllerTest, KeepAliveAtHalfKato) {
  TargetProcess t;
  ControllerOptions co;
  co.kato_ms = 1000;
  ASSERT_EQ(connect(t, co), "");
  const Nanos until = reactor_.now() + 1600 * kMilli;
  while (reactor_.now() < until) reactor_.run_once(10 * kMilli);
  EXPECT_GE(ctrl_->keep_alives_sent(), 2u);
  EXPECT_LE(ctrl_->keep_alives_sent(), 4u);
  EXPECT_FALSE(ctrl_->failed()) << ctrl_->error();
  write_read_back(0, 0, 4096);  // the controller is still there
}

TEST_F(ControllerTest, DiscoveryLogListsTheSubsystem) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  std::string err;
  auto trid = parse_trid("traddr:127.0.0.1 trsvcid:" + std::to_string(t.disc_port), &err);
  ASSERT_TRUE(trid) << err;
  Controller c(reactor_);
  ControllerOptions co;
  co.kato_ms = 0;
  ASSERT_EQ(c.connect(*trid, co), "");
  EXPECT_EQ(c.identify().cntrltype, 2);  // a discovery controller
  std::vector<uint8_t> log;
  ASSERT_EQ(c.discovery_log(&log), "");
  nvme::DiscoveryLogHeader hdr;
  std::memcpy(&hdr, log.data(), sizeof(hdr));
  ASSERT_GE(hdr.numrec, 1u);
  ASSERT_EQ(log.size(), sizeof(hdr) + hdr.numrec * 1024);
  bool found = false;
  for (uint64_t i = 0; i < hdr.numrec; ++i) {
    nvme::DiscoveryLogEntry e;
    std::memcpy(&e, log.data() + 1024 * (i + 1), sizeof(e));
    if (nvme::fixed_string(e.subnqn, 256) == t.nqn) {
      found = true;
      EXPECT_EQ(e.trtype, nvme::kTrtypeTcp);
      EXPECT_EQ(std::stoi(std::string(nvme::fixed_string(e.trsvcid, 32))), t.port);
    }
  }
  EXPECT_TRUE(found);
  c.shutdown();
}

TEST_F(ControllerTest, HungTargetTimesCommandsOut) {
  TargetProcess t;
  ControllerOptions co;
  co.io_timeout = 300 * kMilli;
  co.kato_ms = 0;
  ASSERT_EQ(connect(t, co), "");
  t.signal(SIGSTOP);
  std::vector<uint8_t> buf(4096);
  const Nanos t0 = reactor_.now();
  Completion c = io(0, nvme::io_op::kRead, 0, buf.data(), 4096);
  EXPECT_EQ(c.status, kStatusHostAborted) << describe(c);
  EXPECT_GE(reactor_.now() - t0, 300 * kMilli);
  EXPECT_LT(reactor_.now() - t0, 2 * kSecond);
  EXPECT_TRUE(ctrl_->failed());
  EXPECT_NE(ctrl_->error().find("I/O queue 1: 1 command(s) timed out"), std::string::npos)
      << ctrl_->error();
  t.signal(SIGCONT);
}

TEST_F(ControllerTest, KilledTargetFailsCommandsAndReconnectIsRefused) {
  TargetProcess t;
  ControllerOptions co;
  co.io_depth = 8;
  ASSERT_EQ(connect(t, co), "");
  std::vector<uint8_t> buf(8 * 65536);
  std::vector<Waiter> w(8);
  for (int i = 0; i < 8; ++i) {
    nvme::Sqe sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, 128, nvme::Xfer::kTransport, 65536);
    ASSERT_TRUE(ctrl_->io_queue(0).submit(sqe, buf.data() + i * 65536, 65536,
                                          DataDir::kHostToController, on_done, &w[i], i));
  }
  t.stop();  // SIGKILL: the kernel resets the connections
  const Nanos deadline = reactor_.now() + 5 * kSecond;
  auto all = [&] { return std::all_of(w.begin(), w.end(), [](auto& x) { return x.done; }); };
  while (!all() && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
  ASSERT_TRUE(all());
  // Writes that completed before the kill are fine; the rest failed with a path error.
  for (auto& x : w) EXPECT_TRUE(x.c.ok() || x.c.status == kStatusHostPathError) << describe(x.c);
  while (ctrl_->io_queue(0).is_open() && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
  EXPECT_FALSE(ctrl_->io_queue(0).is_open());
  EXPECT_TRUE(ctrl_->failed());
  Controller again(reactor_);
  std::string err;
  EXPECT_NE(again.connect(*parse_trid(t.trid(), &err), {}).find("Connection refused"),
            std::string::npos);
}

TEST_F(ControllerTest, ConnectToAnUnknownSubsystemIsRefused) {
  TargetProcess t;
  ASSERT_TRUE(t.ready());
  std::string err;
  auto trid = parse_trid(
      "traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:nqn.2026-11.dev.sens:nosuch",
      &err);
  Controller c(reactor_);
  err = c.connect(*trid, {});
  EXPECT_EQ(err.rfind("Connect qid 0 to nqn.2026-11.dev.sens:nosuch: ", 0), 0u) << err;
}

}  // namespace
}  // namespace sens::host
