// The scheduler's state machine, step by step under a ManualClock.
#include "coalesce/scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "scheduler_test_util.h"

namespace sens::coalesce {
namespace {

using namespace testing;

// Figure 3 of the SENS paper, B = 16, c2 = 4, T = 50 us, Tc = 10 us.
TEST_F(SchedulerTest, Figure3Replay) {
  Scheduler s(paper_config(Policy::kSemantic), clock);
  EXPECT_EQ(s.next_deadline(), kNoDeadline);

  // (a) data PDUs only: the total counter grows towards B, T armed by the first one.
  for (int i = 0; i < 3; ++i) {
    at(i * kUs);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
    EXPECT_EQ(s.queued_pdus(), uint32_t(i + 1));
    EXPECT_EQ(s.queued_control(), 0u);
    EXPECT_EQ(s.deadline(), kT0 + 50 * kUs);  // not re-armed by later PDUs
    EXPECT_EQ(s.control_deadline(), kNoDeadline);
  }
  EXPECT_EQ(s.queued_bytes(), 3u * 4096);
  EXPECT_EQ(s.next_deadline(), kT0 + 50 * kUs);

  // (b) the first R2T arms Tc; T is unchanged.
  at(3 * kUs);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);
  EXPECT_EQ(s.queued_pdus(), 4u);
  EXPECT_EQ(s.queued_control(), 1u);
  EXPECT_EQ(s.control_deadline(), kT0 + 13 * kUs);
  EXPECT_EQ(s.deadline(), kT0 + 50 * kUs);
  EXPECT_EQ(s.next_deadline(), kT0 + 13 * kUs);

  // (c) more data PDUs accumulate; nothing is due.
  for (int i = 4; i < 6; ++i) {
    at(i * kUs);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  }
  EXPECT_EQ(s.queued_pdus(), 6u);
  EXPECT_EQ(s.queued_control(), 1u);

  // (d) another data PDU; a timer check before either deadline flushes nothing.
  at(6 * kUs);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  at(7 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
  EXPECT_EQ(s.queued_pdus(), 7u);

  // (e) a second R2T: the control counter moves, Tc is not re-armed.
  at(8 * kUs);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);
  EXPECT_EQ(s.queued_pdus(), 8u);
  EXPECT_EQ(s.queued_control(), 2u);
  EXPECT_EQ(s.control_deadline(), kT0 + 13 * kUs);
  EXPECT_EQ(s.deadline(), kT0 + 50 * kUs);

  // (f) Tc fires well before T and flushes the group early.
  clock.set(kT0 + 13 * kUs - 1);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
  at(13 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kControlTimer);
  EXPECT_EQ(s.deadline(), kT0 + 50 * kUs);  // the control timer never moved T
  s.on_flushed(FlushReason::kControlTimer);
  EXPECT_EQ(flushes(s, FlushReason::kControlTimer), 1u);
  EXPECT_EQ(s.stats().pdus_sent, 8u);
  EXPECT_EQ(s.stats().pdus_per_flush.count(), 1u);
  EXPECT_EQ(s.stats().pdus_per_flush.max(), 8u);
  EXPECT_EQ(s.stats().r2t_delay_ns.count(), 2u);
  EXPECT_EQ(s.stats().r2t_delay_ns.sum(), uint64_t(10 * kUs + 5 * kUs));
  EXPECT_EQ(s.stats().r2t_delay_ns.max(), uint64_t(10 * kUs));
  EXPECT_EQ(s.queued_pdus(), 0u);
  EXPECT_EQ(s.queued_control(), 0u);
  EXPECT_EQ(s.queued_bytes(), 0u);
  EXPECT_EQ(s.next_deadline(), kNoDeadline);

