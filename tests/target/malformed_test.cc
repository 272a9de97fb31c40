// Malformed PDUs: each one, on a fresh connection, must be answered with a C2HTermReq naming
// the fatal error (FES) and the offending byte (FEI), quoting the offending header, and the
// connection must then be closed. Meanwhile another host's queue, opened before and kept,
// goes on doing verified I/O: one bad peer never disturbs the others.
#include <gtest/gtest.h>

#include <functional>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using nvme::Xfer;
namespace fes = pdu::fes;

constexpr uint32_t kAnyFei = 0xFFFFFFFF;

struct Case {
  const char* name;
  // Sets the connection up (IC, Connect, an outstanding R2T...) and returns the bad bytes.
  // An empty result with a failure recorded by gtest aborts the case.
  std::function<std::vector<uint8_t>(RawClient&, Session&)> build;
  uint16_t fes;
  uint32_t fei;  // kAnyFei: not checked (reserved for this FES)
};

std::vector<uint8_t> header8(uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo, uint32_t plen,
                             size_t total) {
  std::vector<uint8_t> b(std::max<size_t>(total, 8), 0);
  b[0] = type;
  b[1] = flags;
  b[2] = hlen;
  b[3] = pdo;
  std::memcpy(&b[4], &plen, 4);
  return b;
}

std::vector<uint8_t> keep_alive_capsule(RawClient& c) {
  auto sqe = nvme::make_keep_alive();
  sqe.cid = 77;
  return c.capsule_bytes(sqe);
}

// An I/O queue with a Write of `len` bytes waiting for its data: returns the R2T.
pdu::R2T pending_write(Session& s, uint16_t port, uint32_t len, uint16_t cid) {
  pdu::R2T r2t{};
  std::string err = s.open(port, kNqn);
  EXPECT_EQ(err, "");
  if (!err.empty()) return r2t;
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, len / 512, Xfer::kTransport, len);
  sqe.cid = cid;
  EXPECT_TRUE(s.io.send_bytes(s.io.capsule_bytes(sqe)));
  Pdu p;
  EXPECT_EQ(s.io.recv_pdu(&p), RecvStatus::kOk) << s.io.last_error();
  EXPECT_EQ(p.type(), uint8_t(pdu::Type::kR2T));
  r2t = p.as<pdu::R2T>();
  EXPECT_EQ(r2t.cccid, cid);
  EXPECT_EQ(r2t.r2tl, len);
  return r2t;
}

bool ic_then(RawClient& c, uint16_t port, uint8_t digest = 0) {
  EXPECT_TRUE(c.connect(port)) << c.last_error();
  EXPECT_TRUE(c.ic(digest)) << c.last_error();
  return !::testing::Test::HasFailure();
}

class MalformedTest : public TargetFixture {
 protected:
  void SetUp() override {
    TargetFixture::SetUp();
    ASSERT_EQ(keeper_.open(port_, kNqn), "");
  }

  // Runs one case: the bad PDU on its own connection, then the keeper's verified I/O.
  void run(const Case& k) {
    SCOPED_TRACE(k.name);
    RawClient c;  // used unless the case set up a Session (then its I/O queue is the victim)
    Session s;
    auto bytes = k.build(c, s);
    if (::testing::Test::HasFatalFailure() || bytes.empty()) return;
    RawClient& victim = c.fd() >= 0 ? c : s.io;
    ASSERT_TRUE(victim.send_bytes(bytes)) << victim.last_error();
    Pdu p;
    RecvStatus st = victim.recv_pdu(&p, 1500);
    ASSERT_EQ(st, RecvStatus::kOk)
        << "no C2HTermReq: " << recv_status_name(st) << ": " << victim.last_error();
    if (p.type() == uint8_t(pdu::Type::kCapsuleResp)) {
      auto cqe = p.as<pdu::CapsuleResp>().cqe;
      FAIL() << "answered with a CapsuleResp (cid " << cqe.cid << ", status 0x" << std::hex
             << cqe.status_code() << ") instead of a C2HTermReq";
    }
    ASSERT_EQ(p.type(), uint8_t(pdu::Type::kC2HTermReq)) << pdu::type_name(p.type());
    auto t = p.as<pdu::TermReq>();
    EXPECT_EQ(t.ch.hlen, 24);
    EXPECT_EQ(t.ch.flags, 0);
    EXPECT_EQ(t.fes, k.fes);
    if (k.fei != kAnyFei) {
      EXPECT_EQ(t.fei, k.fei);
    }
    // The offending header is quoted (at least its common header).
    ASSERT_GE(p.data_len(), 8u);
    EXPECT_LE(p.data_len(), 128u);
    EXPECT_EQ(std::memcmp(p.data(), bytes.data(), std::min<size_t>(8, bytes.size())), 0)
        << "quoted header differs from the one sent";
    EXPECT_TRUE(victim.wait_closed(2000))
        << "still open after the C2HTermReq: " << victim.last_error();
    // Another host is not disturbed.
    EXPECT_EQ(write_read(keeper_.io, 4096 + (seed_ % 64) * 16, 8192, seed_, seed_ % 2), "");
    ++seed_;
  }

