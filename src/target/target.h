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
#include "target/metrics_source.h"
#include "target/reactor_context.h"
#include "target/negotiations.h"
#include "target/subsystem.h"
#include "transport/tls.h"

namespace sens::target {

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
  // The Prometheus metrics of every reactor, gathered on their threads (metrics_source.cc).
  MetricsSnapshot metrics_snapshot();
  // Zeroes the counters the metrics added (IoMetrics), on each reactor's thread; the stats
  // JSON's counters stay.
  void reset_metrics();
  // The I/O and discovery listeners as bound (ports resolved when 0 was asked).
  struct Bound {
    std::string host;
    uint16_t port;
    bool discovery;
    bool tls = false;
  };
  // (a copy: listeners come and go live)
  std::vector<Bound> bound() const {
    std::lock_guard<std::mutex> lock(bound_mu_);
    return bound_;
  }
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

  // ---- Live changes (live.cc). Each validates everything first, then applies all of it or
  // returns why not and changes nothing. They run one at a time (the registry's management
  // lock) on a management thread, never on a reactor; reactors see the result through
  // atomic publication or a message, never through a lock they take per I/O.
  //
  // The configuration as changed so far (what save_config writes).
  TargetConfig live_config();
  std::string create_subsystem(const SubsystemConfig& sc);
  // Disconnects its controllers and removes its namespaces.
  std::string delete_subsystem(const std::string& nqn);
  // nsid 0: the lowest free one. `assigned` gets the nsid used.
  std::string add_namespace(const std::string& nqn, const std::string& spec, uint32_t nsid,
                            uint32_t* assigned);
  // Commands already running complete; later ones fail with Invalid Namespace. Waits up to
  // `drain` for the running ones, then (the device still owed I/O) lets it close when they
  // finish and says so in `note`.
  std::string remove_namespace(const std::string& nqn, uint32_t nsid, Nanos drain,
                               std::string* note);
  // bytes 0: the size the backing store has now.
  std::string resize_namespace(const std::string& nqn, uint32_t nsid, uint64_t bytes);
  // Allows `host` (with DH-HMAC-CHAP keys when host_key is not empty; a host already allowed
  // gets its keys replaced: connected controllers keep working, the next authentication
  // uses the new key).
  // key_file / ctrl_key_file: where the keys were read from (a config's {"file": PATH}), for
  // save_config.
  std::string allow_host(const std::string& nqn, const std::string& host,
                         const std::string& host_key, const std::string& ctrl_key,
                         const std::string& key_file = "", const std::string& ctrl_key_file = "");
  // Takes `host` off the allow-list (and its keys) and disconnects its controllers.
  std::string disallow_host(const std::string& nqn, const std::string& host);
  std::string set_allow_any_host(const std::string& nqn, bool allow);
  // Which hosts must come over TLS and which must authenticate; controllers that no longer
  // qualify are disconnected (their host reconnects the way now required, or is refused).
  std::string set_security(const std::string& nqn, const Requirement& tls, const Requirement& auth);
  std::string disconnect_controller(uint16_t cntlid);
  // An I/O listener (port 0: any free one; `added` gets what was bound). Its ANA states are
  // the address's ana= options. A removed listener accepts no more; connections made through
  // it stay.
  std::string add_listener(const ListenAddress& addr, bool tls, Bound* added);
  std::string remove_listener(const std::string& host, uint16_t port);
  // Moves a namespace to another ANA group: hosts get an ANA change and a Namespace
  // Attribute Changed event.
  std::string set_namespace_ana_group(const std::string& nqn, uint32_t nsid, uint32_t group);
  // nqn empty: every subsystem (and the default); else one subsystem's connections, which
  // keep it through later target-wide changes until clear_coalescing().
  std::string set_coalescing(const std::string& nqn, const coalesce::Config& config);
  // The subsystem follows the target's coalescing again.
  std::string clear_coalescing(const std::string& nqn);
  coalesce::Config coalescing(const std::string& nqn, std::string* error);
  void reset_stats();
  // QoS (qos_live.cc): a subsystem's limits, replaced whole (an empty config: none); each
  // reactor enforces limit / reactors. "" or why not (nothing changed).
  std::string set_qos(const std::string& nqn, const qos::Config& config);
  qos::Config qos_config(const std::string& nqn, std::string* error);
  // SIGHUP: brings the running target to `fresh` (a re-read --config) through the changes
  // above, each all-or-nothing; returns what it did, a line per change (for the log).
  std::vector<std::string> apply_config(const TargetConfig& fresh);
  // Runs `fn` on every reactor's thread and waits for all of them. Returning, every pass a
  // reactor had begun before the call has ended (a grace period for pointers unpublished
  // before it).
  void on_every_reactor(const std::function<void(ReactorContext&)>& fn);

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
  // DH-HMAC-CHAP's DH work off the reactors, and the cap on negotiations in progress.
  Negotiations& negotiations() { return *negotiations_; }

