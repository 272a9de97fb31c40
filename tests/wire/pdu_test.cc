#include "wire/pdu.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "wire_test_util.h"

namespace sens::pdu {
namespace {

using namespace sens::pdu::testing;

// ---- type table ----

TEST(PduTypes, NamesHlenDirectionData) {
  struct Row {
    uint8_t type;
    const char* name;
    uint8_t hlen;
    Receiver to;
    bool data;
  };
  const Row rows[] = {
      {0x00, "ICReq", 128, Receiver::kController, false},
      {0x01, "ICResp", 128, Receiver::kHost, false},
      {0x02, "H2CTermReq", 24, Receiver::kController, false},
      {0x03, "C2HTermReq", 24, Receiver::kHost, false},
      {0x04, "CapsuleCmd", 72, Receiver::kController, true},
      {0x05, "CapsuleResp", 24, Receiver::kHost, false},
      {0x06, "H2CData", 24, Receiver::kController, true},
      {0x07, "C2HData", 24, Receiver::kHost, true},
      {0x09, "R2T", 24, Receiver::kHost, false},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    EXPECT_STREQ(type_name(r.type), r.name);
    EXPECT_EQ(expected_hlen(r.type), r.hlen);
    EXPECT_TRUE(flows_to(r.type, r.to));
    EXPECT_FALSE(flows_to(r.type, other(r.to)));
    EXPECT_EQ(carries_data(r.type), r.data);
  }
  for (int t = 0x08; t <= 0xFF; ++t) {
    if (t == 0x09) continue;
    EXPECT_EQ(expected_hlen(uint8_t(t)), 0) << t;
    EXPECT_FALSE(flows_to(uint8_t(t), Receiver::kController)) << t;
    EXPECT_FALSE(flows_to(uint8_t(t), Receiver::kHost)) << t;
    EXPECT_FALSE(carries_data(uint8_t(t))) << t;
    EXPECT_NE(type_name(uint8_t(t)), nullptr);
  }
}

TEST(PduTypes, WireOffsets) {
  EXPECT_EQ(offsetof(CommonHeader, plen), 4u);
  EXPECT_EQ(offsetof(ICReq, pfv), 8u);
  EXPECT_EQ(offsetof(ICReq, hpda), 10u);
  EXPECT_EQ(offsetof(ICReq, digest), 11u);
  EXPECT_EQ(offsetof(ICReq, maxr2t), 12u);
  EXPECT_EQ(offsetof(ICResp, cpda), 10u);
  EXPECT_EQ(offsetof(ICResp, maxh2cdata), 12u);
  EXPECT_EQ(offsetof(TermReq, fes), 8u);
  EXPECT_EQ(offsetof(TermReq, fei), 10u);
  EXPECT_EQ(offsetof(CapsuleCmd, sqe), 8u);
  EXPECT_EQ(offsetof(CapsuleResp, cqe), 8u);
  EXPECT_EQ(offsetof(DataHeader, cccid), 8u);
  EXPECT_EQ(offsetof(DataHeader, ttag), 10u);
  EXPECT_EQ(offsetof(DataHeader, datao), 12u);
  EXPECT_EQ(offsetof(DataHeader, datal), 16u);
  EXPECT_EQ(offsetof(R2T, cccid), 8u);
  EXPECT_EQ(offsetof(R2T, ttag), 10u);
  EXPECT_EQ(offsetof(R2T, r2to), 12u);
  EXPECT_EQ(offsetof(R2T, r2tl), 16u);
  EXPECT_GE(sizeof(HeaderSlot), kTermReqHlen + kTermReqMaxData);
  EXPECT_GE(sizeof(HeaderSlot), kMaxHlen + kDigestLen);
}

// ---- round trips: build -> finish_header -> check_common -> layout_of -> fields ----

// Checks the common header and layout of a built PDU and its header digest, if any.
Layout round_trip(HeaderSlot& s, Digests d, uint32_t expect_data, bool expect_hdgst,
                  bool expect_ddgst) {
  const uint32_t hlen = s.ch.hlen;
  const uint32_t header_len = finish_header(s, d);
  EXPECT_EQ(header_len, hlen + (expect_hdgst ? 4u : 0u));
  const Check c = check_valid_side(s.ch, d);
  EXPECT_TRUE(c) << (c.why ? c.why : "");
  const Layout l = layout_of(s.ch);
  EXPECT_EQ(l.header_len, header_len);
  EXPECT_EQ(l.data_len, expect_data);
  EXPECT_EQ(l.trailer_len, expect_ddgst ? 4u : 0u);
  EXPECT_EQ(l.data_offset + l.data_len + l.trailer_len, s.ch.plen);
  EXPECT_GE(l.data_offset, l.header_len);
  EXPECT_EQ(bool(s.ch.flags & flag::kHdgst), expect_hdgst);
  EXPECT_EQ(bool(s.ch.flags & flag::kDdgst), expect_ddgst);
  if (expect_hdgst) {
    EXPECT_TRUE(header_digest_ok(s.bytes, hlen));
    EXPECT_EQ(rd<uint32_t>(s.bytes, hlen), crc32c(s.bytes, hlen));
  }
  // Every receiver-side digest combination other than the negotiated one must refuse the PDU
  // whenever it would change what the flags must say.
  return l;
}

TEST(PduRoundTrip, ICReqAndICResp) {
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    HeaderSlot s;
    build_icreq(s.icreq, kDigestHeader | kDigestData, 31);
    round_trip(s, d, 0, false, false);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 0), 0x00);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 1), 0x00);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 2), 128);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 3), 0);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 4), 128u);
    EXPECT_EQ(rd<uint16_t>(s.bytes, 8), 0);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 10), 0);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 11), 0x03);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 12), 31u);
    for (int i = 16; i < 128; ++i) EXPECT_EQ(s.bytes[i], 0) << i;
    EXPECT_TRUE(check_icreq(s.icreq));

    build_icresp(s.icresp, kDigestData, 4u << 20);
    round_trip(s, d, 0, false, false);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 0), 0x01);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 10), 0);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 11), 0x02);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 12), 4u << 20);
    EXPECT_TRUE(check_icresp(s.icresp));
  }
}

