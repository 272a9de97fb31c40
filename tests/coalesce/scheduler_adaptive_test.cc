// The eager and adaptive policies under a ManualClock (and a clock that counts its reads): the
// decisions taken at the end of a reactor pass. The fixed-limit policies are in
// scheduler_test.cc.
#include <gtest/gtest.h>

#include <cmath>

#include "coalesce/scheduler.h"
#include "scheduler_test_util.h"

namespace sens::coalesce {
namespace {

using namespace testing;

// ---- eager and adaptive: decisions at the end of a reactor pass.

TEST_F(SchedulerTest, EagerFlushesEveryPassAndArmsNoTimer) {
  Scheduler s(paper_config(Policy::kEager), clock);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kNone) << "nothing queued";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone) << "no c2 under eager";
  EXPECT_EQ(s.next_deadline(), kNoDeadline);
  EXPECT_EQ(s.queued_control(), 0u);
  EXPECT_EQ(s.on_pass_end(0.0), FlushReason::kPassEnd);
  s.on_flushed(FlushReason::kPassEnd);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kNone);
  // The capacity B still applies within a pass of small PDUs.
  for (int i = 0; i < 15; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kCapacity);
  EXPECT_EQ(s.stats().flushes[size_t(FlushReason::kPassEnd)], 1u);
}

// QD1: one exchange per round trip. However fast the round trips, a reactor that waits for
// its peer is not saturated, so adaptive never holds.
TEST_F(SchedulerTest, AdaptiveNeverHoldsAtQueueDepthOne) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  for (int i = 0; i < 1000; ++i) {
    at(i * 10 * kUs);  // a 10 us round trip
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096 + 24), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 24), FlushReason::kNone);
    ASSERT_EQ(s.on_pass_end(0.45), FlushReason::kPassEnd) << i;
    s.on_flushed(FlushReason::kPassEnd);
  }
  EXPECT_EQ(s.stats().holds, 0u);
  EXPECT_NEAR(s.arrival_rate(), 2e5, 1e3) << "2 PDUs per 10 us";
}

TEST_F(SchedulerTest, AdaptiveHoldsOnlyWhenSaturatedAndMoreAreDue) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  // Learn the rate: 2 PDUs per pass, a pass every 2 us (1 PDU/us: 50 expected within T).
  Nanos t = 0;
  for (int i = 0; i < 50; ++i, t += 2 * kUs) {
    at(t);
    s.on_enqueue(PduClass::kData, 100);
    s.on_enqueue(PduClass::kData, 100);
    ASSERT_EQ(s.on_pass_end(0.5), FlushReason::kPassEnd);  // not saturated: flush
    s.on_flushed(FlushReason::kPassEnd);
  }
  EXPECT_NEAR(s.arrival_rate(), 1e6, 1e4);
  // Saturated: the group is held, counted, and the next passes keep it until B.
  at(t);
  s.on_enqueue(PduClass::kData, 100);
  s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(s.on_pass_end(0.95), FlushReason::kNone);
  EXPECT_EQ(s.stats().holds, 1u);
  EXPECT_EQ(s.deadline(), kT0 + t + 50 * kUs) << "T bounds the hold";
  FlushReason r = FlushReason::kNone;
  for (int i = 0; i < 7 && r == FlushReason::kNone; ++i) {
    at(t += 2 * kUs);
    s.on_enqueue(PduClass::kData, 100);
    r = s.on_enqueue(PduClass::kData, 100);
    if (r == FlushReason::kNone) r = s.on_pass_end(0.95);
  }
  EXPECT_EQ(r, FlushReason::kCapacity);
  EXPECT_EQ(s.queued_pdus(), 16u);
  s.on_flushed(r);
  // A control PDU leaves with the pass, saturated or not.
  at(t += 2 * kUs);
  s.on_enqueue(PduClass::kData, 100);
  s.on_enqueue(PduClass::kControl, 24);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kControlPassEnd);
  s.on_flushed(FlushReason::kControlPassEnd);
  // A group with one place left gains at most one PDU: never worth a hold.
  at(t += 2 * kUs);
  for (int i = 0; i < 15; ++i) s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kPassEnd);
  s.on_flushed(FlushReason::kPassEnd);
}

TEST_F(SchedulerTest, AdaptiveHoldsOnlyForArrivalsThatCanCome) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  Nanos t = 0;
  for (int i = 0; i < 50; ++i, t += 2 * kUs) {  // 1 PDU/us: ~50 expected within T
    at(t);
    s.on_enqueue(PduClass::kData, 100);
    s.on_enqueue(PduClass::kData, 100);
    s.on_flushed(s.on_pass_end(0.5));
  }
  at(t);
  s.on_enqueue(PduClass::kData, 100);
  // A closed loop whose every command is answered in this group: nothing more can come.
  EXPECT_EQ(s.on_pass_end(1.0, 0), FlushReason::kPassEnd);
  s.on_flushed(FlushReason::kPassEnd);
  s.on_enqueue(PduClass::kData, 100);
  // One answer on its way: at most one PDU to gain, below the threshold (E[min(N, room)] < 1).
  EXPECT_EQ(s.on_pass_end(1.0, 1), FlushReason::kPassEnd);
  s.on_flushed(FlushReason::kPassEnd);
  s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(s.on_pass_end(1.0, 2), FlushReason::kNone) << "two more answers are on their way";
  EXPECT_EQ(s.stats().holds, 1u);
}

