#include "coalesce/scheduler.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace sens::coalesce {

// Semantics fixed here (the tests in tests/coalesce pin each of them down):
//
// * Counting. Every PDU, whatever the policy, counts in the total counter and the byte
//   counter, so a kImmediate flush covers what is queued (usually 1 PDU). Only semantic and
//   adaptive count control PDUs in the control counter: under off/eager/uniform
//   queued_control() stays 0. Only semantic flushes at c2 of them (kControlCapacity):
//   adaptive's leave at the end of the pass anyway, and an extra send in mid-pass cost more
//   than the earlier R2T gained (16 KiB R2T writes 0.88-0.93x of eager with it, 1.03-1.05x
//   without, docs/results.md).
// * Deadlines. Under uniform, semantic and adaptive, the first PDU of an empty group (of any
//   class) arms deadline = now + T; under semantic, the first control PDU of the group arms
//   ctrl_deadline = now + Tc. Neither is re-armed or moved until the group is flushed; the
//   control deadline never moves the global one. Off and eager arm nothing.
// * on_pass_end (eager, adaptive) is where those two flush: eager always (kPassEnd),
//   adaptive per its rule (see scheduler.h). It also measures the arrival rate, so the
//   owner calls it at the end of every pass in which the connection enqueued or held PDUs.
// * on_enqueue order: kUrgent -> kImmediate, policy off -> kImmediate, then kCapacity
//   (total >= B), kControlCapacity (semantic, control >= c2), kByteCap (bytes >= cap),
//   then an already-expired deadline (same rule as on_timer). The counters are compared with >=, so
//   an owner that ignored a flush request is asked again on the next PDU. A deadline that is
//   already due at enqueue (T or Tc of 0, or a late owner timer) flushes at once rather than
//   holding the PDU past it.
// * on_timer: when both deadlines have passed, the earlier one names the flush; on a tie
//   kControlTimer wins (it is the more specific reason).
// * bytes == 0 disables the byte cap (a cap of 0 bytes would only mean "never coalesce",
//   which policy off already says).
// * on_flushed with an empty group (a kSocketFull resume, a kClose of an idle connection)
//   counts the reason but records no pdus_per_flush sample: a 0 would drag the batch-size
//   distribution down with flushes that carried no PDU of their own.
// * R2T delay is measured under every policy. The first kMaxTrackedR2T R2Ts of a group keep
//   their exact enqueue time; the ones after it (only possible with B > kMaxTrackedR2T or
//   policy misuse) are summarised by count and summed enqueue offsets, and recorded at their
//   mean delay, so the histogram's count and sum stay exact and only their spread is lost.

namespace {

Nanos saturating_add(Nanos t, Nanos d) {
  d = std::max<Nanos>(d, 0);
  return t > kNoDeadline - d ? kNoDeadline : t + d;
}

}  // namespace

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kOff:
      return "off";
    case Policy::kEager:
      return "eager";
    case Policy::kAdaptive:
      return "adaptive";
    case Policy::kUniform:
      return "uniform";
    case Policy::kSemantic:
      return "semantic";
  }
  return "unknown";
}

