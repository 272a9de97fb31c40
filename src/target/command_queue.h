#pragma once
// What a command set (Fabrics, admin, NVM I/O) sees of the queue a command arrived on: who
// the queue belongs to, and the few things it may ask of the transport. The NVMe/TCP queue
// (tcp_queue.h) implements it; the command sets never see a PDU or a socket.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/worker_thread.h"
#include "storage/device.h"
#include "target/request.h"
#include "target/subsystem.h"

namespace sens::target {

class ReactorContext;
class DhchapSession;

class CommandQueue {
 public:
  explicit CommandQueue(ReactorContext& ctx);
  virtual ~CommandQueue();

  ReactorContext& ctx() { return ctx_; }
  uint16_t qid() const { return qid_; }
  bool connected() const { return subsystem_ != nullptr; }
  Subsystem* subsystem() const { return subsystem_; }
  Controller* controller() const { return ctrl_.get(); }
  QueueCounters& counters() { return counters_; }
  // DH-HMAC-CHAP on this queue (null: the host has no key).
  DhchapSession* dhchap() const { return dhchap_.get(); }

  // The transport.
  // Sends `len` bytes of `data` to the host (controller-to-host data), then the response.
  // `stable`: `data` may change after this call (a RAM namespace's own blocks); the
  // transport copies it there (r.buf) before the bytes would have to wait.
  virtual void send_data(Request& r, const void* data, uint32_t len, uint8_t* stable = nullptr) = 0;
  // Whether reads may be sent straight from a memory namespace (see nvm.cc).
  virtual bool zero_copy_reads() const = 0;
  // Sends the response (CQE) and frees the request once it is out.
  virtual void complete(Request& r, uint16_t status, uint64_t result = 0) = 0;
  // Starts device I/O; the command set's device_done() runs on completion.
  virtual void submit(Request& r, storage::Op op, uint64_t offset, uint64_t len, void* buf) = 0;
  // Runs `work` on `worker` (a control command that blocks, never I/O), then `done(queue, r,
  // status)` back on this queue's thread with what `work` returned. The request counts as
  // device I/O in flight meanwhile, so the queue is not freed under it; if the queue closed,
  // `done` does not run.
  using OffloadDone = void (*)(CommandQueue& q, Request& r, uint16_t status);
  virtual void offload(Request& r, WorkerThread& worker, std::function<uint16_t()> work,
                       OffloadDone done) = 0;
  // Parks `r` for a step that another thread ends (a DH step waiting for a negotiation
  // slot): it counts as in flight, as under offload(). The Resume, called once from any
  // thread, runs `done(queue, r, status)` back on this queue's thread (not if it closed).
  using Resume = std::function<void(uint16_t status)>;
  virtual Resume park(Request& r, OffloadDone done) = 0;
  // Fabrics.
  virtual uint64_t connection_id() const = 0;  // how the reactor finds this queue
  // Connect accepted: the queue now belongs to `ctrl` as queue `qid`.
  // With `auth` (the host has a key) commands other than AUTH_Send/AUTH_Receive (and
  // Disconnect) fail with Authentication Required until on_authenticated(true).
  virtual void on_connected(Subsystem* sub, std::shared_ptr<Controller> ctrl, uint16_t qid,
                            uint32_t sq_entries, bool sq_flow_disabled,
                            std::shared_ptr<const HostAuth> auth) = 0;
  // An exchange ended: the host authenticated, or failed (the queue loses access).
  virtual void on_authenticated(bool ok) = 0;
  // Disconnect: answers `r`, then closes once the response has left.
  virtual void disconnect(Request& r) = 0;
  // Whether the host reached the target through a discovery-only listener.
  virtual bool via_discovery_listener() const = 0;
  // The TLS PSK identity the host used (null: plain TCP). Connect checks its NQNs.
  virtual const std::string* tls_identity() const = 0;
  // The host's address:port (for the operator).
  virtual const std::string& peer_address() const = 0;
  // The local address the host connected to (what a discovery log should advertise).
  virtual const std::string& local_address() const = 0;
  // Admin.
  virtual void keep_alive_changed() = 0;  // Set Features KATO
  virtual bool park_aer(Request& r) = 0;  // false: the AER limit is reached
  // The ANA view of the listener this queue came in on (null: a discovery listener).
  virtual AnaPort* ana_port() const = 0;
  // Completes an outstanding AER with an event the controller has pending, if the host
  // enabled it (on this queue's thread; Target::notify_ana_change posts it here).
  virtual void deliver_events() = 0;

