#pragma once
// Subsystems, namespaces and controllers: the state shared by a target's connections. The
// control path (Connect, admin commands, keep alive) and the management path (live changes,
// src/target/live.cc) touch it; the I/O path reads each namespace slot with one acquire load
// and never locks.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "storage/device.h"
#include "target/config.h"
#include "target/reservations.h"

namespace sens::target {

inline constexpr uint32_t kMaxNsid = 1024;  // Identify NN: nsids 1..1024

struct Namespace {
  uint32_t nsid = 0;
  std::string spec;
  std::unique_ptr<storage::Device> device;
  std::atomic<uint64_t> blocks{0};  // grows (or shrinks) with a live resize
  uint32_t block_shift = 9;
  uint8_t nguid[16]{};
  uint8_t uuid[16]{};
  std::atomic<uint32_t> anagrpid{1};  // its ANA group (anagrpid= in the spec; changes live)
  Reservations reservations;
  // Unique over the process's life: per-queue caches keyed by nsid tell an nsid used again.
  const uint64_t generation = next_generation();

  // Requests that point at this namespace, counted per reactor (one writer each, no atomic
  // read-modify-write on the I/O path): a namespace removed live is destroyed only once
  // every reactor's count is back to zero. Slot i belongs to reactor i.
  struct alignas(64) Holds {
    std::atomic<uint64_t> taken{0}, dropped{0};
  };
  std::unique_ptr<Holds[]> holds;
  uint32_t hold_slots = 0;
  void hold(uint32_t reactor) {
    if (reactor < hold_slots) bump(holds[reactor].taken);
  }
  void drop(uint32_t reactor) {
    if (reactor < hold_slots) bump(holds[reactor].dropped);
  }
  uint64_t held() const;  // requests holding it now, over every reactor

 private:
  static uint64_t next_generation();
  static void bump(std::atomic<uint64_t>& c) {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
};

// The ANA view of one I/O listener: the state of each ANA group as a host that connected
// there sees it, and the change counts of the ANA log page. States are set at start from the
// listener's options and at run time (Target::set_ana_state: SIGHUP reloads them); the I/O
// path reads them with one relaxed load.
class AnaPort {
 public:
  std::string host;
  uint16_t port = 0;
  uint8_t state(uint32_t group) const {
    return group >= 1 && group <= ana::kMaxGroups ? states_[group].load(std::memory_order_relaxed)
                                                  : ana::kInaccessible;
  }
  uint64_t change_count() const { return chgcnt_.load(); }
  uint64_t group_change_count(uint32_t group) const { return group_chgcnt_[group].load(); }
  // Sets a group's state; true when it changed (the change counts then move on).
  bool set(uint32_t group, uint8_t state);

 private:
  std::atomic<uint8_t> states_[ana::kMaxGroups + 1]{};
  std::atomic<uint64_t> chgcnt_{0};
  std::atomic<uint64_t> group_chgcnt_[ana::kMaxGroups + 1]{};
};

// DH-HMAC-CHAP keys of one host, transformed as the exchange uses them (NVMe Base 2.0
// 8.13.5.7): the host's with its NQN, the controller's with the subsystem NQN.
// Immutable once made: a key rotation replaces the whole object, and a session that began
// with the old one keeps it until it ends.
struct HostAuth {
  std::vector<uint8_t> host_key;
  std::vector<uint8_t> ctrl_key;  // empty: the host cannot authenticate the controller
  ~HostAuth();
};

class Subsystem {
 public:
  std::string nqn;
  bool discovery = false;
  std::string serial;
  std::atomic<bool> volatile_cache{false};  // a namespace has a volatile write cache (VWC)
  std::vector<uint8_t> dhchap_hashes, dhchap_dhgroups;  // accepted, preferred first

  // Hosts. Read at Connect and by the management path; guarded by hosts_mu.
  bool host_allowed(const std::string& hostnqn) const;
  std::shared_ptr<const HostAuth> auth_for(const std::string& hostnqn) const;
  std::vector<std::string> allowed_hosts() const;  // empty: any host
  std::vector<std::string> keyed_hosts() const;    // hosts that must authenticate
  void set_hosts(std::vector<std::string> allowed,
                 std::map<std::string, std::shared_ptr<const HostAuth>> auth);
  // Any host may connect: set at start when no host is named; cleared by naming one live.
  bool allow_any_host() const;
  void set_allow_any_host(bool allow);
  // Must `hostnqn` connect over TLS / authenticate (SubsystemConfig::require_tls, _auth)?
  bool tls_required(const std::string& hostnqn) const;
  bool auth_required(const std::string& hostnqn) const;
  void set_requirements(const Requirement& tls, const Requirement& auth);
  std::pair<Requirement, Requirement> requirements() const;  // TLS, authentication
  // Coalescing of this subsystem's connections when set live (else the target's).
  std::optional<coalesce::Config> coalescing() const;
  void set_coalescing(const std::optional<coalesce::Config>& config);  // none: the target's

