#pragma once
// sens host library: NVMe over TCP for applications.
//
//   Controller  one NVMe/TCP controller: connected asynchronously from a transport ID, its
//               namespaces, admin passthrough, asynchronous events, keep alive. It runs a
//               thread of its own for the admin queue.
//   Poller      what one application thread drives its I/O with: process_completions()
//               runs that thread's connections and delivers its completions.
//   IoQueue     a submitting queue (one per thread, or several): read / write / flush /
//               write zeroes / deallocate on (namespace, LBA, count) with an iovec list and
//               a completion callback (a plain function and a context: no allocation per I/O).
//
// Connections: with ShareMode::kNone every IoQueue has an NVMe/TCP connection of its own,
// which its poller's thread drives itself (no other thread on the I/O path). With kLock and
// kSendList the controller opens `connections` connections, each run by a library thread (its
// owner), and IoQueues share them (round robin): kLock submitters take the connection's
// mutex to submit and send; kSendList submitters push onto a lock-free send-list of their
// own, which the owner drains with every other submitter's in one pass and coalesces into
// one vectored send. Completions go back through per-queue lists the queue's poller drains.
//
// Threads: an IoQueue and its Poller belong to the thread that created the Poller (create
// the queue there too); callbacks run on it, inside process_completions(). A queue created
// without a poller has its callbacks run on its connection's owner thread instead.
//
// Statistics and timers (below): what the loops, connections and coalescing did, and a timer
// a poller runs, for applications that measure themselves (sens perf, the fio engine use this
// header only). ABI: libsens_host.so.0; what changes the SONAME: docs/host-abi.md.
//
// Lost connections: the controller reconnects as the Linux host does (reconnect_delay_s,
// ctrl_loss_tmo_s in ControllerOptions): I/O waits, then is retried, or fails with
// Status::kHostPathError once ctrl_loss_tmo_s has passed.
//
// ---- Ownership and lifetimes ----
//
// Who owns what. The application owns the three objects (create_io_queue and connect hand
// over a unique_ptr) and may destroy them in any order. The Controller owns the connections
// to the NVM subsystem and the library's threads; each IoQueue also keeps the Controller's
// internals alive (not the Controller), so a queue may outlive it: the threads and shared
// connections end with the last of the Controller and its queues. A Poller owns nothing of
// the Controller; its queues point to it until it goes. The caller owns every buffer, iovec
// array and callback context until that command's callback has run.
//
// Threads. A Poller and the IoQueues it drives belong to one thread (the one that created
// the Poller and calls process_completions): use and destroy them there. A queue without a
// poller may be used from any one thread at a time. The Controller may be used, and destroyed,
// from any thread, while other threads still submit on its queues (a submission racing the
// destructor is accepted and aborted; later ones get -ENODEV).
//
// Callbacks. A completion callback runs exactly once per accepted command (submit returned
// 0), on the poller's thread inside process_completions or inside a destructor called on that
// thread (no poller: on a library thread). From a completion callback it is legal to:
//   - submit on any queue of this thread (the same queue included);
//   - destroy any IoQueue of this poller, the one whose callback runs included: the delete
//     returns at once, and the queue is closed (below) when the outermost process_completions
//     of this poller returns, its remaining commands' callbacks running then;
//   - destroy this Poller: the same, it goes when process_completions returns;
//   - destroy a queue without poller from its callback on a library thread: it is closed on a
//     thread of the library's own, its remaining callbacks running on the owner thread;
//   - destroy the Controller: from a poller's callback, that poller's queues get their aborts
//     once the callback returns, in this or its next process_completions (the destructor does
//     not wait for them); from a library thread (no-poller, connect, admin, AER and state
//     callbacks) the shutdown runs on a thread of its own and the destructor returns at once.
// Not supported from a callback: process_completions of the same poller (no nesting), and
// Controller::shutdown() or admin_sync() on a library thread (they wait for that thread).
//
// Commands in flight when an object goes. Each gets its callback exactly once before the
// destructor returns (but for the deferred cases above), with its own completion if the
// controller's answer came first, else with Status::kAbortedSqDeletion (NVMe Generic Command
// Status 08h, Command Aborted due to SQ Deletion, DNR clear: deleting a queue deletes its SQ,
// which is what NVMe defines 08h for; 07h, Abort Requested, answers an Abort command naming
// one command). The controller may have executed an aborted command or not, as with any
// deleted SQ. After the callback the library never touches that command's buffers again.
//   - ~IoQueue: on a connection of its own (ShareMode::kNone) the connection closes and every
//     command is aborted at once. On a shared connection, commands not yet sent (and commands
//     held while reconnecting) are aborted at once; commands on the wire get
//     ControllerOptions::abort_timeout_ms to be answered, then that connection is reset (the
//     other queues' commands on it are retried through a reconnect, as after a lost
//     connection) and they are aborted. Its qid or cids are free again afterwards.
//   - ~Poller: closes each queue it drives as ~IoQueue does; those queues stay valid objects
//     whose submissions return -ENODEV, and may be destroyed later.
//   - ~Controller: closes every connection; every command aborts. Queues without poller get
//     their callbacks on the owner threads; queues on a poller of the calling thread get them
//     inside the destructor (it runs that poller); queues on other threads' pollers get them in
//     those threads' next process_completions, which the destructor waits for up to
//     abort_timeout_ms. The shutdown handshake (CC.SHN) is bounded by the same timeout (2 s at
//     most). Submissions on its queues return -ENODEV from then on.
#include <sys/uio.h>

