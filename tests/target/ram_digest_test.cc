// Data digests of zero-copy reads from a RAM namespace come from its table of 4 KiB block CRCs
// (issue 31), taken when the PDU is sealed for sending: they must describe exactly the bytes
// sent while writes to the same blocks land before the read's data leaves. The raw client
// checks every C2HData's data digest against the bytes it received (recv_pdu fails otherwise).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;
constexpr uint32_t kLba = 512;
constexpr uint32_t kBlock = 4096;

uint64_t table_digest_bytes(target::Target& t) {
  uint64_t sum = 0;
  const nlohmann::json stats = t.stats_json();  // (a range-for over a temporary's member dangles)
  for (auto& c : stats["connections"]) sum += c.value("table_digest_bytes", uint64_t(0));
  return sum;
}

// Receives PDUs until `responses` capsule responses (all successful) have come; the read's
// (cid `read_cid`) C2HData go to `got`. False (with a failure) on a bad PDU or digest.
void receive(RawClient& io, int responses, uint16_t read_cid, std::vector<uint8_t>* got) {
  while (responses > 0) {
    Pdu p;
    ASSERT_EQ(io.recv_pdu(&p), RecvStatus::kOk) << io.last_error();
    if (p.type() == uint8_t(pdu::Type::kC2HData)) {
      auto d = p.as<pdu::DataHeader>();
      ASSERT_EQ(d.cccid, read_cid);
      ASSERT_LE(uint64_t(d.datao) + d.datal, got->size());
      std::memcpy(got->data() + d.datao, p.data(), d.datal);
      continue;
    }
    ASSERT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
    --responses;
  }
}

// One send: a read of `read_len` at LBA 0, then in-capsule writes over the same blocks (whole
// blocks and a partial one). The read's data is queued (zero copy) before the writes execute
// in the same reactor pass, so the bytes that leave are the written ones: the digest must be
// theirs, read from the table after the writes updated it.
void read_then_overwrite(RawClient& io, uint32_t read_len, int round) {
  auto rd = nvme::make_io(nvme::io_op::kRead, 1, 0, read_len / kLba, Xfer::kTransport, read_len);
  rd.cid = 100;
  auto bytes = io.capsule_bytes(rd);
  int writes = 0;
  for (uint32_t off = 0; off < read_len; off += kBlock) {
    auto data = pattern(kBlock, uint32_t(round * 1000 + off / kBlock));
    auto wr =
        nvme::make_io(nvme::io_op::kWrite, 1, off / kLba, kBlock / kLba, Xfer::kInCapsule, kBlock);
    wr.cid = uint16_t(200 + writes++);
    auto b = io.capsule_bytes(wr, data.data(), kBlock);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  auto part = pattern(kLba, uint32_t(round));  // one 512-byte write inside the first block
  auto wr = nvme::make_io(nvme::io_op::kWrite, 1, 3, 1, Xfer::kInCapsule, kLba);
  wr.cid = uint16_t(200 + writes++);
  auto b = io.capsule_bytes(wr, part.data(), kLba);
  bytes.insert(bytes.end(), b.begin(), b.end());
  ASSERT_TRUE(io.send_bytes(bytes));
  std::vector<uint8_t> got(read_len);
  receive(io, writes + 1, 100, &got);
}

TEST_F(TargetFixture, TableDigestCoversWritesThatLandWhileTheReadWaitsInItsGroup) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestData, 0, 127), "");
  for (int round = 0; round < 20; ++round)
    for (uint32_t len : {kBlock, 4 * kBlock, 32 * kBlock}) {
      read_then_overwrite(s.io, len, round);
      if (::testing::Test::HasFatalFailure()) return;
    }
  EXPECT_GT(table_digest_bytes(*target_), 0u) << "no digest came from the block table";
}

class FullSocketDigestTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.sock_buf = 4096;  // the read's C2HData goes out in pieces, the rest copied as it waits
    return c;
  }
};

TEST_F(FullSocketDigestTest, TableDigestOfAHalfSentReadMatchesTheBytesSent) {
  Session s;
  s.io.set_rcvbuf(4096);
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestData, 0, 127), "");
  for (int round = 0; round < 16; ++round) {
    read_then_overwrite(s.io, kMaxIo, round);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(table_digest_bytes(*target_), 0u) << "no digest came from the block table";
}

// Two hosts on one reactor: one writes (whole blocks, several blocks, partial blocks, Write
// Zeroes) over 16 blocks while the other reads them with data digests, for a while.
TEST_F(TargetFixture, DigestedReadsRacingWritesToTheSameBlocks) {
  Session reader, writer;
  ASSERT_EQ(reader.open(port_, kNqn, pdu::kDigestData | pdu::kDigestHeader, 0, 127), "");
  ASSERT_EQ(writer.open(port_, kNqn, 0, 0, 127), "");
  constexpr uint32_t kSpan = 16 * kBlock;
  std::atomic<bool> stop{false};
  std::atomic<int> write_errors{0};
  std::atomic<uint64_t> writes{0};
  std::thread writing([&] {
    std::mt19937 rng(1);
    while (!stop.load()) {
      const uint32_t lbas = 1 + rng() % (kSpan / kLba / 2);
      const uint32_t slba = rng() % (kSpan / kLba - lbas + 1);
      Result r;
      if (rng() % 8 == 0) {
        r = writer.io.exec(
            nvme::make_io(nvme::io_op::kWriteZeroes, 1, slba, lbas, Xfer::kTransport, 0));
      } else {
        auto data = pattern(lbas * kLba, uint32_t(rng()));
        const bool inline_data = lbas * kLba <= kInline;
        r = writer.io.exec(
            nvme::make_io(nvme::io_op::kWrite, 1, slba, lbas,
                          inline_data ? Xfer::kInCapsule : Xfer::kTransport, lbas * kLba),
            data.data(), lbas * kLba);
      }
      if (!r.ok()) ++write_errors;
      ++writes;
    }
  });
  std::mt19937 rng(2);
  std::vector<uint8_t> got(kSpan);
  int reads = 0;
  std::string failure;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    const uint32_t blocks = 1 + rng() % 16;
    const uint32_t first = rng() % (16 - blocks + 1);
    Result r =
        reader.io.exec(nvme::make_io(nvme::io_op::kRead, 1, first * kBlock / kLba,
                                     blocks * kBlock / kLba, Xfer::kTransport, blocks * kBlock),
                       nullptr, 0, got.data(), blocks * kBlock);
    if (!r.ok()) {  // a wrong data digest fails here, with the client's reason
      failure = r.describe() + ": " + reader.io.last_error();
      break;
    }
    ++reads;
  }
  stop = true;
  writing.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(write_errors.load(), 0);
  EXPECT_GT(reads, 100);
  EXPECT_GT(writes.load(), 100u);
  EXPECT_GT(table_digest_bytes(*target_), 0u) << "no digest came from the block table";
}

}  // namespace
}  // namespace sens::testing
