// Queue against a scripted controller on a socketpair: exact PDUs for the protocol paths a
// correct target never exercises (bad offsets, unknown cids, silence, hang-ups) and the byte
// layout of what the host sends (in-capsule data, H2CData splitting, digests).
#include "host/queue.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "wire/nvme_build.h"

namespace sens::host {
namespace {

struct Done {
  bool called = false;
  int calls = 0;
  Completion c;
};
void record(void* ctx, uint64_t, const Completion& c) {
  auto* d = static_cast<Done*>(ctx);
  d->called = true;
  ++d->calls;
  d->c = c;
}

class ScriptedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    host_fd_ = sv[0];
    peer_ = sv[1];
  }
  void TearDown() override {
    queue_.reset();
    if (peer_ >= 0) close(peer_);
  }

  // Opens the queue: the ICResp is written first, so open_fd finds it waiting.
  std::string open(QueueOptions qo, uint32_t maxh2cdata = 8192, int resp_digest = -1) {
    qo_ = qo;
    pdu::ICResp resp;
    uint8_t d = uint8_t((qo.hdr_digest ? 1 : 0) | (qo.data_digest ? 2 : 0));
    pdu::build_icresp(resp, resp_digest >= 0 ? uint8_t(resp_digest) : d, maxh2cdata);
    send_bytes(&resp, sizeof(resp));
    queue_ = std::make_unique<Queue>(reactor_, qo);
    std::string err = queue_->open_fd(host_fd_, reactor_.now() + kSecond);
    if (err.empty()) {
      auto icreq = read_pdu();
      EXPECT_EQ(icreq.size(), pdu::kICLen);
      EXPECT_EQ(icreq[0], uint8_t(pdu::Type::kICReq));
      EXPECT_EQ(icreq[11], d);  // digest bits asked for
    }
    return err;
  }

  void send_bytes(const void* p, size_t n) { ASSERT_EQ(write(peer_, p, n), ssize_t(n)); }
  template <class T>
  void send_pdu(T& pdu, const void* data = nullptr, uint32_t len = 0) {
    pdu::Digests d{qo_.hdr_digest, qo_.data_digest};
    std::vector<uint8_t> bytes(sizeof(T) + 4);
    std::memcpy(bytes.data(), &pdu, sizeof(T));
    uint32_t hl = sizeof(T);
    if (d.header) {
      uint32_t crc = crc32c(&pdu, sizeof(T));
      std::memcpy(bytes.data() + sizeof(T), &crc, 4);
      hl += 4;
    }
    bytes.resize(hl);
    if (len) {
      bytes.insert(bytes.end(), static_cast<const uint8_t*>(data),
                   static_cast<const uint8_t*>(data) + len);
      if (d.data) {
        uint32_t crc = crc32c(data, len);
        bytes.insert(bytes.end(), reinterpret_cast<uint8_t*>(&crc),
                     reinterpret_cast<uint8_t*>(&crc) + 4);
      }
    }
    send_bytes(bytes.data(), bytes.size());
  }

