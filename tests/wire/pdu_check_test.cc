// check_common()'s refusals, one rule at a time (the round trips are in pdu_test.cc).
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

// ---- refusals ----

TEST(PduCheck, UnknownTypes) {
  for (int t = 0x08; t <= 0xFF; ++t) {
    if (t == 0x09) continue;
    for (Receiver r : {Receiver::kController, Receiver::kHost}) {
      for (bool before : {false, true}) {
        for (Digests d : kDigestCombos) {
          CommonHeader ch{uint8_t(t), 0, 24, 0, 24};
          expect_fail(check_common(ch, r, d, kMaxPlen, before), fes::kInvalidHeaderField, 0);
        }
      }
    }
  }
  CommonHeader ch{0x08, 0, 24, 0, 24};
  EXPECT_STREQ(check_common(ch, Receiver::kHost, {}, kMaxPlen).why, "unknown PDU type 0x08");
}

TEST(PduCheck, WrongDirection) {
  for (uint8_t t : kKnownTypes) {
    for (bool before : {false, true}) {
      for (Digests d : kDigestCombos) {
        SCOPED_TRACE(type_name(t));
        HeaderSlot s = valid_header(t, d);
        const Check c = check_common(s.ch, other(receiver_of(t)), d, kMaxPlen, before);
        expect_fail(c, fes::kInvalidHeaderField, 0);
      }
    }
  }
}

TEST(PduCheck, ConnectionSetupSequence) {
  // Before IC only the IC PDU (and a TermReq refusing it) may arrive.
  for (uint8_t t : kKnownTypes) {
    SCOPED_TRACE(type_name(t));
    HeaderSlot s = valid_header(t, {});
    const Receiver r = receiver_of(t);
    const Check before = check_common(s.ch, r, {}, kMaxPlen, true);
    const Check after = check_common(s.ch, r, {}, kMaxPlen, false);
    if (is_ic_type(t)) {
      EXPECT_TRUE(before) << before.why;
      expect_fail(after, fes::kPduSequenceError, 0);
    } else if (t == 0x02 || t == 0x03) {
      EXPECT_TRUE(before) << before.why;
      EXPECT_TRUE(after) << after.why;
    } else {
      expect_fail(before, fes::kPduSequenceError, 0);
      EXPECT_TRUE(after) << after.why;
    }
  }
}

TEST(PduCheck, WrongHlenPerType) {
  for (uint8_t t : kKnownTypes) {
    const uint8_t want = expected_hlen(t);
    for (Digests d : kDigestCombos) {
      for (int hlen : {0, 8, want - 1, want + 1, 128, 255}) {
        if (hlen == want) continue;
        SCOPED_TRACE(std::string(type_name(t)) + " hlen " + std::to_string(hlen));
        HeaderSlot s = valid_header(t, d);
        s.ch.hlen = uint8_t(hlen);
        expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 2);
      }
    }
  }
  HeaderSlot s = valid_header(0x04, {});
  s.ch.hlen = 70;
  EXPECT_STREQ(check_valid_side(s.ch, {}).why, "hlen 70 for CapsuleCmd, expected 72");
}

TEST(PduCheck, PlenTooSmallOrWrong) {
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    const uint32_t hd = d.header ? 4 : 0;
    for (uint8_t t : {uint8_t(0x00), uint8_t(0x01)}) {
      for (uint32_t plen : {0u, 8u, 127u, 129u, 132u}) {
        HeaderSlot s = valid_header(t, d);
        s.ch.plen = plen;
        expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 4);
      }
    }
    for (uint8_t t : {uint8_t(0x05), uint8_t(0x09)}) {
      for (uint32_t plen : {0u, 23u, 24u + hd - 1, 24u + hd + 1, 24u + hd + 4, 4096u}) {
        HeaderSlot s = valid_header(t, d);
        s.ch.plen = plen;
        expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 4);
      }
    }
    // CapsuleCmd without data, shorter than its header.
    for (uint32_t plen : {0u, 8u, 71u, 72u + hd - 1}) {
      if (plen == 72 + hd) continue;
      HeaderSlot s = valid_header(0x04, d, 0);
      s.ch.plen = plen;
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 4);
    }
  }
}

TEST(PduCheck, PlenAboveLimit) {
  for (Digests d : kDigestCombos) {
    for (uint8_t t : {uint8_t(0x04), uint8_t(0x06), uint8_t(0x07)}) {
      SCOPED_TRACE(std::string(type_name(t)) + " " + describe(d));
      HeaderSlot s = valid_header(t, d, 8192);
      EXPECT_TRUE(check_valid_side(s.ch, d, s.ch.plen));
      expect_fail(check_valid_side(s.ch, d, s.ch.plen - 1), fes::kInvalidHeaderField, 4);
      s.ch.plen = 0xFFFFFFFFu;
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 4);
    }
    // Even fixed-size PDUs honour the limit.
    HeaderSlot s = valid_header(0x05, d);
    expect_fail(check_valid_side(s.ch, d, 16), fes::kInvalidHeaderField, 4);
  }
}

