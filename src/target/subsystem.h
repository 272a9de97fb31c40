#pragma once
// Subsystems, namespaces and controllers: the state shared by a target's connections. Only
// the control path (Connect, admin commands, keep alive) touches it; the I/O path reads the
// immutable namespace table without locks.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "storage/device.h"
#include "target/config.h"

namespace sens::target {

struct Namespace {
  uint32_t nsid = 0;
  std::string spec;
  std::unique_ptr<storage::Device> device;
  uint64_t blocks = 0;
  uint32_t block_shift = 9;
  uint8_t nguid[16]{};
  uint8_t uuid[16]{};
};

class Subsystem {
 public:
  std::string nqn;
  bool discovery = false;
  std::vector<std::unique_ptr<Namespace>> namespaces;  // index nsid - 1; fixed after start
  std::vector<std::string> allowed_hosts;              // empty: any host
  std::string serial;
  bool volatile_cache = false;  // some namespace has a volatile write cache (Identify VWC)

  bool host_allowed(const std::string& hostnqn) const;
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
  std::atomic<uint32_t> io_queues_granted{
      0};  // I/O queues granted (one-based); read by any reactor

  // Controller registers. Written by the admin queue's thread only; I/O queues read CC.EN.
  std::atomic<uint32_t> cc{0};
  std::atomic<uint32_t> csts{0};
  uint32_t async_event_config = 0;

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

  // Flushes every namespace's device (shutdown).
  void sync_all();

 private:
  TargetConfig config_;
  std::vector<std::unique_ptr<Subsystem>> subsystems_;
  Subsystem discovery_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Controller>> controllers_;
  uint16_t next_cntlid_ = 1;
};

}  // namespace sens::target
