// A host that stops reading, several namespaces, read-only namespaces.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
using nvme::Xfer;

// Host A pipelines 4 MiB of reads and reads nothing back: the target's socket fills up. Host
// B must still be served meanwhile, and A must get every byte once it reads again.
TEST_F(TargetFixture, HostThatStopsReadingDoesNotStallOthers) {
  Session a, b;
  a.io.set_rcvbuf(32 * 1024);
  ASSERT_EQ(a.open(port_, kNqn, 0, 0, /*io_sqsize=*/127), "");
  ASSERT_EQ(b.open(port_, kNqn), "");
  auto data = pattern(kMaxIo, 77);
  ASSERT_EQ(write_read(a.io, 0, kMaxIo, 77, false), "");
  constexpr int kN = 96;  // 12 MiB: far more than the socket buffers hold
  std::vector<uint8_t> stream;
  for (int i = 0; i < kN; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kRead, 1, 0, kMaxIo / 512, Xfer::kTransport, kMaxIo);
    sqe.cid = uint16_t(3000 + i);
    auto c = a.io.capsule_bytes(sqe);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  ASSERT_TRUE(a.io.send_bytes(stream));
  // B works while A's responses sit in the socket buffers.
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(
        write_read(b.io, 4096 + uint64_t(i) * 256, i % 2 ? kInline : 65536, uint32_t(i), i % 2),
        "");
  // A drains: every read complete and intact.
  std::vector<std::vector<uint8_t>> back(kN, std::vector<uint8_t>(kMaxIo));
  int done = 0;
  while (done < kN) {
    Pdu p;
    ASSERT_EQ(a.io.recv_pdu(&p), RecvStatus::kOk) << a.io.last_error() << " after " << done;
    if (p.type() == uint8_t(pdu::Type::kC2HData)) {
      auto d = p.as<pdu::DataHeader>();
      ASSERT_GE(d.cccid, 3000);
      ASSERT_LT(d.cccid, 3000 + kN);
      ASSERT_LE(uint64_t(d.datao) + d.datal, kMaxIo);
      std::memcpy(back[d.cccid - 3000].data() + d.datao, p.data(), d.datal);
      continue;
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    EXPECT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
    ++done;
  }
  for (int i = 0; i < kN; ++i) EXPECT_EQ(first_difference(data, back[i]), -1) << "read " << i;
  // The target did meet a full socket (the path this test is about).
  auto stats = target_->stats_json();
  EXPECT_GT(stats["flushes"].value("socket_full", 0), 0) << stats["flushes"].dump();
}

// A host that stops reading and then sends a malformed PDU: the C2HTermReq cannot leave (the
// socket is full), so the target closes the connection anyway after its close deadline,
// rather than holding it (and its buffers) for as long as the peer stays silent.
TEST_F(TargetFixture, FatalErrorClosesEvenWhenTheTermReqCannotBeSent) {
  Session a;
  a.io.set_rcvbuf(32 * 1024);
  ASSERT_EQ(a.open(port_, kNqn, 0, 0, /*io_sqsize=*/127), "");
  std::vector<uint8_t> stream;
  for (int i = 0; i < 96; ++i) {
    auto sqe = nvme::make_io(nvme::io_op::kRead, 1, 0, kMaxIo / 512, Xfer::kTransport, kMaxIo);
    sqe.cid = uint16_t(100 + i);
    auto c = a.io.capsule_bytes(sqe);
    stream.insert(stream.end(), c.begin(), c.end());
  }
  uint8_t bad[8] = {0x0A, 0, 24, 0, 24, 0, 0, 0};  // reserved PDU type
  stream.insert(stream.end(), bad, bad + sizeof(bad));
  stream.resize(stream.size() + 16, 0);
  ASSERT_TRUE(a.io.send_bytes(stream));
  auto open_connections = [&] { return target_->stats_json()["connections"].size(); };
  EXPECT_EQ(open_connections(), 2u);  // admin + I/O queue
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (open_connections() == 2u && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The I/O queue is gone; its controller's admin queue may follow it or not.
  EXPECT_LT(open_connections(), 2u) << "the connection with an unsendable TermReq stayed open";
}

class MultiNamespaceTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.subsystems[0].namespaces = {"ram:16M", "null:1M", "ram:2M"};
    return c;
  }
};