  // Namespaces: the published table, by nsid - 1 (null: inactive). ns() is one acquire load;
  // a request that keeps the pointer holds the namespace (Namespace::hold).
  Namespace* ns(uint32_t nsid) const {
    return nsid >= 1 && nsid <= kMaxNsid ? ns_table_[nsid - 1].load(std::memory_order_acquire)
                                         : nullptr;
  }
  // The active namespaces in nsid order (a snapshot; the table may change meanwhile).
  // Reactors may use the pointers for the rest of their pass; other threads only under the
  // registry's management lock (a removal frees a namespace once the reactors let it go).
  std::vector<Namespace*> active_namespaces() const;
  std::vector<uint32_t> active_nsids() const;  // any thread
  uint32_t namespace_count() const { return ns_count_.load(std::memory_order_relaxed); }
  // Management path only (Registry, under its lock): publish into a free slot, or take the
  // namespace out of the table (the caller destroys it once nothing holds it).
  void publish(std::unique_ptr<Namespace> ns);
  std::unique_ptr<Namespace> unpublish(uint32_t nsid);

 private:
  mutable std::mutex hosts_mu_;
  std::vector<std::string> allowed_hosts_;
  bool allow_any_ = true;
  std::optional<coalesce::Config> coalesce_;
  Requirement require_tls_, require_auth_;
  std::map<std::string, std::shared_ptr<const HostAuth>> host_auth_;
  std::atomic<Namespace*> ns_table_[kMaxNsid]{};
  std::vector<std::unique_ptr<Namespace>> owned_ =
      std::vector<std::unique_ptr<Namespace>>(kMaxNsid);
  std::atomic<uint32_t> ns_count_{0};
};

// Per-connection counters the controller sums for the SMART log (written by one thread).
struct QueueCounters {
  std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0};
};

class ReactorContext;

// Where a queue of a controller lives, so that the controller can close it from elsewhere.
struct QueueRef {
  QueueCounters* counters = nullptr;
  ReactorContext* ctx = nullptr;
  uint64_t conn_id = 0;
  uint16_t qid = 0;
};

// One controller: an admin queue and the I/O queues that named its cntlid in Connect.
class Controller {
 public:
  uint16_t cntlid = 0;
  Subsystem* subsystem = nullptr;
  std::string hostnqn;
  uint8_t hostid[16]{};
  uint32_t kato_ms = 0;
  std::string peer;  // the admin queue's host address:port (controller_list)
  // The host has a key: every queue authenticates (AUTHREQ.ATR), and I/O queues connect only
  // once the admin queue has. The key at the admin queue's Connect; a queue that connects
  // later authenticates with the subsystem's key of that moment (a rotation).
  std::shared_ptr<const HostAuth> auth;
  bool over_tls = false;  // its admin queue came over TLS (set at Connect)
  std::atomic<bool> admin_authenticated{false};
  std::atomic<uint32_t> io_queues_granted{
      0};  // I/O queues granted (one-based); read by any reactor

  // Controller registers. Written by the admin queue's thread only; I/O queues read CC.EN.
  std::atomic<uint32_t> cc{0};
  std::atomic<uint32_t> csts{0};
  std::atomic<uint32_t> async_event_config{0};  // Set Features 0Bh (read by the notifier)

  // Where the host reached this controller (its admin queue's listener): the ANA states it
  // sees. Never null for an I/O subsystem (a listener-less default otherwise).
  AnaPort* ana = nullptr;
  // An ANA change the host has not been told of yet (an AER completes with it), and one it
  // has been told of but not yet read the ANA log page for (no other notice until it does).
  std::atomic<bool> ana_event_pending{false};
  std::atomic<bool> ana_event_masked{false};
  // Namespace Attribute Changed (added, removed, resized): the same pair, and the nsids for
  // the Changed Namespace List log page (04h), which reading it clears.
  std::atomic<bool> ns_event_pending{false};
  std::atomic<bool> ns_event_masked{false};
  void note_namespace_changed(uint32_t nsid);
  // Discovery Log Page Change (a discovery controller): the same pair, cleared by reading the
  // discovery log with RAE clear.
  std::atomic<bool> disc_event_pending{false};
  std::atomic<bool> disc_event_masked{false};
  // The Changed Namespace List: up to 1024 nsids, or FFFFFFFFh first when more changed.
  std::vector<uint32_t> take_changed_namespaces();