  // The next group arms fresh deadlines; the old T (t0 + 50 us) is forgotten.
  at(20 * kUs);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  EXPECT_EQ(s.deadline(), kT0 + 70 * kUs);
  EXPECT_EQ(s.control_deadline(), kNoDeadline);
  at(50 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
  at(70 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kTimer);
}

TEST_F(SchedulerTest, CapacityFlushAtB) {
  for (Policy p : {Policy::kUniform, Policy::kSemantic}) {
    Scheduler s(paper_config(p), clock);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kCapacity) << policy_name(p);
    EXPECT_EQ(s.queued_pdus(), 16u);
    s.on_flushed(FlushReason::kCapacity);
    EXPECT_EQ(flushes(s, FlushReason::kCapacity), 1u);
    EXPECT_EQ(s.stats().pdus_per_flush.max(), 16u);
    EXPECT_EQ(s.queued_pdus(), 0u);
  }
}

// Eager and adaptive: B splits a pass of small PDUs (answers, R2Ts) as before, but a pass of
// payload (4 KiB read answers) only at the byte cap; uniform and semantic split both at B.
TEST_F(SchedulerTest, PassBatchedPoliciesSplitPayloadAtTheByteCapOnly) {
  for (Policy p : {Policy::kEager, Policy::kAdaptive, Policy::kUniform, Policy::kSemantic}) {
    Config c = paper_config(p);
    c.bytes = 256 * 1024;
    Scheduler s(c, clock);
    for (int i = 0; i < 15; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kData, 24), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 24), FlushReason::kCapacity) << policy_name(p);
    s.on_flushed(FlushReason::kCapacity);
    const uint32_t answer = 24 + 4096;
    for (int i = 0; i < 15; ++i)
      EXPECT_EQ(s.on_enqueue(PduClass::kData, answer), FlushReason::kNone) << policy_name(p);
    if (!pass_batched(p)) {
      EXPECT_EQ(s.on_enqueue(PduClass::kData, answer), FlushReason::kCapacity) << policy_name(p);
      continue;
    }
    // 63 answers are 259,560 bytes; the 64th (263,680) reaches the 256 KiB cap.
    for (int i = 15; i < 63; ++i)
      EXPECT_EQ(s.on_enqueue(PduClass::kData, answer), FlushReason::kNone) << policy_name(p) << i;
    EXPECT_EQ(s.on_enqueue(PduClass::kData, answer), FlushReason::kByteCap) << policy_name(p);
    EXPECT_EQ(s.queued_pdus(), 64u);
    s.on_flushed(FlushReason::kByteCap);
    // A small PDU after payload does not split the group: its average is still payload's.
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(s.on_enqueue(PduClass::kData, answer), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 24), FlushReason::kNone) << policy_name(p);
    EXPECT_EQ(s.on_pass_end(0.0), FlushReason::kPassEnd) << policy_name(p);
  }
}

TEST_F(SchedulerTest, ControlCapacityFlushAtC2) {
  Scheduler s(paper_config(Policy::kSemantic), clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kNone);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kControlCapacity);
  EXPECT_EQ(s.queued_pdus(), 7u);
  EXPECT_EQ(s.queued_control(), 4u);
  s.on_flushed(FlushReason::kControlCapacity);
  EXPECT_EQ(flushes(s, FlushReason::kControlCapacity), 1u);
  EXPECT_EQ(s.stats().r2t_delay_ns.count(), 4u);
  EXPECT_EQ(s.stats().r2t_delay_ns.sum(), 0u);  // the clock never moved
}

// When one PDU trips several limits, the documented order names the flush:
// kCapacity, then kControlCapacity, then kByteCap.
TEST_F(SchedulerTest, SimultaneousLimitsOrder) {
  Config c = paper_config(Policy::kSemantic);
  c.pdus = 4;
  c.ctrl_pdus = 2;
  c.bytes = 400;
  {  // all three on the 4th PDU
    Scheduler s(c, clock);
    s.on_enqueue(PduClass::kData, 100);
    s.on_enqueue(PduClass::kData, 100);
    EXPECT_EQ(s.on_enqueue(PduClass::kControl, 100), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kControl, 100), FlushReason::kCapacity);
  }
  {  // control capacity and byte cap on the 2nd PDU
    Scheduler s(c, clock);
    EXPECT_EQ(s.on_enqueue(PduClass::kControl, 200), FlushReason::kNone);
    EXPECT_EQ(s.on_enqueue(PduClass::kControl, 200), FlushReason::kControlCapacity);
  }
  {  // a limit beats an expired timer
    Config z = c;
    z.timeout = 0;
    Scheduler s(z, clock);
    EXPECT_EQ(s.on_enqueue(PduClass::kData, 400), FlushReason::kByteCap);
  }
}

