#pragma once
// The implementation behind include/sens/host.h: reactor threads (the controller's, and one
// owner per shared connection), pollers, submitting queues and the three ways they reach a
// connection (their own, a lock, per-submitter send-lists). The code, by concern:
//   library_threads.cc     ReactorThread, OwnerThread
//   library_shared.cc      SharedConnection (connection sharing: send-lists, the lock, routing)
//   library_poller.cc      PollerImpl
//   library_queue.cc       IoQueueImpl (submission, cids, delivery)
//   library_controller.cc  ControllerImpl (bring-up, queue creation, admin, shutdown)
//   library_reconnect.cc   the reconnect protocol of all three (epochs, held cids, recovery)
//   library_api.cc         the public classes of sens/host.h over these
#include <sens/host.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/histogram.h"
#include "common/spsc_ring.h"
#include "host/controller.h"
#include "host/queue.h"
#include "host/queue_setup.h"
#include "reactor/reactor.h"
#include "wire/nvme_build.h"

namespace sens::host {

// Whether the calling thread is one of the library's (a ReactorThread: the controller's, an
// owner's). Work that waits for those threads is handed to a thread of its own from there.
bool on_library_thread();

// A reactor on a thread of its own. Jobs run at the top of its loop, outside any pass, so a
// job may drive the reactor itself (connection set-up, synchronous admin commands).
class ReactorThread {
 public:
  ReactorThread(const char* name, PollMode mode, Nanos max_spin);
  ~ReactorThread();  // stops and joins
  ReactorThread(const ReactorThread&) = delete;
  ReactorThread& operator=(const ReactorThread&) = delete;

  Reactor& reactor() { return *reactor_; }
  void run_job(std::function<void()> fn);
  // Runs fn on the thread and waits for it (inline when called on the thread).
  void call(const std::function<void()>& fn);
  bool on_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void loop(const char* name, PollMode mode, Nanos max_spin);
  std::unique_ptr<Reactor> reactor_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
  std::vector<std::function<void()>> jobs_;
  std::atomic<bool> has_jobs_{false}, stop_{false};
};

// One command of a submitting queue, kept until it completes: what a (re)submission needs.
struct Request {
  nvme::Sqe sqe{};
  const iovec* iov = nullptr;
  iovec one{};
  uint16_t iovcnt = 0;
  uint32_t len = 0;
  DataDir dir = DataDir::kNone;
  sens::Callback user_cb = nullptr;
  void* user_ctx = nullptr;
  nvme::DsmRange dsm{};  // deallocate's range
  uint8_t retries = 0;   // times held across a lost connection
};

// Times one command is held across lost connections before it fails (nvme_core.max_retries).
inline constexpr uint8_t kMaxRetries = 5;

struct CompletionEntry {
  uint16_t cid = 0;  // relative to the submitter's first cid
  Completion c;
};

class SharedConnection;
class PollerImpl;
class IoQueueImpl;

// A submitter's end of a shared connection: its cids, its send-list (sendlist mode) and its
// completion list. Each list has one producer thread and one consumer thread.
struct SubmitterLink {
  SubmitterLink(SharedConnection& c, IoQueueImpl& q, PollerImpl* p, uint16_t base, uint16_t n)
      : conn(c), queue(q), poller(p), cid_base(base), depth(n), send(n), done(n), freed(n) {}
  SharedConnection& conn;
  IoQueueImpl& queue;
  PollerImpl* poller;  // null: callbacks run on the owner thread
  uint16_t cid_base, depth;
  SpscRing<uint16_t> send;           // submitter -> owner: cids to send (relative)
  SpscRing<CompletionEntry> done;    // owner -> submitter's poller
  SpscRing<uint16_t> freed;          // owner -> submitter: cids freed by owner-thread callbacks
  bool touched = false;              // owner: got completions this pass (wake its poller)
  std::atomic<bool> closing{false};  // its queue is being destroyed: hold nothing more
};

struct DrainStats {
  uint64_t passes = 0;   // owner passes that found send-list entries
  uint64_t entries = 0;  // entries drained
  Histogram per_pass;    // entries per such pass
};

// The owner thread of shared connections: it sleeps only when no send-list has entries.
class OwnerThread final : public SleepGuard {
 public:
  OwnerThread(PollMode mode, Nanos max_spin);
  ~OwnerThread() override;
  ReactorThread& thread() { return thread_; }
  Reactor& reactor() { return thread_.reactor(); }
  void add(SharedConnection* c) { conns_.push_back(c); }  // owner thread
  void remove(SharedConnection* c);                       // owner thread
  // A submitter queued work: wake the owner if it sleeps (the only syscall a submitter makes).
  void doorbell() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_relaxed) &&
        sleeping_.exchange(false, std::memory_order_relaxed)) {
      wakeups_.fetch_add(1, std::memory_order_relaxed);
      reactor().wake();
    }
  }
  uint64_t doorbell_wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

  bool before_sleep() override;
  void after_sleep() override { sleeping_.store(false, std::memory_order_relaxed); }

 private:
  ReactorThread thread_;
  std::vector<SharedConnection*> conns_;  // owner thread only
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> wakeups_{0};
};

