// PDUs cut anywhere by TCP: the target must reassemble a Connect capsule and a Write capsule
// with in-capsule data whatever the segment boundaries: one byte per send(), and two sends
// split at every position.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;

// For cuts inside the header, a short pause so that the target's read really ends at the cut
// (loopback would otherwise often deliver both parts before the target wakes up).
void pause_if_header_cut(size_t pos) {
  if (pos <= 100) std::this_thread::sleep_for(std::chrono::microseconds(150));
}

class SplitTest : public TargetFixture, public ::testing::WithParamInterface<uint8_t> {};

TEST_P(SplitTest, ConnectAndWriteOneBytePerSend) {
  const uint8_t digest = GetParam();
  RawClient admin;
  ASSERT_TRUE(admin.connect(port_)) << admin.last_error();
  ASSERT_TRUE(admin.send_chunked(RawClient::icreq_bytes(digest), 1));
  Pdu p;
  ASSERT_EQ(admin.recv_pdu(&p), RecvStatus::kOk) << admin.last_error();
  ASSERT_EQ(p.type(), uint8_t(pdu::Type::kICResp));
  auto resp = p.as<pdu::ICResp>();
  EXPECT_EQ(resp.digest, digest);
  admin.assume_ic({bool(digest & 1), bool(digest & 2)}, resp.maxh2cdata);

  auto sqe = nvme::make_connect(0, 31, 0);
  sqe.cid = 7;
  auto cd = RawClient::connect_data(kNqn, kHostNqn, 0xFFFF);
  auto bytes = admin.capsule_bytes(sqe, cd.data(), uint32_t(cd.size()));
  ASSERT_TRUE(admin.send_chunked(bytes, 1));
  Result r = admin.await(7, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.describe();
  uint16_t cntlid = uint16_t(r.cqe.dw0);
  ASSERT_TRUE(admin.enable().ok());
  r = admin.exec(nvme::make_set_num_queues(2, 2));
  ASSERT_TRUE(r.ok()) << r.describe();

  RawClient io;
  ASSERT_TRUE(io.connect(port_)) << io.last_error();
  ASSERT_TRUE(io.ic(digest)) << io.last_error();
  sqe = nvme::make_connect(1, 31, 0);
  sqe.cid = 8;
  cd = RawClient::connect_data(kNqn, kHostNqn, cntlid);
  ASSERT_TRUE(io.send_chunked(io.capsule_bytes(sqe, cd.data(), uint32_t(cd.size())), 1));
  r = io.await(8, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.describe();

  // A 4 KiB in-capsule Write, one byte per send().
  auto data = pattern(4096, 42);
  sqe = nvme::make_io(nvme::io_op::kWrite, 1, 64, 8, Xfer::kInCapsule, 4096);
  sqe.cid = 9;
  ASSERT_TRUE(io.send_chunked(io.capsule_bytes(sqe, data.data(), 4096), 1));
  r = io.await(9, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.describe();
  std::vector<uint8_t> back(4096);
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 64, 8, Xfer::kTransport, 4096), nullptr, 0,
              back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(data, back), -1);

  // A 16 KiB R2T write whose H2CData PDUs go one byte per send() too.
  auto big = pattern(16384, 43);
  sqe = nvme::make_io(nvme::io_op::kWrite, 1, 128, 32, Xfer::kTransport, 16384);
  sqe.cid = 10;
  ASSERT_TRUE(io.send_chunked(io.capsule_bytes(sqe), 1));
  ASSERT_EQ(io.recv_pdu(&p), RecvStatus::kOk) << io.last_error();
  ASSERT_EQ(p.type(), uint8_t(pdu::Type::kR2T));
  auto r2t = p.as<pdu::R2T>();
  for (uint32_t off = 0; off < 16384; off += 4096)
    ASSERT_TRUE(io.send_chunked(
        io.h2c_bytes(10, r2t.ttag, off, big.data() + off, 4096, off + 4096 == 16384), 1));
  r = io.await(10, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.describe();
  std::vector<uint8_t> big_back(16384);
  r = io.exec(nvme::make_io(nvme::io_op::kRead, 1, 128, 32, Xfer::kTransport, 16384), nullptr, 0,
              big_back.data(), 16384);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(big, big_back), -1);
}

// The admin Connect capsule (72 + 1024 bytes) cut in two at every position, each on a fresh
// connection (a queue takes one Connect).
TEST_P(SplitTest, ConnectSplitAtEveryPosition) {
  const uint8_t digest = GetParam();
  auto cd = RawClient::connect_data(kNqn, kHostNqn, 0xFFFF);
  for (size_t pos = 1;; ++pos) {
    RawClient c;
    ASSERT_TRUE(c.connect(port_)) << c.last_error();
    ASSERT_TRUE(c.ic(digest)) << c.last_error();
    auto sqe = nvme::make_connect(0, 31, 0);
    sqe.cid = uint16_t(pos);
    auto bytes = c.capsule_bytes(sqe, cd.data(), uint32_t(cd.size()));
    if (pos >= bytes.size()) break;
    ASSERT_TRUE(c.send_bytes(bytes.data(), pos));
    pause_if_header_cut(pos);
    ASSERT_TRUE(c.send_bytes(bytes.data() + pos, bytes.size() - pos));
    Result r = c.await(sqe.cid, nullptr, 0, nullptr, 0);
    ASSERT_TRUE(r.ok()) << "cut at " << pos << ": " << r.describe();
  }
}

// A Write capsule with 2 KiB in-capsule data cut in two at every position, on one queue;
// every 32nd write is read back, and all of them at the end.
TEST_P(SplitTest, WriteCapsuleSplitAtEveryPosition) {
  const uint8_t digest = GetParam();
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, digest), "");
  constexpr uint32_t kLen = 2048;
  constexpr uint32_t kSlots = 64;  // distinct 2 KiB areas, reused round-robin
  std::vector<std::vector<uint8_t>> last(kSlots);
  size_t total = 0;
  for (size_t pos = 1;; ++pos) {
    uint32_t slot = uint32_t(pos % kSlots);
    auto data = pattern(kLen, uint32_t(pos));
    auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, slot * 4, 4, Xfer::kInCapsule, kLen);
    sqe.cid = s.io.next_cid();
    auto bytes = s.io.capsule_bytes(sqe, data.data(), kLen);
    total = bytes.size();
    if (pos >= total) break;
    ASSERT_TRUE(s.io.send_bytes(bytes.data(), pos));
    pause_if_header_cut(pos);
    ASSERT_TRUE(s.io.send_bytes(bytes.data() + pos, bytes.size() - pos));
    Result r = s.io.await(sqe.cid, nullptr, 0, nullptr, 0);
    ASSERT_TRUE(r.ok()) << "cut at " << pos << ": " << r.describe();
    last[slot] = data;
    if (pos % 32 == 0) {
      std::vector<uint8_t> back(kLen);
      r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, slot * 4, 4, Xfer::kTransport, kLen),
                    nullptr, 0, back.data(), kLen);
      ASSERT_TRUE(r.ok()) << r.describe();
      ASSERT_EQ(first_difference(data, back), -1) << "cut at " << pos;
    }
  }
  EXPECT_GT(total, 2048u);
  for (uint32_t slot = 0; slot < kSlots; ++slot) {
    std::vector<uint8_t> back(kLen);
    Result r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, slot * 4, 4, Xfer::kTransport, kLen),
                         nullptr, 0, back.data(), kLen);
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_EQ(first_difference(last[slot], back), -1) << "slot " << slot;
  }
}

