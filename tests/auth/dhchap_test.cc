// The DH-HMAC-CHAP computations against values computed independently: secrets written by
// `nvme gen-dhchap-key` (nvme-cli 2.4), responses and transforms by Python's hmac/hashlib
// (the formulas of NVMe Base 2.0 8.13.5.x), and the FFDHE exchange between two parties.
#include "auth/dhchap.h"

#include <gtest/gtest.h>

#include <string>

namespace sens::auth {
namespace {

std::string hex(const Bytes& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) s += {d[c >> 4], d[c & 15]};
  return s;
}

Bytes seq(uint8_t from, size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(from + i);
  return b;
}

constexpr const char* kHostNqn =
    "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
constexpr const char* kSubNqn = "nqn.2026-11.dev.sens:test";

TEST(Secret, ParsesWhatNvmeCliWrites) {
  std::string err;
  // nvme gen-dhchap-key --secret=000102..1f --hmac=0 --key-length=32
  auto s = parse_secret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:", &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->transform, 0);
  EXPECT_EQ(s->key, seq(0, 32));
  // --hmac=2 --key-length=48, and --hmac=3 --key-length=64 (random keys)
  s = parse_secret(
      "DHHC-1:02:gaXIkmPxEUbMpcu7KXGUA9JW6pVHjb3MzGj2DoigWZuZeRws6a0ORy8J19xTqBD2QkNHOQ==:", &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->transform, 2);
  EXPECT_EQ(s->key.size(), 48u);
  s = parse_secret(
      "DHHC-1:03:VTtbNvotv9Nh0/7HDFZ4h9ybU+7DuJT6G6YgR1Dw9xUYTIZWBOwEg3eB9/"
      "3Azsg1BzldcDwoIhaxO32AfrrfZM+"
      "i7f4=:",
      &err);
  ASSERT_TRUE(s) << err;
  EXPECT_EQ(s->transform, 3);
  EXPECT_EQ(s->key.size(), 64u);
  // Written back, it reads the same.
  EXPECT_EQ(parse_secret(format_secret(*s), &err)->key, s->key);
  EXPECT_EQ(format_secret({0, seq(0, 32)}),
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:");
}

TEST(Secret, RefusesMalformedSecretsWithoutEchoingThem) {
  std::string err;
  const std::string good = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
  std::string bad_crc = good;
  bad_crc[20] = bad_crc[20] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(parse_secret(bad_crc, &err));
  EXPECT_NE(err.find("CRC"), std::string::npos) << err;
  EXPECT_EQ(err.find("AAEC"), std::string::npos) << "the error must not repeat the key";
  EXPECT_FALSE(parse_secret("DHHC-2:00:AAECAwQF:", &err));
  EXPECT_FALSE(parse_secret("DHHC-1:04:" + good.substr(10), &err));
  EXPECT_NE(err.find("transform"), std::string::npos);
  EXPECT_FALSE(parse_secret("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMU:", &err));  // 21 bytes
  EXPECT_NE(err.find("bytes"), std::string::npos);
  EXPECT_FALSE(parse_secret("DHHC-1:00:AAEC*wQF:", &err));
  EXPECT_FALSE(parse_secret("DHHC-1:00::", &err));
  EXPECT_FALSE(parse_secret("", &err));
}

TEST(Secret, TransformMatchesNvmeCli) {
  // nvme gen-dhchap-key --secret=000102..1f --hmac=1 --nqn=kHostNqn writes the key already
  // transformed once: HMAC-SHA256(key, NQN || "NVMe-over-Fabrics").
  std::string err;
  auto cli = parse_secret("DHHC-1:01:bOHk6jHoMxpP5YJr/eF6XNOGuPAzh0iRniebpsVb9ydqVuR5:", &err);
  ASSERT_TRUE(cli) << err;
  Bytes t = transform_key({1, seq(0, 32)}, kHostNqn);
  EXPECT_EQ(hex(t), "6ce1e4ea31e8331a4fe5826bfde17a5cd386b8f0338748919e279ba6c55bf727");
  EXPECT_EQ(t, cli->key);
  EXPECT_EQ(transform_key({0, seq(0, 32)}, kHostNqn), seq(0, 32));  // 00: as is
}

TEST(Response, HostAndControllerValuesMatchTheSpecFormula) {
  const Bytes key = transform_key({1, seq(0, 32)}, kHostNqn);
  const Bytes c = seq(100, 32);
  EXPECT_EQ(hex(host_response(1, key, c, 0x01020304, 0x0506, kHostNqn, kSubNqn)),
            "bf549f34ef5d381037795346a054e439ab1c7ca0319a6c026d99549d82b9e05d");
  EXPECT_EQ(hex(ctrl_response(1, key, c, 7, 9, kSubNqn, kHostNqn)),
            "360c991cbcc05f383ea5f785fa49ff242b5bfa3b6a0af86a9177d0d69da72d53");
  EXPECT_EQ(hex(augmented_challenge(1, seq(0, 256), c)),
            "c5e923a6e04338b35dc209c2e4942b9f611bcb7535efeb26604d1ab4cfb2cc9a");
  // Each hash gives its own length.
  EXPECT_EQ(host_response(2, key, seq(0, 48), 1, 1, kHostNqn, kSubNqn).size(), 48u);
  EXPECT_EQ(host_response(3, key, seq(0, 64), 1, 1, kHostNqn, kSubNqn).size(), 64u);
  EXPECT_TRUE(host_response(4, key, c, 1, 1, kHostNqn, kSubNqn).empty());
}

TEST(Names, HashAndGroupIds) {
  uint8_t id = 0;
  EXPECT_TRUE(parse_hash("hmac(sha384)", &id));
  EXPECT_EQ(id, 2);
  EXPECT_TRUE(parse_hash("sha512", &id));
  EXPECT_EQ(id, 3);
  EXPECT_FALSE(parse_hash("md5", &id));
  EXPECT_TRUE(parse_dh_group("ffdhe6144", &id));
  EXPECT_EQ(id, 4);
  EXPECT_EQ(dh_group_bytes(id), 768u);
  EXPECT_FALSE(parse_dh_group("ffdhe1024", &id));
  EXPECT_FALSE(dh_group_known(6));
}

TEST(Ffdhe, BothSidesDeriveTheSameSecretInEveryGroup) {
  for (uint8_t g = 1; g <= 5; ++g) {
    DhExchange a, b;
    Bytes pa, pb, sa, sb;
    std::string err;
    ASSERT_TRUE(a.generate(g, &pa, &err)) << err;
    ASSERT_TRUE(b.generate(g, &pb, &err)) << err;
    EXPECT_EQ(pa.size(), dh_group_bytes(g));
    ASSERT_TRUE(a.derive(pb, &sa, &err)) << err;
    ASSERT_TRUE(b.derive(pa, &sb, &err)) << err;
    EXPECT_EQ(sa.size(), dh_group_bytes(g));
    EXPECT_EQ(sa, sb) << dh_group_name(g);
    EXPECT_NE(pa, pb);
  }
}

TEST(Ffdhe, RefusesValuesOutsideTheGroup) {
  DhExchange a;
  Bytes pub, out;
  std::string err;
  ASSERT_TRUE(a.generate(1, &pub, &err)) << err;
  Bytes zero(256, 0), one(256, 0), big(256, 0xFF);
  one.back() = 1;
  EXPECT_FALSE(a.derive(zero, &out, &err));
  EXPECT_FALSE(a.derive(one, &out, &err));
  EXPECT_FALSE(a.derive(big, &out, &err));  // larger than p
  EXPECT_FALSE(a.derive(Bytes(255, 7), &out, &err));
  EXPECT_NE(err.find("bytes"), std::string::npos);
  EXPECT_TRUE(out.empty());
  DhExchange none;
  EXPECT_FALSE(none.derive(pub, &out, &err));
}

// The range check refuses the order-2 subgroup {1, p - 1} and anything not below p; the full
// check also refuses p - 2, which lies outside the prime-order subgroup (2 is a square mod
// these p, -1 is not), and which the range check takes.
TEST(Ffdhe, RangeCheckRefusesTheSmallSubgroupFullCheckTheNonResidues) {
  for (uint8_t g : {uint8_t(1), uint8_t(5)}) {
    SCOPED_TRACE(dh_group_name(g));
    DhExchange a, b;
    Bytes pa, pb, out;
    std::string err;
    ASSERT_TRUE(a.generate(g, &pa, &err)) << err;
    ASSERT_TRUE(b.generate(g, &pb, &err)) << err;
    const Bytes p = a.prime();
    ASSERT_EQ(p.size(), dh_group_bytes(g));
    ASSERT_EQ(p.back(), 0xFF);  // (the RFC 7919 primes end in 64 one bits)
    Bytes p_minus_1 = p, p_minus_2 = p;
    p_minus_1.back() -= 1;
    p_minus_2.back() -= 2;
    for (PeerCheck check : {PeerCheck::kRange, PeerCheck::kFull}) {
      EXPECT_FALSE(a.derive(p_minus_1, &out, &err, check));
      EXPECT_FALSE(a.derive(p, &out, &err, check));
      EXPECT_TRUE(out.empty());
      ASSERT_TRUE(a.derive(pb, &out, &err, check)) << err;  // an honest value passes both
    }
    EXPECT_TRUE(a.derive(p_minus_2, &out, &err, PeerCheck::kRange)) << err;
    EXPECT_FALSE(a.derive(p_minus_2, &out, &err, PeerCheck::kFull));
  }
}

// Secrets are overwritten, not just freed: wipe() and wipe_text() keep the capacity, so the
// bytes they leave behind can be read back here.
TEST(Wipe, WipeOnExitOverwritesOnEveryWayOut) {
  Bytes key(64, 0xAB), derived(48, 0xCD);
  const uint8_t* k = key.data();
  const uint8_t* d = derived.data();
  auto early_return = [&](bool fail) {
    WipeOnExit wiped{&key, &derived};
    if (fail) return false;  // an error path
    return true;
  };
  EXPECT_FALSE(early_return(true));
  EXPECT_TRUE(key.empty() && derived.empty());
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(k[i], 0) << i;
  for (size_t i = 0; i < 48; ++i) ASSERT_EQ(d[i], 0) << i;
}

TEST(Wipe, SecretTextIsOverwritten) {
  std::string text = "DHHC-1:00:" + std::string(48, 'x') + ":";
  const char* p = text.data();
  const size_t n = text.size();
  wipe_text(text);
  EXPECT_TRUE(text.empty());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0) << i;
}

}  // namespace
}  // namespace sens::auth