class ControllerImpl;

// One NVMe/TCP I/O connection shared by several submitting queues (kLock or kSendList), or
// the connection of one queue whose callbacks run on the owner thread.
class SharedConnection final : public PassHook, public PassEndHandler {
 public:
  // `owner`: the thread that drives it, which kSendList connections may share (kLock needs one
  // of its own: a pass holds that connection's mutex).
  SharedConnection(ControllerImpl& ctrl, int index, ShareMode mode, uint16_t qid, uint32_t depth,
                   std::shared_ptr<OwnerThread> owner);
  ~SharedConnection() override;

  // On the owner thread: connect (ICReq, Fabrics Connect). "" or the error.
  std::string open();
  void close(const char* why);  // owner thread

  // Reconnect, on the owner thread. teardown: close the connection (what was in flight is
  // held). reopen: a new connection of association `epoch`, then the held commands are sent
  // (resend_held, once the controller is live). fail_held: the controller failed, held commands
  // complete with a path error.
  void teardown(const std::string& why);
  std::string reopen(uint64_t epoch);
  void resend_held();  // the controller is live again: send what was held
  void fail_held();
  void fail_link_held(SubmitterLink* l);  // l's queue is going away

  // Reserves `n` contiguous cids for a submitter (any thread; set-up only). -1: no room.
  int reserve(uint16_t n);
  void release(uint16_t base, uint16_t n);
  void add_link(SubmitterLink* l);     // owner thread
  void remove_link(SubmitterLink* l);  // owner thread

  // kLock: submit and send under the mutex, from the submitter's thread.
  bool submit_locked(uint16_t cid);
  // kSendList: a submitter queued entries.
  void doorbell() { owner_->doorbell(); }

  ShareMode mode() const { return mode_; }
  int index() const { return index_; }
  Request& request(uint16_t cid) { return requests_[cid]; }
  OwnerThread& owner() { return *owner_; }
  const std::vector<SubmitterLink*>& links() const { return links_; }
  bool has_queued() const;  // owner thread: a send-list has entries

  // Read on the owner thread (OwnerThread::thread().call).
  Queue* queue() { return queue_.get(); }
  // kLock: submitters send (and count) under it: read the queue's send counters under it too.
  std::mutex& send_lock() { return lock_; }
  const DrainStats& drain_stats() const { return drain_; }
  void reset_drain_stats() { drain_ = DrainStats{}; }

  // Ownership (the owner thread). abort_queued: l's queue is being deleted: what it has not
  // put on the wire (its send-list, its held commands) completes with
  // kStatusAbortedSqDeletion. abort_link: the same, and the connection is reset if it is
  // open (l's commands on the wire did not come back in time: they fail with the connection,
  // the others are held for the reconnect as after any loss). shut_down: the controller is
  // being deleted: the connection closes, everything of every link completes aborted.
  void abort_queued(SubmitterLink* l);
  void abort_link(SubmitterLink* l);
  void shut_down();

