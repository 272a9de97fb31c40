#pragma once
// The target: one reactor thread per core, listeners on the first, connections spread
// round-robin; a Registry of subsystems, namespaces and controllers shared by all.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "auth/tls_psk.h"
#include "buffers/buffer_pool.h"
#include "reactor/reactor.h"
#include "storage/device.h"
#include "target/config.h"
#include "target/subsystem.h"
#include "target/tcp_queue.h"
#include "transport/tls.h"

namespace sens::target {

using buffers::BufferPool;

class Target;

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

  void adopt(int fd, TcpQueue::Endpoint endpoint);
  // Runs `q`'s requests that the pool served, from the loop (never inside a put()).
  void schedule_resume(TcpQueue* q);
  // A queue closed (or finished its last device I/O after closing): reaps it later.
  void on_queue_closed() { schedule_reap(); }
  void close_connection(uint64_t id, const char* why);
  void deliver_events(uint64_t id);
  void close_all(const char* why);
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

 private:
  class QueueWatcher;
  std::unordered_map<const Namespace*, std::unique_ptr<storage::Queue>> queues_;
  std::vector<std::unique_ptr<QueueWatcher>> watchers_;
  std::vector<storage::Queue*> kick_list_;
  std::vector<TcpQueue*> resume_list_;
  std::unordered_map<uint64_t, std::unique_ptr<TcpQueue>> conns_;
  bool reap_scheduled_ = false;
  uint64_t next_id_;
  // Totals of connections already destroyed.
  coalesce::Stats closed_coalesce_;
  uint64_t closed_holds_ = 0;
  uint64_t closed_connections_ = 0;
};

class Target {
 public:
  explicit Target(TargetConfig config);
  ~Target();

  // Opens devices and listeners and starts the reactor threads. Returns "" or an error.
  std::string start();
  // Stops gracefully (shutdown.cc): closes the listeners, lets the commands already started
  // finish (up to 10 s; the log names any left), closes the connections, joins the threads,
  // flushes the devices.
  void stop();

  // Counters of every reactor (summed and per connection), gathered on their threads.
  nlohmann::json stats_json();
  // The I/O and discovery listeners as bound (ports resolved when 0 was asked).
  struct Bound {
    std::string host;
    uint16_t port;
    bool discovery;
    bool tls = false;
  };
  const std::vector<Bound>& bound() const { return bound_; }
  const TargetConfig& config() const { return config_; }
  Registry& registry() { return registry_; }
  // This machine's caches (sysfs), which the tyche buffer layout colours for.
  const buffers::CacheGeometry& cache_geometry() const { return geometry_; }
  ReactorContext& context(size_t i) { return *ctxs_[i]; }
  size_t contexts() const { return ctxs_.size(); }

  // ANA at run time: sets `group`'s state (0: every group) through I/O listener `port`
  // (Registry::ana_ports() order) and tells the controllers attached there (ANA change
  // AEN). Returns how many group states changed.
  int set_ana_state(size_t port, uint32_t group, uint8_t state);
  // Applies the ANA options of `config`'s listeners to the listeners running with the same
  // address and port; returns what it did, a line per listener (for the log).
  std::vector<std::string> reload_ana(const TargetConfig& config);
  // Raises an ANA change for every controller attached through `port` and wakes their AERs.
  void notify_ana_change(AnaPort* port);

  // Closes, on their own threads, the I/O queues of a controller whose admin queue is gone.
  void close_controller_queues(Controller* ctrl);

  // Hands an accepted socket to the next reactor (`peer` for the log).
  void dispatch_accepted(int fd, std::string peer, uint16_t local_port,
                         bool discovery_listener = false, bool tls = false, AnaPort* ana = nullptr);
  // The TLS server context (null without --tls-listen).
  transport::TlsContext* tls() const { return tls_.get(); }
  // Open connections (accepted and not yet closed), against config().max_connections.
  uint32_t open_connections() const { return open_connections_.load(); }
  void connection_closed() { open_connections_.fetch_sub(1); }
  // DH-HMAC-CHAP exchanges that ended, by outcome (stats JSON "auth").
  void count_authentication(bool ok) { (ok ? auth_succeeded_ : auth_failed_).fetch_add(1); }

 private:
  class Listener;
  TargetConfig config_;
  buffers::CacheGeometry geometry_;
  Registry registry_;
  std::vector<std::unique_ptr<ReactorContext>> ctxs_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::thread> threads_;
  std::vector<Bound> bound_;
  std::atomic<uint64_t> next_reactor_{0};
  std::atomic<uint32_t> open_connections_{0};
  std::atomic<uint64_t> auth_succeeded_{0}, auth_failed_{0};
  std::unique_ptr<transport::TlsContext> tls_;
  std::vector<auth::ConfiguredPsk> tls_keys_;
  bool find_tls_psk(const std::string& identity, transport::TlsPsk* psk, std::string* why);
  // Stops accepting: the listeners close on the reactor that watches them.
  void close_listeners();
  // Runs `fn` on reactor `i` and waits for it (false: not run by `deadline`).
  bool run_on(size_t i, std::function<void()> fn, std::chrono::steady_clock::time_point deadline);
  bool running_ = false;
};

}  // namespace sens::target
