#pragma once
// Per-host and per-namespace QoS: IOPS and bandwidth limits (read, write, total), enforced by
// token buckets without sleeping a reactor. Pure logic over an injected clock (like the
// coalescing scheduler): it owns no timer and no request, so it is tested exactly
// (tests/target/qos_test.cc). The reactor side (qos_reactor.h) keeps one Limiter per limited
// entity per reactor, arms a timer for its first waiter and resumes the commands it releases.
//
// Design: each reactor enforces its share of a limit, limit / reactors, in buckets only it
// touches: no atomic and no lock on the data path, and no cross-thread cache line per I/O.
// A shared bucket refilled by one owner would hold the limit exactly whatever the spread of
// a host's queues, but every admission would then be an atomic read-modify-write on a line
// all reactors write. The split is exact with one reactor (the default, --cores 1) and when
// the entity's load spreads evenly (a Linux host opens a queue per CPU and the target deals
// connections round-robin); an entity whose queues all land on one of N reactors gets 1/N
// of its limit (README "QoS").
#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "common/clock.h"

namespace sens::target::qos {

// The limits of one entity (a namespace, or a host within a subsystem); 0: unlimited.
// IOPS are commands a second, bandwidth MiB (2^20 bytes) a second.
struct Limits {
  uint64_t read_iops = 0, write_iops = 0, total_iops = 0;
  uint64_t read_mibps = 0, write_mibps = 0, total_mibps = 0;
  bool any() const;
  bool operator==(const Limits&) const = default;
};
inline constexpr int kKeyCount = 6;
// "read_iops", "write_iops", "total_iops", "read_mibps", "write_mibps", "total_mibps".
extern const char* const kKeys[kKeyCount];
uint64_t& field(Limits& l, int key);
uint64_t field(const Limits& l, int key);
inline constexpr uint64_t kMaxIops = 100'000'000;  // bounds that keep the arithmetic exact
inline constexpr uint64_t kMaxMibps = 1'000'000;

// A subsystem's limits.
struct Config {
  std::map<uint32_t, Limits> namespaces;  // by nsid
  std::map<std::string, Limits> hosts;    // by host NQN
  bool empty() const { return namespaces.empty() && hosts.empty(); }
  bool operator==(const Config&) const = default;
};

// {"read_iops": N, ...}: the keys given replace those of *out (0 lifts that limit). Unknown
// keys, non-integers and values past the bounds are refused with `where` and the key named.
bool parse_limits(const nlohmann::json& v, const std::string& where, Limits* out,
                  std::string* error);
nlohmann::json limits_json(const Limits& l);  // the non-zero keys only
// A subsystem's "qos": {"namespaces": {"1": {...}}, "hosts": {"HOSTNQN": {...}}}. Entities
// whose limits are all 0 are dropped.
bool parse_config(const nlohmann::json& v, const std::string& where, Config* out,
                  std::string* error);
nlohmann::json config_json(const Config& c);
// The command line's --qos: "ns=NSID,KEY=N[,KEY=N...]" or "host=HOSTNQN,KEY=N[,...]"; the
// keys given replace those already set for that entity in *out.
bool parse_option(const std::string& text, Config* out, std::string* error);
// "" or what is wrong (an nsid out of 1..1024, a host that is not an NQN, a value too large).
std::string check_config(const Config& c);

enum class Dir : uint8_t { kRead, kWrite };

// `rate` units a second, holding at most `burst` units; a reactor's share divides the rate.
// A command costing n units may go once the bucket holds min(n, burst) (a command larger
// than the bucket waits for a full one and leaves it in debt), so the long-run rate is
// exact and a large command is never stuck.
class TokenBucket {
 public:
  // rate 0: unlimited. Starts full.
  void configure(uint64_t rate, uint32_t share, Nanos now);
  bool limited() const { return rate_ != 0; }
  void refill(Nanos now);
  bool has(uint64_t n) const { return rate_ == 0 || tokens_ >= need(n); }
  void take(uint64_t n) {
    if (rate_) tokens_ -= __int128(n) * unit_;
  }
  // When has(n) holds, given the refill at `now` (now itself when it holds already).
  Nanos ready_at(uint64_t n, Nanos now) const;
  // The whole units held (negative: in debt), and the most it holds.
  int64_t tokens() const { return int64_t(tokens_ / unit_); }
  int64_t burst() const { return int64_t(cap_ / unit_); }
  // The bucket holds `kBurst` of its rate (at least one unit): a timer that fires up to that
  // late loses nothing, and the first burst of a measurement is small.
  static constexpr Nanos kBurst = 10 * kMilli;

 private:
  __int128 need(uint64_t n) const { return std::min(__int128(n) * unit_, cap_); }
  uint64_t rate_ = 0;        // units a second
  __int128 unit_ = kSecond;  // one unit, scaled: kSecond * share (refill adds rate per ns)
  __int128 cap_ = 0, tokens_ = 0;
  Nanos last_ = 0;
};

class Limiter;

// A command waiting for tokens (kept beside the request; no allocation to wait).
struct Waiter {
  Waiter *prev = nullptr, *next = nullptr;
  Limiter* on = nullptr;  // the limiter it waits in (null: not waiting)
  void* owner = nullptr;  // for whoever resumes it
  Dir dir = Dir::kRead;
  uint32_t bytes = 0;
  Nanos since = 0;
};

struct Counters {
  uint64_t admitted = 0;   // commands that went (at once or after waiting)
  uint64_t throttled = 0;  // commands that had to wait
  uint64_t delay_ns = 0;   // their total wait
};

// One entity's limits on one reactor, with its waiters. Commands go in arrival order: one
// that finds its tokens missing waits, and every later command waits behind it (SPDK's
// bdev QoS does the same), so a large command is not overtaken for ever by small ones.
class Limiter {
 public:
  explicit Limiter(const Clock& clock) : clock_(clock) {}
  Limiter(const Limiter&) = delete;
  Limiter& operator=(const Limiter&) = delete;

  // New limits (a share of them); tokens already held are kept up to the new burst.
  void configure(const Limits& limits, uint32_t share);
  const Limits& limits() const { return limits_; }
  // true: the command may go now (its tokens are taken). false: it waits in `w` until
  // release() hands it back.
  bool admit(Waiter& w, Dir dir, uint32_t bytes);
  // The oldest waiter if its tokens are there now (taken, and it leaves the queue); else null.
  Waiter* release();
  // When the oldest waiter's tokens will be there (kNever: nobody waits).
  Nanos next_ready() const;
  static constexpr Nanos kNever = INT64_MAX;
  // A waiter that gives up (its connection closed): off the queue, no tokens taken.
  void cancel(Waiter& w);
  // The oldest waiter, off the queue with no tokens taken (the limits are lifted).
  Waiter* drop_first();
  bool waiting() const { return head_ != nullptr; }
  const Counters& counters() const { return counters_; }
  void reset_counters() { counters_ = Counters{}; }

 private:
  // The buckets a command of `dir` draws from: [0..2] IOPS (read, write, total), [3..5] bytes.
  bool fits(Dir dir, uint32_t bytes) const;
  void take(Dir dir, uint32_t bytes);
  void unlink(Waiter& w);
  const Clock& clock_;
  Limits limits_;
  TokenBucket buckets_[kKeyCount];
  Waiter *head_ = nullptr, *tail_ = nullptr;
  Counters counters_;
};

}  // namespace sens::target::qos
