// Random sequences of enqueue / clock advance / timer against a deliberately naive reference
// model (a list of queued PDUs, every quantity recomputed from it), under random configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "coalesce/scheduler.h"

namespace sens::coalesce {
namespace {

struct RefPdu {
  Nanos t;
  PduClass cls;
  uint32_t bytes;
};

// The reference: what the scheduler should say, recomputed from the queued PDUs.
class Reference {
 public:
  explicit Reference(const Config& c) : c_(c) {}

  FlushReason enqueue(Nanos now, PduClass cls, uint32_t bytes) {
    q_.push_back({now, cls, bytes});
    if (cls == PduClass::kUrgent || c_.policy == Policy::kOff) return FlushReason::kImmediate;
    uint64_t bytes_total = 0;
    for (auto& p : q_) bytes_total += p.bytes;
    // Eager and adaptive: B splits a pass of small PDUs only; one of payload, the byte cap.
    const bool small = bytes_total < q_.size() * kSmallPduBytes;
    if (q_.size() >= c_.pdus && (!pass_batched(c_.policy) || small)) return FlushReason::kCapacity;
    // Only semantic flushes at c2 R2Ts; adaptive's leave with the pass.
    if (c_.policy == Policy::kSemantic && control() >= 1 && control() >= c_.ctrl_pdus)
      return FlushReason::kControlCapacity;
    if (c_.bytes > 0 && bytes_total >= c_.bytes) return FlushReason::kByteCap;
    return timer(now);
  }

  FlushReason timer(Nanos now) const {
    Nanos d = deadline(), cd = control_deadline();
    if (now >= cd && cd <= d) return FlushReason::kControlTimer;
    if (now >= d) return FlushReason::kTimer;
    return FlushReason::kNone;
  }

  Nanos deadline() const {
    if (q_.empty() || c_.policy == Policy::kOff || c_.policy == Policy::kEager)
      return kNoDeadline;  // eager flushes at the end of the pass, not on a timer
    return q_.front().t + c_.timeout;
  }
  Nanos control_deadline() const {
    if (c_.policy != Policy::kSemantic) return kNoDeadline;
    for (auto& p : q_) {
      if (p.cls == PduClass::kControl) return p.t + c_.ctrl_timeout;
    }
    return kNoDeadline;
  }
  uint32_t control() const {
    if (c_.policy != Policy::kSemantic && c_.policy != Policy::kAdaptive) return 0;
    return uint32_t(
        std::count_if(q_.begin(), q_.end(), [](auto& p) { return p.cls == PduClass::kControl; }));
  }
  uint32_t bytes() const {
    uint32_t b = 0;
    for (auto& p : q_) b += p.bytes;
    return b;
  }
  size_t size() const { return q_.size(); }

  void flush(Nanos now, FlushReason r) {
    ++flushes[size_t(r)];
    if (!q_.empty()) ++batches, batch_sum += q_.size();
    for (auto& p : q_) {
      if (p.cls == PduClass::kControl) ++r2t_count, r2t_sum += uint64_t(now - p.t);
    }
    q_.clear();
  }

  std::array<uint64_t, size_t(FlushReason::kCount)> flushes{};
  uint64_t batches = 0, batch_sum = 0, r2t_count = 0, r2t_sum = 0;

 private:
  Config c_;
  std::vector<RefPdu> q_;
};

TEST(SchedulerProperty, MatchesReferenceAndHonoursLimits) {
  std::mt19937_64 rng(20240229);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  uint64_t total_flushes = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Config c;
    c.policy = Policy(uni(0, 4));  // off, eager, uniform, semantic, adaptive
    c.pdus = uint32_t(uni(1, 20));
    c.ctrl_pdus = uint32_t(uni(0, 6));
    c.timeout = uni(0, 100) * kMicro;
    c.ctrl_timeout = uni(0, 60) * kMicro;
    c.bytes = uni(0, 3) == 0 ? 0 : uint32_t(uni(1000, 40000));
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " policy " << policy_name(c.policy)
                                      << " B " << c.pdus << " c2 " << c.ctrl_pdus);
    ManualClock clock(uni(0, 1) * kSecond);
    Scheduler s(c, clock);
    Reference ref(c);
    auto flush = [&](FlushReason r) {
      ref.flush(clock.now(), r);
      s.on_flushed(r);
    };