#include <climits>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sens {

namespace host {
class ControllerImpl;
class PollerImpl;
class IoQueueImpl;
class PollerTimerImpl;
struct ConnectionStatsImpl;
struct ApiAccess;  // the library's own way in (src/host/library.h); not an API
}  // namespace host

// An NVMe completion status: (SCT << 8) | SC, and DNR.
class Status {
 public:
  enum class Type : uint8_t {
    kGeneric = 0,
    kCommandSpecific = 1,
    kMediaError = 2,
    kPath = 3,  // path-related: the host lost the connection (reconnect), timed out, ...
    kVendor = 7,
  };
  // What the host reports for errors it detects itself (the Linux host's values).
  static constexpr uint16_t kHostPathError = 0x370;  // no usable path: transport lost
  static constexpr uint16_t kHostAborted = 0x371;    // the command timed out
  // Its queue, its queue's poller or its controller was deleted while it was in flight
  // (NVMe Generic 08h, Command Aborted due to SQ Deletion): see "Ownership and lifetimes".
  static constexpr uint16_t kAbortedSqDeletion = 0x008;

  constexpr Status() = default;
  constexpr explicit Status(uint16_t sct_sc, bool dnr = false) : raw_(sct_sc), dnr_(dnr) {}
  bool ok() const { return raw_ == 0; }
  Type type() const { return Type((raw_ >> 8) & 7); }
  uint8_t code() const { return uint8_t(raw_); }
  uint16_t raw() const { return raw_; }
  bool dnr() const { return dnr_; }
  bool path_error() const { return type() == Type::kPath; }
  std::string to_string() const;  // "LBA Out of Range (0x080)"
  bool operator==(const Status& o) const { return raw_ == o.raw_; }

 private:
  uint16_t raw_ = 0;
  bool dnr_ = false;
};

struct Completion {
  Status status;
  uint32_t dw0 = 0, dw1 = 0;  // command specific
};
using Callback = void (*)(void* ctx, const Completion& completion);