TEST(PduRoundTrip, CapsuleCmd) {
  nvme::Sqe sqe{};
  for (int i = 0; i < 64; ++i) reinterpret_cast<uint8_t*>(&sqe)[i] = uint8_t(i * 7 + 1);
  for (Digests d : kDigestCombos) {
    for (uint32_t len : {0u, 1u, 4096u, 8192u}) {
      SCOPED_TRACE(describe(d) + " len=" + std::to_string(len));
      HeaderSlot s;
      std::memset(&s, 0xEE, sizeof(s));
      build_capsule_cmd(s.cmd, sqe, len, d);
      const bool dd = d.data && len > 0;
      const Layout l = round_trip(s, d, len, d.header, dd);
      const uint32_t hd = d.header ? 4 : 0;
      EXPECT_EQ(s.ch.type, 0x04);
      EXPECT_EQ(s.ch.hlen, 72);
      EXPECT_EQ(s.ch.pdo, len ? 72 + hd : 0);
      EXPECT_EQ(s.ch.plen, 72 + hd + len + (dd ? 4 : 0));
      if (len) {
        EXPECT_EQ(l.data_offset, 72 + hd);
      }
      EXPECT_EQ(std::memcmp(s.bytes + 8, &sqe, 64), 0);
    }
  }
}

TEST(PduRoundTrip, CapsuleResp) {
  nvme::Cqe cqe{};
  cqe.dw0 = 0x11223344;
  cqe.sqhd = 7;
  cqe.sqid = 2;
  cqe.cid = 0xBEEF;
  cqe.status = 0x80 << 1;
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    HeaderSlot s;
    std::memset(&s, 0xEE, sizeof(s));
    build_capsule_resp(s.resp, cqe, d);
    round_trip(s, d, 0, d.header, false);
    EXPECT_EQ(s.ch.type, 0x05);
    EXPECT_EQ(s.ch.pdo, 0);
    EXPECT_EQ(s.ch.plen, 24u + (d.header ? 4 : 0));
    EXPECT_EQ(std::memcmp(s.bytes + 8, &cqe, 16), 0);
    EXPECT_EQ(rd<uint16_t>(s.bytes, 8 + 12), 0xBEEF);
  }
}