  Session keeper_;
  uint32_t seed_ = 1;
};

// ---------------------------------------------------------------------------- before IC

TEST_F(MalformedTest, BeforeIc) {
  const Case cases[] = {
      {"CapsuleCmd before ICReq",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         return keep_alive_capsule(c);
       },
       fes::kPduSequenceError, 0},
      {"H2CData before ICReq",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         uint8_t d[512] = {};
         return c.h2c_bytes(1, 0, 0, d, sizeof(d), true);
       },
       fes::kPduSequenceError, 0},
      {"ICReq with hpda 1",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         return RawClient::icreq_bytes(0, 0, 1);
       },
       fes::kUnsupportedParameter, offsetof(pdu::ICReq, hpda)},
      {"ICReq with pfv 1",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         auto b = RawClient::icreq_bytes(0);
         b[8] = 1;
         return b;
       },
       fes::kUnsupportedParameter, offsetof(pdu::ICReq, pfv)},
      {"ICReq with reserved digest bits",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         return RawClient::icreq_bytes(0x04);
       },
       fes::kInvalidHeaderField, offsetof(pdu::ICReq, digest)},
      {"ICReq with hlen 64",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         auto b = RawClient::icreq_bytes(0);
         b[2] = 64;
         return b;
       },
       fes::kInvalidHeaderField, 2},
      {"ICReq with plen 64",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         auto b = RawClient::icreq_bytes(0);
         b[4] = 64;
         return b;
       },
       fes::kInvalidHeaderField, 4},
      {"ICResp sent by the host",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         auto b = RawClient::icreq_bytes(0);
         b[0] = 0x01;
         return b;
       },
       fes::kInvalidHeaderField, 0},
      {"unknown type 0xFF before ICReq",
       [&](RawClient& c, Session&) {
         EXPECT_TRUE(c.connect(port_));
         return header8(0xFF, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
  };
  for (auto& k : cases) run(k);
}

// ---------------------------------------------------------------------------- common header

TEST_F(MalformedTest, CommonHeaderAfterIc) {
  const Case cases[] = {
      {"CapsuleCmd with hlen 64",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         b[2] = 64;
         return b;
       },
       fes::kInvalidHeaderField, 2},
      {"CapsuleCmd with hlen 128",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         b[2] = 128;
         b.resize(128);
         uint32_t plen = 128;
         std::memcpy(&b[4], &plen, 4);
         return b;
       },
       fes::kInvalidHeaderField, 2},
      {"CapsuleCmd with plen 40 (< hlen)",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         uint32_t plen = 40;
         std::memcpy(&b[4], &plen, 4);
         b.resize(40);
         return b;
       },
       fes::kInvalidHeaderField, 4},
      {"CapsuleCmd with plen 0x7fffffff",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         b[3] = 72;  // pdo: data would follow
         uint32_t plen = 0x7fffffff;
         std::memcpy(&b[4], &plen, 4);
         b.resize(72 + 512, 0);
         return b;
       },
       fes::kInvalidHeaderField, 4},
      {"CapsuleCmd with plen 0xffffffff",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         b[3] = 72;
         uint32_t plen = 0xffffffff;
         std::memcpy(&b[4], &plen, 4);
         return b;
       },
       fes::kInvalidHeaderField, 4},
      {"CapsuleCmd with pdo inside the header",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         uint8_t d[512] = {};
         auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, 0, 1, Xfer::kInCapsule, 512);
         auto b = c.capsule_bytes(sqe, d, 512);
         b[3] = 40;
         return b;
       },
       fes::kInvalidHeaderField, 3},
      {"HDGSTF set, header digests not negotiated",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = keep_alive_capsule(c);
         b[1] |= pdu::flag::kHdgst;
         return b;
       },
       fes::kInvalidHeaderField, 1},
      {"unknown type 0x08",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0x08, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"unknown type 0x0A",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0x0A, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"unknown type 0xFF",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0xFF, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"CapsuleResp sent by the host",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0x05, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"R2T sent by the host",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0x09, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"C2HData sent by the host",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         auto b = header8(0x07, pdu::flag::kDataLast, 24, 24, 24 + 512, 24 + 512);
         return b;
       },
       fes::kInvalidHeaderField, 0},
      {"C2HTermReq sent by the host",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return header8(0x03, 0, 24, 0, 24, 24);
       },
       fes::kInvalidHeaderField, 0},
      {"second ICReq",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         return RawClient::icreq_bytes(0);
       },
       fes::kPduSequenceError, 0},
      {"second ICReq after Connect",
       [&](RawClient& c, Session&) {
         ic_then(c, port_);
         Result r = c.connect_queue(0, kNqn);
         EXPECT_TRUE(r.ok()) << r.describe();
         return RawClient::icreq_bytes(0);
       },
       fes::kPduSequenceError, 0},
  };
  for (auto& k : cases) run(k);
}

