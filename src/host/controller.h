#pragma once
// An NVMe over TCP controller as the host drives it: the admin queue brought up the way the
// Linux host does it (ICReq, Fabrics Connect, CAP/VS, CC.EN, CSTS.RDY, Identify), keep alive
// at KATO/2, Set Features Number of Queues and one TCP connection per I/O queue, a discovery
// log reader, and a clean shutdown (CC.SHN, CSTS.SHST, close).
//
// Set-up and admin helpers are synchronous: they drive the reactor (run_once) until their
// command completes or times out, so call them from the top level of the reactor's thread,
// never from a completion callback. The I/O path (Queue::submit) is asynchronous.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host/queue.h"
#include "host/trid.h"
#include "reactor/reactor.h"
#include "wire/nvme.h"

namespace sens::host {

struct ControllerOptions {
  std::string hostnqn;               // empty: nqn.2014-08.org.nvmexpress:uuid:<hostid>
  std::array<uint8_t, 16> hostid{};  // all zero: a random one
  uint32_t kato_ms = 5000;           // admin Connect KATO; keep alive every kato/2; 0: none
  uint16_t io_queues = 1;
  uint16_t io_depth = 32;  // commands in flight per I/O queue
  bool hdr_digest = false;
  bool data_digest = false;
  bool disable_sqflow = false;  // Connect cattr bit 2: the target may skip CapsuleResps
  coalesce::Config coalesce;    // I/O queues; the admin queue never coalesces
  Nanos io_timeout = 30 * kSecond;
  Nanos admin_timeout = 10 * kSecond;
  Nanos connect_timeout = 10 * kSecond;
  uint32_t max_transfer = 1u << 20;  // the largest I/O the caller will submit
  // DH-HMAC-CHAP (as nvme connect --dhchap-secret / --dhchap-ctrl-secret): the host's secret,
  // used on every queue whose Connect answers AUTHREQ.ATR; with the controller's secret the
  // host also checks the controller's response (bidirectional). A controller that asks for
  // authentication fails the connect when the host has no secret, and a controller secret
  // given to a controller that does not ask fails it too.
  std::string dhchap_secret, dhchap_ctrl_secret;
  std::vector<uint8_t> dhchap_hashes = {1, 2, 3};             // offered, in this order
  std::vector<uint8_t> dhchap_dhgroups = {0, 1, 2, 3, 4, 5};  // null, ffdhe2048..8192
  // TLS 1.3 (NVMe/TCP 1.1) with the first PSK of this file (interchange format): its length
  // picks TLS_AES_128_GCM_SHA256 (32 bytes) or TLS_AES_256_GCM_SHA384 (48).
  std::string tls_psk_file;
  ~ControllerOptions();  // wipes the secrets' text (every copy)
};

// The fields of Identify Namespace a benchmark needs.
struct NamespaceInfo {
  uint32_t nsid = 0;
  uint64_t blocks = 0;      // NSZE
  uint32_t block_size = 0;  // from the formatted LBA format
  uint64_t bytes() const { return blocks * block_size; }
};

class DhchapExchange;

class Controller {
 public:
  explicit Controller(Reactor& reactor);
  ~Controller();  // closes whatever is open (no shutdown handshake: call shutdown() for that)
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Connects the admin queue and brings the controller up to CSTS.RDY and Identify.
  // Returns "" or an error naming the step that failed.
  std::string connect(const TransportId& trid, const ControllerOptions& options);
  // After a lost connection: closes the admin queue (commands on it fail with
  // kStatusHostPathError), stops keep alive. The keys, TLS context and host identity stay.
  void drop(const std::string& why);
  // A new association with the same options (a new admin queue, Connect, authentication, TLS,
  // CC.EN, Identify), as connect() did; "" or what failed.
  std::string reconnect();
  // Caps the connect and admin command timeouts (0: none), so that a reconnect attempt ends
  // by a deadline; read by the threads that connect I/O queues.
  void set_timeout_cap(Nanos cap) { timeout_cap_.store(cap, std::memory_order_relaxed); }
  Nanos admin_timeout() const { return capped(options_.admin_timeout); }
  Nanos connect_timeout() const { return capped(options_.connect_timeout); }
  // Called once per failure of the admin queue or of a keep alive (not for drop() or
  // shutdown()), on the reactor's thread.
  void set_on_lost(void (*fn)(void* ctx, const std::string& why), void* ctx) {
    on_lost_ = fn;
    on_lost_ctx_ = ctx;
  }
  // Bounds the data of one I/O command (received PDU sizes are checked against it).
  void set_max_transfer(uint32_t bytes) { options_.max_transfer = bytes; }
  // Set Features Number of Queues, then one connection and Fabrics Connect per I/O queue.
  std::string create_io_queues();
  // CC.SHN = normal, waits up to `timeout` for CSTS.SHST = complete, then closes every queue
  // (commands still in flight complete with kStatusHostPathError).
  void shutdown(Nanos timeout = 2 * kSecond);