  // Points `r` at `ns` (null: at none), holding it: a namespace removed live is destroyed
  // only once no request holds it. Every request that keeps a namespace goes through here;
  // the transport calls it with null when the request is freed.
  void bind_ns(Request& r, Namespace* ns) {
    if (r.ns) r.ns->drop(reactor_index_);
    r.ns = ns;
    if (ns) ns->hold(reactor_index_);
  }

  // What this host may do on `ns` under its reservations (resv::kMayRead | kMayWrite); one
  // atomic load while no reservation is held, else a cache checked against the version.
  uint8_t reservation_access(const Namespace& ns) {
    if (!ns.reservations.held()) return resv::kMayRead | resv::kMayWrite;
    // (grown on the first reservation seen on a namespace added after Connect)
    if (ns.nsid > resv_cache_.size()) resv_cache_.resize(ns.nsid);
    auto& c = resv_cache_[ns.nsid - 1];
    if (c.generation != ns.generation) c = ResvCache{ns.generation};  // an nsid used again
    if (c.version != ns.reservations.version())
      c.allowed = const_cast<Reservations&>(ns.reservations).access(ctrl_->hostid, &c.version);
    return c.allowed;
  }

 protected:
  ReactorContext& ctx_;
  uint32_t reactor_index_;  // this queue's slot in Namespace::holds
  uint16_t qid_ = 0;
  Subsystem* subsystem_ = nullptr;
  std::shared_ptr<Controller> ctrl_;
  QueueCounters counters_;
  std::unique_ptr<DhchapSession> dhchap_;
  struct ResvCache {
    uint64_t generation = 0;  // Namespace::generation of the namespace it was filled for
    uint64_t version = 0;     // 0: never filled (versions start at 1)
    uint8_t allowed = 0;
  };
  std::vector<ResvCache> resv_cache_;  // by nsid - 1; sized at Connect
};

// The command sets: plan() decides what a command needs before it runs (a buffer, data from
// the host), execute() runs it once that is in place, device_done() continues after device
// I/O. Each answers through the queue (send_data / complete).
namespace fabrics {
Plan plan(CommandQueue& q, Request& r);
void execute(CommandQueue& q, Request& r);
void device_done(CommandQueue& q, Request& r);
}  // namespace fabrics
namespace admin {
Plan plan(CommandQueue& q, Request& r);
void execute(CommandQueue& q, Request& r);
}  // namespace admin
namespace dhchap {  // AUTH_Send, AUTH_Receive
Plan plan(CommandQueue& q, Request& r);
void execute(CommandQueue& q, Request& r);
}  // namespace dhchap
namespace nvm {
Plan plan(CommandQueue& q, Request& r);
void execute(CommandQueue& q, Request& r);
void device_done(CommandQueue& q, Request& r);
}  // namespace nvm

// Constants the layers share.
inline constexpr uint32_t kAdminDataMax = 8192;       // admin/Fabrics data (Connect's 1024 bytes)
inline constexpr uint32_t kAerLimit = 4;              // AERL + 1
inline constexpr uint32_t kNvmeVersion = 0x00010300;  // NVMe 1.3
// Keep Alive Timer granularity (Identify KAS, in 100 ms units).
inline constexpr uint16_t kKasUnits = 10;

}  // namespace sens::target
