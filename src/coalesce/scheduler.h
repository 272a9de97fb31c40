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
  kEager,     // a connection's PDUs leave together once the reactor pass has handled every
              // ready event (SPDK's posix sockets flush once per poll)
  kUniform,   // one capacity B and one timer T for all PDUs (i10, PGIC)
  kSemantic,  // uniform plus a control counter c2 and a shorter timer Tc for R2T (SENS)
  kAdaptive,  // eager, except that data PDUs are held past the pass while holding pays (see
              // Scheduler::on_pass_end); control PDUs always leave with the pass
};
const char* policy_name(Policy p);
// Eager and adaptive: a group is what one reactor pass queued (plus, adaptive, what it held).
inline bool pass_batched(Policy p) {
  return p == Policy::kEager || p == Policy::kAdaptive;
}
// Under eager and adaptive, B splits a pass of small PDUs (answers, R2Ts, read commands; below
// this many bytes each on average): the peer acts on the first while the rest are made. A pass
// of payload is split only by the byte cap: fewer, larger sends of data cost both cores less.
inline constexpr uint32_t kSmallPduBytes = 512;
bool parse_policy(std::string_view name, Policy* out);

// Control PDUs (R2T) unblock a peer; data PDUs (C2HData, H2CData, CapsuleCmd, CapsuleResp) do
// not. Urgent PDUs (ICReq/ICResp, TermReq, admin queue traffic) are never delayed.
enum class PduClass : uint8_t { kData, kControl, kUrgent };

enum class FlushReason : uint8_t {
  kNone = 0,         // no flush due
  kImmediate,        // policy off, or an urgent PDU
  kCapacity,         // B PDUs queued
  kControlCapacity,  // c2 control PDUs queued (semantic)
  kTimer,            // T expired
  kControlTimer,     // Tc expired
  kByteCap,          // the byte cap reached
  kSocketFull,       // a partial send resumed when the socket became writable
  kClose,            // the connection is closing
  kPassEnd,          // eager/adaptive: the reactor pass ended (adaptive: holding would not pay)
  kControlPassEnd,   // adaptive: the pass ended with a control PDU in the group
  kCount
};
const char* reason_name(FlushReason r);  // JSON keys: "capacity", "control_timer", ...

struct Config {
  Policy policy = Policy::kAdaptive;
  uint32_t pdus = 16;                // B (--pg-pdus)
  Nanos timeout = 50 * kMicro;       // T (--pg-timeout-us)
  uint32_t ctrl_pdus = 4;            // c2 (--ctrl-pdus)
  Nanos ctrl_timeout = 10 * kMicro;  // Tc (--ctrl-timeout-us)
  // Byte cap (--pg-bytes). 1 MiB: an eager or adaptive pass of read answers goes out in one
  // send up to 1 MiB (QD 254 of 4 KiB, 8 of 128 KiB). A cut mid-pass cost more than the send
  // it saves: 64 KiB -> 256 KiB gave 4 KiB reads QD128 1.34x, QD32 1.09x; 256 KiB -> 1 MiB
  // 128 KiB reads QD8 1.42x, QD32 1.63x, 4 KiB QD128 1.06x (2 MiB: no more). With uniform and
  // semantic, B binds first for PDUs up to 64 KiB. The host's default
  // (ControllerOptions::pg_bytes, sens perf's --pg-bytes) is 1 MiB too: 64 KiB cut a pass of
  // 128 KiB writes' data at each PDU (writes 128 KiB QD32 1.15x, QD8 1.08x with 1 MiB).
  uint32_t bytes = 1024 * 1024;
  bool operator==(const Config&) const = default;
};

inline constexpr Nanos kNoDeadline = INT64_MAX;