TEST_F(SchedulerTest, TimerFlushAtT) {
  Scheduler s(paper_config(Policy::kUniform), clock);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);  // empty group: nothing armed
  at(0);
  s.on_enqueue(PduClass::kData, 100);
  at(30 * kUs);
  s.on_enqueue(PduClass::kData, 100);
  EXPECT_EQ(s.next_deadline(), kT0 + 50 * kUs);
  clock.set(kT0 + 50 * kUs - 1);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
  at(50 * kUs);
  EXPECT_EQ(s.on_timer(), FlushReason::kTimer);
  at(80 * kUs);  // a late timer still reports T
  EXPECT_EQ(s.on_timer(), FlushReason::kTimer);
  s.on_flushed(FlushReason::kTimer);
  EXPECT_EQ(flushes(s, FlushReason::kTimer), 1u);
  EXPECT_EQ(s.stats().pdus_per_flush.max(), 2u);
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
}

// When both deadlines have passed, the earlier one names the flush (a tie goes to Tc).
TEST_F(SchedulerTest, EarlierDeadlineWins) {
  Config c = paper_config(Policy::kSemantic);
  {  // Tc armed late, ends after T
    Scheduler s(c, clock);
    at(0);
    s.on_enqueue(PduClass::kData, 100);
    at(45 * kUs);
    s.on_enqueue(PduClass::kControl, 24);
    EXPECT_EQ(s.control_deadline(), kT0 + 55 * kUs);
    EXPECT_EQ(s.next_deadline(), kT0 + 50 * kUs);
    at(60 * kUs);
    EXPECT_EQ(s.on_timer(), FlushReason::kTimer);
  }
  {  // Tc ends first
    Scheduler s(c, clock);
    at(0);
    s.on_enqueue(PduClass::kData, 100);
    at(5 * kUs);
    s.on_enqueue(PduClass::kControl, 24);
    at(60 * kUs);
    EXPECT_EQ(s.on_timer(), FlushReason::kControlTimer);
  }
  {  // a tie
    c.ctrl_timeout = c.timeout;
    Scheduler s(c, clock);
    at(0);
    s.on_enqueue(PduClass::kControl, 24);
    at(50 * kUs);
    EXPECT_EQ(s.on_timer(), FlushReason::kControlTimer);
  }
}

// A deadline already due when a PDU arrives flushes at once instead of waiting for the owner's
// timer: T = 0 or Tc = 0 mean "do not hold".
TEST_F(SchedulerTest, ExpiredDeadlineFlushesOnEnqueue) {
  Config c = paper_config(Policy::kSemantic);
  c.ctrl_timeout = 0;
  Scheduler s(c, clock);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 100), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kControlTimer);
  s.on_flushed(FlushReason::kControlTimer);

  c.timeout = 0;
  Scheduler z(c, clock);
  EXPECT_EQ(z.on_enqueue(PduClass::kData, 100), FlushReason::kTimer);

  // A late owner timer: the next PDU is not held past T either.
  Scheduler u(paper_config(Policy::kUniform), clock);
  at(0);
  u.on_enqueue(PduClass::kData, 100);
  at(51 * kUs);
  EXPECT_EQ(u.on_enqueue(PduClass::kData, 100), FlushReason::kTimer);
}

TEST_F(SchedulerTest, ByteCap) {
  Config c = paper_config(Policy::kUniform);
  c.bytes = 10000;
  Scheduler s(c, clock);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 4096), FlushReason::kByteCap);
  s.on_flushed(FlushReason::kByteCap);
  EXPECT_EQ(flushes(s, FlushReason::kByteCap), 1u);
  // Reaching the cap exactly counts.
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 5000), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kData, 5000), FlushReason::kByteCap);

  c.bytes = 0;  // disabled
  Scheduler z(c, clock);
  for (int i = 0; i < 15; ++i)
    EXPECT_EQ(z.on_enqueue(PduClass::kData, 1 << 20), FlushReason::kNone);
}

TEST_F(SchedulerTest, OffSendsEachPduAlone) {
  Scheduler s(paper_config(Policy::kOff), clock);
  for (int i = 0; i < 10; ++i) {
    at(i * kUs);
    PduClass cls = i % 3 == 0 ? PduClass::kControl : PduClass::kData;
    EXPECT_EQ(s.on_enqueue(cls, 100), FlushReason::kImmediate);
    EXPECT_EQ(s.queued_pdus(), 1u);
    EXPECT_EQ(s.queued_control(), 0u);
    EXPECT_EQ(s.next_deadline(), kNoDeadline);
    EXPECT_EQ(s.on_timer(), FlushReason::kNone);
    s.on_flushed(FlushReason::kImmediate);
  }
  const Stats& st = s.stats();
  EXPECT_EQ(st.flushes[size_t(FlushReason::kImmediate)], 10u);
  EXPECT_EQ(st.pdus_sent, 10u);
  EXPECT_EQ(st.pdus_per_flush.count(), 10u);
  EXPECT_EQ(st.pdus_per_flush.max(), 1u);
  // R2T delay is measured under off too: zero here, since the flush is immediate.
  EXPECT_EQ(st.r2t_delay_ns.count(), 4u);
  EXPECT_EQ(st.r2t_delay_ns.max(), 0u);
}

