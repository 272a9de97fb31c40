// Randomized headers through check_common: never crash, and whatever is accepted must
// describe a self-consistent PDU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "wire/pdu.h"
#include "wire_test_util.h"

namespace sens::pdu {
namespace {

using namespace sens::pdu::testing;

// Interesting plen values around the boundaries check_common cares about.
uint32_t edge_plen(std::mt19937_64& rng) {
  static constexpr uint32_t kEdges[] = {
      0,  1,  7,   8,   23,  24,  25,  27,  28,  29,  32,   71,    72,       73,        76,
      77, 80, 127, 128, 129, 151, 152, 153, 255, 256, 4096, 65536, 1u << 20, 0xFFFFFFFF};
  uint32_t v = kEdges[rng() % std::size(kEdges)];
  if (rng() % 2) v += uint32_t(rng() % 9) - 4;
  return v;
}

void check_all_ways(const CommonHeader& ch, uint32_t max_plen, uint64_t& accepted) {
  for (Receiver r : {Receiver::kController, Receiver::kHost}) {
    for (Digests d : kDigestCombos) {
      for (bool before : {false, true}) {
        const Check c = check_common(ch, r, d, max_plen, before);
        if (!c) {
          ASSERT_TRUE(c.fes == fes::kInvalidHeaderField || c.fes == fes::kPduSequenceError);
          ASSERT_LE(c.fei, 4u);
          ASSERT_NE(c.why, nullptr);
          continue;
        }
        ++accepted;
        const Layout l = layout_of(ch);
        ASSERT_TRUE(flows_to(ch.type, r));
        ASSERT_EQ(ch.hlen, expected_hlen(ch.type));
        ASSERT_LE(uint64_t(ch.plen), max_plen);
        ASSERT_GE(l.header_len, ch.hlen);
        ASSERT_LE(l.header_len, ch.plen);
        ASSERT_LE(l.header_len, l.data_offset);
        ASSERT_EQ(uint64_t(l.data_offset) + l.data_len + l.trailer_len, ch.plen);
        if (l.data_len == 0) {
          ASSERT_EQ(l.trailer_len, 0u);
        }
        if (l.trailer_len) {
          ASSERT_TRUE(d.data && carries_data(ch.type));
        }
        if (carries_data(ch.type) && l.data_len > 0) {
          ASSERT_EQ(l.trailer_len, d.data ? 4u : 0u);
        }
        ASSERT_EQ(l.header_len, ch.hlen + ((d.header && ch.type > 0x03) ? 4u : 0u));
        if (ch.type == 0x06 || ch.type == 0x07) {
          ASSERT_GT(l.data_len, 0u);
        }
      }
    }
  }
}

TEST(PduFuzz, RandomAndMutatedHeaders) {
  std::mt19937_64 rng(0x5e45'f022);
  uint64_t accepted = 0;
  constexpr int kIterations = 200'000;
  for (int i = 0; i < kIterations; ++i) {
    CommonHeader ch;
    if (i % 4 == 0) {
      // Pure noise.
      const uint64_t bits = rng();
      std::memcpy(&ch, &bits, sizeof(ch));
    } else {
      // A valid header, then a few bytes, bits or fields disturbed.
      const uint8_t t = kKnownTypes[rng() % std::size(kKnownTypes)];
      const Digests d = kDigestCombos[rng() % 4];
      const HeaderSlot s = valid_header(t, d, uint32_t(rng() % 3 == 0 ? 0 : rng() % 9000));
      ch = s.ch;
      auto* b = reinterpret_cast<uint8_t*>(&ch);
      const int mutations = int(rng() % 3);
      for (int m = 0; m < mutations; ++m) {
        switch (rng() % 5) {
          case 0:
            b[rng() % 8] ^= uint8_t(1u << (rng() % 8));
            break;
          case 1:
            b[rng() % 8] = uint8_t(rng());
            break;
          case 2:
            ch.plen = edge_plen(rng);
            break;
          case 3:
            ch.pdo = uint8_t(rng() % 2 ? rng() % 100 : ch.hlen + 4 * (rng() % 3));
            break;
          case 4:
            ch.flags ^= uint8_t(1u << (rng() % 4));
            break;
        }
      }
    }
    const uint32_t max_plen = rng() % 4 == 0 ? uint32_t(rng() % 10000) : kMaxPlen;
    check_all_ways(ch, max_plen, accepted);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "header " << int(ch.type) << "/" << int(ch.flags) << "/" << int(ch.hlen)
                    << "/" << int(ch.pdo) << "/" << ch.plen << " max " << max_plen;
      return;
    }
  }
  // The mutated half must exercise the accepting path too, not only refusals.
  EXPECT_GT(accepted, uint64_t(kIterations) / 4);
}

TEST(PduFuzz, ICBodies) {
  std::mt19937_64 rng(42);
  int ok_req = 0, ok_resp = 0;
  for (int i = 0; i < 20'000; ++i) {
    ICReq req;
    build_icreq(req, 0, 0);
    auto* b = reinterpret_cast<uint8_t*>(&req);
    for (int m = 0; m < 2; ++m) b[8 + rng() % 8] = uint8_t(rng() % 3 ? rng() % 4 : rng());
    const Check c = check_icreq(req);
    if (c) {
      ++ok_req;
      ASSERT_EQ(req.pfv, 0);
      ASSERT_LE(req.hpda, 31);
      ASSERT_EQ(req.digest & ~3, 0);
    } else {
      ASSERT_TRUE(c.fei == 8 || c.fei == 10 || c.fei == 11) << c.fei;
    }
    ICResp resp;
    std::memcpy(&resp, &req, sizeof(resp));
    const Check r = check_icresp(resp);
    if (r) {
      ++ok_resp;
      ASSERT_GE(resp.maxh2cdata, 4096u);
      ASSERT_EQ(resp.maxh2cdata % 4, 0u);
    } else {
      ASSERT_TRUE(r.fei == 8 || r.fei == 10 || r.fei == 11 || r.fei == 12) << r.fei;
    }
  }
  EXPECT_GT(ok_req, 0);
  EXPECT_GE(ok_req, ok_resp);
}

}  // namespace
}  // namespace sens::pdu