  // One whole PDU from the host, pumping the reactor while it is not there yet. Empty on EOF
  // or timeout.
  std::vector<uint8_t> read_pdu(Nanos timeout = 2 * kSecond) {
    std::vector<uint8_t> out(8);
    if (!read_exact(out.data(), 8, timeout)) return {};
    uint32_t plen;
    std::memcpy(&plen, out.data() + 4, 4);
    if (plen < 8 || plen > (1u << 24)) return {};
    out.resize(plen);
    if (!read_exact(out.data() + 8, plen - 8, timeout)) return {};
    return out;
  }
  bool read_exact(uint8_t* p, size_t n, Nanos timeout) {
    const Nanos deadline = reactor_.now() + timeout;
    size_t got = 0;
    while (got < n) {
      ssize_t r = recv(peer_, p + got, n - got, MSG_DONTWAIT);
      if (r > 0) {
        got += size_t(r);
        continue;
      }
      if (r == 0) return false;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
      if (reactor_.now() > deadline) return false;
      reactor_.run_once(kMilli);
    }
    return true;
  }
  template <class F>
  bool pump_until(F done, Nanos timeout = 2 * kSecond) {
    const Nanos deadline = reactor_.now() + timeout;
    while (!done()) {
      if (reactor_.now() > deadline) return false;
      reactor_.run_once(kMilli);
    }
    return true;
  }
  bool submit_read(void* buf, uint32_t len, Done* d) {
    nvme::Sqe sqe = nvme::make_io(nvme::io_op::kRead, 1, 0, len / 512, nvme::Xfer::kTransport, len);
    return queue_->submit(sqe, buf, len, DataDir::kControllerToHost, record, d, 0);
  }
  bool submit_write(void* buf, uint32_t len, Done* d) {
    nvme::Sqe sqe =
        nvme::make_io(nvme::io_op::kWrite, 1, 8, len / 512, nvme::Xfer::kTransport, len);
    return queue_->submit(sqe, buf, len, DataDir::kHostToController, record, d, 0);
  }
  void send_resp(uint16_t cid, uint16_t status = 0) {
    pdu::CapsuleResp r;
    pdu::build_capsule_resp(r, nvme::make_cqe(cid, qo_.qid, 0, status), {qo_.hdr_digest, false});
    send_pdu(r);
  }
  void send_c2h(uint16_t cid, uint32_t datao, const void* data, uint32_t len, uint8_t flags) {
    pdu::DataHeader h;
    pdu::build_data(h, pdu::Type::kC2HData, cid, 0, datao, len, flags,
                    {qo_.hdr_digest, qo_.data_digest});
    send_pdu(h, data, len);
  }
  // The H2CTermReq the host sends before hanging up on a bad PDU.
  void expect_term_req(uint16_t fes) {
    auto t = read_pdu();
    ASSERT_GE(t.size(), pdu::kTermReqHlen);
    EXPECT_EQ(t[0], uint8_t(pdu::Type::kH2CTermReq));
    uint16_t got;
    std::memcpy(&got, t.data() + 8, 2);
    EXPECT_EQ(got, fes);
    EXPECT_TRUE(read_pdu(200 * kMilli).empty());  // then the connection closes
  }

  Reactor reactor_;
  int host_fd_ = -1, peer_ = -1;
  QueueOptions qo_;
  std::unique_ptr<Queue> queue_;
};

QueueOptions io_queue(bool hdr = false, bool data = false) {
  QueueOptions qo;
  qo.qid = 1;
  qo.depth = 4;
  qo.hdr_digest = hdr;
  qo.data_digest = data;
  qo.coalesce.policy = coalesce::Policy::kOff;
  qo.command_timeout = 5 * kSecond;
  return qo;
}

TEST_F(ScriptedTest, IcrespDigestMismatchFailsOpen) {
  std::string err = open(io_queue(true, false), 8192, /*resp_digest=*/0);
  EXPECT_EQ(err, "ICResp digest 0x0, asked for 0x1");
  EXPECT_EQ(queue_->state(), Queue::State::kFailed);
}

TEST_F(ScriptedTest, NoIcrespTimesOut) {
  queue_ = std::make_unique<Queue>(reactor_, io_queue());
  const Nanos t0 = reactor_.now();
  EXPECT_EQ(queue_->open_fd(host_fd_, t0 + 100 * kMilli), "no ICResp before the connect timeout");
  EXPECT_LT(reactor_.now() - t0, kSecond);
}

