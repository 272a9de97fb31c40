#pragma once
// What one reactor thread owns (its buffer pools, device queues, connections, QoS limiters),
// as the command sets see it. Transport-neutral: the NVMe/TCP queue (tcp_queue.h) is only
// named here, so admin.cc, nvm.cc, fabrics.cc, ... compile without it (tests/target/
// layering_test.cc checks that they do).
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "buffers/buffer_pool.h"
#include "coalesce/scheduler.h"
#include "reactor/reactor.h"
#include "storage/device.h"
#include "target/metrics_source.h"
#include "target/qos_reactor.h"
#include "target/subsystem.h"

namespace sens::target {

using buffers::BufferPool;

class Target;
class TcpQueue;

// Who a connection came from and how (the listener that accepted it).
struct ConnectionEndpoint {
  std::string peer;           // "addr:port" of the host
  std::string local_address;  // the address the host reached (numeric)
  uint16_t local_port = 0;
  bool discovery_listener = false;  // reached through a discovery-only listener
  bool tls = false;                 // reached through a TLS listener: handshake first
  AnaPort* ana = nullptr;           // the I/O listener's ANA view (null: discovery)
};

// Everything one reactor thread owns.
class ReactorContext {
 public:
  ReactorContext(Target& target, int index);
  ~ReactorContext();

  Reactor reactor;
  Target& target;
  Registry& registry;
  const TargetConfig& config;

  // I/O buffers of this thread's queues: bounded, shared, recycled.
  // In-capsule data has its own pool: a capsule waiting for a buffer stops its connection's
  // reader, and the H2CData that requests holding general buffers wait for may be behind it.
  // Were they one pool, those requests could hold every buffer and wait forever; in-capsule
  // buffers always come back without anything more from the host.
  BufferPool pool;
  BufferPool inline_pool;
  // tyche only: the I/O queues' receive staging buffers (64 KiB each), coloured so that
  // their heads (where every read lands first) do not all share one set of cache lines.
  std::unique_ptr<BufferPool> staging_pool;

  // This thread's submission queue for a namespace's device.
  storage::Queue* queue_for(const Namespace* ns);
  // Asks for a kick of `q` at the end of this loop iteration (one submit per batch).
  void schedule_kick(storage::Queue* q);

  void adopt(int fd, ConnectionEndpoint endpoint);
  // Runs `q`'s requests that the pool served, from the loop (never inside a put()).
  void schedule_resume(TcpQueue* q);
  // A queue closed (or finished its last device I/O after closing): reaps it later.
  void on_queue_closed() { schedule_reap(); }
  void close_connection(uint64_t id, const char* why);
  void deliver_events(uint64_t id);
  void close_all(const char* why);
  // A namespace removed live that no request holds any more: drops this thread's device
  // queue for it (live.cc).
  void forget_namespace(const Namespace* ns);
  // Coalescing of this thread's connections from now on (`sub`: those of that subsystem, and
  // later ones that connect to it; null: every connection, and the default for new ones).
  void retune_coalescing(const Subsystem* sub, const coalesce::Config& config);
  const coalesce::Config& coalescing() const { return coalesce_; }
  // Zeroes this thread's counters (stats reset).
  void reset_stats();
  // Device I/O still owed to this reactor's queues (open or closed).
  uint32_t inflight_io() const;
  // A graceful stop (shutdown.cc): every open connection holds the commands that arrive
  // from now on; unanswered() counts those started before, still unanswered, and `detail`
  // (if given) gets a line for each connection that has some.
  void quiesce_all();
  uint32_t unanswered(std::string* detail) const;
  // Destroys closed connections whose device I/O has drained (deferred, never re-entrant).
  void schedule_reap();
  // Per-connection counters and this reactor's own (wake-ups, timers).
  nlohmann::json stats_json();
  // The coalescing counters of every connection this reactor has had.
  coalesce::Stats total_stats() const;
  // The Prometheus counters of this reactor's queues (metrics_source.h); the two functions
  // below read and zero them, on this reactor's thread only.
  IoMetrics io_metrics;
  ReactorSnapshot collect_metrics();
  void reset_metrics();
  // This thread's QoS limiters (qos_reactor.h; Target::set_qos changes them).
  ReactorQos qos;

 private:
  class QueueWatcher;
  std::unordered_map<const Namespace*, std::unique_ptr<storage::Queue>> queues_;
  std::vector<std::unique_ptr<QueueWatcher>> watchers_;
  std::vector<storage::Queue*> kick_list_;
  std::vector<TcpQueue*> resume_list_;
  std::unordered_map<uint64_t, std::unique_ptr<TcpQueue>> conns_;
  bool reap_scheduled_ = false;
  uint64_t next_id_;
  coalesce::Config coalesce_;  // for connections not yet connected (see retune_coalescing)
  // Totals of connections already destroyed.
  coalesce::Stats closed_coalesce_;
  uint64_t closed_holds_ = 0;
  uint64_t closed_connections_ = 0;
};

}  // namespace sens::target