// A transport ID as Controller::connect reads it ("trtype:tcp traddr:127.0.0.1 trsvcid:4420
// subnqn:nqn..."; keys case-insensitive, traddr required).
struct TransportId {
  std::string trtype = "tcp";
  std::string adrfam = "ipv4";  // "ipv4" or "ipv6"
  std::string traddr;           // a numeric address
  uint16_t trsvcid = 4420;
  std::string subnqn;             // the discovery NQN when the text names none
  std::string hostnqn;            // empty: the controller options' (or a generated one)
  std::string to_string() const;  // the keys in this order (hostnqn if set), as connect() reads
};
// Parses `text` exactly as connect() does: true, or false and *error naming the offending
// pair (unknown or repeated key, bad address or port, NQN too long, ...).
bool parse_trid(std::string_view text, TransportId* out, std::string* error);

enum class ShareMode : uint8_t { kNone, kLock, kSendList };
const char* share_mode_name(ShareMode mode);  // "none", "lock", "sendlist"
bool parse_share_mode(std::string_view name, ShareMode* out);

// Who computes TLS records' AES-GCM, for the connections the process makes from now on (one
// choice per process, made at start-up): "auto" (Intel's ipsec-mb with the CPU's widest AES
// code where it runs, else OpenSSL; the default), "ipsec-mb", or "openssl" (OpenSSL's EVP: a
// FIPS-validated provider, say). False and *error for another name, or for ipsec-mb where it
// cannot run (not built in, or a CPU without AES-NI).
bool set_tls_aes_gcm(std::string_view name, std::string* error);
// What new TLS connections use: "ipsec-mb 1.3.0 (AVX-512, VAES)", "OpenSSL 3.0.19 (EVP)".
std::string tls_aes_gcm();
// Who protects the TLS records of the connections the process makes from now on, after
// OpenSSL's handshake: "auto" (the kernel's TLS, kTLS, where the kernel takes the keys: it has
// the `tls` module; else sens in user space; the default), "kernel" (kTLS or the connection
// fails), or "sens". False and *error for another name. IoQueue::tls_records() says which a
// connection got.
bool set_tls_records(std::string_view name, std::string* error);
// What this process knows of the kernel's TLS: "not tried yet", "in use", or why not.
std::string kernel_tls_status();

enum class ControllerState : uint8_t { kConnecting, kLive, kReconnecting, kFailed, kClosed };
const char* controller_state_name(ControllerState s);