TEST_F(ScriptedTest, InCapsuleWriteCarriesTheData) {
  ASSERT_EQ(open(io_queue(true, true)), "");
  queue_->set_incapsule_limit(8192);
  std::vector<uint8_t> buf(4096);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 7);
  Done d;
  ASSERT_TRUE(submit_write(buf.data(), 4096, &d));
  auto cmd = read_pdu();
  ASSERT_EQ(cmd.size(), 72u + 4 + 4096 + 4);  // header, hdgst, data, ddgst
  pdu::CapsuleCmd c;
  std::memcpy(&c, cmd.data(), sizeof(c));
  EXPECT_EQ(c.ch.flags, pdu::flag::kHdgst | pdu::flag::kDdgst);
  EXPECT_EQ(c.ch.pdo, 76);
  EXPECT_EQ(c.sqe.sgl.type, nvme::kSglDataBlockOffset);
  EXPECT_EQ(c.sqe.sgl.length, 4096u);
  EXPECT_TRUE(pdu::header_digest_ok(cmd.data(), 72));
  EXPECT_EQ(std::memcmp(cmd.data() + 76, buf.data(), 4096), 0);
  uint32_t ddgst;
  std::memcpy(&ddgst, cmd.data() + 76 + 4096, 4);
  EXPECT_EQ(ddgst, crc32c(buf.data(), 4096));
  EXPECT_EQ(queue_->counters().incapsule_writes, 1u);
  send_resp(c.sqe.cid);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_TRUE(d.c.ok());
}

class H2CTest : public ScriptedTest, public ::testing::WithParamInterface<bool> {};

// A 40 KiB write, maxh2cdata 8 KiB: one R2T, five H2CData PDUs of exactly 8 KiB with the
// R2T's ttag, DATA_LAST on the fifth only; with digests, each one correct.
TEST_P(H2CTest, R2TAnsweredInMaxh2cdataPieces) {
  const bool digests = GetParam();
  ASSERT_EQ(open(io_queue(digests, digests), 8192), "");
  queue_->set_incapsule_limit(4096);  // 40 KiB does not fit: R2T
  std::vector<uint8_t> buf(40960);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i ^ (i >> 8));
  Done d;
  ASSERT_TRUE(submit_write(buf.data(), 40960, &d));
  auto cmd = read_pdu();
  pdu::CapsuleCmd c;
  ASSERT_GE(cmd.size(), sizeof(c));
  std::memcpy(&c, cmd.data(), sizeof(c));
  EXPECT_EQ(cmd.size(), 72u + (digests ? 4 : 0));  // no data in the capsule
  EXPECT_EQ(c.sqe.sgl.type, nvme::kSglTransportDataBlock);
  EXPECT_EQ(c.sqe.sgl.length, 40960u);
  pdu::R2T r2t;
  pdu::build_r2t(r2t, c.sqe.cid, 0x1234, 0, 40960, {digests, false});
  send_pdu(r2t);
  uint32_t expect_off = 0;
  for (int i = 0; i < 5; ++i) {
    auto p = read_pdu();
    pdu::DataHeader h;
    ASSERT_GE(p.size(), sizeof(h));
    std::memcpy(&h, p.data(), sizeof(h));
    EXPECT_EQ(h.ch.type, uint8_t(pdu::Type::kH2CData));
    EXPECT_EQ(h.cccid, c.sqe.cid);
    EXPECT_EQ(h.ttag, 0x1234);
    EXPECT_EQ(h.datao, expect_off);
    EXPECT_EQ(h.datal, 8192u);
    EXPECT_EQ(bool(h.ch.flags & pdu::flag::kDataLast), i == 4);
    const uint32_t pdo = 24 + (digests ? 4 : 0);
    ASSERT_EQ(p.size(), pdo + 8192 + (digests ? 4 : 0));
    EXPECT_EQ(std::memcmp(p.data() + pdo, buf.data() + expect_off, 8192), 0);
    if (digests) {
      EXPECT_TRUE(pdu::header_digest_ok(p.data(), 24));
      uint32_t dd;
      std::memcpy(&dd, p.data() + pdo + 8192, 4);
      EXPECT_EQ(dd, crc32c(buf.data() + expect_off, 8192));
    }
    expect_off += 8192;
  }
  EXPECT_FALSE(d.called);
  send_resp(c.sqe.cid);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_TRUE(d.c.ok());
  EXPECT_EQ(queue_->counters().h2c_pdus, 5u);
}

INSTANTIATE_TEST_SUITE_P(Digests, H2CTest, ::testing::Bool());