// Several PDUs in one send(): a Write capsule, a Read capsule and a Keep-Alive-free mix, cut
// at every position of the concatenation (exercises a PDU boundary inside one segment).
TEST_P(SplitTest, TwoCapsulesInOneStreamSplitAtEveryPosition) {
  const uint8_t digest = GetParam();
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, digest), "");
  constexpr uint32_t kLen = 512;
  for (size_t pos = 1;; ++pos) {
    auto data = pattern(kLen, uint32_t(pos) + 7);
    auto w = nvme::make_io(nvme::io_op::kWrite, 1, 4000, 1, Xfer::kInCapsule, kLen);
    w.cid = s.io.next_cid();
    auto rd = nvme::make_io(nvme::io_op::kRead, 1, 4000, 1, Xfer::kTransport, kLen);
    rd.cid = s.io.next_cid();
    auto bytes = s.io.capsule_bytes(w, data.data(), kLen);
    auto b2 = s.io.capsule_bytes(rd);
    bytes.insert(bytes.end(), b2.begin(), b2.end());
    if (pos >= bytes.size()) break;
    ASSERT_TRUE(s.io.send_bytes(bytes.data(), pos));
    ASSERT_TRUE(s.io.send_bytes(bytes.data() + pos, bytes.size() - pos));
    Result r = s.io.await(w.cid, nullptr, 0, nullptr, 0);
    ASSERT_TRUE(r.ok()) << "cut at " << pos << ": " << r.describe();
    std::vector<uint8_t> back(kLen);
    r = s.io.await(rd.cid, nullptr, 0, back.data(), kLen);
    ASSERT_TRUE(r.ok()) << "cut at " << pos << ": " << r.describe();
    ASSERT_EQ(first_difference(data, back), -1) << "cut at " << pos;
  }
}

INSTANTIATE_TEST_SUITE_P(Digests, SplitTest, ::testing::Values(0, 3),
                         [](const ::testing::TestParamInfo<uint8_t>& i) {
                           return i.param ? std::string("HeaderAndDataDigests")
                                          : std::string("NoDigests");
                         });

}  // namespace
}  // namespace sens::testing
