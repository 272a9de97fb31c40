// Closing is a state (issue 29, item 1): once a C2HTermReq is queued, nothing that finishes
// later (a device completion, a request the buffer pool resumes, an AER's event) may queue a
// PDU behind it. Each test fills the socket first (a host that stops reading, tiny socket
// buffers), provokes the TermReq with a malformed PDU while commands are still under way, lets
// them finish behind it, then reads: the TermReq must be the last PDU on the wire.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;

// A reserved PDU type: the target answers with a C2HTermReq and closes.
void append_malformed(std::vector<uint8_t>& stream) {
  const uint8_t bad[8] = {0x0A, 0, 24, 0, 24, 0, 0, 0};
  stream.insert(stream.end(), bad, bad + sizeof(bad));
  stream.resize(stream.size() + 16, 0);
}

// A read of kMaxIo bytes (`block`: the namespace's LBA size).
void append_read(RawClient& c, std::vector<uint8_t>& stream, uint32_t nsid, uint16_t cid,
                 uint64_t slba = 0, uint32_t block = 512) {
  auto sqe =
      nvme::make_io(nvme::io_op::kRead, nsid, slba, kMaxIo / block, Xfer::kTransport, kMaxIo);
  sqe.cid = cid;
  auto b = c.capsule_bytes(sqe);
  stream.insert(stream.end(), b.begin(), b.end());
}

// Reads PDUs up to the C2HTermReq, then every byte until the target closes: returns how many
// bytes came after the TermReq (any at all: a PDU, or part of one, was queued behind it).
// -1: no TermReq came.
long bytes_after_termreq(RawClient& c) {
  for (;;) {
    Pdu p;
    RecvStatus s = c.recv_pdu(&p, 5000);
    if (s != RecvStatus::kOk) {
      ADD_FAILURE() << "no C2HTermReq: " << recv_status_name(s) << ": " << c.last_error();
      return -1;
    }
    if (p.type() == uint8_t(pdu::Type::kC2HTermReq)) break;
  }
  long late = 0;
  for (;;) {
    pollfd pfd{c.fd(), POLLIN, 0};
    if (poll(&pfd, 1, 5000) != 1) {
      ADD_FAILURE() << "the target did not close after its C2HTermReq";
      return late;
    }
    uint8_t buf[65536];
    ssize_t n = ::recv(c.fd(), buf, sizeof(buf), 0);
    if (n <= 0) return late;  // closed (or reset)
    late += n;
  }
}

class ClosingTest : public FileNsFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    // nsid 1 answers inline (RAM), nsid 2 later (io_uring): its completions race the TermReq.
    c.subsystems[0].namespaces = {"ram:16M", "file:" + make_file("sens-closing")};
    c.sock_buf = 4096;  // the target's socket fills after a few KiB
    c.buffer_pool = pool_bytes();
    return c;
  }
  virtual uint64_t pool_bytes() { return 64ull << 20; }
  // A session whose host reads slowly (a small receive buffer).
  void open(Session& s) {
    s.admin.set_rcvbuf(4096);
    s.io.set_rcvbuf(4096);
    ASSERT_EQ(s.open(port_, kNqn, 0, 0, /*io_sqsize=*/127), "");
  }
  // Reads of nsid 1 that fill the socket; nothing is read back.
  void fill(RawClient& c, int n, uint16_t cid) {
    std::vector<uint8_t> stream;
    for (int i = 0; i < n; ++i) append_read(c, stream, 1, uint16_t(cid + i));
    ASSERT_TRUE(c.send_bytes(stream));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  void expect_termreq_last(RawClient& c) {
    // What finishes after the TermReq finishes meanwhile (the close deadline is 2 s).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(bytes_after_termreq(c), 0) << "bytes sent behind the C2HTermReq";
  }
};

// Reads of the file namespace are at the device when the TermReq is queued; their data and
// responses must not follow it.
TEST_F(ClosingTest, DeviceCompletionAfterTermReqSendsNothing) {
  Session s;
  ASSERT_NO_FATAL_FAILURE(open(s));
  nvme::IdentifyNamespace idn{};
  ASSERT_TRUE(s.admin.exec(nvme::make_identify(0, 2), nullptr, 0, &idn, sizeof(idn)).ok());
  const uint32_t block = 1u << idn.lbaf[idn.flbas & 0xF].lbads;
  ASSERT_NO_FATAL_FAILURE(fill(s.io, 8, 100));
  std::vector<uint8_t> stream;
  for (int i = 0; i < 16; ++i)
    append_read(s.io, stream, 2, uint16_t(200 + i), uint64_t(i) * (kMaxIo / block), block);
  append_malformed(stream);
  ASSERT_TRUE(s.io.send_bytes(stream));
  expect_termreq_last(s.io);
}

// An AER parked on the admin queue; the event it waits for comes after the TermReq.
TEST_F(ClosingTest, AerAfterTermReqSendsNothing) {
  Session s;
  ASSERT_NO_FATAL_FAILURE(open(s));
  ASSERT_TRUE(
      s.admin.exec(nvme::make_set_features(nvme::feature::kAsyncEventConfig, 1u << 8)).ok());
  auto aer = nvme::make_async_event();
  aer.cid = s.admin.next_cid();
  ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(aer)));
  // Identify pages fill the admin queue's socket.
  std::vector<uint8_t> stream;
  for (int i = 0; i < 16; ++i) {
    auto id = nvme::make_identify(1, 0);
    id.cid = s.admin.next_cid();
    auto b = s.admin.capsule_bytes(id);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(s.admin.send_bytes(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stream.clear();
  append_malformed(stream);
  ASSERT_TRUE(s.admin.send_bytes(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  uint32_t nsid = 0;
  ASSERT_EQ(target_->add_namespace(kNqn, "ram:1M", 0, &nsid), "");  // Namespace Attribute Changed
  expect_termreq_last(s.admin);
}

// A pool of four 128 KiB buffers: reads beyond the first four, and a write's R2T, wait for
// buffers that come back only as the data queued before the TermReq leaves.
class ClosingSmallPoolTest : public ClosingTest {
 protected:
  uint64_t pool_bytes() override { return 4 * kMaxIo; }
};

TEST_F(ClosingSmallPoolTest, BufferResumeAfterTermReqSendsNothing) {
  Session s;
  ASSERT_NO_FATAL_FAILURE(open(s));
  std::vector<uint8_t> stream;
  for (int i = 0; i < 8; ++i) append_read(s.io, stream, 1, uint16_t(100 + i));
  auto w = nvme::make_io(nvme::io_op::kWrite, 1, 0, kMaxIo / 512, Xfer::kTransport, kMaxIo);
  w.cid = 300;
  auto b = s.io.capsule_bytes(w);
  stream.insert(stream.end(), b.begin(), b.end());
  ASSERT_TRUE(s.io.send_bytes(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stream.clear();
  append_malformed(stream);
  ASSERT_TRUE(s.io.send_bytes(stream));
  expect_termreq_last(s.io);
}

}  // namespace
}  // namespace sens::testing
