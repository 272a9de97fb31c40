// A target whose buffer pool is far smaller than what the host asks for at once: commands
// wait for buffers (and the reader for in-capsule data) instead of failing.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;

class SmallPoolTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.buffer_pool = 4 * kMaxIo;  // 512 KiB: four largest I/Os
    c.sock_buf = 4096;           // reads' data waits in user space, holding its buffers
    return c;
  }
};

TEST_F(SmallPoolTest, CommandsWaitForBuffersAndAllComplete) {
  Session s;
  s.io.set_rcvbuf(64 * 1024);
  ASSERT_EQ(s.open(port_, kNqn, 0, 0, /*io_sqsize=*/127), "");
  // 1 MiB of known data.
  for (uint32_t i = 0; i < 8; ++i)
    ASSERT_EQ(write_read(s.io, uint64_t(i) * (kMaxIo / 512), kMaxIo, 100 + i, false), "");
  // 48 reads of 128 KiB (6 MiB wanted at once: 12x the pool) and, behind them, 32 in-capsule
  // writes whose data must wait for buffers, all in one send; nothing read back yet.
  constexpr int kReads = 48, kWrites = 32;
  std::vector<uint8_t> stream;
  auto wdata = pattern(kInline, 7);
  for (int i = 0; i < kReads; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kRead, 1, uint64_t(i % 8) * (kMaxIo / 512), kMaxIo / 512,
                             Xfer::kTransport, kMaxIo);
    sqe.cid = uint16_t(1000 + i);
    auto c = s.io.capsule_bytes(sqe);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  for (int i = 0; i < kWrites; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 4096 + uint64_t(i) * (kInline / 512),
                             kInline / 512, Xfer::kInCapsule, kInline);
    sqe.cid = uint16_t(2000 + i);
    auto c = s.io.capsule_bytes(sqe, wdata.data(), kInline);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  ASSERT_TRUE(s.io.send_bytes(stream));
  std::vector<std::vector<uint8_t>> back(kReads, std::vector<uint8_t>(kMaxIo));
  int reads = 0, writes = 0;
  while (reads + writes < kReads + kWrites) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
    if (p.type() == uint8_t(pdu::Type::kC2HData)) {
      auto d = p.as<pdu::DataHeader>();
      ASSERT_GE(d.cccid, 1000);
      ASSERT_LT(d.cccid, 1000 + kReads);
      ASSERT_LE(uint64_t(d.datao) + d.datal, kMaxIo);
      std::memcpy(back[d.cccid - 1000].data() + d.datao, p.data(), d.datal);
      continue;
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    auto cqe = p.as<pdu::CapsuleResp>().cqe;
    EXPECT_TRUE(cqe.ok()) << "cid " << cqe.cid << " status 0x" << std::hex << cqe.status_code();
    (cqe.cid >= 2000 ? writes : reads)++;
  }
  for (int i = 0; i < kReads; ++i)
    EXPECT_EQ(first_difference(pattern(kMaxIo, 100 + i % 8), back[i]), -1) << "read " << i;
  for (int i = 0; i < kWrites; i += 7) {
    std::vector<uint8_t> got(kInline);
    Result r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 4096 + uint64_t(i) * (kInline / 512),
                                       kInline / 512, Xfer::kTransport, kInline),
                         nullptr, 0, got.data(), kInline);
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_EQ(first_difference(wdata, got), -1) << "write " << i;
  }
  auto stats = target_->stats_json();
  auto& pool = stats["reactors"][0]["buffer_pool"];
  EXPECT_GT(pool.value("waits", 0), 0) << pool.dump();
  EXPECT_LE(pool.value("allocated_bytes", uint64_t(0)), 4u * kMaxIo) << pool.dump();
  EXPECT_EQ(pool.value("in_use_bytes", uint64_t(1)), 0u) << pool.dump();
}

// R2T writes hold every general buffer while their data is on the way; in-capsule writes sent
// before that data must still get buffers (their own pool), or the reader would stop in front
// of the very H2CData that frees the pool: a deadlock.
TEST_F(SmallPoolTest, InCapsuleWritesDoNotDeadlockBehindR2TWrites) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, 0, 0, /*io_sqsize=*/127), "");
  constexpr int kBig = 4, kSmall = 8;
  auto big = pattern(kMaxIo, 41);
  auto small = pattern(kInline, 42);
  std::vector<uint8_t> stream;
  for (int i = 0; i < kBig; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, uint64_t(i) * (kMaxIo / 512), kMaxIo / 512,
                             Xfer::kTransport, kMaxIo);
    sqe.cid = uint16_t(3000 + i);
    auto c = s.io.capsule_bytes(sqe);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  for (int i = 0; i < kSmall; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 8192 + uint64_t(i) * (kInline / 512),
                             kInline / 512, Xfer::kInCapsule, kInline);
    sqe.cid = uint16_t(4000 + i);
    auto c = s.io.capsule_bytes(sqe, small.data(), kInline);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  ASSERT_TRUE(s.io.send_bytes(stream));
  int responses = 0, r2ts = 0;
  while (responses < kBig + kSmall) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p, 5000), RecvStatus::kOk)
        << s.io.last_error() << " after " << responses << " responses, " << r2ts << " R2Ts";
    if (p.type() == uint8_t(pdu::Type::kR2T)) {
      auto r2t = p.as<pdu::R2T>();
      ++r2ts;
      std::vector<uint8_t> data;
      for (uint32_t off = 0; off < r2t.r2tl; off += kMaxH2C) {
        uint32_t n = std::min(kMaxH2C, r2t.r2tl - off);
        auto h = s.io.h2c_bytes(r2t.cccid, r2t.ttag, r2t.r2to + off, big.data() + r2t.r2to + off, n,
                                off + n == r2t.r2tl);
        data.insert(data.end(), h.begin(), h.end());
      }
      ASSERT_TRUE(s.io.send_bytes(data));
      continue;
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    auto cqe = p.as<pdu::CapsuleResp>().cqe;
    EXPECT_TRUE(cqe.ok()) << "cid " << cqe.cid;
    ++responses;
  }
  EXPECT_EQ(r2ts, kBig);
  std::vector<uint8_t> got(kMaxIo);
  Result r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 3 * (kMaxIo / 512), kMaxIo / 512,
                                     Xfer::kTransport, kMaxIo),
                       nullptr, 0, got.data(), kMaxIo);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(big, got), -1);
}

}  // namespace
}  // namespace sens::testing