struct ControllerOptions {
  std::string hostnqn;      // empty: the TRID's, else nqn.2014-08.org.nvmexpress:uuid:<random>
  uint32_t kato_ms = 5000;  // keep alive timeout (sent every kato/2); 0: none
  ShareMode share = ShareMode::kNone;
  uint32_t connections = 1;         // shared modes: I/O connections (M)
  uint32_t connection_depth = 256;  // shared modes: commands in flight per connection, split
                                    // among the queues on it (each takes its own depth)
  uint32_t max_io_queues = 64;      // Set Features Number of Queues asks for this many
  bool hdr_digest = false, data_digest = false;
  bool disable_sqflow = false;  // Connect with SQ flow control disabled
  // SENS coalescing of the I/O connections (see the README): off|eager|uniform|semantic|adaptive.
  // kLock sends each command at once under the lock, whatever the policy.
  std::string coalesce = "adaptive";
  uint32_t pg_pdus = 16, pg_timeout_us = 50, ctrl_pdus = 4, ctrl_timeout_us = 10;
  // Byte cap of a group: a pass's commands and write data leave in one send up to it.
  uint32_t pg_bytes = 1024 * 1024;
  // How owner threads and pollers wait: off|adaptive|always, and the longest adaptive spin.
  std::string poll = "adaptive";
  uint32_t poll_max_us = 50;
  uint32_t io_timeout_ms = 30000, admin_timeout_ms = 10000, connect_timeout_ms = 10000;
  // How long deleting an object waits for commands in flight (see "Ownership and lifetimes"):
  // a shared connection's commands to be answered, other threads' pollers to deliver the
  // aborts, the shutdown handshake. 5 s, as the Linux host's shutdown_timeout.
  uint32_t abort_timeout_ms = 5000;
  uint32_t max_transfer = 1u << 20;  // the largest I/O the caller will submit (bytes)
  // DH-HMAC-CHAP, as nvme connect --dhchap-secret / --dhchap-ctrl-secret (DHHC-1:xx:...:):
  // every queue authenticates when the controller asks; with the controller's secret the
  // controller is authenticated too.
  std::string dhchap_secret, dhchap_ctrl_secret;
  // TLS 1.3 with the first PSK of this file (NVMeTLSkey-1:..., as nvme gen-tls-key writes);
  // empty: plain TCP.
  std::string tls_psk_file;
  // Reconnect, as the Linux host does it (nvme connect --reconnect-delay / --ctrl-loss-tmo).
  // When any connection of the controller fails (the peer closed or reset it, a keep alive
  // or a command timed out), the controller goes to kReconnecting: every connection is
  // closed, I/O commands in flight are held (not failed) and retried once reconnected, up to
  // 5 times each (nvme_core.max_retries), and new I/O submissions are accepted and held too.
  // Every reconnect_delay_s seconds the controller tries a new association: admin queue,
  // Connect, DH-HMAC-CHAP and TLS as configured, CC.EN, then the I/O connections of the
  // share mode (shared ones on their owner threads; a kNone queue on its poller's thread, in
  // that poller's next process_completions call). Once up it is kLive again and the held
  // commands are sent. If it is not up within ctrl_loss_tmo_s seconds of the loss, it is
  // kFailed: every held command, and every I/O submitted from then on, completes with
  // Status::kHostPathError (SCT 3 SC 0x70). An attempt's connect and admin timeouts are cut
  // to the time left, so a peer that accepts and never answers does not hold it past that. Admin
  // commands are not held: one submitted or in flight while reconnecting completes with
  // kHostPathError (as Linux fails passthrough). ctrl_loss_tmo_s 0: no reconnect, a lost connection
  // fails the controller at once; kForever: never give up. reconnect_delay_s must be >= 1 when
  // reconnecting.
  static constexpr uint32_t kForever = UINT32_MAX;
  uint32_t reconnect_delay_s = 10;
  uint32_t ctrl_loss_tmo_s = 600;
  // Called on the controller's thread at every state change: kConnecting and kLive (or
  // kFailed) while connecting, then kReconnecting, kLive, kFailed. Not for kClosed.
  void (*on_state)(void* ctx, ControllerState state) = nullptr;
  void* on_state_ctx = nullptr;
};

// What the controller did to survive lost connections (Controller::counters()).
struct ControllerCounters {
  uint64_t losses = 0;              // connections lost while live (each starts a reconnect)
  uint64_t reconnect_attempts = 0;  // associations tried
  uint64_t reconnects = 0;          // ... that came up (kReconnecting -> kLive)
  uint64_t retried = 0;             // I/O commands in flight at a loss, sent again after it
  uint64_t held = 0;                // I/O commands submitted while reconnecting, sent after it
};

struct Namespace {
  uint32_t nsid = 0;
  uint64_t blocks = 0;  // NSZE
  uint32_t block_size = 0;
  uint64_t bytes() const { return blocks * block_size; }
};

// An admin command for passthrough: the library fills the CID and the data pointer.
struct AdminCommand {
  uint8_t opcode = 0;
  uint32_t nsid = 0;
  uint32_t cdw10 = 0, cdw11 = 0, cdw12 = 0, cdw13 = 0, cdw14 = 0, cdw15 = 0;
  enum class Data : uint8_t { kNone, kToController, kFromController } data = Data::kNone;
};

// ---- Statistics (what `sens perf` and the fio engine report) ----
//
// Read them on the thread the object belongs to (a poller's, a queue's), or, for a shared
// connection, anywhere but a library thread: the library reads it on its owner thread and
// waits. None of this is on the I/O path: no counter here costs a submission anything.