TEST(PduCheck, PdoRules) {
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    const uint32_t hd = d.header ? 4 : 0;
    for (uint8_t t : {uint8_t(0x04), uint8_t(0x06), uint8_t(0x07)}) {
      const uint32_t full = expected_hlen(t) + hd;
      // Inside the header (or its digest).
      for (uint32_t pdo : {0u, 1u, full - 4, full - 1}) {
        HeaderSlot s = valid_header(t, d, 100);
        s.ch.pdo = uint8_t(pdo);
        expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 3);
      }
      // Past plen.
      HeaderSlot s = valid_header(t, d, 10);
      s.ch.pdo = uint8_t(s.ch.plen + 1);
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 3);
      // Padding the receiver tolerates: pdo beyond the header, plen grown to match.
      HeaderSlot p = valid_header(t, d, 10);
      p.ch.pdo = uint8_t(full + 8);
      p.ch.plen += 8;
      EXPECT_TRUE(check_valid_side(p.ch, d)) << check_valid_side(p.ch, d).why;
      EXPECT_EQ(layout_of(p.ch).data_len, 10u);
      EXPECT_EQ(layout_of(p.ch).data_offset, full + 8);
    }
    // pdo without data.
    for (uint8_t t : {uint8_t(0x02), uint8_t(0x03), uint8_t(0x04), uint8_t(0x05), uint8_t(0x09)}) {
      SCOPED_TRACE(type_name(t));
      HeaderSlot s = valid_header(t, d, 0);
      s.ch.pdo = expected_hlen(t);
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 3);
    }
    for (uint8_t t : {uint8_t(0x00), uint8_t(0x01)}) {
      HeaderSlot s = valid_header(t, d);
      s.ch.pdo = 128;
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 3);
    }
  }
}

TEST(PduCheck, ZeroLengthDataPdus) {
  for (Digests d : kDigestCombos) {
    for (uint8_t t : {uint8_t(0x06), uint8_t(0x07)}) {
      SCOPED_TRACE(std::string(type_name(t)) + " " + describe(d));
      const uint32_t hd = d.header ? 4 : 0;
      HeaderSlot s = valid_header(t, d, 1);
      // No bytes after the header at all.
      s.ch.pdo = 0;
      s.ch.flags &= ~flag::kDdgst;
      s.ch.plen = 24 + hd;
      expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 4);
      // Only a data digest after the header.
      if (d.data) {
        HeaderSlot g = valid_header(t, d, 1);
        g.ch.plen -= 1;
        expect_fail(check_valid_side(g.ch, d), fes::kInvalidHeaderField, 4);
      }
      // pdo == plen: nothing left for data.
      HeaderSlot e = valid_header(t, d, 8);
      e.ch.pdo = uint8_t(e.ch.plen - (d.data ? 4 : 0));
      expect_fail(check_valid_side(e.ch, d), fes::kInvalidHeaderField, 4);
    }
  }
  // A CapsuleCmd without data is fine.
  HeaderSlot c = valid_header(0x04, {true, true}, 0);
  EXPECT_TRUE(check_valid_side(c.ch, {true, true}));
}

TEST(PduCheck, DigestFlagMismatches) {
  const uint8_t digest_types[] = {0x04, 0x05, 0x06, 0x07, 0x09};
  for (Digests built : kDigestCombos) {
    for (Digests negotiated : kDigestCombos) {
      for (uint8_t t : digest_types) {
        SCOPED_TRACE(std::string(type_name(t)) + " built " + describe(built) + " negotiated " +
                     describe(negotiated));
        HeaderSlot s = valid_header(t, built, 64);
        const bool data = carries_data(t);
        const bool same =
            built.header == negotiated.header && (!data || built.data == negotiated.data);
        const Check c = check_valid_side(s.ch, negotiated);
        if (same)
          EXPECT_TRUE(c) << c.why;
        else
          expect_fail(c, fes::kInvalidHeaderField, 1);
      }
    }
  }
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    // DDGSTF on a PDU without data.
    HeaderSlot s = valid_header(0x04, d, 0);
    s.ch.flags |= flag::kDdgst;
    expect_fail(check_valid_side(s.ch, d), fes::kInvalidHeaderField, 1);
    // DDGSTF on types that never carry data.
    for (uint8_t t : {uint8_t(0x05), uint8_t(0x09)}) {
      HeaderSlot n = valid_header(t, d);
      n.ch.flags |= flag::kDdgst;
      expect_fail(check_valid_side(n.ch, d), fes::kInvalidHeaderField, 1);
    }
    // IC PDUs and TermReqs never carry digests, even when negotiated.
    for (uint8_t t : {uint8_t(0x00), uint8_t(0x01), uint8_t(0x02), uint8_t(0x03)}) {
      for (uint8_t f : {flag::kHdgst, flag::kDdgst}) {
        HeaderSlot n = valid_header(t, d);
        n.ch.flags |= f;
        expect_fail(check_valid_side(n.ch, d), fes::kInvalidHeaderField, 1);
      }
    }
  }
}