// Four 16 KiB writes through R2T, the four R2Ts in one read: under eager (and adaptive) a group
// of H2CData leaves as soon as it holds half of the write data in flight (two PDUs of four),
// not at the pass end, so the target works on the first half while the host makes the second.
// Uniform is a baseline's rule and keeps its B and T. Either way the data arrives whole.
class H2CHalfTest : public ScriptedTest, public ::testing::WithParamInterface<coalesce::Policy> {};

TEST_P(H2CHalfTest, H2CDataLeavesAtHalfTheWriteDataInFlight) {
  const coalesce::Policy policy = GetParam();
  QueueOptions qo = io_queue();
  qo.coalesce.policy = policy;
  qo.coalesce.timeout = 20 * kMilli;  // (uniform: sent by its timer, well before read_pdu gives up)
  ASSERT_EQ(open(qo, 65536), "");
  queue_->set_incapsule_limit(4096);
  constexpr uint32_t kLen = 16384;
  std::vector<uint8_t> buf(4 * kLen);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = uint8_t(i * 13 + (i >> 9));
  Done d[4];
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(submit_write(buf.data() + w * kLen, kLen, &d[w]));
  uint16_t cids[4];
  for (auto& cid : cids) {
    auto cmd = read_pdu();
    pdu::CapsuleCmd c;
    ASSERT_GE(cmd.size(), sizeof(c));
    std::memcpy(&c, cmd.data(), sizeof(c));
    cid = c.sqe.cid;
  }
  std::vector<uint8_t> r2ts;
  for (int w = 0; w < 4; ++w) {
    pdu::R2T r2t;
    pdu::build_r2t(r2t, cids[w], uint16_t(0x100 + w), 0, kLen, {false, false});
    r2ts.insert(r2ts.end(), reinterpret_cast<uint8_t*>(&r2t),
                reinterpret_cast<uint8_t*>(&r2t) + sizeof(r2t));
  }
  send_bytes(r2ts.data(), r2ts.size());  // one write: the host reads all four in one pass
  for (int w = 0; w < 4; ++w) {
    auto p = read_pdu();
    pdu::DataHeader h;
    ASSERT_EQ(p.size(), sizeof(h) + kLen);
    std::memcpy(&h, p.data(), sizeof(h));
    EXPECT_EQ(h.cccid, cids[w]);
    EXPECT_EQ(h.ttag, 0x100 + w);
    EXPECT_EQ(std::memcmp(p.data() + sizeof(h), buf.data() + w * kLen, kLen), 0);
  }
  for (int w = 0; w < 4; ++w) send_resp(cids[w]);
  ASSERT_TRUE(pump_until([&] { return d[0].called && d[1].called && d[2].called && d[3].called; }));
  const auto& flushes = queue_->send_queue().scheduler().stats().flushes;
  const uint64_t at_half = flushes[size_t(coalesce::FlushReason::kByteCap)];
  if (policy == coalesce::Policy::kUniform) {
    EXPECT_EQ(at_half, 0u);
  } else {
    EXPECT_EQ(at_half, 2u);  // after the second and the fourth H2CData
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, H2CHalfTest,
                         ::testing::Values(coalesce::Policy::kEager, coalesce::Policy::kAdaptive,
                                           coalesce::Policy::kUniform));

TEST_F(ScriptedTest, SecondR2TWhileAnsweringIsAProtocolError) {
  QueueOptions qo = io_queue();
  qo.max_h2c_window = 1;  // keeps the first R2T's answer unfinished while nothing is read
  ASSERT_EQ(open(qo, 4096), "");
  std::vector<uint8_t> buf(1 << 20);
  Done d;
  ASSERT_TRUE(submit_write(buf.data(), 1 << 20, &d));
  auto cmd = read_pdu();
  pdu::CapsuleCmd c;
  std::memcpy(&c, cmd.data(), sizeof(c));
  pdu::R2T r2t;
  pdu::build_r2t(r2t, c.sqe.cid, 1, 0, 1 << 20, {});
  send_pdu(r2t);
  send_pdu(r2t);
  // Nothing is read here, so the first R2T's 1 MiB of H2CData fills the socket and is still
  // being answered when the second R2T arrives (the TermReq cannot pass the queued data).
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, kStatusHostPathError);
  EXPECT_EQ(queue_->error(), "protocol error: R2T cid 0: a previous R2T is still being answered");
}