// A distribution (latencies, batch sizes) as the library's log-linear histograms summarize it
// (percentiles within ~3 %), in the unit its name says.
struct Summary {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, p99_9 = 0, min = 0, max = 0;
};

// An event loop's work: a poller's (its thread's), or a shared connection's owner thread's.
// Counters since the loop started.
struct LoopStats {
  uint64_t polls = 0;     // epoll_pwait2 calls
  uint64_t sleeps = 0;    // polls that could block
  uint64_t spins = 0;     // zero-timeout polls of hybrid polling that found nothing
  uint64_t yields = 0;    // spinning polls that first yielded a crowded CPU
  uint64_t wakeups = 0;   // polls that returned events or fired timers
  Summary timer_late_us;  // how long after its deadline each timer fired (PollerTimer's too)
};

// One NVMe/TCP connection's send and receive path, or the sum of several (merge): a copyable
// value, a snapshot. The system call counters run from the connection's opening; the
// coalescing and send-list statistics from the last reset_stats() (or the opening).
class ConnectionStats {
 public:
  ConnectionStats();
  ~ConnectionStats();
  ConnectionStats(const ConnectionStats& other);
  ConnectionStats& operator=(const ConnectionStats& other);
  // Adds `other`'s counters and histograms (exactly: percentiles of the sum, not of summaries).
  void merge(const ConnectionStats& other);

  uint64_t sendmsg_calls() const;  // since opened
  uint64_t recv_calls() const;     // since opened
  // SENS coalescing (ControllerOptions::coalesce): PDUs handed to the socket, the send calls
  // that carried them, groups held past a pass (adaptive), flushed groups by reason ("capacity",
  // "timer", ..., every reason, zeros included, in a fixed order), and distributions.
  uint64_t pdus_sent() const;
  uint64_t send_calls() const;
  uint64_t holds() const;
  std::vector<std::pair<std::string, uint64_t>> flushes() const;
  uint64_t total_flushes() const;
  Summary pdus_per_flush() const;
  Summary r2t_delay_us() const;         // an R2T from entering a group to its flush
  Summary timer_flush_late_us() const;  // a timer flush after its deadline
  // ShareMode::kSendList: owner passes that found send-list entries, the entries drained, and
  // entries per such pass (0 for other connections).
  uint64_t drain_passes() const;
  uint64_t drain_entries() const;
  Summary drain_per_pass() const;

 private:
  friend struct host::ApiAccess;
  std::unique_ptr<host::ConnectionStatsImpl> impl_;
};

// A shared connection (ShareMode::kLock, kSendList) with its owner thread's part.
struct SharedConnectionStats {
  int owner = 0;         // the owner thread's index: connections with the same owner share its loop
  LoopStats owner_loop;  // the owner thread's loop (every connection it runs)
  uint64_t owner_wakeups = 0;  // times a submitter woke the sleeping owner thread
  ConnectionStats connection;
};

struct PollerOptions {
  std::string poll = "adaptive";  // off|adaptive|always, as ControllerOptions::poll
  uint32_t poll_max_us = 50;
};

class Poller {
 public:
  explicit Poller(const PollerOptions& options = {});
  ~Poller();
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;

  // One pass over this thread's connections and completion lists: receives, sends what was
  // submitted, runs callbacks. Waits up to `timeout_ns` for something to happen when nothing
  // is ready (0: never; < 0: no limit); hybrid polling spins before it sleeps. `max` bounds
  // the completions taken from shared connections' lists in this call (0: all). Returns the
  // number of callbacks run.
  int process_completions(uint32_t max = 0, int64_t timeout_ns = 0);

  LoopStats stats() const;  // this poller's loop (its thread's)

 private:
  friend struct host::ApiAccess;
  std::unique_ptr<host::PollerImpl> impl_;
};