  // PassHook: drains every submitter's send-list into the connection.
  bool on_pass() override;
  // PassEndHandler: wakes the pollers that got completions this pass.
  void on_pass_end() override;

 private:
  static void on_done(void* ctx, uint64_t cid, const Completion& c);
  static void on_queue_failure(void* ctx, Queue& q);
  bool hold(uint16_t cid, const Completion& c);  // a made-up failure of a lost connection
  void submit_one(uint16_t cid);
  void route(uint16_t cid, const Completion& c);

  ControllerImpl& ctrl_;
  int index_;
  ShareMode mode_;
  uint16_t qid_;
  uint32_t depth_;
  std::shared_ptr<OwnerThread> owner_;
  std::unique_ptr<Queue> queue_;
  std::vector<Request> requests_;        // by cid
  std::vector<SubmitterLink*> link_of_;  // by cid
  std::vector<SubmitterLink*> links_;    // owner thread
  std::vector<SubmitterLink*> touched_;  // owner thread, this pass
  std::mutex reserve_mu_;
  std::vector<bool> reserved_;
  std::mutex lock_;  // kLock: the connection's mutex
  DrainStats drain_;
  // Held while reconnecting (cids). kSendList: the owner thread's; kLock: under lock_.
  std::vector<uint16_t> held_;
  uint64_t epoch_ = 0;  // the association the connection belongs to
  bool shut_ = false;   // owner thread: the controller is being deleted
};