TEST(PduRoundTrip, DataPdus) {
  for (Digests d : kDigestCombos) {
    for (Type type : {Type::kH2CData, Type::kC2HData}) {
      for (uint8_t extra :
           {uint8_t(0), flag::kDataLast, uint8_t(flag::kDataLast | flag::kDataSuccess)}) {
        const bool h2c = type == Type::kH2CData;
        SCOPED_TRACE(describe(d) + (h2c ? " H2C" : " C2H") + " extra=" + std::to_string(extra));
        HeaderSlot s;
        std::memset(&s, 0xEE, sizeof(s));
        build_data(s.data, type, 0x1234, 0x5678, 0x10000, 3000, extra, d);
        round_trip(s, d, 3000, d.header, d.data);
        const uint8_t want_extra = h2c ? (extra & flag::kDataLast) : extra;
        EXPECT_EQ(s.ch.flags & (flag::kDataLast | flag::kDataSuccess), want_extra);
        EXPECT_EQ(rd<uint16_t>(s.bytes, 8), 0x1234);
        EXPECT_EQ(rd<uint16_t>(s.bytes, 10), h2c ? 0x5678 : 0);  // ttag reserved in C2HData
        EXPECT_EQ(rd<uint32_t>(s.bytes, 12), 0x10000u);
        EXPECT_EQ(rd<uint32_t>(s.bytes, 16), 3000u);
        EXPECT_EQ(rd<uint32_t>(s.bytes, 20), 0u);
        EXPECT_EQ(s.ch.pdo, 24 + (d.header ? 4 : 0));
      }
    }
  }
}

TEST(PduRoundTrip, R2T) {
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    HeaderSlot s;
    std::memset(&s, 0xEE, sizeof(s));
    build_r2t(s.r2t, 0x0102, 0x0304, 0x05060708, 0x090A0B0C, d);
    round_trip(s, d, 0, d.header, false);
    EXPECT_EQ(rd<uint8_t>(s.bytes, 0), 0x09);
    EXPECT_EQ(s.ch.plen, 24u + (d.header ? 4 : 0));
    EXPECT_EQ(rd<uint16_t>(s.bytes, 8), 0x0102);
    EXPECT_EQ(rd<uint16_t>(s.bytes, 10), 0x0304);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 12), 0x05060708u);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 16), 0x090A0B0Cu);
    EXPECT_EQ(rd<uint32_t>(s.bytes, 20), 0u);
  }
}

TEST(PduRoundTrip, TermReqQuotesOffendingHeader) {
  uint8_t bad[200];
  for (int i = 0; i < 200; ++i) bad[i] = uint8_t(0x80 + i);
  for (Type type : {Type::kH2CTermReq, Type::kC2HTermReq}) {
    for (uint32_t n : {0u, 8u, 72u, 128u, 129u, 200u}) {
      for (Digests d : kDigestCombos) {
        SCOPED_TRACE(std::to_string(n) + " " + describe(d));
        HeaderSlot s;
        std::memset(&s, 0xEE, sizeof(s));
        const uint32_t q = n < 128 ? n : 128;
        EXPECT_EQ(build_term_req(s, type, fes::kInvalidHeaderField, 2, bad, n), 24 + q);
        EXPECT_EQ(finish_header(s, d), 24u);  // never a header digest
        EXPECT_EQ(s.ch.flags, 0);
        EXPECT_EQ(s.ch.hlen, 24);
        EXPECT_EQ(s.ch.pdo, 0);
        EXPECT_EQ(s.ch.plen, 24 + q);
        EXPECT_EQ(rd<uint16_t>(s.term_bytes, 8), fes::kInvalidHeaderField);
        EXPECT_EQ(rd<uint32_t>(s.term_bytes, 10), 2u);
        for (int i = 14; i < 24; ++i) EXPECT_EQ(s.term_bytes[i], 0) << i;
        EXPECT_EQ(std::memcmp(s.term_bytes + 24, bad, q), 0);
        for (uint32_t i = 24 + q; i < sizeof(s.term_bytes); ++i) EXPECT_EQ(s.term_bytes[i], 0);
        const Check c = check_valid_side(s.ch, d);
        EXPECT_TRUE(c) << (c.why ? c.why : "");
        const Layout l = layout_of(s.ch);
        EXPECT_EQ(l.header_len, 24u);
        EXPECT_EQ(l.data_offset, 24u);
        EXPECT_EQ(l.data_len, q);
        EXPECT_EQ(l.trailer_len, 0u);
      }
    }
  }
}