  std::mutex mu;  // guards `queues` and `changed_ns_` (any reactor, the management path)
  std::vector<QueueRef> queues;
  std::atomic<bool> dead{false};  // admin queue gone or kato expired: I/O queues close

  // Registers a queue, unless the controller has one with that qid or is gone already.
  enum class AddQueue { kAdded, kDuplicate, kGone };
  AddQueue add_queue(const QueueRef& q);
  // The admin queue is gone: marks the controller dead and returns the queues to close. Under
  // the same lock as add_queue(), so no I/O queue joins after this.
  std::vector<QueueRef> retire();
  void remove_queue(QueueCounters* q);
  void sum(uint64_t* reads, uint64_t* writes, uint64_t* read_bytes, uint64_t* write_bytes);

 private:
  std::vector<uint32_t> changed_ns_;
  bool changed_overflow_ = false;
};

// All subsystems and the live controllers (cntlid allocation).
class Registry {
 public:
  // Opens every namespace's device; returns "" or the first error.
  std::string build(const TargetConfig& config);

  Subsystem* find(const std::string& nqn);
  Subsystem& discovery() { return discovery_; }
  // The I/O subsystems (a snapshot: the management path may add or delete some meanwhile;
  // a deleted subsystem's object stays until the target stops, so the pointers stay valid).
  std::vector<Subsystem*> subsystems() const;
  const TargetConfig& config() const { return config_; }

  // The management path (live.cc): one change at a time under this lock; reactors never take it.
  std::mutex& management_mutex() { return mgmt_mu_; }
  // Opens `spec`'s device and makes namespace `nsid` of `nqn` from it (not yet published).
  std::unique_ptr<Namespace> make_namespace(const std::string& nqn, uint32_t nsid,
                                            const std::string& spec, std::string* error);
  // Makes a subsystem from its configuration (namespaces published); "" or an error.
  std::string add_subsystem(const SubsystemConfig& sc, Subsystem** out = nullptr);
  // Takes `sub` out of find() and subsystems(); the caller disconnects its controllers and
  // retires its namespaces. The object itself is kept (see subsystems()).
  void remove_subsystem(Subsystem* sub);
  // Host keys as the exchange uses them, from DHHC-1 secrets (empty ctrl_secret: none).
  static std::shared_ptr<const HostAuth> make_host_auth(const std::string& host,
                                                        const std::string& subnqn,
                                                        const std::string& host_secret,
                                                        const std::string& ctrl_secret,
                                                        std::string* error);

  // A new controller with a free cntlid; `fill` sets the rest before it is published.
  std::shared_ptr<Controller> create_controller(
      Subsystem* subsystem, const std::string& hostnqn, const uint8_t hostid[16], uint32_t kato_ms,
      const std::function<void(Controller&)>& fill = nullptr);
  std::shared_ptr<Controller> find_controller(uint16_t cntlid);
  void remove_controller(uint16_t cntlid);
  std::vector<std::shared_ptr<Controller>> controllers();

  // One per I/O listener (config listen, then tls_listen order), and the default for
  // controllers that came in elsewhere (optimized).
  const std::vector<std::unique_ptr<AnaPort>>& ana_ports() const { return ana_ports_; }
  AnaPort* default_ana() { return &default_ana_; }
  // A listener added live: its ANA view (kept for good: controllers point at it). Under the
  // management lock, like every reader of ana_ports() but Target::start.
  AnaPort* add_ana_port(const ListenAddress& l);
  // The discovery log's generation counter: moves with every live change that can change a
  // host's discovery log page (subsystems, hosts, listeners), so hosts re-read it.
  uint64_t discovery_generation() const { return discovery_gen_.load(); }
  void discovery_changed() { discovery_gen_.fetch_add(1); }

  // Flushes every namespace's device (shutdown).
  void sync_all();
  // Waits for the reservation commands running off the reactors; drops those not started
  // (shutdown, after the reactors stopped: their answers would go nowhere).
  void stop_workers();

 private:
  TargetConfig config_;
  mutable std::mutex subsystems_mu_;  // guards the list (not the subsystems)
  std::vector<std::unique_ptr<Subsystem>> subsystems_;
  std::vector<std::unique_ptr<Subsystem>> deleted_;
  Subsystem discovery_;
  std::mutex mgmt_mu_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Controller>> controllers_;
  std::vector<std::unique_ptr<AnaPort>> ana_ports_;
  AnaPort default_ana_;
  std::atomic<uint64_t> discovery_gen_{1};
};

}  // namespace sens::target