class PollerImpl final : public PassHook, public SleepGuard {
 public:
  explicit PollerImpl(const PollerOptions& o);
  // Closes the queues still on it first: their commands complete (aborted), and they stay
  // as empty shells (submissions -ENODEV) until their owners delete them.
  ~PollerImpl() override;
  Reactor& reactor() { return reactor_; }
  int process_completions(uint32_t max, int64_t timeout_ns);
  void add_link(SubmitterLink* l) { links_.push_back(l); }
  void remove_link(SubmitterLink* l);
  void count_delivered() { ++delivered_; }
  void add_queue(IoQueueImpl* q) { queues_.push_back(q); }
  void remove_queue(IoQueueImpl* q);
  // Inside process_completions on the calling thread (its callbacks run there now). The
  // thread test comes first: another thread never reads depth_.
  bool busy_here() const { return home_here() && depth_ > 0; }
  // The calling thread is the one that last drove this poller (or created it).
  bool home_here() const {
    return home_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  // A queue deleted inside process_completions (a callback): closed once it returns.
  void defer_destroy(std::unique_ptr<IoQueueImpl> q);
  // The poller itself was deleted inside process_completions: it goes once that returns.
  void defer_self() { doomed_self_ = true; }
  // A controller changed state (any thread): the next process_completions reconnects, fails
  // or closes this poller's queues as it says.
  void request_recovery() {
    recovery_.store(true, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    wake_if_sleeping();
  }
  void mark_local_work() { local_work_ = true; }  // the poller's own thread
  void wake_if_sleeping() {
    if (sleeping_.load(std::memory_order_relaxed) &&
        sleeping_.exchange(false, std::memory_order_relaxed))
      reactor_.wake();
  }

  bool on_pass() override;
  bool before_sleep() override;
  void after_sleep() override { sleeping_.store(false, std::memory_order_relaxed); }

 private:
  void recover();
  void finish_deferred();  // depth_ 0: closes the doomed queues

  Reactor reactor_;
  std::vector<SubmitterLink*> links_;
  std::vector<IoQueueImpl*> queues_;
  std::atomic<bool> recovery_{false};
  bool local_work_ = false;
  std::atomic<bool> sleeping_{false};
  uint32_t budget_ = 0;  // completions left to take from lists in this call (0: no limit)
  bool limited_ = false;
  int delivered_ = 0;
  int depth_ = 0;  // process_completions (or the destructor) running on home_
  std::atomic<std::thread::id> home_;
  std::vector<std::unique_ptr<IoQueueImpl>> doomed_;
  bool doomed_self_ = false;
};

class IoQueueImpl {
 public:
  // Keeps the controller's internals (its threads, shared connections, qids) until it goes,
  // so that it may outlive the sens::Controller.
  IoQueueImpl(std::shared_ptr<ControllerImpl> ctrl, PollerImpl* poller, uint32_t depth);
  ~IoQueueImpl();  // close()
  // What sens::IoQueue's destructor does: close and free now, or, inside one of its poller's
  // callbacks, once process_completions returns; on a library thread (a callback without a
  // poller), on a thread of its own, since closing waits for the owner thread.
  static void destroy(std::unique_ptr<IoQueueImpl> q);
  // Ends the queue (idempotent): every command still in flight completes exactly once, with
  // kStatusAbortedSqDeletion unless its answer came first: the inline connection closes at
  // once; a shared connection's commands on the wire get options().abort_timeout_ms to come
  // back before the connection is reset. Then its qid or cids, its links and its poller are
  // given back; submissions get -ENODEV from then on.
  void close();
  // Its poller is being deleted (after close()).
  void detach_poller() { poller_ = nullptr; }
  // Set-up (on the poller's thread): an inline connection, or a link to a shared one.
  std::string attach_inline(uint16_t qid);
  std::string attach_shared(SharedConnection& c);

  int submit(uint8_t opcode, uint32_t nsid, uint64_t lba, uint32_t blocks, const iovec* iov,
             int iovcnt, sens::Callback cb, void* ctx);
  // A command of this queue completed (on the thread that runs its callbacks).
  void deliver(uint16_t cid, const Completion& c);
  // On the poller's thread, at the top of process_completions: acts on the controller's
  // state (close, reconnect and resend, or fail what is held).
  void recover();

  uint32_t depth() const { return depth_; }
  uint32_t inflight() const { return inflight_.load(std::memory_order_relaxed); }
  int connection() const { return shared_ ? shared_->index() : -1; }
  bool closed() const { return closed_; }
  // The inline connection's state, for stats and tests (the poller's thread): "open", "down",
  // a reconnect's step (QueueSetup::Step's name), or "shared".
  const char* connection_state() const;
  Queue* inline_queue() { return inline_.get(); }
  SharedConnection* shared() { return shared_; }
  PollerImpl* poller() { return poller_; }

 private:
  static void on_inline_done(void* ctx, uint64_t cid, const Completion& c);
  static void on_inline_failure(void* ctx, Queue& q);
  bool pop_cid(uint16_t* cid);
  void fail_later(uint16_t cid);  // a command of a failed controller: path error, later
  // Reconnect of the inline connection without blocking the poller's thread: starts a
  // QueueSetup for association `epoch`, which the poller's reactor advances; once it is
  // finished (the poller's next call), the connection goes live and the held commands are sent
  // again, or the controller hears of the failure.
  void reconnect_inline(uint64_t epoch);
  static void on_setup_finished(void* ctx);
  void finish_reconnect();
  // Completes every cid of `list` with `c`.
  void fail_list(std::vector<uint16_t>& list, const Completion& c);
  // What a command whose connection went gets: aborted when the queue or the controller is
  // being deleted, else the path error.
  Completion gone() const;
  void close_link();  // close(), a shared connection's part
  void drain_done();  // delivers what the owner put on this queue's completion list

  std::shared_ptr<ControllerImpl> ctrl_;
  PollerImpl* poller_;
  uint32_t depth_;
  std::unique_ptr<Queue> inline_;
  std::vector<Request> own_requests_;  // inline
  Request* requests_ = nullptr;        // inline: own_requests_; shared: the connection's
  SharedConnection* shared_ = nullptr;
  std::unique_ptr<SubmitterLink> link_;
  std::vector<uint16_t> free_;  // cids (relative), the submitting thread's
  std::mutex submit_mu_;        // no poller: callbacks on the owner thread may submit too
  std::atomic<uint32_t> inflight_{0};
  uint16_t qid_ = 0;
  // Recovery, the poller's thread: inline commands held while reconnecting, commands of a
  // failed controller waiting for their callback, the association of the inline connection
  // and the last one a reconnect was tried for.
  std::vector<uint16_t> held_, failed_, scratch_;
  uint64_t epoch_ = 0, tried_ = 0;
  std::unique_ptr<QueueSetup> setup_;  // the inline connection's reconnect in progress
  uint64_t setup_epoch_ = 0;           // the association it is for
  bool closing_ = false;               // close() runs: nothing is held any more
  bool closed_ = false;                // close() ran (or runs): submissions -ENODEV
};

// Shared: sens::Controller and each IoQueueImpl hold it, so its threads and connections stay
// until the last of them goes (shutdown() closes the connections when the Controller goes).
class ControllerImpl : public std::enable_shared_from_this<ControllerImpl> {
 public:
  ControllerImpl(const TransportId& trid, const sens::ControllerOptions& o);
  ~ControllerImpl();
  static std::unique_ptr<sens::Controller> wrap(std::shared_ptr<ControllerImpl> impl);
  // On the controller thread: the whole bring-up. "" or the error.
  std::string bring_up();
  void shutdown();

  const sens::ControllerOptions& options() const { return o_; }
  const std::vector<Namespace>& namespaces() const { return namespaces_; }
  const Namespace* find_namespace(uint32_t nsid) const;
  ControllerState state() const { return state_.load(std::memory_order_acquire); }
  // The association: incremented by every reconnect.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // A command whose connection was lost may be held for a reconnect.
  bool may_hold() const {
    const ControllerState s = state();
    return o_.ctrl_loss_tmo_s > 0 && s != ControllerState::kFailed && s != ControllerState::kClosed;
  }
  // Any thread: a connection of association `epoch` failed.
  void connection_lost(uint64_t epoch, const std::string& why);
  void count_resent(uint64_t retried, uint64_t held) {
    if (retried) retried_.fetch_add(retried, std::memory_order_relaxed);
    if (held) held_.fetch_add(held, std::memory_order_relaxed);
  }
  sens::ControllerCounters counters() const;
  std::string last_error() const;
  void set_state_callback(void (*cb)(void*, ControllerState), void* ctx);
  // Every queue not closed yet, for notify_pollers() and shutdown().
  void add_queue(IoQueueImpl* q);
  void remove_queue(IoQueueImpl* q);

  // Makes I/O queue `qid` on `reactor` (called on its thread, which drives it here): the TCP
  // connection, ICReq/ICResp, Fabrics Connect and DH-HMAC-CHAP when asked; `*out` on success.
  // Blocking: set-up (create_io_queue) and the library's own threads use it.
  std::string open_io(Reactor& reactor, uint16_t qid, uint32_t depth, bool shared_lock,
                      std::unique_ptr<Queue>* out);
  // The same without waiting (on the reactor's thread): the set-up advances as the reactor
  // runs, and calls on_finished(ctx) once it is done or failed (see QueueSetup).
  std::unique_ptr<QueueSetup> start_io_setup(Reactor& reactor, uint16_t qid, uint32_t depth,
                                             bool shared_lock, void (*on_finished)(void*),
                                             void* ctx);
  QueueOptions io_queue_options(uint16_t qid, uint32_t depth, bool shared_lock) const;
  int take_qid();  // -1 when none is left
  void give_qid(uint16_t qid);

  std::unique_ptr<sens::IoQueue> create_io_queue(Poller* poller, uint32_t depth,
                                                 std::string* error);
  int admin(const AdminCommand& cmd, void* buf, uint32_t len, sens::Callback cb, void* ctx);
  void set_async_event_callback(AsyncEventCallback cb, void* ctx);

  ReactorThread& control() { return *control_; }
  Controller& admin_controller() { return *ctrl_; }
  std::vector<std::unique_ptr<SharedConnection>>& shared() { return shared_; }
  uint16_t cntlid() const { return cntlid_; }
  uint32_t max_transfer() const { return max_transfer_; }
  uint64_t keep_alives() const;
  const std::string& subnqn() const { return trid_.subnqn; }
  const TransportId& trid() const { return trid_; }
  PollMode poll_mode() const { return poll_; }
  Nanos poll_max_spin() const { return max_spin_; }
  const coalesce::Config& coalesce() const { return coalesce_; }

 private:
  static void on_aer(void* ctx, uint64_t tag, const host::Completion& c);
  static void on_admin_lost(void* ctx, const std::string& why);
  void submit_aer();
  // Reconnect, on the controller thread.
  void on_lost(uint64_t epoch, const std::string& why);
  void teardown(const std::string& why);
  void attempt_reconnect();
  std::string renegotiate_queues();
  void fail_controller(const std::string& why);
  void set_state(ControllerState s);
  void set_error(const std::string& why);
  void notify_pollers();
  // shutdown(): the queues' aborted completions delivered (this thread's pollers run here,
  // others' in their next call), waited for up to abort_timeout_ms.
  void finish_queues();

  TransportId trid_;
  sens::ControllerOptions o_;
  coalesce::Config coalesce_;
  PollMode poll_ = PollMode::kAdaptive;
  Nanos max_spin_ = 50 * kMicro;
  std::unique_ptr<ReactorThread> control_;
  std::unique_ptr<Controller> ctrl_;  // the admin queue, on the controller thread
  std::vector<Namespace> namespaces_;
  std::vector<std::unique_ptr<SharedConnection>> shared_;
  std::atomic<uint32_t> next_shared_{0};
  std::atomic<ControllerState> state_{ControllerState::kConnecting};
  uint16_t cntlid_ = 0;
  uint32_t max_transfer_ = 0;
  uint32_t incapsule_ = 0;
  uint32_t mqes_ = 0;
  std::mutex qid_mu_;
  std::vector<bool> qid_used_;  // index qid
  AsyncEventCallback aer_cb_ = nullptr;
  void* aer_ctx_ = nullptr;
  bool aer_outstanding_ = false;
  std::atomic<bool> shut_{false};
  std::atomic<bool> shutdown_started_{false};
  std::atomic<uint64_t> epoch_{1};
  Timer reconnect_timer_, loss_timer_;  // the controller thread's reactor
  Nanos loss_deadline_ = 0;
  void (*state_cb_)(void*, ControllerState) = nullptr;
  void* state_ctx_ = nullptr;
  std::atomic<uint64_t> losses_{0}, attempts_{0}, reconnects_{0}, retried_{0}, held_{0};
  mutable std::mutex error_mu_;
  std::string last_error_;
  std::mutex queues_mu_;
  std::vector<IoQueueImpl*> queues_;  // not closed yet
};

// The ControllerOptions' coalescing settings, checked. "" or the error.
std::string coalesce_config(const sens::ControllerOptions& o, coalesce::Config* out);
// A poll mode by name (off|adaptive|always); adaptive when the name is not one.
PollMode parse_poll_or_default(const std::string& name);

// What a command gets when its connection is gone for good: no usable path.
inline Completion path_error() {
  Completion c;
  c.status = kStatusHostPathError;
  return c;
}

// What a command in flight gets when its queue (or its controller, or its queue's poller) is
// deleted: Generic Command Status 08h, Command Aborted due to SQ Deletion. NVMe defines it for
// exactly this, the submission queue a command was on went away; 07h (Abort Requested) is
// the answer to an Abort command naming the command. DNR clear: another queue may retry it.
inline constexpr uint16_t kStatusAbortedSqDeletion = 0x008;
inline Completion aborted_completion() {
  Completion c;
  c.status = kStatusAbortedSqDeletion;
  return c;
}
// A status the host made up for a command whose connection went (not the controller's).
inline bool host_made(uint16_t status) {
  return status == kStatusHostPathError || status == kStatusHostAborted;
}

// The library's way to the implementations behind the public classes (the public header
// names this struct a friend and exposes no accessor): for src/host and its tests only.
struct ApiAccess {
  static PollerImpl& impl(sens::Poller& p) { return *p.impl_; }
  static IoQueueImpl& impl(sens::IoQueue& q) { return *q.impl_; }
  static ControllerImpl& impl(sens::Controller& c) { return *c.impl_; }
  static ConnectionStatsImpl& impl(sens::ConnectionStats& s) { return *s.impl_; }
};

}  // namespace sens::host
