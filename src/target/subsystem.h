#pragma once
// Subsystems, namespaces and controllers: the state shared by a target's connections. Only
// the control path (Connect, admin commands, keep alive) touches it; the I/O path reads the
// immutable namespace table without locks.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/device.h"
#include "target/config.h"
#include "target/reservations.h"

namespace sens::target {

struct Namespace {
  uint32_t nsid = 0;
  std::string spec;
  std::unique_ptr<storage::Device> device;
  uint64_t blocks = 0;
  uint32_t block_shift = 9;
  uint8_t nguid[16]{};
  uint8_t uuid[16]{};
  uint32_t anagrpid = 1;  // its ANA group (anagrpid= in the spec)
  Reservations reservations;
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
struct HostAuth {
  std::vector<uint8_t> host_key;
  std::vector<uint8_t> ctrl_key;  // empty: the host cannot authenticate the controller
  ~HostAuth();
};

class Subsystem {
 public:
  std::string nqn;
  bool discovery = false;
  std::vector<std::unique_ptr<Namespace>> namespaces;  // index nsid - 1; fixed after start
  std::vector<std::string> allowed_hosts;              // empty: any host
  std::string serial;
  bool volatile_cache = false;  // some namespace has a volatile write cache (Identify VWC)

  std::map<std::string, HostAuth> host_auth;            // hosts that must authenticate
  std::vector<uint8_t> dhchap_hashes, dhchap_dhgroups;  // accepted, preferred first

  bool host_allowed(const std::string& hostnqn) const;
  const HostAuth* auth_for(const std::string& hostnqn) const {
    auto it = host_auth.find(hostnqn);
    return it == host_auth.end() ? nullptr : &it->second;
  }
  Namespace* ns(uint32_t nsid) const {
    return nsid >= 1 && nsid <= namespaces.size() ? namespaces[nsid - 1].get() : nullptr;
  }
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
  // The host has a key: every queue authenticates (AUTHREQ.ATR), and I/O queues connect only
  // once the admin queue has.
  const HostAuth* auth = nullptr;
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

  std::mutex mu;  // guards `queues` (I/O queues register and leave from any reactor)
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
};

// All subsystems and the live controllers (cntlid allocation).
class Registry {
 public:
  // Opens every namespace's device; returns "" or the first error.
  std::string build(const TargetConfig& config);

  Subsystem* find(const std::string& nqn);
  Subsystem& discovery() { return discovery_; }
  const std::vector<std::unique_ptr<Subsystem>>& subsystems() const { return subsystems_; }
  const TargetConfig& config() const { return config_; }

  std::shared_ptr<Controller> create_controller(Subsystem* subsystem, const std::string& hostnqn,
                                                const uint8_t hostid[16], uint32_t kato_ms);
  std::shared_ptr<Controller> find_controller(uint16_t cntlid);
  void remove_controller(uint16_t cntlid);
  std::vector<std::shared_ptr<Controller>> controllers();

  // One per I/O listener (config listen, then tls_listen order), and the default for
  // controllers that came in elsewhere (optimized).
  const std::vector<std::unique_ptr<AnaPort>>& ana_ports() const { return ana_ports_; }
  AnaPort* default_ana() { return &default_ana_; }

  // Flushes every namespace's device (shutdown).
  void sync_all();
  // Waits for the reservation commands running off the reactors; drops those not started
  // (shutdown, after the reactors stopped: their answers would go nowhere).
  void stop_workers();

 private:
  TargetConfig config_;
  std::vector<std::unique_ptr<Subsystem>> subsystems_;
  Subsystem discovery_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Controller>> controllers_;
  std::vector<std::unique_ptr<AnaPort>> ana_ports_;
  AnaPort default_ana_;
};

}  // namespace sens::target
