#include "coalesce/scheduler.h"

#include <algorithm>

namespace sens::coalesce {

// Semantics fixed here (the tests in tests/coalesce pin each of them down):
//
// * Counting. Every PDU, whatever the policy, counts in the total counter and the byte
//   counter, so a kImmediate flush covers what is queued (usually 1 PDU). Only the semantic
//   policy counts control PDUs in the control counter: under off/uniform queued_control()
//   stays 0 and no control deadline is ever armed.
// * Deadlines. Under uniform and semantic, the first PDU of an empty group (of any class)
//   arms deadline = now + T; under semantic, the first control PDU of the group arms
//   ctrl_deadline = now + Tc. Neither is re-armed or moved until the group is flushed; the
//   control deadline never moves the global one. Policy off arms nothing.
// * on_enqueue order: kUrgent -> kImmediate, policy off -> kImmediate, then kCapacity
//   (total >= B), kControlCapacity (semantic, control >= c2), kByteCap (bytes >= cap), then an
//   already-expired deadline (same rule as on_timer). The counters are compared with >=, so an
//   owner that ignored a flush request is asked again on the next PDU. A deadline that is
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
    case Policy::kUniform:
      return "uniform";
    case Policy::kSemantic:
      return "semantic";
  }
  return "unknown";
}

bool parse_policy(std::string_view name, Policy* out) {
  for (Policy p : {Policy::kOff, Policy::kUniform, Policy::kSemantic}) {
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
    case FlushReason::kCount:
      break;
  }
  return "unknown";
}

void Stats::merge(const Stats& other) {
  pdus_sent += other.pdus_sent;
  send_calls += other.send_calls;
  for (size_t i = 0; i < flushes.size(); ++i) flushes[i] += other.flushes[i];
  pdus_per_flush.merge(other.pdus_per_flush);
  r2t_delay_ns.merge(other.r2t_delay_ns);
}

Scheduler::Scheduler(const Config& config, const Clock& clock) : config_(config), clock_(clock) {}

FlushReason Scheduler::on_enqueue(PduClass cls, uint32_t bytes) {
  const Nanos now = clock_.now();
  const Policy policy = config_.policy;
  const bool coalescing = policy != Policy::kOff;

  if (pdus_ == 0 && coalescing) deadline_ = saturating_add(now, config_.timeout);
  ++pdus_;
  bytes_ = bytes > UINT32_MAX - bytes_ ? UINT32_MAX : bytes_ + bytes;

  if (cls == PduClass::kControl) {
    track_r2t(now);
    if (policy == Policy::kSemantic) {
      if (ctrl_ == 0) ctrl_deadline_ = saturating_add(now, config_.ctrl_timeout);
      ++ctrl_;
    }
  }

  if (cls == PduClass::kUrgent || !coalescing) return FlushReason::kImmediate;
  if (pdus_ >= config_.pdus) return FlushReason::kCapacity;
  if (policy == Policy::kSemantic && ctrl_ > 0 && ctrl_ >= config_.ctrl_pdus) {
    return FlushReason::kControlCapacity;
  }
  if (config_.bytes > 0 && bytes_ >= config_.bytes) return FlushReason::kByteCap;
  return expired(now);
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
  const Nanos now = clock_.now();
  const size_t r = std::min(size_t(reason), stats_.flushes.size() - 1);
  ++stats_.flushes[r];
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