// Adaptive counts R2Ts but does not flush at c2 of them: they leave together at the end of
// the pass (kControlPassEnd). A c2 flush inside the pass is an extra send per c2 R2Ts, which
// cost 16 KiB R2T writes 7-12 % against eager here (docs/results.md).
TEST_F(SchedulerTest, AdaptiveSendsR2TsWithThePassNotAtC2) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);
  EXPECT_EQ(s.queued_control(), 8u);
  EXPECT_EQ(s.on_pass_end(0.0), FlushReason::kControlPassEnd);
  s.on_flushed(FlushReason::kControlPassEnd);
  EXPECT_EQ(s.stats().flushes[size_t(FlushReason::kControlCapacity)], 0u);
  EXPECT_EQ(s.stats().r2t_delay_ns.count(), 8u);
  // B still bounds a group of R2Ts.
  for (int i = 0; i < 15; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kCapacity);
}

TEST_F(SchedulerTest, AdaptiveDoesNotHoldWhenTooFewArriveBeforeTheTimer) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  Nanos t = 0;
  for (int i = 0; i < 50; ++i, t += 100 * kUs) {  // 1 PDU per 100 us: 0.5 expected within T
    at(t);
    s.on_enqueue(PduClass::kData, 100);
    EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kPassEnd) << i;
    s.on_flushed(FlushReason::kPassEnd);
  }
  EXPECT_EQ(s.stats().holds, 0u);
  // 1 PDU per 40 us: 1.25 expected within T, enough for a roomy group (threshold ~1.0).
  for (int i = 0; i < 60; ++i, t += 40 * kUs) {
    at(t);
    s.on_enqueue(PduClass::kData, 100);
    FlushReason r = s.on_pass_end(1.0);
    s.on_flushed(r == FlushReason::kNone ? FlushReason::kTimer : r);
  }
  EXPECT_GT(s.stats().holds, 0u);
}

TEST_F(SchedulerTest, AdaptiveTimerBoundsAHold) {
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  Nanos t = 0;
  for (int i = 0; i < 50; ++i, t += 1 * kUs) {
    at(t);
    s.on_enqueue(PduClass::kData, 100);
    s.on_flushed(s.on_pass_end(0.0));
  }
  at(t);
  s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kNone);
  EXPECT_EQ(s.next_deadline(), kT0 + t + 50 * kUs);
  at(t + 50 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kTimer);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kTimer) << "a due deadline is never held past";
}

// Counts reads, so the tests can hold the scheduler to its clock budget.
class CountingClock final : public Clock {
 public:
  Nanos now() const override {
    ++reads;
    return t;
  }
  Nanos t = 0;
  mutable int reads = 0;
};

TEST(SchedulerClock, AdaptiveReadsTheClockPerGroupNotPerPdu) {
  CountingClock clock;
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  s.on_enqueue(PduClass::kData, 100);  // opens the group: its deadline needs the time
  EXPECT_EQ(clock.reads, 1);
  for (int i = 0; i < 10; ++i) s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(clock.reads, 1) << "PDUs joining a group cost no clock read";
  s.on_enqueue(PduClass::kControl, 24);  // a control PDU's delay is measured
  EXPECT_EQ(clock.reads, 2);
  s.on_flushed(FlushReason::kControlPassEnd);
  EXPECT_EQ(clock.reads, 3);
  s.on_enqueue(PduClass::kData, 100);
  s.on_flushed(FlushReason::kPassEnd);  // no R2T to time: no read
  EXPECT_EQ(clock.reads, 4);
}

TEST(SchedulerClock, AdaptiveLateTimerIsCaughtAtThePassEnd) {
  CountingClock clock;
  Scheduler s(paper_config(Policy::kAdaptive), clock);
  s.on_enqueue(PduClass::kData, 100);
  clock.t = 60 * kUs;  // past T, and the owner's timer has not run
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kNone);
  EXPECT_EQ(s.on_pass_end(1.0), FlushReason::kTimer) << "held no longer than this pass";
}

TEST(SchedulerHoldThreshold, FollowsThePoissonGain) {
  EXPECT_TRUE(std::isinf(Scheduler::hold_threshold(0)));
  EXPECT_TRUE(std::isinf(Scheduler::hold_threshold(1)));
  // room 2: E[min(N, 2)] = 2 - (2 + mu) e^-mu = 1 at mu ~ 1.1462.
  const double mu2 = Scheduler::hold_threshold(2);
  EXPECT_NEAR(2 - (2 + mu2) * std::exp(-mu2), 1.0, 1e-9);
  EXPECT_NEAR(mu2, 1.1462, 1e-3);
  double prev = mu2;
  for (uint32_t room = 3; room <= 100; ++room) {
    const double mu = Scheduler::hold_threshold(room);
    EXPECT_LE(mu, prev) << room;
    EXPECT_GE(mu, 1.0 - 1e-9) << room;
    prev = mu;
  }
  EXPECT_NEAR(Scheduler::hold_threshold(64), 1.0, 1e-3);
}

}  // namespace
}  // namespace sens::coalesce
