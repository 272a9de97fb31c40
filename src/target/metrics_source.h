#pragma once
// What the target counts for its Prometheus metrics (src/mgmt/metrics.h renders them): I/O
// commands, bytes, errors and latency by subsystem, namespace and opcode, kept per reactor.
// Each counter is a plain integer in an object one reactor thread owns: its queues add to it
// on the data path (no atomic, no lock, no allocation per command), and a scrape reads it on
// that same thread (Reactor::post; Target::metrics_snapshot()), as Target::stats_json() does.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "buffers/buffer_pool.h"
#include "coalesce/scheduler.h"
#include "common/clock.h"
#include "reactor/reactor.h"

namespace sens::target {

struct Request;
class Subsystem;

// The opcodes the metrics tell apart; the rest of the NVM command set is "other".
enum class IoKind : uint8_t { kRead, kWrite, kFlush, kWriteZeroes, kDsm, kOther, kCount };
inline constexpr size_t kIoKinds = size_t(IoKind::kCount);
const char* io_kind_name(IoKind k);  // "read", "write", "flush", "write_zeroes", "dsm", "other"
IoKind io_kind(uint8_t opcode);

// Upper bounds (ns) of the latency buckets, Prometheus' `le` (an implicit +Inf follows).
inline constexpr std::array<Nanos, 17> kLatencyBounds = {
    5 * kMicro,   10 * kMicro,  25 * kMicro,   50 * kMicro,  100 * kMicro, 250 * kMicro,
    500 * kMicro, 1 * kMilli,   2500 * kMicro, 5 * kMilli,   10 * kMilli,  25 * kMilli,
    50 * kMilli,  100 * kMilli, 250 * kMilli,  500 * kMilli, 1 * kSecond};

struct LatencyBuckets {
  std::array<uint64_t, kLatencyBounds.size() + 1> counts{};  // per bucket, not cumulative
  uint64_t sum_ns = 0;
  void record(Nanos ns) {
    if (ns < 0) ns = 0;
    size_t i = 0;
    while (i < kLatencyBounds.size() && ns > kLatencyBounds[i]) ++i;
    ++counts[i];
    sum_ns += uint64_t(ns);
  }
};

// One namespace as one reactor's I/O queues saw it. nsid 0: commands that reached no single
// namespace (an invalid NSID, a flush to all namespaces, a disabled controller).
struct NsIoMetrics {
  std::string nqn;
  uint32_t nsid = 0;
  struct Op {
    uint64_t commands = 0;  // completed, whatever the status
    uint64_t bytes = 0;     // data moved by successful reads and writes
    LatencyBuckets latency;
  };
  std::array<Op, kIoKinds> ops{};
  std::vector<std::pair<uint16_t, uint64_t>> errors;  // (status, count): rare, first one allocates
  uint64_t inflight = 0;                              // filled by a snapshot (counted then)

  void count_error(uint16_t status) {
    for (auto& e : errors)
      if (e.first == status) return void(++e.second);
    errors.emplace_back(status, 1);
  }
  void reset();
};

// A reactor's counters. Only its own thread touches them.
class IoMetrics {
 public:
  // The entry of (subsystem, nsid), created on first use (stable address).
  NsIoMetrics* entry(const std::string& nqn, uint32_t nsid);
  const std::map<std::pair<std::string, uint32_t>, std::unique_ptr<NsIoMetrics>>& entries() const {
    return entries_;
  }
  uint64_t tls_handshake_failures = 0;
  // TLS sessions established, by who protects their records and whose AES-GCM: 0 sens's
  // records with ipsec-mb, 1 sens's with OpenSSL's EVP, 2 OpenSSL's record layer, 3 the
  // kernel's (kTLS).
  uint64_t tls_sessions[4] = {};
  // Connections ended by a stall deadline, by StallWatch::Kind (send, h2c, pdu).
  uint64_t stalled[4] = {};
  void reset();

 private:
  std::map<std::pair<std::string, uint32_t>, std::unique_ptr<NsIoMetrics>> entries_;
};

// One I/O queue's way into its reactor's IoMetrics: the entries of its subsystem by nsid, so
// that a command finds its counters with an index, not a map lookup.
//
// A command's latency runs from the pass that read its capsule to the end of the pass that
// queued its answer, when the pass's answers are flushed: one clock read per queue and pass,
// not one per command (the clock cost about 20 ns per I/O at 4 KiB, 1-2 % of the target's
// time).
class QueueIoMetrics final : public PassEndHandler {
 public:
  explicit QueueIoMetrics(Reactor& reactor) : reactor_(reactor) {}
  ~QueueIoMetrics() override;
  QueueIoMetrics(const QueueIoMetrics&) = delete;
  QueueIoMetrics& operator=(const QueueIoMetrics&) = delete;

  // An I/O command whose plan passed starts: `r.metrics` (it counts as in flight).
  void on_start(IoMetrics& m, const Subsystem& sub, Request& r);
  // Its response (or its last data PDU, carrying success) is queued with `status`: counted
  // now, its latency recorded at the pass end.
  void on_complete(IoMetrics& m, const Subsystem* sub, Request& r, uint16_t status);
  // Records the latencies of the commands answered since the last pass end.
  void on_pass_end() override;
  // At most one answer per command slot waits for a pass end: room for them all up front.
  void reserve(size_t slots) { waiting_.reserve(slots); }

 private:
  NsIoMetrics* lookup(IoMetrics& m, const Subsystem& sub, uint32_t nsid);
  std::vector<NsIoMetrics*> by_nsid_;  // index nsid (0: no single namespace)
  struct Answered {
    LatencyBuckets* latency;  // an IoMetrics entry's: entries are never freed
    Nanos started;
  };
  Reactor& reactor_;
  std::vector<Answered> waiting_;  // answered this pass
};

// Everything a scrape reads from one reactor.
struct ReactorSnapshot {
  int index = 0;
  std::vector<NsIoMetrics> namespaces;
  std::map<std::string, uint64_t> connections;  // open, by subsystem NQN ("": not connected yet)
  uint64_t inflight = 0;                        // commands of open connections not yet done
  buffers::BufferPool::Stats pool, inline_pool;
  uint64_t pool_limit = 0, inline_pool_limit = 0;
  ReactorStats reactor;
  coalesce::Stats coalesce;
  uint64_t tls_handshake_failures = 0;
  uint64_t tls_sessions[4] = {};  // IoMetrics::tls_sessions
  uint64_t stalled[4] = {};       // IoMetrics::stalled
  uint64_t connections_closed = 0;
  uint64_t qos_throttled = 0, qos_delay_ns = 0;  // commands QoS held, and for how long
};

struct MetricsSnapshot {
  std::vector<ReactorSnapshot> reactors;
  // Every configured namespace (so that one without I/O still has its series).
  std::vector<std::pair<std::string, uint32_t>> namespaces;
  std::vector<std::string> subsystems;
  std::map<std::string, uint64_t> controllers;  // live, by subsystem NQN
  uint64_t auth_succeeded = 0, auth_failed = 0;
  // DH-HMAC-CHAP negotiations with a DH group (negotiations.h): in progress, waiting for a
  // slot, and the totals admitted, queued, refused (the waiting line full) and timed out.
  uint64_t negotiations_limit = 0, negotiations_active = 0, negotiations_waiting = 0;
  uint64_t negotiations_admitted = 0, negotiations_queued = 0, negotiations_refused = 0,
           negotiations_timed_out = 0;
  uint64_t open_connections = 0;
  std::string coalesce_policy;
};

}  // namespace sens::target