// A one-shot timer a poller runs: `fire(ctx)` runs on the poller's thread, inside
// process_completions, once CLOCK_MONOTONIC has reached the deadline (process_completions'
// timeout is cut short for it). For work of the application's own on the poller's thread,
// e.g. pacing submissions to a rate (`sens perf --rate-iops`). Create, arm and destroy it on
// the poller's thread, before the poller goes.
class PollerTimer {
 public:
  PollerTimer(Poller& poller, void (*fire)(void* ctx), void* ctx);
  ~PollerTimer();  // cancels it
  PollerTimer(const PollerTimer&) = delete;
  PollerTimer& operator=(const PollerTimer&) = delete;

  // Arms (or moves) it for `deadline_ns` on CLOCK_MONOTONIC (clock_gettime, in nanoseconds).
  void arm(int64_t deadline_ns);
  void cancel();
  bool armed() const;

 private:
  std::unique_ptr<host::PollerTimerImpl> impl_;
};

class IoQueue {
 public:
  ~IoQueue();  // commands in flight complete first, aborted (see "Ownership and lifetimes")
  IoQueue(const IoQueue&) = delete;
  IoQueue& operator=(const IoQueue&) = delete;

  // Submit one command. `blocks` in the namespace's block size; the iovec array stays the
  // caller's and must stay valid (as the data) until the callback. Returns 0, or: -EAGAIN
  // (depth commands in flight already), -EINVAL (bad arguments, unknown namespace, LBA range
  // past its end, data length not blocks x block size, more than 32 iovecs), -ENODEV
  // (controller closed). While the controller is kReconnecting a command is accepted and held
  // (see ControllerOptions::ctrl_loss_tmo_s); once it is kFailed a command is accepted and its
  // callback gets Status::kHostPathError (in the poller's next process_completions).
  int read(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt, Callback cb,
           void* ctx);
  int write(uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov, int iovcnt, Callback cb,
            void* ctx);
  int flush(uint32_t nsid, Callback cb, void* ctx);
  int write_zeroes(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx);
  int deallocate(uint32_t nsid, uint64_t lba, uint32_t blocks, Callback cb, void* ctx);

  // The same as the poller's (the queue's thread drives all its queues at once).
  int process_completions(uint32_t max = 0, int64_t timeout_ns = 0);

  uint32_t depth() const;
  uint32_t inflight() const;
  int connection() const;  // the controller connection index carrying it (-1: its own)
  // Its own connection's state (ShareMode::kNone), for stats and tests; the poller's thread:
  // "open", "down", or while it reconnects the step its set-up waits for ("tcp-connect",
  // "tls", "icresp", "fabrics-connect", "dh-hmac-chap"), which the poller advances without
  // blocking. "shared" on a shared connection.
  const char* connection_state() const;

  // The connection carrying it. On a connection of its own (ShareMode::kNone) these read it
  // here (call them on the queue's thread); on a shared one they read it on its owner thread
  // and wait (not from a library thread).
  uint16_t qid() const;         // the NVMe queue ID of its connection
  uint32_t maxh2cdata() const;  // the controller's MAXH2CDATA (ICResp): bytes per H2CData PDU
  // Who protects its TLS records: "kernel" (kTLS), "sens" (user space), "openssl"; "" on
  // plain TCP.
  const char* tls_records() const;
  // Why its own connection last failed ("" if it never did; a shared connection's failures
  // are the controller's, see Controller::last_error).
  std::string last_error() const;
  ConnectionStats stats() const;
  // Restarts the connection's coalescing and send-list statistics (not its counters). A
  // shared connection's are every queue's on it.
  void reset_stats();
  // Connection of its own only: receive into the caller's `bytes` at `mem` from now on
  // (e.g. a cache-coloured buffer) instead of the library's staging buffer. The memory stays
  // the caller's and must outlive the queue. False, and nothing changes, on a shared
  // connection or if it cannot hold what is already received. A reconnect goes back to the
  // library's own buffer.
  bool use_receive_buffer(void* mem, size_t bytes);

