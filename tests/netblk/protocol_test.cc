// NBLK wire format, max_io sizing and the --allow filter.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>

#include "netblk/address_filter.h"
#include "netblk/protocol.h"

namespace sens::netblk {
namespace {

TEST(Protocol, HeaderIsBigEndianAtTheDocumentedOffsets) {
  Header h;
  h.op = kOpWrite | kReplyBit;
  h.flags = kFlagFua;
  h.cookie = 0x0102030405060708ull;
  h.offset = 0x1112131415161718ull;
  h.length = 0x21222324;
  h.status = kReadOnly;
  uint8_t bytes[kHeaderSize];
  encode_header(h, bytes);
  const uint8_t want[kHeaderSize] = {
      'N',  'B',  'L',  'K',  1,    0x83, 0x00, 0x01,  // magic, version, op, flags
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // cookie
      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,  // offset
      0x21, 0x22, 0x23, 0x24,                          // length
      0x00, 0x05};                                     // status
  EXPECT_EQ(std::memcmp(bytes, want, kHeaderSize), 0);
  Header back = decode_header(bytes);
  EXPECT_EQ(back.magic, kMagic);
  EXPECT_EQ(back.version, 1);
  EXPECT_EQ(back.op, kOpWrite | kReplyBit);
  EXPECT_EQ(back.flags, kFlagFua);
  EXPECT_EQ(back.cookie, h.cookie);
  EXPECT_EQ(back.offset, h.offset);
  EXPECT_EQ(back.length, h.length);
  EXPECT_EQ(back.status, kReadOnly);
}

TEST(Protocol, InfoBody) {
  Info info;
  info.size = 64ull << 30;
  info.sector_size = 512;
  info.max_io = 1024;
  info.max_read = 16384;
  info.flags = kInfoFlagReadOnly;
  info.slots = 256;
  uint8_t body[kInfoBodySize];
  std::memset(body, 0xff, sizeof body);
  encode_info(info, body);
  EXPECT_EQ(body[0], 0);
  EXPECT_EQ(body[3], 0x10);                                 // 64 GiB = 0x10_0000_0000
  EXPECT_EQ(body[8 + 2], 0x02);                             // sector 512 = 0x200
  EXPECT_EQ(body[28] | body[29] | body[30] | body[31], 0);  // reserved
  Info back = decode_info(body);
  EXPECT_EQ(back.size, info.size);
  EXPECT_EQ(back.sector_size, 512u);
  EXPECT_EQ(back.max_io, 1024u);
  EXPECT_EQ(back.max_read, 16384u);
  EXPECT_TRUE(back.read_only());
  EXPECT_EQ(back.slots, 256u);
}

TEST(Protocol, MaxIoIsWholeSectorsBehindTheHeaders) {
  EXPECT_EQ(max_io_for(1500, 512), 1024u);   // 1500 - 58 = 1442
  EXPECT_EQ(max_io_for(1500, 4096), 0u);     // does not fit
  EXPECT_EQ(max_io_for(4154, 4096), 4096u);  // exactly fits
  EXPECT_EQ(max_io_for(4153, 4096), 0u);
  EXPECT_EQ(max_io_for(9000, 4096), 8192u);
  EXPECT_EQ(max_io_for(9000, 512), 8704u);
  EXPECT_EQ(max_io_for(65536, 512), 65024u);  // capped at the largest UDP datagram
  EXPECT_EQ(max_io_for(58, 512), 0u);
  EXPECT_EQ(max_io_for(1500, 0), 0u);
}

TEST(Protocol, Names) {
  EXPECT_STREQ(status_name(kBusy), "busy");
  EXPECT_STREQ(status_name(kReadOnly), "read-only");
  EXPECT_STREQ(op_name(kOpRead | kReplyBit), "READ");
}

sockaddr_in v4(const char* text) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, text, &a.sin_addr);
  return a;
}

sockaddr_in6 v6(const char* text) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, text, &a.sin6_addr);
  return a;
}

template <typename A>
bool allows(const AddressFilter& f, const A& a) {
  return f.allows(reinterpret_cast<const sockaddr*>(&a));
}

TEST(AddressFilter, EmptyAllowsEverybody) {
  AddressFilter f;
  EXPECT_TRUE(allows(f, v4("203.0.113.9")));
}

TEST(AddressFilter, MatchesPrefixes) {
  AddressFilter f;
  std::string error;
  ASSERT_TRUE(f.add("10.0.0.0/8", &error)) << error;
  ASSERT_TRUE(f.add("192.168.7.5", &error)) << error;
  ASSERT_TRUE(f.add("172.16.0.0/12", &error)) << error;
  ASSERT_TRUE(f.add("fd00::/8", &error)) << error;
  EXPECT_TRUE(allows(f, v4("10.200.3.4")));
  EXPECT_FALSE(allows(f, v4("11.0.0.1")));
  EXPECT_TRUE(allows(f, v4("192.168.7.5")));
  EXPECT_FALSE(allows(f, v4("192.168.7.6")));
  EXPECT_TRUE(allows(f, v4("172.31.255.255")));
  EXPECT_FALSE(allows(f, v4("172.32.0.0")));
  EXPECT_TRUE(allows(f, v6("fd12::1")));
  EXPECT_FALSE(allows(f, v6("fe80::1")));
  EXPECT_TRUE(allows(f, v6("::ffff:10.1.2.3")));  // IPv4 through a dual-stack socket
  EXPECT_FALSE(allows(f, v6("::ffff:127.0.0.1")));
  EXPECT_FALSE(allows(f, v4("127.0.0.1")));
}

TEST(AddressFilter, ZeroPrefixAllowsTheFamily) {
  AddressFilter f;
  std::string error;
  ASSERT_TRUE(f.add("0.0.0.0/0", &error));
  EXPECT_TRUE(allows(f, v4("8.8.8.8")));
  EXPECT_FALSE(allows(f, v6("2001:db8::1")));
}

TEST(AddressFilter, RefusesGarbage) {
  AddressFilter f;
  std::string error;
  EXPECT_FALSE(f.add("10.0.0/8", &error));
  EXPECT_NE(error.find("is not an IPv4 or IPv6 address"), std::string::npos) << error;
  EXPECT_FALSE(f.add("10.0.0.0/33", &error));
  EXPECT_EQ(error, "--allow 10.0.0.0/33: prefix must be 0..32");
  EXPECT_FALSE(f.add("::1/129", &error));
  EXPECT_FALSE(f.add("10.0.0.0/", &error));
  EXPECT_FALSE(f.add("10.0.0.0/8x", &error));
  EXPECT_TRUE(f.empty());
}

}  // namespace
}  // namespace sens::netblk
