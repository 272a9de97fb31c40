// Queue-level behaviour beyond one command at a time: SQ head pointer, pipelined and
// interleaved commands, limits of in-capsule data and AERs, data that a later write changes
// while a read's C2HData still waits to be sent, and a target with two reactors.
#include <gtest/gtest.h>

#include <cstring>

#include "target/command_queue.h"
#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
using nvme::Xfer;

// With SQ flow control on, every CQE carries the SQ head: one further per command, modulo
// the queue size the Connect asked for (sqsize + 1).
TEST_F(TargetFixture, SqHeadAdvancesPerCommandAndWraps) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  RawClient io;
  ASSERT_TRUE(io.connect(port_));
  ASSERT_TRUE(io.ic(0)) << io.last_error();
  Result r = io.connect_queue(2, kNqn, s.cntlid, 0, 0, /*sqsize=*/3);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.cqe.sqhd, 1) << "the Connect consumed entry 0";
  for (int i = 0; i < 9; ++i) {
    r = io.exec(nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, Xfer::kTransport, 0));
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_EQ(r.cqe.sqhd, (2 + i) % 4) << "command " << i;
    EXPECT_EQ(r.cqe.sqid, 2);
  }
}

// Two R2T writes outstanding at once, their H2CData PDUs interleaved.
TEST_F(TargetFixture, InterleavedR2TWrites) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto a = pattern(32768, 21), b = pattern(32768, 22);
  auto wa = nvme::make_io(nvme::io_op::kWrite, 1, 0, 64, Xfer::kTransport, 32768);
  auto wb = nvme::make_io(nvme::io_op::kWrite, 1, 64, 64, Xfer::kTransport, 32768);
  wa.cid = 501;
  wb.cid = 502;
  auto bytes = s.io.capsule_bytes(wa);
  auto b2 = s.io.capsule_bytes(wb);
  bytes.insert(bytes.end(), b2.begin(), b2.end());
  ASSERT_TRUE(s.io.send_bytes(bytes));
  pdu::R2T ra{}, rb{};
  for (int i = 0; i < 2; ++i) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kR2T));
    auto t = p.as<pdu::R2T>();
    (t.cccid == 501 ? ra : rb) = t;
  }
  ASSERT_EQ(ra.cccid, 501);
  ASSERT_EQ(rb.cccid, 502);
  EXPECT_NE(ra.ttag, rb.ttag);
  for (uint32_t off = 0; off < 32768; off += 8192) {
    bool last = off + 8192 == 32768;
    ASSERT_TRUE(s.io.send_bytes(s.io.h2c_bytes(502, rb.ttag, off, b.data() + off, 8192, last)));
    ASSERT_TRUE(s.io.send_bytes(s.io.h2c_bytes(501, ra.ttag, off, a.data() + off, 8192, last)));
  }
  for (int i = 0; i < 2; ++i) {
    Pdu p;
    ASSERT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
    EXPECT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
  }
  std::vector<uint8_t> back(32768);
  Result r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 0, 64, Xfer::kTransport, 32768),
                       nullptr, 0, back.data(), 32768);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(a, back), -1);
  r = s.io.exec(nvme::make_io(nvme::io_op::kRead, 1, 64, 64, Xfer::kTransport, 32768), nullptr, 0,
                back.data(), 32768);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(first_difference(b, back), -1);
}

// In-capsule data beyond what IOCCSZ advertises (but within the PDU size limit) fails the
// command, not the connection.
TEST_F(TargetFixture, InCapsuleDataBeyondIoccszFailsTheCommand) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto data = pattern(kInline + 4096, 3);
  Result r = s.io.exec(nvme::make_io(nvme::io_op::kWrite, 1, 0, uint32_t(data.size() / 512),
                                     Xfer::kInCapsule, uint32_t(data.size())),
                       data.data(), uint32_t(data.size()));
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kSglInvalidDataLength) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, kInline, 4, true), "") << "exactly IOCCSZ is fine";
}

