#pragma once
// The SENS coalescing scheduler: per connection, decides *when* the queued PDUs are flushed
// in one vectored send. Pure logic over an injected clock: it owns no socket and no buffer,
// so its state machine is tested exactly (see tests/coalesce).
#include <array>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "common/histogram.h"

namespace sens::coalesce {

enum class Policy : uint8_t {
  kOff,       // every PDU is sent at once, alone (the Linux kernel today)
  kUniform,   // one capacity B and one timer T for all PDUs (i10, PGIC)
  kSemantic,  // uniform plus a control counter c2 and a shorter timer Tc for R2T (SENS)
};
const char* policy_name(Policy p);
bool parse_policy(std::string_view name, Policy* out);

// Control PDUs (R2T) unblock a peer; data PDUs (C2HData, H2CData, CapsuleCmd, CapsuleResp) do
// not. Urgent PDUs (ICReq/ICResp, TermReq, admin queue traffic) are never delayed.
enum class PduClass : uint8_t { kData, kControl, kUrgent };

enum class FlushReason : uint8_t {
  kNone = 0,         // no flush due
  kImmediate,        // policy off, or an urgent PDU
  kCapacity,         // B PDUs queued
  kControlCapacity,  // c2 control PDUs queued
  kTimer,            // T expired
  kControlTimer,     // Tc expired
  kByteCap,          // the byte cap reached
  kSocketFull,       // a partial send resumed when the socket became writable
  kClose,            // the connection is closing
  kCount
};
const char* reason_name(FlushReason r);  // JSON keys: "capacity", "control_timer", ...

struct Config {
  Policy policy = Policy::kSemantic;
  uint32_t pdus = 16;                // B (--pg-pdus)
  Nanos timeout = 50 * kMicro;       // T (--pg-timeout-us)
  uint32_t ctrl_pdus = 4;            // c2 (--ctrl-pdus)
  Nanos ctrl_timeout = 10 * kMicro;  // Tc (--ctrl-timeout-us)
  uint32_t bytes = 64 * 1024;        // byte cap (--pg-bytes)
};

inline constexpr Nanos kNoDeadline = INT64_MAX;

// Counters a connection exports (summed over connections by the owner).
struct Stats {
  uint64_t pdus_sent = 0;
  uint64_t send_calls = 0;  // filled by the sender: sendmsg() calls made
  std::array<uint64_t, size_t(FlushReason::kCount)> flushes{};
  Histogram pdus_per_flush;
  Histogram r2t_delay_ns;  // from an R2T entering the group to its flush

  void merge(const Stats& other);
};

class Scheduler {
 public:
  Scheduler(const Config& config, const Clock& clock);

  // A PDU of `bytes` bytes joined the group. Returns the reason to flush now, or kNone.
  FlushReason on_enqueue(PduClass cls, uint32_t bytes);
  // Returns the reason to flush if a deadline has passed at clock.now(), else kNone.
  FlushReason on_timer();
  // The earliest pending deadline, or kNoDeadline (the owner arms its timer for it).
  Nanos next_deadline() const;
  // The group was handed to the socket for `reason`: record the flush and start a new group.
  void on_flushed(FlushReason reason);

  // Observable state (Figure 3 of the paper).
  uint32_t queued_pdus() const { return pdus_; }     // total counter
  uint32_t queued_control() const { return ctrl_; }  // control counter
  uint32_t queued_bytes() const { return bytes_; }
  Nanos deadline() const { return deadline_; }               // T, armed by the group's first PDU
  Nanos control_deadline() const { return ctrl_deadline_; }  // Tc, armed by the first R2T
  const Config& config() const { return config_; }
  Stats& stats() { return stats_; }
  const Stats& stats() const { return stats_; }

 private:
  Config config_;
  const Clock& clock_;
  uint32_t pdus_ = 0, ctrl_ = 0, bytes_ = 0;
  Nanos deadline_ = kNoDeadline, ctrl_deadline_ = kNoDeadline;
  static constexpr int kMaxTrackedR2T = 64;
  std::array<Nanos, kMaxTrackedR2T> r2t_enqueued_{};  // enqueue times of this group's R2Ts
  uint32_t r2t_tracked_ = 0;  // used slots of r2t_enqueued_ (R2Ts are tracked under every policy)
  // R2Ts beyond kMaxTrackedR2T: their count and enqueue offsets from the first of them, so
  // they are recorded at their exact mean delay without storing each time.
  uint64_t r2t_overflow_ = 0, r2t_overflow_offsets_ = 0;
  Nanos r2t_overflow_base_ = 0;
  Stats stats_;

  FlushReason expired(Nanos now) const;  // the timer reason due at `now`, or kNone
  void track_r2t(Nanos now);
};

}  // namespace sens::coalesce