TEST_F(ScriptedTest, C2HDataLandsInPlaceAndSuccessReplacesTheResponse) {
  ASSERT_EQ(open(io_queue(true, true)), "");
  std::vector<uint8_t> buf(8192, 0), src(8192);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 1);
  Done d;
  ASSERT_TRUE(submit_read(buf.data(), 8192, &d));
  auto cmd = read_pdu();
  pdu::CapsuleCmd c;
  std::memcpy(&c, cmd.data(), sizeof(c));
  EXPECT_EQ(c.sqe.opcode, nvme::io_op::kRead);
  EXPECT_EQ(c.sqe.sgl.type, nvme::kSglTransportDataBlock);
  send_c2h(c.sqe.cid, 0, src.data(), 4096, 0);
  send_c2h(c.sqe.cid, 4096, src.data() + 4096, 4096,
           pdu::flag::kDataLast | pdu::flag::kDataSuccess);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_TRUE(d.c.ok());
  EXPECT_EQ(buf, src);
  EXPECT_EQ(queue_->counters().c2h_success, 1u);
  EXPECT_TRUE(queue_->is_open());
}

TEST_F(ScriptedTest, DataDigestErrorFailsTheCommandOnly) {
  ASSERT_EQ(open(io_queue(false, true)), "");
  std::vector<uint8_t> buf(4096), src(4096, 0x5A);
  Done d;
  ASSERT_TRUE(submit_read(buf.data(), 4096, &d));
  auto cmd = read_pdu();
  pdu::CapsuleCmd c;
  std::memcpy(&c, cmd.data(), sizeof(c));
  // A C2HData whose data digest is wrong.
  pdu::DataHeader h;
  pdu::build_data(h, pdu::Type::kC2HData, c.sqe.cid, 0, 0, 4096, pdu::flag::kDataLast,
                  {false, true});
  std::vector<uint8_t> bytes(sizeof(h) + 4096 + 4);
  std::memcpy(bytes.data(), &h, sizeof(h));
  std::memcpy(bytes.data() + sizeof(h), src.data(), 4096);
  const uint32_t bad = crc32c(src.data(), 4096) ^ 1;
  std::memcpy(bytes.data() + sizeof(h) + 4096, &bad, 4);
  send_bytes(bytes.data(), bytes.size());
  send_resp(c.sqe.cid);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, nvme::status::kDataTransferError);
  EXPECT_TRUE(queue_->is_open());  // as Linux: the command fails, the connection lives on
}

TEST_F(ScriptedTest, C2HDataPastTheCommandFailsEveryCommand) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(4096), b(4096), junk(8192);
  Done da, db;
  ASSERT_TRUE(submit_read(a.data(), 4096, &da));
  ASSERT_TRUE(submit_read(b.data(), 4096, &db));
  auto c1 = read_pdu();
  auto c2 = read_pdu();
  ASSERT_FALSE(c2.empty());
  send_c2h(0, 0, junk.data(), 8192, pdu::flag::kDataLast);
  expect_term_req(pdu::fes::kDataOutOfRange);
  ASSERT_TRUE(pump_until([&] { return da.called && db.called; }));
  EXPECT_EQ(da.c.status, kStatusHostPathError);
  EXPECT_EQ(db.c.status, kStatusHostPathError);
  EXPECT_EQ(queue_->state(), Queue::State::kFailed);
  EXPECT_EQ(queue_->error(),
            "protocol error: C2HData cid 0: datao 0 + datal 8192 past the command's 4096 bytes");
  EXPECT_FALSE(submit_read(a.data(), 4096, &da));  // a failed queue takes nothing
}

TEST_F(ScriptedTest, C2HDataOutOfOrderIsAProtocolError) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(8192), junk(4096);
  Done d;
  ASSERT_TRUE(submit_read(a.data(), 8192, &d));
  read_pdu();
  send_c2h(0, 4096, junk.data(), 4096, pdu::flag::kDataLast);
  expect_term_req(pdu::fes::kDataOutOfRange);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(queue_->error(), "protocol error: C2HData cid 0: datao 4096, expected 0");
}