TEST(PduCheck, ReservedAndDataFlags) {
  for (Digests d : kDigestCombos) {
    SCOPED_TRACE(describe(d));
    auto with = [&](uint8_t t, uint8_t set, uint8_t clear = 0) {
      HeaderSlot s = valid_header(t, d);
      s.ch.flags = uint8_t((s.ch.flags & ~clear) | set);
      return check_valid_side(s.ch, d);
    };
    expect_fail(with(0x04, flag::kDataLast), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x05, flag::kDataLast), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x09, flag::kDataSuccess), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x06, flag::kDataSuccess), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x07, 0x10), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x06, 0x80), fes::kInvalidHeaderField, 1);
    expect_fail(with(0x07, flag::kDataSuccess, flag::kDataLast), fes::kInvalidHeaderField, 1);
    EXPECT_TRUE(with(0x07, flag::kDataSuccess));  // LAST already set
    EXPECT_TRUE(with(0x07, 0, flag::kDataLast));
    EXPECT_TRUE(with(0x06, 0, flag::kDataLast));
  }
}

TEST(PduCheck, TermReqPlenBounds) {
  for (uint8_t t : {uint8_t(0x02), uint8_t(0x03)}) {
    for (uint32_t plen = 0; plen < 300; ++plen) {
      HeaderSlot s = valid_header(t, {});
      s.ch.plen = plen;
      const Check c = check_valid_side(s.ch, {true, true});
      if (plen >= 24 && plen <= 152)
        EXPECT_TRUE(c) << c.why;
      else
        expect_fail(c, fes::kInvalidHeaderField, 4);
    }
    HeaderSlot s = valid_header(t, {});
    s.ch.plen = 0xFFFFFFFFu;
    expect_fail(check_valid_side(s.ch, {}), fes::kInvalidHeaderField, 4);
  }
}

TEST(PduCheck, LowestFieldReportedFirst) {
  HeaderSlot s = valid_header(0x04, {}, 100);
  s.ch.hlen = 71;
  s.ch.pdo = 1;
  s.ch.plen = 3;
  expect_fail(check_valid_side(s.ch, {}), fes::kInvalidHeaderField, 2);
  s.ch.flags = flag::kHdgst;
  expect_fail(check_valid_side(s.ch, {}), fes::kInvalidHeaderField, 1);
  s.ch.type = 0x08;
  expect_fail(check_valid_side(s.ch, {}), fes::kInvalidHeaderField, 0);
}

TEST(PduCheck, WhyStringsSurviveLaterChecks) {
  HeaderSlot a = valid_header(0x04, {});
  a.ch.hlen = 70;
  const Check first = check_valid_side(a.ch, {});
  HeaderSlot b = valid_header(0x05, {});
  b.ch.plen = 99;
  const Check second = check_valid_side(b.ch, {});
  EXPECT_STREQ(first.why, "hlen 70 for CapsuleCmd, expected 72");
  EXPECT_STREQ(second.why, "plen 99 for CapsuleResp, expected 24");
}

// check_common() accepts the usual header of a PDU without data with one comparison; every
// header near those (each field at, beside and far from its valid value) must get the same
// verdict, FEI and reason as the field-by-field check.
TEST(PduCheck, ShortcutAgreesWithTheFieldByFieldCheck) {
  int accepted = 0, compared = 0;
  for (int t : {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0xFF}) {
    for (int flags = 0; flags < 0x20; ++flags) {
      for (Digests d : kDigestCombos) {
        const uint32_t want = expected_hlen(uint8_t(t)) ? expected_hlen(uint8_t(t)) : 24;
        for (uint32_t hlen : {want, want - 1, want + 4, 0u}) {
          for (uint32_t pdo : {0u, want, want + 4, 1u}) {
            for (uint32_t plen : {want, want + 4, want + 8, want + 4100, 0u, kMaxPlen + 1}) {
              for (uint32_t max_plen : {kMaxPlen, want + 2}) {
                for (Receiver r : {Receiver::kController, Receiver::kHost}) {
                  for (bool before : {false, true}) {
                    const CommonHeader ch{uint8_t(t), uint8_t(flags), uint8_t(hlen), uint8_t(pdo),
                                          plen};
                    const Check fast = check_common(ch, r, d, max_plen, before);
                    const Check full = check_common_fields(ch, r, d, max_plen, before);
                    ++compared;
                    accepted += bool(full);
                    ASSERT_EQ(fast.fes, full.fes)
                        << "type " << t << " flags " << flags << " hlen " << hlen << " pdo "
                        << pdo << " plen " << plen << " max " << max_plen << ": " << full.why;
                    ASSERT_EQ(fast.fei, full.fei);
                    ASSERT_STREQ(fast.why, full.why);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 100);  // the valid headers are among those compared
  EXPECT_GT(compared, 100000);
}

}  // namespace
}  // namespace sens::pdu
