// TRID parsing: what users type on -r, and the precise errors for what they get wrong.
#include "host/trid.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace sens::host {
namespace {

TEST(Trid, ParsesFullTrid) {
  std::string err;
  auto t = parse_trid(
      "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2024-01.io.x:d0", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->trtype, "tcp");
  EXPECT_EQ(t->adrfam, "ipv4");
  EXPECT_EQ(t->traddr, "127.0.0.1");
  EXPECT_EQ(t->trsvcid, 4420);
  EXPECT_EQ(t->subnqn, "nqn.2024-01.io.x:d0");
  EXPECT_EQ(t->hostnqn, "");
  sockaddr_storage ss;
  socklen_t len;
  ASSERT_TRUE(trid_sockaddr(*t, &ss, &len));
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  EXPECT_EQ(a->sin_family, AF_INET);
  EXPECT_EQ(ntohs(a->sin_port), 4420);
  EXPECT_EQ(ntohl(a->sin_addr.s_addr), 0x7F000001u);
}

TEST(Trid, DefaultsAndCaseAndSpacing) {
  std::string err;
  auto t = parse_trid("  TRADDR:10.1.2.3   TrSvcId:8009 ", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->trtype, "tcp");
  EXPECT_EQ(t->trsvcid, 8009);
  EXPECT_EQ(t->subnqn, "nqn.2014-08.org.nvmexpress.discovery");  // as SPDK defaults
  EXPECT_EQ(parse_trid("trtype:TCP traddr:1.2.3.4", &err)->trtype, "tcp");
}

TEST(Trid, Ipv6) {
  std::string err;
  auto t = parse_trid("traddr:::1 trsvcid:4420 subnqn:nqn.a:b", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->adrfam, "ipv6");  // inferred from the address
  sockaddr_storage ss;
  socklen_t len;
  ASSERT_TRUE(trid_sockaddr(*t, &ss, &len));
  EXPECT_EQ(ss.ss_family, AF_INET6);
  EXPECT_EQ(len, sizeof(sockaddr_in6));
}

TEST(Trid, HostNqn) {
  std::string err;
  auto t = parse_trid("traddr:1.2.3.4 hostnqn:nqn.2014-08.org.nvmexpress:uuid:1234", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->hostnqn, "nqn.2014-08.org.nvmexpress:uuid:1234");
  EXPECT_NE(t->to_string().find("hostnqn:nqn.2014-08"), std::string::npos);
}

struct Bad {
  const char* text;
  const char* error;
};

class TridErrors : public ::testing::TestWithParam<Bad> {};

TEST_P(TridErrors, PreciseMessage) {
  std::string err;
  EXPECT_FALSE(parse_trid(GetParam().text, &err));
  EXPECT_EQ(err, GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    All, TridErrors,
    ::testing::Values(
        Bad{"", "traddr missing"}, Bad{"trsvcid:4420", "traddr missing"},
        Bad{"traddr:1.2.3.4 bogus", "'bogus' is not key:value"},
        Bad{"traddr:", "empty value for traddr"},
        Bad{"traddr:1.2.3.4 traddr:1.2.3.5", "traddr given twice"},
        Bad{"trtype:rdma traddr:1.2.3.4", "trtype 'rdma' not supported (only tcp)"},
        Bad{"adrfam:ib traddr:1.2.3.4", "adrfam 'ib' not supported (ipv4 or ipv6)"},
        Bad{"traddr:localhost", "traddr 'localhost' is not a numeric ipv4 address"},
        Bad{"traddr:1.2.3.4 adrfam:ipv6", "traddr '1.2.3.4' is not a numeric ipv6 address"},
        Bad{"traddr:1.2.3.4 trsvcid:0", "trsvcid '0' is not a port number (1..65535)"},
        Bad{"traddr:1.2.3.4 trsvcid:65536", "trsvcid '65536' is not a port number (1..65535)"},
        Bad{"traddr:1.2.3.4 trsvcid:44x", "trsvcid '44x' is not a port number (1..65535)"},
        Bad{"traddr:1.2.3.4 hostnqn:host0", "hostnqn 'host0' does not start with 'nqn.'"},
        Bad{"traddr:1.2.3.4 flavour:x",
            "unknown key 'flavour' (expected trtype, adrfam, traddr, trsvcid, subnqn, hostnqn)"}));

// The Linux target takes subsystem names without "nqn." (blktests: blktests-subsystem-1), and
// so does sens target: the host can name them.
TEST(Trid, SubsystemNameAsLinuxTakesIt) {
  std::string err;
  auto t = parse_trid("traddr:127.0.0.1 subnqn:blktests-subsystem-1", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->subnqn, "blktests-subsystem-1");
}

TEST(Trid, NqnLengthLimit) {
  std::string err;
  std::string nqn = "nqn." + std::string(219, 'a');  // 223 bytes: the limit
  EXPECT_TRUE(parse_trid("traddr:1.2.3.4 subnqn:" + nqn, &err)) << err;
  EXPECT_FALSE(parse_trid("traddr:1.2.3.4 subnqn:" + nqn + "a", &err));
  EXPECT_EQ(err, "subnqn is 224 bytes, at most 223 allowed");
}

}  // namespace
}  // namespace sens::host