    for (int step = 0; step < 400; ++step) {
      const int op = int(uni(0, 99));
      if (op < 55) {  // a PDU joins
        const int k = int(uni(0, 99));
        PduClass cls = k < 60 ? PduClass::kData : k < 97 ? PduClass::kControl : PduClass::kUrgent;
        uint32_t bytes = uint32_t(uni(8, 9000));
        FlushReason got = s.on_enqueue(cls, bytes);
        ASSERT_EQ(got, ref.enqueue(clock.now(), cls, bytes));
        if (!pass_batched(c.policy)) {
          ASSERT_LE(s.queued_pdus(), std::max<uint32_t>(c.pdus, 1));
        }
        if (got != FlushReason::kNone) flush(got);
      } else if (op < 90) {  // time passes; a punctual owner fires its timer at next_deadline()
        // Whole microseconds half the time, so deadlines tie and land exactly on PDUs.
        const Nanos dt = uni(0, 1) ? uni(0, 40) * kMicro : uni(0, 40 * kMicro);
        const Nanos target = clock.now() + dt;
        while (s.next_deadline() <= target) {
          clock.set(std::max(clock.now(), s.next_deadline()));
          FlushReason got = s.on_timer();
          ASSERT_NE(got, FlushReason::kNone) << "a deadline passed and nothing flushed";
          ASSERT_EQ(got, ref.timer(clock.now()));
          flush(got);
        }
        clock.set(target);
        ASSERT_EQ(s.on_timer(), FlushReason::kNone);
      } else if (op < 97) {  // a late owner: time jumps past deadlines, then one timer check
        clock.advance(uni(0, 120) * kMicro);
        FlushReason got = s.on_timer();
        ASSERT_EQ(got, ref.timer(clock.now()));
        if (got != FlushReason::kNone) flush(got);
      } else {  // close, or a resumed partial send (possibly with an empty group)
        flush(uni(0, 1) ? FlushReason::kClose : FlushReason::kSocketFull);
      }

      // Invariants after the owner acted on what the scheduler said.
      ASSERT_EQ(s.queued_pdus(), ref.size());
      ASSERT_EQ(s.queued_control(), ref.control());
      ASSERT_EQ(s.queued_bytes(), ref.bytes());
      ASSERT_EQ(s.deadline(), ref.deadline());
      ASSERT_EQ(s.control_deadline(), ref.control_deadline());
      ASSERT_EQ(s.next_deadline(), std::min(ref.deadline(), ref.control_deadline()));
      if (c.policy == Policy::kOff) {
        ASSERT_EQ(s.queued_pdus(), 0u);
      } else {
        // Never holds B, but for an eager or adaptive group of payload (the byte cap's).
        if (!pass_batched(c.policy) || s.queued_bytes() < s.queued_pdus() * kSmallPduBytes) {
          ASSERT_LT(s.queued_pdus(), std::max<uint32_t>(c.pdus, 1));
        }
        if (c.bytes > 0) {
          ASSERT_LT(s.queued_bytes(), c.bytes);
        }
        // Nothing queued is past its deadline.
        if (s.queued_pdus() > 0) {
          ASSERT_LT(clock.now(), s.next_deadline());
        }
      }
    }
    flush(FlushReason::kClose);

    const Stats& st = s.stats();
    ASSERT_EQ(st.flushes, ref.flushes);
    ASSERT_EQ(st.pdus_sent, ref.batch_sum);
    ASSERT_EQ(st.pdus_per_flush.count(), ref.batches);
    ASSERT_EQ(st.pdus_per_flush.sum(), ref.batch_sum);
    if (!pass_batched(c.policy)) {
      ASSERT_LE(st.pdus_per_flush.max(), std::max<uint32_t>(c.pdus, 1));
    }
    ASSERT_EQ(st.r2t_delay_ns.count(), ref.r2t_count);
    ASSERT_EQ(st.r2t_delay_ns.sum(), ref.r2t_sum);
    for (auto n : st.flushes) total_flushes += n;
  }
  EXPECT_GT(total_flushes, 10000u);  // the random walk really exercised the scheduler
}

}  // namespace
}  // namespace sens::coalesce