TEST_F(SchedulerTest, UniformIgnoresPduTypes) {
  Scheduler s(paper_config(Policy::kUniform), clock);
  at(0);
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kNone);  // c2 = 4 never bites
    EXPECT_EQ(s.queued_control(), 0u);
    EXPECT_EQ(s.control_deadline(), kNoDeadline);
  }
  at(10 * kUs);  // Tc has no meaning here
  EXPECT_EQ(s.on_timer(), FlushReason::kNone);
  EXPECT_EQ(s.on_enqueue(PduClass::kControl, 24), FlushReason::kCapacity);
  s.on_flushed(FlushReason::kCapacity);
  // Their delay is still measured: 15 R2Ts waited 10 us, the last one 0.
  EXPECT_EQ(s.stats().r2t_delay_ns.count(), 16u);
  EXPECT_EQ(s.stats().r2t_delay_ns.sum(), uint64_t(15 * 10 * kUs));
  EXPECT_EQ(s.stats().flushes[size_t(FlushReason::kControlCapacity)], 0u);
}

TEST_F(SchedulerTest, UrgentFlushesAtOnce) {
  for (Policy p : {Policy::kOff, Policy::kUniform, Policy::kSemantic}) {
    Scheduler s(paper_config(p), clock);
    if (p != Policy::kOff) {
      s.on_enqueue(PduClass::kData, 100);
      s.on_enqueue(PduClass::kControl, 24);
    }
    EXPECT_EQ(s.on_enqueue(PduClass::kUrgent, 128), FlushReason::kImmediate) << policy_name(p);
    s.on_flushed(FlushReason::kImmediate);
    // The whole group went out with it.
    EXPECT_EQ(s.stats().pdus_sent, p == Policy::kOff ? 1u : 3u);
    EXPECT_EQ(s.queued_pdus(), 0u);
    EXPECT_EQ(s.next_deadline(), kNoDeadline);
  }
}

TEST_F(SchedulerTest, R2tDelayExact) {
  Scheduler s(paper_config(Policy::kUniform), clock);
  at(0);
  s.on_enqueue(PduClass::kControl, 24);
  at(3 * kUs);
  s.on_enqueue(PduClass::kData, 4096);
  at(7 * kUs + 123);
  s.on_enqueue(PduClass::kControl, 24);
  at(50 * kUs);
  ASSERT_EQ(s.on_timer(), FlushReason::kTimer);
  s.on_flushed(FlushReason::kTimer);
  const Histogram& h = s.stats().r2t_delay_ns;
  EXPECT_EQ(h.count(), 2u);
  EXPECT_EQ(h.max(), uint64_t(50 * kUs));
  EXPECT_EQ(h.min(), uint64_t(43 * kUs - 123));
  EXPECT_EQ(h.sum(), uint64_t(93 * kUs - 123));
}

// More R2Ts than the group tracks one by one: count and sum stay exact.
TEST_F(SchedulerTest, R2tDelayBeyondTrackedSlots) {
  Config c = paper_config(Policy::kUniform);
  c.pdus = 1000;
  c.timeout = kSecond;
  Scheduler s(c, clock);
  uint64_t expected = 0;
  for (int i = 0; i < 150; ++i) {
    at(i * kUs + i % 7);  // uneven spacing so the mean is not a whole number
    s.on_enqueue(PduClass::kControl, 24);
    expected += uint64_t(200 * kUs - (i * kUs + i % 7));
  }
  at(200 * kUs);
  s.on_flushed(FlushReason::kClose);
  const Histogram& h = s.stats().r2t_delay_ns;
  EXPECT_EQ(h.count(), 150u);
  EXPECT_EQ(h.sum(), expected);
  EXPECT_EQ(h.max(), uint64_t(200 * kUs));
  // Another group starts clean.
  s.on_enqueue(PduClass::kControl, 24);
  s.on_flushed(FlushReason::kClose);
  EXPECT_EQ(h.count(), 151u);
  EXPECT_EQ(h.sum(), expected);
}