TEST_F(ScriptedTest, ResponseForACommandNotInFlight) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(4096);
  Done d;
  ASSERT_TRUE(submit_read(a.data(), 4096, &d));
  read_pdu();
  send_resp(3);
  expect_term_req(pdu::fes::kInvalidHeaderField);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, kStatusHostPathError);
  EXPECT_EQ(queue_->error(), "protocol error: CapsuleResp for cid 3, not in flight");
}

TEST_F(ScriptedTest, SuccessWithMissingDataIsAnError) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(8192), src(4096);
  Done d;
  ASSERT_TRUE(submit_read(a.data(), 8192, &d));
  read_pdu();
  send_c2h(0, 0, src.data(), 4096, 0);
  send_resp(0);  // success, but half the data never came
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, nvme::status::kDataTransferError);
}

TEST_F(ScriptedTest, ErrorStatusIsPassedThrough) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(4096);
  Done d;
  ASSERT_TRUE(submit_read(a.data(), 4096, &d));
  read_pdu();
  send_resp(0, nvme::status::kLbaOutOfRange);
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, nvme::status::kLbaOutOfRange);
  EXPECT_STREQ(completion_status_name(d.c.status), "LBA out of range");
  EXPECT_TRUE(queue_->is_open());
}

TEST_F(ScriptedTest, SilentControllerTimesCommandsOut) {
  QueueOptions qo = io_queue();
  qo.command_timeout = 100 * kMilli;
  ASSERT_EQ(open(qo), "");
  std::vector<uint8_t> a(4096);
  Done d;
  const Nanos t0 = reactor_.now();
  ASSERT_TRUE(submit_read(a.data(), 4096, &d));
  ASSERT_TRUE(pump_until([&] { return d.called; }, 2 * kSecond));
  EXPECT_GE(reactor_.now() - t0, 100 * kMilli);
  EXPECT_EQ(d.c.status, kStatusHostAborted);
  EXPECT_EQ(d.calls, 1);
  EXPECT_NE(queue_->error().find("timed out after 100 ms"), std::string::npos) << queue_->error();
}

TEST_F(ScriptedTest, HangUpFailsInFlightCommands) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(4096);
  Done d;
  ASSERT_TRUE(submit_read(a.data(), 4096, &d));
  read_pdu();
  close(peer_);
  peer_ = -1;
  ASSERT_TRUE(pump_until([&] { return d.called; }));
  EXPECT_EQ(d.c.status, kStatusHostPathError);
  EXPECT_EQ(queue_->error(), "connection closed by the controller");
}

TEST_F(ScriptedTest, DepthBoundsSubmissionsAndCidsAreSlots) {
  ASSERT_EQ(open(io_queue()), "");
  std::vector<uint8_t> a(4 * 4096);
  Done d[5];
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(submit_read(a.data() + i * 4096, 4096, &d[i]));
  EXPECT_FALSE(submit_read(a.data(), 4096, &d[4]));
  EXPECT_EQ(queue_->inflight(), 4u);
  for (int i = 0; i < 4; ++i) {
    auto p = read_pdu();
    pdu::CapsuleCmd c;
    std::memcpy(&c, p.data(), sizeof(c));
    EXPECT_EQ(c.sqe.cid, i);
  }
  send_resp(2);
  ASSERT_TRUE(pump_until([&] { return d[2].called; }));
  ASSERT_TRUE(submit_read(a.data(), 4096, &d[4]));  // the freed slot is reused
  auto p = read_pdu();
  pdu::CapsuleCmd c;
  std::memcpy(&c, p.data(), sizeof(c));
  EXPECT_EQ(c.sqe.cid, 2);
  queue_->close();
  EXPECT_EQ(queue_->state(), Queue::State::kClosed);
  for (int i : {0, 1, 3, 4}) EXPECT_EQ(d[i].c.status, kStatusHostPathError);
}

}  // namespace
}  // namespace sens::host