TEST_F(MalformedTest, HeaderDigest) {
  const Case cases[] = {
      {"bad header digest on a CapsuleCmd",
       [&](RawClient& c, Session&) {
         ic_then(c, port_, pdu::kDigestHeader);
         auto b = keep_alive_capsule(c);
         b[72] ^= 0x01;
         return b;
       },
       fes::kHeaderDigestError, kAnyFei},
      {"bad header digest on a Connect (with data)",
       [&](RawClient& c, Session&) {
         ic_then(c, port_, pdu::kDigestHeader | pdu::kDigestData);
         auto sqe = nvme::make_connect(0, 31, 0);
         auto cd = RawClient::connect_data(kNqn, kHostNqn, 0xFFFF);
         auto b = c.capsule_bytes(sqe, cd.data(), uint32_t(cd.size()));
         b[75] ^= 0x80;
         return b;
       },
       fes::kHeaderDigestError, kAnyFei},
      {"header digest missing (HDGSTF clear) when negotiated",
       [&](RawClient& c, Session&) {
         ic_then(c, port_, pdu::kDigestHeader);
         c.set_digests({});
         return keep_alive_capsule(c);
       },
       fes::kInvalidHeaderField, 1},
      {"data digest missing (DDGSTF clear) when negotiated",
       [&](RawClient& c, Session&) {
         ic_then(c, port_, pdu::kDigestData);
         c.set_digests({});
         auto sqe = nvme::make_connect(0, 31, 0);
         auto cd = RawClient::connect_data(kNqn, kHostNqn, 0xFFFF);
         return c.capsule_bytes(sqe, cd.data(), uint32_t(cd.size()));
       },
       fes::kInvalidHeaderField, 1},
  };
  for (auto& k : cases) run(k);
}

// ---------------------------------------------------------------------------- H2CData

TEST_F(MalformedTest, H2CData) {
  uint8_t payload[kMaxH2C + 4096] = {};
  const Case cases[] = {
      {"H2CData without an R2T (unknown ttag)",
       [&](RawClient&, Session& s) {
         EXPECT_EQ(s.open(port_, kNqn), "");
         return s.io.h2c_bytes(5, 17, 0, payload, 512, true);
       },
       fes::kInvalidHeaderField, offsetof(pdu::DataHeader, ttag)},
      {"H2CData with ttag out of range",
       [&](RawClient&, Session& s) {
         EXPECT_EQ(s.open(port_, kNqn), "");
         return s.io.h2c_bytes(5, 0xFFFF, 0, payload, 512, true);
       },
       fes::kInvalidHeaderField, offsetof(pdu::DataHeader, ttag)},
      {"H2CData with the wrong cccid",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 65536, 33);
         return s.io.h2c_bytes(34, r2t.ttag, 0, payload, 4096, false);
       },
       fes::kInvalidHeaderField, offsetof(pdu::DataHeader, cccid)},
      {"H2CData with datao at the end of the R2T",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 8192, 35);
         return s.io.h2c_bytes(35, r2t.ttag, 8192, payload, 512, true);
       },
       fes::kDataOutOfRange, kAnyFei},
      {"H2CData with datao past the R2T",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 8192, 36);
         return s.io.h2c_bytes(36, r2t.ttag, 1u << 20, payload, 512, true);
       },
       fes::kDataOutOfRange, kAnyFei},
      {"H2CData with datao + datal beyond the R2T length",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 4096, 37);
         return s.io.h2c_bytes(37, r2t.ttag, 0, payload, 8192, true);
       },
       fes::kDataOutOfRange, kAnyFei},
      {"H2CData 16 bytes larger than maxh2cdata",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 65536, 38);
         return s.io.h2c_bytes(38, r2t.ttag, 0, payload, kMaxH2C + 16, false);
       },
       fes::kDataLimitExceeded, offsetof(pdu::DataHeader, datal)},
  };
  for (auto& k : cases) run(k);
}