bool parse_policy(std::string_view name, Policy* out) {
  for (Policy p :
       {Policy::kOff, Policy::kEager, Policy::kUniform, Policy::kSemantic, Policy::kAdaptive}) {
    if (name == policy_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

const char* reason_name(FlushReason r) {
  switch (r) {
    case FlushReason::kNone:
      return "none";
    case FlushReason::kImmediate:
      return "immediate";
    case FlushReason::kCapacity:
      return "capacity";
    case FlushReason::kControlCapacity:
      return "control_capacity";
    case FlushReason::kTimer:
      return "timer";
    case FlushReason::kControlTimer:
      return "control_timer";
    case FlushReason::kByteCap:
      return "byte_cap";
    case FlushReason::kSocketFull:
      return "socket_full";
    case FlushReason::kClose:
      return "close";
    case FlushReason::kPassEnd:
      return "pass_end";
    case FlushReason::kControlPassEnd:
      return "control_pass_end";
    case FlushReason::kCount:
      break;
  }
  return "unknown";
}

void Stats::merge(const Stats& other) {
  pdus_sent += other.pdus_sent;
  holds += other.holds;
  send_calls += other.send_calls;
  for (size_t i = 0; i < flushes.size(); ++i) flushes[i] += other.flushes[i];
  pdus_per_flush.merge(other.pdus_per_flush);
  r2t_delay_ns.merge(other.r2t_delay_ns);
  timer_flush_late_ns.merge(other.timer_flush_late_ns);
}

Scheduler::Scheduler(const Config& config, const Clock& clock) : config_(config), clock_(clock) {}

FlushReason Scheduler::on_enqueue(PduClass cls, uint32_t bytes, uint32_t pdus) {
  const Policy policy = config_.policy;
  const bool coalescing = policy != Policy::kOff;
  // Eager holds nothing past the pass, so it needs no timer; adaptive's T bounds a hold.
  const bool timed =
      policy == Policy::kUniform || policy == Policy::kSemantic || policy == Policy::kAdaptive;
  // Adaptive counts control PDUs like semantic but has neither c2 nor Tc: its control PDUs
  // leave at the end of the pass.
  const bool classes = policy == Policy::kSemantic || policy == Policy::kAdaptive;

  // Uniform and semantic check their deadlines on every PDU (a late timer must not hold a
  // group past T). Adaptive checks at every pass end, so it reads the clock only to open a
  // group or for a control PDU: at high load most of its PDUs cost no clock read.
  const bool needs_time = policy == Policy::kUniform || policy == Policy::kSemantic ||
                          (pdus_ == 0 && timed) || cls == PduClass::kControl;
  const Nanos now = needs_time ? clock_.now() : 0;
  if (pdus_ == 0 && timed) deadline_ = saturating_add(now, config_.timeout);
  pdus_ += pdus;
  pass_pdus_ += pdus;
  bytes_ = bytes > UINT32_MAX - bytes_ ? UINT32_MAX : bytes_ + bytes;

  if (cls == PduClass::kControl) {
    track_r2t(now);
    if (classes) {
      if (ctrl_ == 0 && policy == Policy::kSemantic)
        ctrl_deadline_ = saturating_add(now, config_.ctrl_timeout);
      ++ctrl_;
    }
  }

  if (cls == PduClass::kUrgent || !coalescing) return FlushReason::kImmediate;
  if (pdus_ >= config_.pdus && (!pass_batched(policy) || bytes_ < pdus_ * kSmallPduBytes))
    return FlushReason::kCapacity;
  if (policy == Policy::kSemantic && ctrl_ > 0 && ctrl_ >= config_.ctrl_pdus)
    return FlushReason::kControlCapacity;
  if (config_.bytes > 0 && bytes_ >= config_.bytes) return FlushReason::kByteCap;
  return needs_time ? expired(now) : FlushReason::kNone;
}

double Scheduler::arrival_rate() const {
  if (ewma_pass_gap_ns_ <= 0) return 0;
  return ewma_pass_pdus_ / ewma_pass_gap_ns_ * double(kSecond);
}

double Scheduler::hold_threshold(uint32_t room) {
  // E[min(N, room)] = sum_{k<room} P(N > k) grows with mu from 0 to room; for room >= 2 it
  // reaches 1 between mu = 1 (room -> inf, where it tends to mu) and ~1.15 (room = 2).
  constexpr uint32_t kTable = 64;
  static const std::array<double, kTable + 1> table = [] {
    std::array<double, kTable + 1> t{};
    auto gain = [](double mu, uint32_t r) {
      double pmf = std::exp(-mu), cdf = pmf, sum = 0;  // P(N = 0), P(N <= 0)
      for (uint32_t k = 0; k < r; ++k) {
        sum += 1 - cdf;  // P(N > k)
        pmf *= mu / double(k + 1);
        cdf += pmf;
      }
      return sum;
    };
    t[0] = t[1] = INFINITY;
    for (uint32_t r = 2; r <= kTable; ++r) {
      double lo = 0.5, hi = 2.0;
      for (int i = 0; i < 60; ++i) {
        double mid = (lo + hi) / 2;
        (gain(mid, r) >= 1 ? hi : lo) = mid;
      }
      t[r] = hi;
    }
    return t;
  }();
  return table[std::min(room, kTable)];
}

FlushReason Scheduler::on_pass_end(double busy, uint32_t in_progress) {
  const Nanos now = clock_.now();
  if (pass_pdus_ > 0) {
    if (last_arrival_pass_ >= 0) {
      const double gap = double(std::max<Nanos>(now - last_arrival_pass_, 1));
      const double n = double(pass_pdus_);
      constexpr double kWeight = 1.0 / 8;  // about the last 8 passes with arrivals
      if (ewma_pass_gap_ns_ <= 0) {
        ewma_pass_gap_ns_ = gap;
        ewma_pass_pdus_ = n;
      } else {
        ewma_pass_gap_ns_ += kWeight * (gap - ewma_pass_gap_ns_);
        ewma_pass_pdus_ += kWeight * (n - ewma_pass_pdus_);
      }
    }
    last_arrival_pass_ = now;
    pass_pdus_ = 0;
  }
  if (pdus_ == 0) return FlushReason::kNone;
  switch (config_.policy) {
    case Policy::kEager:
      return FlushReason::kPassEnd;
    case Policy::kAdaptive: {
      if (ctrl_ > 0) return FlushReason::kControlPassEnd;
      if (FlushReason due = expired(now); due != FlushReason::kNone) return due;
      if (busy < kHoldBusy) return FlushReason::kPassEnd;
      const uint32_t room = config_.pdus > pdus_ ? config_.pdus - pdus_ : 0;
      const double mu =
          std::min(arrival_rate() * double(deadline_ - now) / double(kSecond), double(in_progress));
      if (mu < hold_threshold(room)) return FlushReason::kPassEnd;
      ++stats_.holds;
      return FlushReason::kNone;
    }
    default:
      return FlushReason::kNone;  // the other policies decide on enqueue and on their timers
  }
}

FlushReason Scheduler::on_timer() {
  return expired(clock_.now());
}

FlushReason Scheduler::expired(Nanos now) const {
  // Deadlines are kNoDeadline unless armed, and only armed while the group holds PDUs.
  if (ctrl_deadline_ <= deadline_ && now >= ctrl_deadline_) return FlushReason::kControlTimer;
  if (now >= deadline_) return FlushReason::kTimer;
  return FlushReason::kNone;
}

Nanos Scheduler::next_deadline() const {
  return std::min(deadline_, ctrl_deadline_);
}

void Scheduler::track_r2t(Nanos now) {
  if (r2t_tracked_ < kMaxTrackedR2T) {
    r2t_enqueued_[r2t_tracked_++] = now;
    return;
  }
  if (r2t_overflow_ == 0) r2t_overflow_base_ = now;
  ++r2t_overflow_;
  r2t_overflow_offsets_ += uint64_t(now - r2t_overflow_base_);
}

void Scheduler::on_flushed(FlushReason reason) {
  // Only the R2T delay and timer lateness statistics need the time.
  const bool timer = reason == FlushReason::kTimer || reason == FlushReason::kControlTimer;
  const Nanos now = timer || r2t_tracked_ > 0 || r2t_overflow_ > 0 ? clock_.now() : 0;
  const size_t r = std::min(size_t(reason), stats_.flushes.size() - 1);
  ++stats_.flushes[r];
  if (timer && next_deadline() != kNoDeadline) {
    stats_.timer_flush_late_ns.record(uint64_t(std::max<Nanos>(now - next_deadline(), 0)));
  }
  if (pdus_ > 0) {
    stats_.pdus_per_flush.record(pdus_);
    stats_.pdus_sent += pdus_;
  }
  for (uint32_t i = 0; i < r2t_tracked_; ++i) {
    stats_.r2t_delay_ns.record(uint64_t(std::max<Nanos>(now - r2t_enqueued_[i], 0)));
  }
  if (r2t_overflow_ > 0) {
    // Total delay = n * (now - base) - sum(offsets); split it into floor/ceil samples so the
    // histogram's sum is exact.
    const uint64_t n = r2t_overflow_;
    const uint64_t elapsed = uint64_t(std::max<Nanos>(now - r2t_overflow_base_, 0));
    const uint64_t total = n * elapsed - std::min(r2t_overflow_offsets_, n * elapsed);
    const uint64_t q = total / n, rem = total % n;
    if (n > rem) stats_.r2t_delay_ns.record(q, n - rem);
    if (rem > 0) stats_.r2t_delay_ns.record(q + 1, rem);
  }
  pdus_ = ctrl_ = bytes_ = 0;
  deadline_ = ctrl_deadline_ = kNoDeadline;
  r2t_tracked_ = 0;
  r2t_overflow_ = 0;
  r2t_overflow_offsets_ = 0;
}

}  // namespace sens::coalesce