  // One admin command, waited for. The buffer is the caller's.
  Completion admin(const nvme::Sqe& sqe, void* buf = nullptr, uint32_t len = 0,
                   DataDir dir = DataDir::kNone);
  std::string property_get(uint32_t offset, bool eight_bytes, uint64_t* value);
  std::string property_set(uint32_t offset, uint64_t value, bool eight_bytes);
  std::string identify_namespace(uint32_t nsid, nvme::IdentifyNamespace* out);
  std::string active_namespaces(std::vector<uint32_t>* out);
  // The first active namespace's size and block size (or the one given).
  std::string namespace_info(uint32_t nsid, NamespaceInfo* out);
  // The whole discovery log page (header + numrec entries), re-read if genctr changed.
  std::string discovery_log(std::vector<uint8_t>* out);

  Queue* admin_queue() { return admin_.get(); }
  size_t io_queue_count() const { return io_.size(); }
  Queue& io_queue(size_t i) { return *io_[i]; }
  const Queue& io_queue(size_t i) const { return *io_[i]; }

  const nvme::IdentifyController& identify() const { return *id_; }
  uint64_t cap() const { return cap_; }
  uint32_t vs() const { return vs_; }
  uint16_t cntlid() const { return cntlid_.load(std::memory_order_acquire); }
  const std::string& hostnqn() const { return hostnqn_; }
  const TransportId& trid() const { return trid_; }
  const ControllerOptions& options() const { return options_; }
  // Largest data transfer (MDTS; 0 = no limit reported) and in-capsule bytes on I/O queues.
  uint32_t max_transfer_bytes() const;
  uint32_t io_incapsule_bytes() const;

  // Runs DH-HMAC-CHAP again on the admin queue, then on every I/O queue (re-authentication,
  // NVMe Base 2.0 8.13.5.1). "" or what failed.
  std::string reauthenticate();
  // The hash and DH group the last exchange on the admin queue used (0 before any).
  uint8_t auth_hash() const { return auth_hash_; }
  uint8_t auth_dhgroup() const { return auth_dhgroup_; }
  uint64_t authentications() const { return authentications_; }

  // Fabrics Connect of a queue this controller did not open itself (the library's I/O
  // queues), then DH-HMAC-CHAP if the controller asks for it; runs the queue's reactor until
  // done. "" or what failed.
  std::string connect_queue(Queue& q, uint16_t qid, uint16_t sqsize);
  // The same in pieces, for a set-up that does not wait (host/queue_setup.h): the Connect
  // command (its data into *data), and the verdict on its answer: "" or what failed, and
  // whether DH-HMAC-CHAP (a DhchapExchange) must follow.
  nvme::Sqe connect_command(uint16_t qid, uint16_t sqsize, nvme::ConnectData* data) const;
  std::string connect_answer(uint16_t qid, const Completion& c, const Queue& q, bool* authenticate);
  // The TLS context every queue of this controller uses (null: plain TCP).
  transport::TlsContext* tls() const { return tls_.get(); }

  // The first failure of any queue (or of a keep alive), "" while all is well.
  const std::string& error() const { return error_; }
  bool failed() const { return !error_.empty(); }
  uint64_t keep_alives_sent() const { return keep_alives_.load(std::memory_order_relaxed); }