// An in-capsule SGL whose length does not match the data that follows.
TEST_F(TargetFixture, InCapsuleSglLengthMismatchFailsTheCommand) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto data = pattern(4096, 3);
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, 8, Xfer::kInCapsule, 4096);
  sqe.cid = 9;
  ASSERT_TRUE(s.io.send_bytes(s.io.capsule_bytes(sqe, data.data(), 2048)));
  Result r = s.io.await(9, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kSglInvalidDataLength) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, 4096, 5, true), "");
}

// At most AERL + 1 Asynchronous Event Requests outstanding; they do not block other commands.
TEST_F(TargetFixture, AsyncEventRequestLimit) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  nvme::IdentifyController idc{};
  Result r = s.admin.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  for (int i = 0; i <= idc.aerl; ++i) {
    auto sqe = nvme::make_async_event();
    sqe.cid = uint16_t(900 + i);
    ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(sqe)));
  }
  EXPECT_TRUE(s.admin.quiet(50)) << "an AER completed with no event";
  r = s.admin.exec(nvme::make_async_event());
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kAsyncEventLimit) << r.describe();
  r = s.admin.exec(nvme::make_keep_alive());
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, 4096, 6, true), "");
}

// SPDK's host completes its outstanding AERs by itself when it shuts a controller down, without
// telling the target, and reuses their CIDs: its Property Get of CC came with the CID of an AER
// the target still held and was refused with Command ID Conflict, so CC.SHN was never set
// (issue 29). A new admin command with an outstanding AER's CID retires that AER silently (no
// completion is sent for it, and its slot counts no more) and runs.
TEST_F(TargetFixture, CommandReusingAnAerCidRetiresTheAer) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  for (uint16_t cid = 900; cid < 900 + target::kAerLimit; ++cid) {
    auto sqe = nvme::make_async_event();
    sqe.cid = cid;
    ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(sqe)));
  }
  ASSERT_TRUE(s.admin.quiet(50)) << "an AER completed with no event";
  auto get_cc = nvme::make_property_get(0x14, false);  // CC
  get_cc.cid = 903;
  ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(get_cc)));
  Result r = s.admin.await(903, nullptr, 0, nullptr, 0);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kSuccess) << r.describe();
  EXPECT_EQ(r.cqe.dw0 & 1, 1u) << "CC.EN of an enabled controller";
  EXPECT_TRUE(s.admin.quiet(50)) << "the retired AER was answered after all";
  // Its slot is free again: one more AER is held, not refused with the limit...
  auto aer = nvme::make_async_event();
  aer.cid = 950;
  ASSERT_TRUE(s.admin.send_bytes(s.admin.capsule_bytes(aer)));
  EXPECT_TRUE(s.admin.quiet(50)) << "the AER that takes the freed place was answered";
  // ...and the one after it is.
  r = s.admin.exec(nvme::make_async_event());
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kAsyncEventLimit) << r.describe();
  EXPECT_EQ(write_read(s.io, 0, 4096, 7, true), "");
}

// An Identify whose SGL describes no data cannot be answered with an empty C2HData (a data
// PDU without data is malformed): it must fail with a status.
TEST_F(TargetFixture, IdentifyWithZeroLengthSgl) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto sqe = nvme::make_identify(1, 0);
  nvme::set_sgl(sqe, Xfer::kTransport, 0);
  Result r = s.admin.exec(sqe);
  ASSERT_TRUE(r.error.empty()) << r.describe();
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_FALSE(r.cqe.ok()) << "no data to return, yet success";
  r = s.admin.exec(nvme::make_keep_alive());
  EXPECT_TRUE(r.ok()) << r.describe();
}

// A short Identify (SGL of 256 bytes) gets exactly the first 256 bytes.
TEST_F(TargetFixture, ShortIdentify) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  auto sqe = nvme::make_identify(1, 0);
  nvme::set_sgl(sqe, Xfer::kTransport, 256);
  uint8_t buf[256];
  Result r = s.admin.exec(sqe, nullptr, 0, buf, sizeof(buf));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.c2h_bytes, 256u);
}