 private:
  class Listener;
  TargetConfig config_;
  buffers::CacheGeometry geometry_;
  Registry registry_;
  std::unique_ptr<Negotiations> negotiations_;  // outlives the queues (their sessions)
  std::vector<std::unique_ptr<ReactorContext>> ctxs_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::vector<std::thread> threads_;
  mutable std::mutex bound_mu_;
  std::vector<Bound> bound_;
  std::atomic<uint64_t> next_reactor_{0};
  std::atomic<uint32_t> open_connections_{0};
  std::atomic<uint64_t> auth_succeeded_{0}, auth_failed_{0};
  std::unique_ptr<transport::TlsContext> tls_;
  // live.cc: the configuration as changed live, and namespaces removed while I/O was still
  // running on them (closed once nothing holds them).
  TargetConfig live_;
  struct Draining {
    std::unique_ptr<Namespace> ns;
    std::string name;
  };
  std::vector<Draining> draining_;
  void notify_namespace_changed(Subsystem* sub, uint32_t nsid);
  // Asks `c`'s admin queue, on its reactor, to complete an AER with what is pending.
  void deliver_events(Controller& c);
  void disconnect_where(const std::function<bool(const Controller&)>& match);
  // Waits for the requests holding `ns` (up to `drain`); true when none is left.
  bool drain_namespace(Namespace* ns, Nanos drain);
  // Closes `ns` once no request holds it: its reactor queues, then its device.
  void destroy_namespace(std::unique_ptr<Namespace> ns);
  void sweep_draining();
  // listener.cc: the start's listeners (--listen, discovery, --tls-listen); "" or why not.
  std::string open_listeners();
  // listener.cc: opens, registers (on reactor 0) and records a listener (I/O, with its ANA
  // view, or discovery); closes one.
  std::string open_live_listener(const ListenAddress& addr, bool discovery, bool tls, AnaPort* ana,
                                 Bound* out);
  bool close_live_listener(const std::string& host, uint16_t port, bool discovery);
  // live.cc: a discovery listener for an address that has none yet (listener_add), and its
  // close once the last I/O listener of the address goes; the discovery log changed.
  void open_discovery_for(const std::string& host);
  void close_discovery_if_unused(const std::string& host);
  std::vector<std::string> live_discovery_hosts_;  // opened by open_discovery_for()
  void discovery_changed();
  std::string retire_namespace(Subsystem* sub, uint32_t nsid, Nanos drain, std::string* note);
  // qos_live.cc: `config` on every reactor for `sub` (also at start, before the threads run).
  void publish_qos(const Subsystem* sub, const qos::Config& config);
  std::vector<auth::ConfiguredPsk> tls_keys_;
  bool find_tls_psk(const std::string& identity, transport::TlsPsk* psk, std::string* why);
  // Stops accepting: the listeners close on the reactor that watches them.
  void close_listeners();
  // Runs `fn` on reactor `i` and waits for it (false: not run by `deadline`).
  bool run_on(size_t i, std::function<void()> fn, std::chrono::steady_clock::time_point deadline);
  bool running_ = false;
};

}  // namespace sens::target