 private:
  friend class DhchapExchange;
  Completion wait_command(Queue& q, const nvme::Sqe& sqe, void* buf, uint32_t len, DataDir dir,
                          Nanos timeout);
  std::string authenticate(Queue& q, uint16_t qid);  // host/dhchap.cc
  std::unique_ptr<Queue> open_queue(const QueueOptions& qo, std::string* error);
  std::string connect_admin();
  Nanos capped(Nanos t) const {
    const Nanos cap = timeout_cap_.load(std::memory_order_relaxed);
    return cap > 0 && cap < t ? cap : t;
  }
  void lost(const std::string& why);
  void on_keep_alive_timer();
  static void on_keep_alive_done(void* ctx, uint64_t tag, const Completion& c);
  static void on_queue_failure(void* ctx, Queue& q);

  Reactor& reactor_;
  TransportId trid_;
  ControllerOptions options_;
  std::string hostnqn_;
  std::unique_ptr<Queue> admin_;
  std::vector<std::unique_ptr<Queue>> io_;
  std::unique_ptr<nvme::IdentifyController> id_;
  uint64_t cap_ = 0;
  uint32_t vs_ = 0;
  uint32_t cc_ = 0;
  std::atomic<Nanos> timeout_cap_{0};
  // Read by the threads that connect the library's I/O queues.
  std::atomic<uint16_t> cntlid_{0xFFFF};
  std::string error_;
  Timer keep_alive_;
  bool keep_alive_inflight_ = false;
  std::atomic<uint64_t> keep_alives_{0};  // read from other threads (the library's API)
  bool shutting_down_ = false;
  std::vector<uint8_t> host_key_, ctrl_key_;  // transformed DH-HMAC-CHAP keys
  std::unique_ptr<transport::TlsContext> tls_;
  bool have_host_key_ = false, have_ctrl_key_ = false;
  std::atomic<uint16_t> transaction_{0};  // I/O queues authenticate on their own threads
  void (*on_lost_)(void*, const std::string&) = nullptr;
  void* on_lost_ctx_ = nullptr;
  uint8_t auth_hash_ = 0, auth_dhgroup_ = 0;
  std::atomic<uint64_t> authentications_{0};
};

// One DH-HMAC-CHAP transaction of the host on one queue (NVMe Base 2.0 8.13.5), message by
// message, so that the blocking Controller::authenticate and the non-blocking queue set-up
// run the same checks. Each step says what to send next with AUTH_Send (`send`; empty:
// nothing) and "" or what failed (`error`). A step with both: the host refuses (FAILURE2):
// send it, whatever becomes of that, then fail with `error`.
class DhchapExchange {
 public:
  static constexpr uint32_t kReceiveBytes = 4096;  // AL of every AUTH_Receive (ffdhe8192 fits)
  struct Step {
    std::string error;
    std::vector<uint8_t> send;
  };
  DhchapExchange(Controller& ctrl, uint16_t qid);
  ~DhchapExchange();  // wipes the session key

  Step negotiate();  // NEGOTIATE: every hash and group this host accepts
  // The answers of AUTH_Receive: its completion and its kReceiveBytes of data.
  Step on_challenge(const Completion& c, const uint8_t* msg);  // -> REPLY
  Step on_success1(const Completion& c, const uint8_t* msg);   // -> SUCCESS2 (bidirectional)
  std::string send_failed(const Completion& c) const;          // AUTH_Send did not succeed
  void finished();  // the last message is sent: the queue is authenticated

 private:
  std::string check(const Completion& c, const uint8_t* msg, uint8_t expected) const;
  Step refuse(uint8_t reason, const std::string& why) const;

  Controller& ctrl_;
  uint16_t qid_;
  std::string where_;
  uint16_t t_id_ = 0;
  uint8_t hashid_ = 0, dhgid_ = 0;
  size_t hl_ = 0, dhvlen_ = 0;
  std::vector<uint8_t> session_key_;
  uint8_t c2_[64] = {};  // our challenge to the controller (bidirectional; 64: SHA-512)
  uint32_t s2_ = 0;
};

// Text for a Completion: "LBA out of range (0x080)".
std::string describe(const Completion& c);

}  // namespace sens::host