// A Read's C2HData may wait in the send queue (coalescing) while a Write to the same blocks
// executes: what goes out must still be one consistent 4 KiB — either the old or the new data
// — and its data digest must match the bytes actually sent.
TEST_F(TargetFixture, ReadDataStableWhileALaterWriteChangesTheBlocks) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, pdu::kDigestHeader | pdu::kDigestData), "");
  auto before = pattern(4096, 31);
  ASSERT_EQ(write_read(s.io, 2000, 4096, 31, true), "");
  for (int round = 0; round < 8; ++round) {
    auto after = pattern(4096, 100 + round);
    auto rd = nvme::make_io(nvme::io_op::kRead, 1, 2000, 8, Xfer::kTransport, 4096);
    rd.cid = uint16_t(700 + 2 * round);
    auto wr = nvme::make_io(nvme::io_op::kWrite, 1, 2000, 8, Xfer::kInCapsule, 4096);
    wr.cid = uint16_t(701 + 2 * round);
    auto bytes = s.io.capsule_bytes(rd);
    auto b2 = s.io.capsule_bytes(wr, after.data(), 4096);
    bytes.insert(bytes.end(), b2.begin(), b2.end());
    ASSERT_TRUE(s.io.send_bytes(bytes));  // one segment: both commands in one read
    std::vector<uint8_t> got(4096);
    int responses = 0;
    while (responses < 2) {
      Pdu p;
      RecvStatus st = s.io.recv_pdu(&p);
      ASSERT_EQ(st, RecvStatus::kOk) << "round " << round << ": " << s.io.last_error();
      if (p.type() == uint8_t(pdu::Type::kC2HData)) {
        auto d = p.as<pdu::DataHeader>();
        ASSERT_EQ(d.cccid, rd.cid);
        ASSERT_LE(d.datao + d.datal, 4096u);
        std::memcpy(got.data() + d.datao, p.data(), d.datal);
        continue;
      }
      ASSERT_EQ(p.type(), uint8_t(pdu::Type::kCapsuleResp));
      EXPECT_TRUE(p.as<pdu::CapsuleResp>().cqe.ok());
      ++responses;
    }
    EXPECT_TRUE(first_difference(got, before) == -1 || first_difference(got, after) == -1)
        << "round " << round << ": the read returned a mix of old and new data";
    before = after;
  }
}

class TwoReactorTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.cores = 2;
    return c;
  }
};

// Admin and I/O queues of one controller on different reactor threads: I/O, SMART counters
// summed across threads, and the I/O queues closed when the admin queue goes.
TEST_F(TwoReactorTest, ControllerSpansReactors) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn, 3), "");
  RawClient io2;
  ASSERT_TRUE(io2.connect(port_));
  ASSERT_TRUE(io2.ic(3)) << io2.last_error();
  Result r = io2.connect_queue(2, kNqn, s.cntlid);
  ASSERT_TRUE(r.ok()) << r.describe();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(write_read(s.io, uint64_t(i) * 256, 65536, uint32_t(i), false), "");
    EXPECT_EQ(write_read(io2, 8192 + uint64_t(i) * 256, 4096, uint32_t(50 + i), true), "");
  }
  nvme::SmartLog smart{};
  r = s.admin.exec(nvme::make_get_log_page(nvme::log_page::kSmart, 0xFFFFFFFF, 512, 0), nullptr, 0,
                   &smart, sizeof(smart));
  ASSERT_TRUE(r.ok()) << r.describe();
  uint64_t writes = 0, reads = 0;
  std::memcpy(&writes, smart.host_writes, 8);
  std::memcpy(&reads, smart.host_reads, 8);
  EXPECT_EQ(writes, 8u);
  EXPECT_EQ(reads, 8u);
  s.admin.close();
  EXPECT_TRUE(s.io.wait_closed(2000)) << s.io.last_error();
  EXPECT_TRUE(io2.wait_closed(2000)) << io2.last_error();
  // The target stays usable.
  Session t;
  ASSERT_EQ(t.open(port_, kNqn), "");
  EXPECT_EQ(write_read(t.io, 0, 4096, 9, true), "");
}

}  // namespace
}  // namespace sens::testing