// DATAL larger than MAXH2CDATA is "Data Transfer Limit Exceeded" (FES 05h) however large the
// excess; the target only reports it for small excesses.
TEST_F(MalformedTest, H2CDataFarLargerThanMaxH2CDataIsDataLimitExceeded) {
  uint8_t payload[kMaxH2C + 4096] = {};
  run({"H2CData 4 KiB larger than maxh2cdata",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 65536, 39);
         return s.io.h2c_bytes(39, r2t.ttag, 0, payload, kMaxH2C + 4096, false);
       },
       fes::kDataLimitExceeded, kAnyFei});
}

// DATAL must equal the payload the PDU carries (plen - hlen - digests - padding). The target
// trusts DATAL for its bookkeeping while the reader moves plen's bytes: the payload is dropped
// and the write "completes" with whatever the buffer held.
TEST_F(MalformedTest, H2CDataDatalLargerThanPayload) {
  uint8_t payload[8192] = {};
  run({"H2CData datal 8192 carrying 4096 bytes",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 8192, 40);
         auto b = s.io.h2c_bytes(40, r2t.ttag, 0, payload, 4096, true);
         uint32_t datal = 8192;
         std::memcpy(&b[offsetof(pdu::DataHeader, datal)], &datal, 4);
         return b;
       },
       fes::kInvalidHeaderField, kAnyFei});
}

TEST_F(MalformedTest, H2CDataDatalSmallerThanPayload) {
  uint8_t payload[8192] = {};
  run({"H2CData datal 4096 carrying 8192 bytes",
       [&](RawClient&, Session& s) {
         auto r2t = pending_write(s, port_, 8192, 41);
         auto b = s.io.h2c_bytes(41, r2t.ttag, 0, payload, 8192, true);
         uint32_t datal = 4096;
         std::memcpy(&b[offsetof(pdu::DataHeader, datal)], &datal, 4);
         return b;
       },
       fes::kInvalidHeaderField, kAnyFei});
}

// A host TermReq is never answered with a TermReq: the target just closes.
TEST_F(MalformedTest, H2CTermReqClosesWithoutAnswer) {
  RawClient c;
  ASSERT_TRUE(ic_then(c, port_));
  auto b = header8(0x02, 0, 24, 0, 24 + 8, 24 + 8);
  uint16_t f = fes::kInvalidHeaderField;
  std::memcpy(&b[8], &f, 2);
  ASSERT_TRUE(c.send_bytes(b));
  Pdu p;
  RecvStatus st = c.recv_pdu(&p, 1500);
  EXPECT_TRUE(st == RecvStatus::kClosed || st == RecvStatus::kReset)
      << recv_status_name(st) << (st == RecvStatus::kOk ? pdu::type_name(p.type()) : "");
  EXPECT_EQ(write_read(keeper_.io, 0, 4096, 99, true), "");
}

// Garbage on many connections at once, then the keeper still works and the target still
// accepts new hosts.
TEST_F(MalformedTest, ManyBadPeersAtOnce) {
  std::vector<std::unique_ptr<RawClient>> peers;
  for (int i = 0; i < 24; ++i) {
    auto c = std::make_unique<RawClient>();
    ASSERT_TRUE(c->connect(port_)) << c->last_error();
    if (i % 2) {
      ASSERT_TRUE(c->ic(0)) << c->last_error();
    }
    auto junk = pattern(300 + i * 17, 1000 + i);
    ASSERT_TRUE(c->send_bytes(junk));
    peers.push_back(std::move(c));
  }
  for (auto& c : peers) EXPECT_TRUE(c->wait_closed(2000)) << c->last_error();
  EXPECT_EQ(write_read(keeper_.io, 64, 65536, 7, false), "");
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  EXPECT_EQ(write_read(s.io, 128, 4096, 8, true), "");
}

}  // namespace
}  // namespace sens::testing
