#pragma once
// One NVMe/TCP queue: a TCP connection, its PDU framing (ICReq, capsules, R2T/H2CData
// accounting, C2HData, TermReq) and its requests. It lives on one reactor thread and is
// touched by no other, so nothing here locks. Outbound PDUs all go through the SendQueue
// (the coalescing point); inbound ones through the PduReader. What a command does is up to
// the command sets (fabrics.cc, admin.cc, nvm.cc); the queue moves bytes (tcp_queue.cc),
// drives each request's state machine (request.h, tcp_requests.cc) and serves the Fabrics
// and admin hooks (tcp_control.cc).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "buffers/buffer_pool.h"
#include "reactor/reactor.h"
#include "target/command_queue.h"
#include "target/metrics_source.h"
#include "target/qos_reactor.h"
#include "target/reactor_context.h"
#include "target/stall_watch.h"
#include "transport/pdu_reader.h"
#include "transport/send_queue.h"
#include "transport/tls.h"
#include "wire/pdu.h"

namespace sens::target {

using buffers::BufferPool;

class TcpQueue final : public CommandQueue,
                       public EventHandler,
                       public transport::SendQueue::Owner,
                       public transport::PduReader::Sink {
 public:
  using Endpoint = ConnectionEndpoint;
  TcpQueue(ReactorContext& ctx, int fd, uint64_t id, Endpoint endpoint);
  ~TcpQueue() override;

  uint64_t id() const { return id_; }
  bool closed() const { return closed_; }
  // Sends what is queued, then closes. Queues close themselves on fatal errors.
  void close(const char* why);
  nlohmann::json stats_json() const;
  const coalesce::Stats& coalesce_stats() const { return sendq_.scheduler().stats(); }
  const transport::RecvCounters& recv_counters() const { return reader_.counters(); }
  const RequestStates& request_states() const { return states_; }
  uint32_t inflight_io() const { return inflight_io_; }
  // A graceful stop: from now on, commands that arrive are held, never started (the host
  // sends them again once it has reconnected); those already started run to their response.
  void quiesce() { quiescing_ = true; }
  // Commands started and not yet answered (their response may still be leaving); an
  // outstanding AER does not count. A stop waits for 0 before it closes the connection.
  uint32_t unanswered() const;
  // "connection N (peer, qid Q): K unanswered (state n, ...)" for the stop's log.
  std::string describe_unanswered() const;
  // Whether the queue may be destroyed (closed, no device I/O in flight, no pending resume).
  bool reapable() const { return closed_ && inflight_io_ == 0 && !resume_scheduled_; }
  // Runs the requests (and the held reader) that the buffer pool has served since.
  void run_resumed();
  // Live changes (ReactorContext::retune_coalescing, reset_stats).
  void retune_coalescing(const Subsystem* sub, const coalesce::Config& config);
  void reset_counters();
  // Metrics (metrics_source.cc): counts each open request in its namespace's entry
  // (NsIoMetrics::inflight); returns the commands not yet answered.
  uint64_t tally_inflight() const;
  // A QoS limiter let a throttled command go (ReactorQos's Resume): run it from the loop.
  static void on_qos_release(qos::Waiter& w);

  // EventHandler
  void on_event(uint32_t events) override;
  // SendQueue::Owner
  void want_writable(bool on) override;
  void on_send_error(int err) override;
  uint32_t pdus_in_progress() const override;
  // PduReader::Sink
  bool on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) override;
  bool on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) override;
  void on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) override;

  // CommandQueue
  void send_data(Request& r, const void* data, uint32_t len, uint8_t* stable = nullptr) override;
  bool zero_copy_reads() const override;
  void complete(Request& r, uint16_t status, uint64_t result = 0) override;
  void submit(Request& r, storage::Op op, uint64_t offset, uint64_t len, void* buf) override;
  void offload(Request& r, WorkerThread& worker, std::function<uint16_t()> work,
               OffloadDone done) override;
  Resume park(Request& r, OffloadDone done) override;
  void on_connected(Subsystem* sub, std::shared_ptr<Controller> ctrl, uint16_t qid,
                    uint32_t sq_entries, bool sq_flow_disabled,
                    std::shared_ptr<const HostAuth> auth) override;
  void on_authenticated(bool ok) override;
  void disconnect(Request& r) override;
  uint64_t connection_id() const override { return id_; }
  bool via_discovery_listener() const override { return endpoint_.discovery_listener; }
  const std::string* tls_identity() const override;
  const std::string& local_address() const override { return endpoint_.local_address; }
  const std::string& peer_address() const override { return endpoint_.peer; }
  void keep_alive_changed() override;
  bool park_aer(Request& r) override;
  AnaPort* ana_port() const override { return endpoint_.ana; }
  void deliver_events() override;

 private:
  // kAuthenticating: connected, DH-HMAC-CHAP not (or no longer) done; only AUTH_Send and
  // AUTH_Receive run.
  enum class State {
    kHandshake,  // TLS listener: the TLS handshake runs before any PDU
    kWaitIC,
    kWaitConnect,
    kAuthenticating,
    kReady,
    // The last PDU (a C2HTermReq, a Disconnect's response) is queued and the send queue
    // sealed behind it: nothing more is read or sent; requests end unanswered (drive()).
    kClosing,
    kClosed
  };
  void step_handshake();
  static constexpr Nanos kSetupTimeout = 10 * kSecond;  // ICReq + Connect must arrive by then
  static constexpr size_t kIoStaging = 64 * 1024;       // an I/O queue's receive staging

  // A request with what the transport keeps beside it.
  struct Slot : BufferPool::Waiter {
    TcpQueue* queue = nullptr;
    Request req;
    qos::Waiter qos_wait;     // in a QoS limiter's queue while THROTTLED
    uint8_t qos_stage = 0;    // the limiters passed: 0 none, 1 the namespace's, 2 the host's too
    uint32_t plan_bytes = 0;  // the buffer its plan asked for (plan_buffer() once let go)
    OffloadDone offload_done = nullptr;  // WAITING_DEVICE on a worker: what runs once back
    // offload() recorded: the job and its worker, until drive() posts it.
    WorkerThread* offload_worker = nullptr;
    std::function<uint16_t()> offload_work;
  };
  struct ReaderWaiter : BufferPool::Waiter {
    TcpQueue* queue = nullptr;
  };

  // Receive side
  bool handle_icreq(const pdu::ICReq& req);
  bool handle_capsule(const pdu::CapsuleCmd& cmd, const pdu::Layout& layout);
  bool handle_h2c_data(const pdu::DataHeader& data);
  void fatal(uint16_t fes, uint32_t fei, const char* why, const void* header, uint32_t len);
  void handle_read_status(transport::PduReader::Status status);
  // Sends `pdu` (a TermReq, a Disconnect's response) and closes once it has left, or after a
  // deadline if the host never reads it. Nothing more is read or sent meanwhile (kClosing).
  void send_last(iovec pdu);

  // The request state machine (tcp_drive.cc). drive() alone moves a request from state to
  // state; the events below and the command sets' actions (CommandQueue) record what
  // happened or what was decided on the request and call it.
  Slot* take_slot();
  void drive(Request& r);
  void run_until_waiting(Request& r);  // drive()'s loop
  // A command set's decision, recorded on `r`: the drive() pass running for `r` carries it out
  // (outside one, this starts one).
  void decide(Request& r, ReqAction action) {
    r.action = action;
    if (!r.driving) drive(r);
  }
  // Closing: ends `r` where it is if nothing else holds it; true when drive() has no more to do.
  bool end_if_closing(Request& r);
  // Steps drive() takes: each returns to its loop, which takes the next.
  void start(Request& r);  // NEW: checks, the command set's plan, QoS
  // Planned (and past QoS): a buffer of `buffer_bytes` (unless the one it has will do), then
  // R2T or execution.
  void plan_buffer(Request& r, uint32_t buffer_bytes);
  bool obtain_buffer(Request& r);  // false: waits in the pool (on_slot_buffer)
  void execute(Request& r);        // READY -> EXECUTING: the command set
  void after_device(Request& r);   // WAITING_DEVICE -> EXECUTING: the command set goes on
  void send_r2t(Request& r);
  // EXECUTING (or NEW, AWAITING_H2C, AER answering): carries out r.action.
  void carry_out(Request& r);
  void respond(Request& r, uint16_t status, uint64_t result);  // -> SENDING_RESPONSE
  // The response capsule built and the request moved to SENDING_RESPONSE: its iovec.
  iovec response(Request& r, uint16_t status, uint64_t result);
  void prefetch_answer(const void* data, uint32_t len) const;  // a zero-copy read's bytes
  void send_c2h_data(Request& r);                              // -> SENDING_DATA
  void start_device_io(Request& r);                            // -> WAITING_DEVICE
  void start_offload(Request& r);                              // -> WAITING_DEVICE
  void send_disconnect_response(Request& r);                   // -> SENDING_RESPONSE, closing
  void release(Request& r);                                    // answered and sent: -> FREE
  void drop(Request& r);                                       // closing: -> FREE unanswered
  void free_slot(Request& r);
  // QoS: true when `slot`'s command may go on; false: THROTTLED until on_qos_release().
  bool qos_next(Slot& slot);
  void qos_refresh();
  void give_back_buffer(Request& r);
  // Events.
  static void on_slot_buffer(BufferPool::Waiter* w);  // a buffer: resumed from the loop
  static void on_reader_buffer(BufferPool::Waiter* w);
  void schedule_resume();
  static void on_device_done(storage::Request* req);
  void device_event(Request& r);  // device I/O or an offloaded job ended
  static void on_resp_sent(void* ctx, uint64_t index);
  // The last PDU is queued: requests waiting for what will not come now (a buffer, QoS
  // tokens, H2C data, an event) end at once.
  void on_closing();
  bool closing() const { return closed_ || state_ == State::kClosing; }
  void count_done(Request& r, uint16_t status);  // the metrics of an answered I/O command
  coalesce::PduClass data_class() const;

  // Issue 29 hooks (tcp_stall.cc): the stall deadlines, looked at every timeout / 4.
  void start_stall_watch();
  void on_stall_timer();

  void watch(bool readable, bool writable);
  void reset_keep_alive();
  void on_keep_alive_timer();
  void on_setup_timer();
  uint32_t inline_limit() const;
  void set_max_plen();
  bool cid_in_use(uint16_t cid) const;
  void set_cid(uint16_t cid, bool on);
  // Frees the outstanding AER with this CID, if there is one, without answering it.
  bool retire_aer(uint16_t cid);
  // Takes the i-th oldest outstanding AER off the list.
  Request& unpark_aer(uint32_t i);

  int fd_;
  uint64_t id_;
  Endpoint endpoint_;
  State state_ = State::kWaitIC;
  bool closed_ = false;
  bool close_pending_ = false;  // a TermReq / Disconnect response is on its way out
  bool want_out_ = false;
  bool reading_ = true;
  pdu::Digests digests_;
  uint32_t sq_entries_ = 1;  // requests the host may have outstanding (1 until Connect)
  uint16_t sqhd_ = 0;
  bool sqflow_disabled_ = false;
  std::unique_ptr<transport::TlsChannel> tls_;
  transport::PduReader reader_;
  transport::SendQueue sendq_;
  BufferPool& pool_;         // reads, R2T data, admin pages
  BufferPool& inline_pool_;  // in-capsule data (see ReactorContext::inline_pool)
  // This connection's shares of the two pools (issue 29: reserve and cap, buffer_pool.h).
  BufferPool::Account pool_account_, inline_account_;

  std::vector<std::unique_ptr<Slot>> slots_;  // grown on demand up to sq_entries_
  std::vector<uint16_t> free_;
  int64_t active_requests_ = 0;    // not FREE; summed into the reactor's outstanding count
  std::vector<uint64_t> cids_;     // bitmap of command ids outstanding (I/O and admin queues)
  std::vector<uint16_t> resumed_;  // slots the pool has served, to run from the loop
  bool resume_scheduled_ = false;
  ReaderWaiter reader_waiter_;
  uint8_t* staging_mem_ = nullptr;  // the reader's staging buffer, from the staging pool
  uint8_t* held_buf_ = nullptr;     // the buffer that ended a reader hold, for the capsule
  uint32_t held_bytes_ = 0;
  bool reader_ready_ = false;   // the pool served the reader's wait
  Request* current_ = nullptr;  // the request whose PDU payload is arriving
  RequestStates states_;
  uint32_t aer_outstanding_ = 0;
  uint16_t aer_parked_[kAerLimit]{};  // slots of the outstanding AERs, oldest first
  uint32_t inflight_io_ = 0;
  uint64_t commands_ = 0;
  QueueIoMetrics io_metrics_{ctx_.reactor};
  bool quiescing_ = false;  // quiesce(): new commands are held
  uint32_t held_ = 0;       // commands held unstarted since quiesce()
  // QoS: this queue's subsystem's limiters and its host's on this reactor, as of the
  // reactor's QoS generation qos_gen_ (null: none).
  uint64_t qos_gen_ = UINT64_MAX;
  const ReactorQos::Sub* qos_sub_ = nullptr;
  ReactorQos::Entry* qos_host_ = nullptr;

  pdu::HeaderSlot ic_hdr_{}, term_hdr_{};
  Timer ka_timer_;
  Timer setup_timer_;  // ICReq + Connect deadline; later, the deadline to send a C2HTermReq
  StallWatch stall_;   // issue 29: send / H2CData / unfinished PDU deadlines
  Timer stall_timer_;
  Nanos last_admin_ = 0;
};

}  // namespace sens::target
