// SIGTERM stops `sens target` gracefully: the listeners close, a command already started is
// answered (a write whose data the host sends only after the signal), a command that arrives
// after it is held unanswered, then the connections close, the file namespace holds the data,
// and the exit code is 0. A host that never sends the data is waited for 10 s and named.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

constexpr const char* kNqn = "nqn.2026-11.dev.sens:stop";
constexpr uint32_t kLen = 64 * 1024;  // over the in-capsule limit: the data follows an R2T

// Namespace 1's block size (a file namespace takes its file system's).
uint32_t block_size(RawClient& admin) {
  nvme::IdentifyNamespace id{};
  Result r = admin.exec(nvme::make_identify(0, 1), nullptr, 0, &id, sizeof(id));
  return r.ok() ? 1u << id.lbaf[id.flbas & 0xF].lbads : 0;
}

struct StoppingTarget {
  TempDir dir;
  Child child;
  uint16_t port = 0;

  bool start() {
    if (!write_file(dir.file("ns.img"), std::string(16 << 20, '\0'))) return false;
    for (int attempt = 0; attempt < 5 && !child.running(); ++attempt) {
      port = free_port();
      if (!child.start(
              {SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(port),
               "--discovery-port", "0", "--nqn", kNqn, "--ns", "file:" + dir.file("ns.img")},
              dir.file("out"), dir.file("err")))
        return false;
      if (!child.wait_for_text(dir.file("out"), "listening on", 5000)) child.kill_now();
    }
    return child.running();
  }
  // SIGTERM, then waits until the listener refuses connections (the stop has begun).
  bool terminate() {
    if (!child.signal(SIGTERM)) return false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      RawClient probe;
      if (!probe.connect(port, 200)) {
        // The quiesce is posted right after the listeners close.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::string err() { return read_file(dir.file("err")); }
};

// Sends a write whose data goes after an R2T and reads that R2T; "" or what went wrong.
std::string start_write(Session& s, uint16_t* cid, pdu::R2T* r2t) {
  RawClient& io = s.io;
  uint32_t block = block_size(s.admin);
  if (block == 0 || kLen % block) return "block size " + std::to_string(block);
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, kLen / block, nvme::Xfer::kTransport, kLen);
  sqe.cid = *cid = io.next_cid();
  if (!io.send_bytes(io.capsule_bytes(sqe))) return "send: " + io.last_error();
  Pdu p;
  RecvStatus st = io.recv_pdu(&p);
  if (st != RecvStatus::kOk) return std::string("recv: ") + recv_status_name(st);
  if (p.type() != uint8_t(pdu::Type::kR2T))
    return "PDU type " + std::to_string(p.type()) + " instead of an R2T";
  *r2t = p.as<pdu::R2T>();
  if (r2t->cccid != *cid || r2t->r2tl != kLen)
    return "R2T for cid " + std::to_string(r2t->cccid) + " of " + std::to_string(r2t->r2tl);
  return "";
}

TEST(GracefulStop, AnswersStartedCommandsHoldsNewOnesAndFlushes) {
  StoppingTarget t;
  ASSERT_TRUE(t.start()) << t.err();
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  uint16_t wcid = 0;
  pdu::R2T r2t{};
  ASSERT_EQ(start_write(s, &wcid, &r2t), "");
  uint32_t block = block_size(s.admin);

  ASSERT_TRUE(t.terminate()) << t.err();
  // After the signal: a new read is held, the started write gets its data and is answered.
  auto read = nvme::make_io(nvme::io_op::kRead, 1, 0, 1, nvme::Xfer::kTransport, block);
  read.cid = s.io.next_cid();
  ASSERT_TRUE(s.io.send_bytes(s.io.capsule_bytes(read)));
  auto data = pattern(kLen, 7);
  ASSERT_TRUE(s.io.send_bytes(s.io.h2c_bytes(wcid, r2t.ttag, 0, data.data(), kLen, true)));
  bool write_answered = false;
  for (;;) {
    Pdu p;
    RecvStatus st = s.io.recv_pdu(&p, 10000);
    if (st != RecvStatus::kOk) {
      EXPECT_TRUE(st == RecvStatus::kClosed || st == RecvStatus::kReset) << recv_status_name(st);
      break;
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    auto cqe = p.as<pdu::CapsuleResp>().cqe;
    EXPECT_NE(cqe.cid, read.cid) << "a command sent after SIGTERM was answered";
    if (cqe.cid == wcid) {
      EXPECT_TRUE(cqe.ok()) << nvme::status_name(cqe.status_code());
      write_answered = true;
    }
  }
  EXPECT_TRUE(write_answered);
  EXPECT_EQ(t.child.wait(20000), 0) << t.err();
  EXPECT_NE(t.err().find("stop: 1 command(s) in flight answered"), std::string::npos) << t.err();
  EXPECT_EQ(t.err().find("still unanswered"), std::string::npos) << t.err();
  // The answered write is in the file.
  std::string img = read_file(t.dir.file("ns.img"));
  ASSERT_GE(img.size(), kLen);
  EXPECT_EQ(first_difference(data, std::vector<uint8_t>(img.begin(), img.begin() + kLen)), -1);
}

TEST(GracefulStop, NamesWhatAHostLeftUnansweredAfterTenSeconds) {
  StoppingTarget t;
  ASSERT_TRUE(t.start()) << t.err();
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  uint16_t wcid = 0;
  pdu::R2T r2t{};
  ASSERT_EQ(start_write(s, &wcid, &r2t), "");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.terminate()) << t.err();
  // No data ever comes: the stop gives up after 10 s, says what it waited for, exits 0.
  EXPECT_TRUE(s.io.wait_closed(20000));
  EXPECT_EQ(t.child.wait(20000), 0) << t.err();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(9));
  std::string err = t.err();
  EXPECT_NE(err.find("stop: commands still unanswered after"), std::string::npos) << err;
  EXPECT_NE(err.find("qid 1): 1 unanswered (awaiting_h2c 1)"), std::string::npos) << err;
}

}  // namespace
}  // namespace sens::testing