 private:
  friend struct host::ApiAccess;
  friend class host::ControllerImpl;
  explicit IoQueue(std::unique_ptr<host::IoQueueImpl> impl);
  std::unique_ptr<host::IoQueueImpl> impl_;
};

class Controller;
struct ConnectResult {
  std::unique_ptr<Controller> controller;  // null on failure
  std::string error;                       // why, naming the step that failed
};
using ConnectCallback = void (*)(void* ctx, ConnectResult result);
using AsyncEventCallback = void (*)(void* ctx, uint32_t dw0);

class Controller {
 public:
  // Connects (admin queue, CC.EN, Identify, namespaces, and in the shared modes the I/O
  // connections) on the controller's own thread. `trid` as SPDK writes it:
  // "trtype:tcp traddr:127.0.0.1 trsvcid:4420 subnqn:nqn...".
  static std::future<ConnectResult> connect(std::string_view trid,
                                            const ControllerOptions& options = {});
  // The same; `cb` runs on the controller's thread once connected or failed.
  static void connect(std::string_view trid, const ControllerOptions& options, ConnectCallback cb,
                      void* ctx);
  // Shuts the controller down (CC.SHN) and closes every connection; commands in flight on any
  // of its queues are aborted (see "Ownership and lifetimes").
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  const std::vector<Namespace>& namespaces() const;
  const Namespace* find_namespace(uint32_t nsid) const;

  // A submitting queue of `depth` commands, driven by `poller` (null: callbacks on the
  // connection owner's thread). Call it on the poller's thread. Null and *error on failure
  // (no qid left, no room in a shared connection's cid space, connect refused). With
  // ShareMode::kNone it connects before returning, waiting (up to connect_timeout_ms, then
  // admin_timeout_ms per set-up command) on this thread; its reconnects never wait: the
  // poller's calls advance them while its other queues keep running (connection_state()).
  std::unique_ptr<IoQueue> create_io_queue(Poller* poller, uint32_t depth = 32,
                                           std::string* error = nullptr);

  // Admin passthrough; `cb` runs on the controller's thread. 0, -EINVAL or -ENODEV.
  int admin(const AdminCommand& cmd, void* buf, uint32_t len, Callback cb, void* ctx);
  // The same, waited for.
  Completion admin_sync(const AdminCommand& cmd, void* buf = nullptr, uint32_t len = 0);
  // Called (on the controller's thread) with dw0 of every Asynchronous Event completion;
  // the library keeps one AER outstanding while a callback is set.
  void set_async_event_callback(AsyncEventCallback cb, void* ctx);

  ControllerState state() const;
  // Replaces ControllerOptions::on_state (null: none); returns once it is in place.
  void set_state_callback(void (*cb)(void* ctx, ControllerState state), void* ctx);
  // Why the controller last lost a connection or failed a reconnect ("" if it never did).
  std::string last_error() const;
  ControllerCounters counters() const;
  uint16_t cntlid() const;  // changes with every reconnect (a new association)
  const std::string& subnqn() const;
  uint32_t max_transfer() const;  // MDTS in bytes (0: no limit)
  uint64_t keep_alives_sent() const;
  const ControllerOptions& options() const;
  // The in-capsule data an I/O command may carry (IOCCSZ less the command): bytes.
  uint32_t io_incapsule_bytes() const;

  // The shared connections (ShareMode::kLock, kSendList; none with kNone), by index as
  // IoQueue::connection() names them. Not from a library thread.
  int shared_connection_count() const;
  SharedConnectionStats shared_connection_stats(int index) const;
  void reset_shared_connection_stats();  // IoQueue::reset_stats for each of them

  // Orderly shutdown now (the destructor's work); idempotent. Not on a library thread.
  void shutdown();

 private:
  friend struct host::ApiAccess;
  friend class host::ControllerImpl;
  explicit Controller(std::shared_ptr<host::ControllerImpl> impl);
  std::shared_ptr<host::ControllerImpl> impl_;  // shared with its queues
};

}  // namespace sens
