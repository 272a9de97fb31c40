// The stall deadlines (issue 29) with an injected clock: what has not moved for the timeout
// since it was first seen stalls; any progress, or nothing waiting, starts the clock again.
#include "target/stall_watch.h"

#include <gtest/gtest.h>

namespace sens::target {
namespace {

using Kind = StallWatch::Kind;
constexpr Nanos kT = 1000 * kMilli;

TEST(StallWatch, SendWithoutProgressStallsAfterTheTimeout) {
  StallWatch w(kT);
  EXPECT_EQ(w.period(), kT / 4);
  StallWatch::Sample s;
  s.sent_bytes = 100;
  s.send_waiting = true;
  EXPECT_EQ(w.look(s, 0), Kind::kNone);  // first seen
  EXPECT_EQ(w.look(s, kT - 1), Kind::kNone);
  s.sent_bytes = 200;  // progress: the clock starts again
  EXPECT_EQ(w.look(s, kT), Kind::kNone);
  EXPECT_EQ(w.look(s, 2 * kT - 1), Kind::kNone);
  EXPECT_EQ(w.look(s, 2 * kT), Kind::kSend);
}

TEST(StallWatch, NothingWaitingNeverStalls) {
  StallWatch w(kT);
  StallWatch::Sample s;  // idle: nothing queued, no PDU begun
  for (Nanos t = 0; t < 10 * kT; t += kT / 4) EXPECT_EQ(w.look(s, t), Kind::kNone);
  s.send_waiting = true;  // waiting starts now, not at the first look
  EXPECT_EQ(w.look(s, 10 * kT), Kind::kNone);
  EXPECT_EQ(w.look(s, 11 * kT - 1), Kind::kNone);
  s.send_waiting = false;  // drained in between
  EXPECT_EQ(w.look(s, 11 * kT - 1), Kind::kNone);
  s.send_waiting = true;
  EXPECT_EQ(w.look(s, 11 * kT), Kind::kNone);
  EXPECT_EQ(w.look(s, 12 * kT), Kind::kSend);
}

TEST(StallWatch, UnfinishedPdu) {
  StallWatch w(kT);
  StallWatch::Sample s;
  s.received_bytes = 72 + 4;  // ICReq and four bytes of a header
  s.pdu_unfinished = true;
  EXPECT_EQ(w.look(s, 5 * kT), Kind::kNone);
  s.received_bytes += 1;  // a byte a while keeps it alive
  EXPECT_EQ(w.look(s, 6 * kT - 1), Kind::kNone);
  EXPECT_EQ(w.look(s, 7 * kT - 2), Kind::kNone);
  EXPECT_EQ(w.look(s, 7 * kT - 1), Kind::kPdu);
}

TEST(StallWatch, H2cPerRequest) {
  StallWatch w(kT);
  // Two requests wait for data; slot 1 gets some, slot 0 none.
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(0, 111, 0, 0));
  EXPECT_FALSE(w.h2c_stalled(1, 222, 0, 0));
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(0, 111, 0, kT / 2));
  EXPECT_FALSE(w.h2c_stalled(1, 222, 4096, kT / 2));
  w.begin_h2c_look();
  EXPECT_TRUE(w.h2c_stalled(0, 111, 0, kT));
  EXPECT_FALSE(w.h2c_stalled(1, 222, 4096, kT)) << "its last data came at kT / 2";
  w.begin_h2c_look();
  EXPECT_TRUE(w.h2c_stalled(1, 222, 4096, kT + kT / 2));
}

TEST(StallWatch, H2cNewCommandInTheSlotOrAGapStartsAgain) {
  StallWatch w(kT);
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(3, 111, 0, 0));
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(3, 112, 0, kT)) << "another command in the slot";
  w.begin_h2c_look();  // a look where slot 3 waited for nothing
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(3, 112, 0, 2 * kT)) << "not seen at the last look: new wait";
  w.begin_h2c_look();
  EXPECT_TRUE(w.h2c_stalled(3, 112, 0, 3 * kT));
}

TEST(StallWatch, ZeroTimeoutIsOff) {
  StallWatch w(0);
  EXPECT_FALSE(w.enabled());
  StallWatch::Sample s;
  s.send_waiting = s.pdu_unfinished = true;
  EXPECT_EQ(w.look(s, 0), Kind::kNone);
  EXPECT_EQ(w.look(s, 1000 * kT), Kind::kNone);
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(0, 1, 0, 0));
  w.begin_h2c_look();
  EXPECT_FALSE(w.h2c_stalled(0, 1, 0, 1000 * kT));
  EXPECT_STREQ(StallWatch::kind_name(Kind::kH2C), "h2c");
}

}  // namespace
}  // namespace sens::target