// A resumed partial send may find no new PDU: the reason counts, no batch of 0 is recorded.
TEST_F(SchedulerTest, EmptyFlushCountsReasonOnly) {
  Scheduler s(paper_config(Policy::kSemantic), clock);
  s.on_flushed(FlushReason::kSocketFull);
  s.on_flushed(FlushReason::kClose);
  EXPECT_EQ(flushes(s, FlushReason::kSocketFull), 1u);
  EXPECT_EQ(flushes(s, FlushReason::kClose), 1u);
  EXPECT_EQ(s.stats().pdus_per_flush.count(), 0u);
  EXPECT_EQ(s.stats().pdus_sent, 0u);
  s.on_enqueue(PduClass::kData, 100);
  s.on_flushed(FlushReason::kSocketFull);  // PDUs queued meanwhile go out with the resume
  EXPECT_EQ(flushes(s, FlushReason::kSocketFull), 2u);
  EXPECT_EQ(s.stats().pdus_per_flush.count(), 1u);
  EXPECT_EQ(s.stats().pdus_sent, 1u);
}

TEST_F(SchedulerTest, StatsMergeSumsEverything) {
  Scheduler a(paper_config(Policy::kSemantic), clock), b(paper_config(Policy::kOff), clock);
  at(0);
  a.on_enqueue(PduClass::kControl, 24);
  b.on_enqueue(PduClass::kControl, 24);
  b.on_flushed(FlushReason::kImmediate);
  at(10 * kUs);
  ASSERT_EQ(a.on_timer(), FlushReason::kControlTimer);
  a.on_flushed(FlushReason::kControlTimer);
  a.stats().send_calls = 3;
  b.stats().send_calls = 4;
  Stats total;
  total.merge(a.stats());
  total.merge(b.stats());
  EXPECT_EQ(total.pdus_sent, 2u);
  EXPECT_EQ(total.send_calls, 7u);
  EXPECT_EQ(total.flushes[size_t(FlushReason::kImmediate)], 1u);
  EXPECT_EQ(total.flushes[size_t(FlushReason::kControlTimer)], 1u);
  EXPECT_EQ(total.pdus_per_flush.count(), 2u);
  EXPECT_EQ(total.r2t_delay_ns.count(), 2u);
  EXPECT_EQ(total.r2t_delay_ns.sum(), uint64_t(10 * kUs));
}

TEST(SchedulerNames, PoliciesAndReasons) {
  Policy p = Policy::kOff;
  EXPECT_TRUE(parse_policy("semantic", &p));
  EXPECT_EQ(p, Policy::kSemantic);
  EXPECT_TRUE(parse_policy("uniform", &p));
  EXPECT_EQ(p, Policy::kUniform);
  EXPECT_TRUE(parse_policy("off", &p));
  EXPECT_EQ(p, Policy::kOff);
  EXPECT_FALSE(parse_policy("Semantic", &p));
  EXPECT_FALSE(parse_policy("", &p));
  EXPECT_EQ(p, Policy::kOff);  // untouched on failure
  EXPECT_TRUE(parse_policy("eager", &p));
  EXPECT_EQ(p, Policy::kEager);
  EXPECT_TRUE(parse_policy("adaptive", &p));
  EXPECT_EQ(p, Policy::kAdaptive);
  for (Policy q :
       {Policy::kOff, Policy::kEager, Policy::kUniform, Policy::kSemantic, Policy::kAdaptive}) {
    Policy back;
    ASSERT_TRUE(parse_policy(policy_name(q), &back));
    EXPECT_EQ(back, q);
  }
  EXPECT_STREQ(reason_name(FlushReason::kImmediate), "immediate");
  EXPECT_STREQ(reason_name(FlushReason::kCapacity), "capacity");
  EXPECT_STREQ(reason_name(FlushReason::kControlCapacity), "control_capacity");
  EXPECT_STREQ(reason_name(FlushReason::kTimer), "timer");
  EXPECT_STREQ(reason_name(FlushReason::kControlTimer), "control_timer");
  EXPECT_STREQ(reason_name(FlushReason::kByteCap), "byte_cap");
  EXPECT_STREQ(reason_name(FlushReason::kSocketFull), "socket_full");
  EXPECT_STREQ(reason_name(FlushReason::kClose), "close");
}

}  // namespace
}  // namespace sens::coalesce
