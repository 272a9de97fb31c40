// The shared reservation record (ReservationState::serialize / parse): a round trip, and a
// precise refusal of every malformed record, since another gateway, an older or newer sens, or
// an operator may have written it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "target/reservations.h"

namespace sens::target {
namespace {

ReservationState two_registrants() {
  ReservationState s;
  s.regs.resize(2);
  std::memset(s.regs[0].hostid, 0xA1, 16);
  s.regs[0].key = 0x1122334455667788ull;
  std::memset(s.regs[1].hostid, 0xB2, 16);
  s.regs[1].key = 0xBBBB;
  s.rtype = resv::kWriteExclusive;
  std::memcpy(s.holder, s.regs[0].hostid, 16);
  s.gen = 0xDEADBEEF;
  return s;
}

std::string refusal(const std::string& bytes) {
  ReservationState s;
  std::string why;
  EXPECT_FALSE(ReservationState::parse(bytes, &s, &why));
  EXPECT_TRUE(s.regs.empty());  // nothing half-parsed is left
  EXPECT_EQ(s.rtype, 0);
  return why;
}

TEST(ReservationState, RoundTripsAndStaysCompact) {
  ReservationState s = two_registrants();
  std::string bytes = s.serialize();
  EXPECT_EQ(bytes.size(), 28u + 2 * 24);
  EXPECT_EQ(bytes.substr(0, 4), "SNRV");
  ReservationState back;
  std::string why;
  ASSERT_TRUE(ReservationState::parse(bytes, &back, &why)) << why;
  EXPECT_EQ(back.serialize(), bytes);
  EXPECT_EQ(back.gen, 0xDEADBEEFu);
  EXPECT_EQ(back.rtype, resv::kWriteExclusive);
  ASSERT_EQ(back.regs.size(), 2u);
  EXPECT_EQ(back.regs[0].key, 0x1122334455667788ull);
  EXPECT_EQ(std::memcmp(back.holder, s.regs[0].hostid, 16), 0);
  // An empty record (never written) is the empty state.
  ASSERT_TRUE(ReservationState::parse("", &back, &why));
  EXPECT_TRUE(back.regs.empty());
  EXPECT_EQ(back.rtype, 0);
}

TEST(ReservationState, RefusesEveryMalformedRecordPrecisely) {
  std::string good = two_registrants().serialize();
  EXPECT_EQ(refusal("SNRV"), "4 bytes, shorter than the 28-byte header");
  EXPECT_EQ(refusal(std::string(28, 'x')), "no SNRV magic: not a sens record");
  std::string b = good;
  b[4] = 2;
  EXPECT_EQ(refusal(b), "format 2, this sens reads format 1");
  b = good;
  b[5] = 7;
  EXPECT_EQ(refusal(b), "reservation type 7 (valid: 0..6)");
  b = good;
  b[6] = char(0x01);
  b[7] = char(0x01);  // 257 registrants
  EXPECT_EQ(refusal(b), "257 registrants (at most 256)");
  EXPECT_EQ(refusal(good.substr(0, good.size() - 1)), "75 bytes for 2 registrants, which take 76");
  EXPECT_EQ(refusal(good + "x"), "77 bytes for 2 registrants, which take 76");
  b = good;
  std::memcpy(&b[28 + 24], &b[28], 16);  // registrant 1 takes registrant 0's host ID
  EXPECT_EQ(refusal(b), "registrant 1 repeats the host ID of registrant 0");
  ReservationState none;
  none.rtype = resv::kExclusiveAccess;
  EXPECT_EQ(refusal(none.serialize()), "a reservation with no registrant");
  ReservationState stray = two_registrants();
  std::memset(stray.holder, 0xCC, 16);
  EXPECT_EQ(refusal(stray.serialize()), "the reservation's holder is not a registrant");
  // The all-registrants types have no single holder: any holder field is accepted.
  stray.rtype = resv::kWriteExclusiveAllRegs;
  ReservationState s;
  std::string why;
  EXPECT_TRUE(ReservationState::parse(stray.serialize(), &s, &why)) << why;
}

}  // namespace
}  // namespace sens::target
