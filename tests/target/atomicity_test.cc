// Per-block atomicity of RAM namespaces: a read never returns a 512-byte block that is part
// old and part new, whether the read's data waits in a full socket while a later write lands
// (one reactor), or reads and writes run on two reactors at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;
constexpr uint32_t kBlock = 512;

// Every 8 bytes of each block hold the same stamp.
void stamp(std::vector<uint8_t>& buf, uint64_t base) {
  for (size_t b = 0; b < buf.size() / kBlock; ++b)
    for (size_t w = 0; w < kBlock / 8; ++w) {
      uint64_t v = base + b;
      std::memcpy(buf.data() + b * kBlock + w * 8, &v, 8);
    }
}

// Blocks whose 8-byte words are not all equal.
int torn_blocks(const std::vector<uint8_t>& buf) {
  int torn = 0;
  for (size_t b = 0; b < buf.size() / kBlock; ++b) {
    uint64_t first;
    std::memcpy(&first, buf.data() + b * kBlock, 8);
    for (size_t w = 1; w < kBlock / 8; ++w) {
      uint64_t v;
      std::memcpy(&v, buf.data() + b * kBlock + w * 8, 8);
      if (v != first) {
        ++torn;
        break;
      }
    }
  }
  return torn;
}

class FullSocketTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.sock_buf = 4096;  // the read's C2HData goes out in pieces
    return c;
  }
};

// No data digest (the path that used to send straight from namespace memory): a 128 KiB
// read is stuck half-sent in a full socket while a write to the same blocks lands.
TEST_F(FullSocketTest, HalfSentReadIsNotChangedByALaterWrite) {
  Session s;
  s.io.set_rcvbuf(4096);
  ASSERT_EQ(s.open(port_, kNqn, 0, 0, 127), "");
  std::vector<uint8_t> data(kMaxIo);
  int torn = 0;
  for (int round = 0; round < 16; ++round) {
    stamp(data, uint64_t(round) << 32);
    Result w = s.io.exec(
        nvme::make_io(nvme::io_op::kWrite, 1, 0, kMaxIo / kBlock, Xfer::kTransport, kMaxIo),
        data.data(), kMaxIo);
    ASSERT_TRUE(w.ok()) << w.describe();
    // The read, then 16 in-capsule writes over the same blocks, in one send.
    auto rd = nvme::make_io(nvme::io_op::kRead, 1, 0, kMaxIo / kBlock, Xfer::kTransport, kMaxIo);
    rd.cid = 100;
    auto bytes = s.io.capsule_bytes(rd);
    std::vector<uint8_t> later(kInline);
    for (int i = 0; i < 16; ++i) {
      stamp(later, (uint64_t(round) << 32) | (uint64_t(i + 1) << 20));
      auto wr = nvme::make_io(nvme::io_op::kWrite, 1, uint64_t(i) * (kInline / kBlock),
                              kInline / kBlock, Xfer::kInCapsule, kInline);
      wr.cid = uint16_t(200 + i);
      auto b = s.io.capsule_bytes(wr, later.data(), kInline);
      bytes.insert(bytes.end(), b.begin(), b.end());
    }
    ASSERT_TRUE(s.io.send_bytes(bytes));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the writes land meanwhile
    std::vector<uint8_t> got(kMaxIo);
    int responses = 0;
    while (responses < 17) {
      Pdu p;
      ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
      if (p.type() == uint8_t(pdu::Type::kC2HData)) {
        auto d = p.as<pdu::DataHeader>();
        ASSERT_EQ(d.cccid, 100);
        ASSERT_LE(uint64_t(d.datao) + d.datal, kMaxIo);
        std::memcpy(got.data() + d.datao, p.data(), d.datal);
        continue;
      }
      EXPECT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
      ++responses;
    }
    torn += torn_blocks(got);
  }
  EXPECT_EQ(torn, 0) << "blocks half old, half new";
}

class TwoReactorAtomicityTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.cores = 2;
    return c;
  }
};

// Writers and readers on both reactors hammer the same 32 KiB for 3 seconds.
TEST_F(TwoReactorAtomicityTest, ReadsAndWritesOnTwoReactorsNeverTearABlock) {
  RawClient admin;
  ASSERT_TRUE(admin.connect(port_));
  ASSERT_TRUE(admin.ic(0));
  Result r = admin.connect_queue(0, kNqn);
  ASSERT_TRUE(r.ok()) << r.describe();
  uint16_t cntlid = uint16_t(r.cqe.dw0);
  ASSERT_TRUE(admin.exec(nvme::make_property_set(nvme::reg::kCc, 0x00460001, false)).ok());
  ASSERT_TRUE(admin.exec(nvme::make_set_num_queues(4, 4)).ok());
  // Accepted connections alternate between the reactors: queues 1 and 3 on one, 2 and 4 on
  // the other, so each reactor has a writer and a reader.
  constexpr int kQueues = 4;
  std::vector<std::unique_ptr<RawClient>> io;
  for (int q = 1; q <= kQueues; ++q) {
    io.push_back(std::make_unique<RawClient>());
    ASSERT_TRUE(io.back()->connect(port_));
    ASSERT_TRUE(io.back()->ic(0));
    Result c = io.back()->connect_queue(uint16_t(q), kNqn, cntlid);
    ASSERT_TRUE(c.ok()) << c.describe();
  }
  constexpr uint32_t kRegion = 32 * 1024;
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, errors{0};
  std::atomic<uint64_t> ios{0};
  auto writer = [&](RawClient& c, uint64_t id) {
    std::vector<uint8_t> buf(kInline);
    for (uint64_t seq = 0; !stop; ++seq) {
      stamp(buf, (id << 56) | (seq << 16));
      uint64_t slba = (seq * 3 % (kRegion / kInline * 2)) * (kInline / kBlock) / 2;
      Result w = c.exec(
          nvme::make_io(nvme::io_op::kWrite, 1, slba, kInline / kBlock, Xfer::kInCapsule, kInline),
          buf.data(), kInline);
      if (!w.ok()) ++errors;
      ++ios;
    }
  };
  auto reader = [&](RawClient& c) {
    std::vector<uint8_t> buf(kRegion);
    while (!stop) {
      Result rd = c.exec(
          nvme::make_io(nvme::io_op::kRead, 1, 0, kRegion / kBlock, Xfer::kTransport, kRegion),
          nullptr, 0, buf.data(), kRegion);
      if (!rd.ok()) ++errors;
      torn += torn_blocks(buf);
      ++ios;
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, std::ref(*io[0]), 1);
  threads.emplace_back(writer, std::ref(*io[1]), 2);
  threads.emplace_back(reader, std::ref(*io[2]));
  threads.emplace_back(reader, std::ref(*io[3]));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the test's duration
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(ios.load(), 1000u);
  EXPECT_EQ(torn.load(), 0) << "torn blocks in " << ios.load() << " I/Os";
}

}  // namespace
}  // namespace sens::testing