TEST_F(MultiNamespaceTest, EachNamespaceIsIdentifiedAndAddressed) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  nvme::IdentifyController idc{};
  Result r = s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(idc.nn, 1024u);  // NN: the nsids the controller may have; the active list says which
  uint32_t list[1024] = {};
  r = s.admin.exec(nvme::make_identify(2, 0), nullptr, 0, list, sizeof(list));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(list[0], 1u);
  EXPECT_EQ(list[1], 2u);
  EXPECT_EQ(list[2], 3u);
  EXPECT_EQ(list[3], 0u);
  r = s.admin.exec(nvme::make_identify(2, 2), nullptr, 0, list, sizeof(list));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(list[0], 3u);
  EXPECT_EQ(list[1], 0u);
  const uint64_t sizes[] = {16u << 20, 1u << 20, 2u << 20};
  nvme::IdentifyNamespace first{};
  for (uint32_t nsid = 1; nsid <= 3; ++nsid) {
    nvme::IdentifyNamespace idn{};
    r = s.admin.exec(nvme::make_identify(0, nsid), nullptr, 0, &idn, sizeof(idn));
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_EQ(idn.nsze, sizes[nsid - 1] / 512) << "nsid " << nsid;
    if (nsid == 1)
      first = idn;
    else
      EXPECT_NE(std::memcmp(first.nguid, idn.nguid, 16), 0) << "NGUID of nsid " << nsid;
  }
  // nsid 3 is addressable and separate from nsid 1; the last block of nsid 3 exists, the
  // block after it does not.
  auto d3 = pattern(4096, 3);
  r = s.io.exec(nvme::make_io(nvme::io_op::kWrite, 3, 4096 - 8, 8, Xfer::kInCapsule, 4096),
                d3.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  std::vector<uint8_t> back(4096);
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 3, 4096 - 8, 8, Xfer::kTransport, 4096), nullptr,
                0, back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(d3, back), -1);
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 3, 4096, 1, Xfer::kTransport, 512), nullptr, 0,
                back.data(), 512);
  EXPECT_EQ(r.status(), st::kLbaOutOfRange) << r.describe();
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 4096 - 8, 8, Xfer::kTransport, 4096), nullptr,
                0, back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(std::vector<uint8_t>(4096, 0), back), -1) << "nsid 1 changed";
  // The null namespace takes writes and reads zeroes.
  r = s.io.exec(nvme::make_io(nvme::io_op::kWrite, 2, 0, 8, Xfer::kInCapsule, 4096), d3.data(),
                4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 2, 0, 8, Xfer::kTransport, 4096), nullptr, 0,
                back.data(), 4096);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(std::vector<uint8_t>(4096, 0), back), -1);
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 4, 0, 1, Xfer::kTransport, 512), nullptr, 0,
                back.data(), 512);
  EXPECT_EQ(r.status(), st::kInvalidNamespace) << r.describe();
}

class ReadOnlyTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.read_only = true;
    return c;
  }
};

// Every command that would change a read-only namespace fails with Namespace Is Write
// Protected (20h); reads work.
TEST_F(ReadOnlyTest, WritesAreWriteProtected) {
  constexpr uint16_t kWriteProtected = 0x020;
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto data = pattern(65536, 1);
  Result r = s.io.exec(nvme::make_io(nvme::io_op::kWrite, 1, 0, 8, Xfer::kInCapsule, 4096),
                       data.data(), 4096);
  EXPECT_EQ(r.status(), kWriteProtected) << "in-capsule write: " << r.describe();
  r = s.io.exec(nvme::make_io(nvme::io_op::kWrite, 1, 0, 128, Xfer::kTransport, 65536), data.data(),
                65536);
  EXPECT_EQ(r.status(), kWriteProtected) << "R2T write: " << r.describe();
  EXPECT_TRUE(r.r2ts.empty()) << "asked for data it will refuse";
  r = s.io.exec(nvme::make_io(nvme::io_op::kWriteZeroes, 1, 0, 8, Xfer::kTransport, 0));
  EXPECT_EQ(r.status(), kWriteProtected) << "Write Zeroes: " << r.describe();
  nvme::DsmRange range{0, 8, 0};
  r = s.io.exec(nvme::make_dsm_deallocate(1, 1, Xfer::kInCapsule), &range, sizeof(range));
  EXPECT_EQ(r.status(), kWriteProtected) << "Dataset Management deallocate: " << r.describe();
  std::vector<uint8_t> back(4096);
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 0, 8, Xfer::kTransport, 4096), nullptr, 0,
                back.data(), 4096);
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
}  // namespace sens::testing