// Counters a connection exports (summed over connections by the owner).
struct Stats {
  uint64_t pdus_sent = 0;
  uint64_t holds = 0;       // adaptive: pass ends at which the group was held, not flushed
  uint64_t send_calls = 0;  // filled by the sender: sendmsg() calls made
  std::array<uint64_t, size_t(FlushReason::kCount)> flushes{};
  Histogram pdus_per_flush;
  Histogram r2t_delay_ns;  // from an R2T entering the group to its flush
  // Timer flushes: from the deadline to the flush (a late reactor pass, or the thread
  // preempted in the handler), so that "an R2T waits at most Tc" can be checked end to end.
  Histogram timer_flush_late_ns;

  void merge(const Stats& other);
};

class Scheduler {
 public:
  Scheduler(const Config& config, const Clock& clock);

  // A PDU of `bytes` bytes joined the group (or `pdus` PDUs of one class, `bytes` in all,
  // queued together: a read's data and its response). Returns the reason to flush now, or
  // kNone.
  FlushReason on_enqueue(PduClass cls, uint32_t bytes, uint32_t pdus = 1);
  // Returns the reason to flush if a deadline has passed at clock.now(), else kNone.
  FlushReason on_timer();
  // The earliest pending deadline, or kNoDeadline (the owner arms its timer for it).
  Nanos next_deadline() const;
  // The group was handed to the socket for `reason`: record the flush and start a new group.
  void on_flushed(FlushReason reason);

  // Eager and adaptive: the reactor has handled every ready event of its pass. `busy` is the
  // reactor's recent busy fraction (0..1: time spent working, not waiting for events). Returns
  // the reason to flush now, or kNone to hold the group (adaptive) or when it is empty.
  //
  // Adaptive holds a group of data PDUs only when both hold:
  //  * the reactor is saturated (busy >= kHoldBusy): coalescing trades latency for CPU, so it
  //    pays only where CPU is what limits; a reactor with idle time flushes at once, which is
  //    also why a QD1 exchange (the reactor waits for the peer) never holds;
  //  * the model expects at least one more PDU to join before the timer: with the
  //    connection's measured arrival rate lambda and the time left to the deadline, Eq. 1
  //    gives E[B_eff] >= 2 for the room left in the group (see hold_threshold()).
  //    The expected count is capped by `in_progress`: the connection's work under way that
  //    will queue PDUs without waiting for this group (target: commands not yet answered and
  //    not in the group; host: commands the target holds). The measured rate assumes
  //    arrivals go on while the group waits; in a closed loop that has handed all its
  //    commands' answers to the group, nothing more comes until it leaves.
  FlushReason on_pass_end(double busy, uint32_t in_progress = UINT32_MAX);
  // The smallest expected arrival count mu = lambda * t for which a group with `room` more
  // places gains at least one PDU on average: E[min(N(mu), room)] >= 1 (infinite for room < 2).
  static double hold_threshold(uint32_t room);
  static constexpr double kHoldBusy = 0.9;
  // The connection's arrival rate (PDUs per second) as the adaptive rule sees it.
  double arrival_rate() const;

  // Observable state (Figure 3 of the paper).
  uint32_t queued_pdus() const { return pdus_; }     // total counter
  uint32_t queued_control() const { return ctrl_; }  // control counter
  uint32_t queued_bytes() const { return bytes_; }
  Nanos deadline() const { return deadline_; }               // T, armed by the group's first PDU
  Nanos control_deadline() const { return ctrl_deadline_; }  // Tc, armed by the first R2T
  const Config& config() const { return config_; }
  Stats& stats() { return stats_; }
  const Stats& stats() const { return stats_; }
  // Carries counters over to a scheduler made with a new configuration (a live retune), or
  // zeroes them (stats reset).
  void adopt_stats(Stats stats) { stats_ = std::move(stats); }

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

  // Arrivals per pass, for the adaptive rule: PDUs enqueued since the last pass end, and
  // EWMAs of PDUs per pass with arrivals and of the time between such passes.
  uint32_t pass_pdus_ = 0;
  Nanos last_arrival_pass_ = -1;
  double ewma_pass_pdus_ = 0, ewma_pass_gap_ns_ = 0;

  FlushReason expired(Nanos now) const;  // the timer reason due at `now`, or kNone
  void track_r2t(Nanos now);
};

}  // namespace sens::coalesce