TEST(PduRoundTrip, TermReqQuotesHeaderFromItsOwnSlot) {
  HeaderSlot s;
  nvme::Sqe sqe{};
  sqe.cid = 0x4242;
  build_capsule_cmd(s.cmd, sqe, 0, {});
  s.ch.hlen = 70;  // the "offending" field
  uint8_t copy[72];
  std::memcpy(copy, s.bytes, 72);
  EXPECT_EQ(build_term_req(s, Type::kC2HTermReq, fes::kInvalidHeaderField, 2, s.bytes, 72), 96u);
  EXPECT_EQ(std::memcmp(s.term_bytes + 24, copy, 72), 0);
  EXPECT_EQ(s.term.fei, 2u);
}

TEST(PduRoundTrip, TermReqWithNullQuote) {
  HeaderSlot s;
  EXPECT_EQ(build_term_req(s, Type::kH2CTermReq, fes::kPduSequenceError, 0, nullptr, 50), 24u);
  EXPECT_EQ(s.ch.plen, 24u);
}

// ---- header digest ----

TEST(PduDigest, HeaderDigestGoodAndBad) {
  for (uint8_t t : {uint8_t(0x04), uint8_t(0x05), uint8_t(0x06), uint8_t(0x07), uint8_t(0x09)}) {
    SCOPED_TRACE(type_name(t));
    HeaderSlot s = valid_header(t, {true, false});
    const uint32_t hlen = s.ch.hlen;
    ASSERT_EQ(finish_header(s, {true, false}), hlen + 4);
    EXPECT_TRUE(header_digest_ok(s.bytes, hlen));
    for (uint32_t byte : {0u, 1u, 4u, hlen - 1, hlen, hlen + 3}) {
      s.bytes[byte] ^= 0x10;
      EXPECT_FALSE(header_digest_ok(s.bytes, hlen)) << byte;
      s.bytes[byte] ^= 0x10;
    }
    EXPECT_TRUE(header_digest_ok(s.bytes, hlen));
  }
}

TEST(PduDigest, FinishHeaderWithoutDigests) {
  HeaderSlot s = valid_header(0x05, {});
  s.bytes[24] = 0x77;
  EXPECT_EQ(finish_header(s, {}), 24u);
  EXPECT_EQ(s.bytes[24], 0x77);  // nothing written behind the header
  HeaderSlot ic = valid_header(0x00, {});
  ic.bytes[128] = 0x77;
  EXPECT_EQ(finish_header(ic, {true, true}), 128u);
  EXPECT_EQ(ic.bytes[128], 0x77);
}

// ---- ICReq / ICResp bodies ----

TEST(PduIC, ICReqFields) {
  ICReq req;
  build_icreq(req, 0, 0);
  EXPECT_TRUE(check_icreq(req));
  req.maxr2t = 0xFFFFFFFF;
  EXPECT_TRUE(check_icreq(req));
  req.pfv = 1;
  expect_fail(check_icreq(req), fes::kUnsupportedParameter, 8);
  req.pfv = 0;
  req.hpda = 31;
  EXPECT_TRUE(check_icreq(req));
  req.hpda = 32;
  expect_fail(check_icreq(req), fes::kInvalidHeaderField, 10);
  req.hpda = 0;
  req.digest = 0x03;
  EXPECT_TRUE(check_icreq(req));
  req.digest = 0x04;
  expect_fail(check_icreq(req), fes::kInvalidHeaderField, 11);
}

TEST(PduIC, ICRespFields) {
  ICResp resp;
  build_icresp(resp, 0x03, 4096);
  EXPECT_TRUE(check_icresp(resp));
  resp.pfv = 0x100;
  expect_fail(check_icresp(resp), fes::kUnsupportedParameter, 8);
  resp.pfv = 0;
  resp.cpda = 32;
  expect_fail(check_icresp(resp), fes::kInvalidHeaderField, 10);
  resp.cpda = 0;
  resp.digest = 0x80;
  expect_fail(check_icresp(resp), fes::kInvalidHeaderField, 11);
  resp.digest = 0;
  for (uint32_t bad : {0u, 4u, 4092u, 4095u, 4098u, 131073u}) {
    resp.maxh2cdata = bad;
    expect_fail(check_icresp(resp), fes::kInvalidHeaderField, 12);
  }
  for (uint32_t good : {4096u, 4100u, 131072u, 4u << 20, 0xFFFFFFFCu}) {
    resp.maxh2cdata = good;
    EXPECT_TRUE(check_icresp(resp)) << good;
  }
}

}  // namespace
}  // namespace sens::pdu
