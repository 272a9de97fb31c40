#pragma once
// One NVMe/TCP queue as the host sees it: a non-blocking TCP connection, its PduReader and
// SendQueue, and a command table preallocated at creation (cid = slot index). Submitting a
// command, answering R2Ts with H2CData and receiving C2HData in place allocate nothing and
// copy no payload. Everything runs on the reactor's thread.
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coalesce/scheduler.h"
#include "reactor/reactor.h"
#include "transport/pdu_reader.h"
#include "transport/send_queue.h"
#include "transport/tls.h"
#include "wire/nvme.h"
#include "wire/pdu.h"

namespace sens::host {

// Statuses for errors the host itself detects, as (SCT << 8) | SC: NVMe 2.0 path-related
// status (SCT 3), the values the Linux host reports for the same events.
inline constexpr uint16_t kStatusHostPathError = 0x370;  // transport lost or protocol error
inline constexpr uint16_t kStatusHostAborted = 0x371;    // the host timed the command out
const char* completion_status_name(uint16_t status);     // includes the two above

struct Completion {
  uint16_t status = 0;  // (SCT << 8) | SC; 0 is success
  bool dnr = false;
  uint32_t dw0 = 0, dw1 = 0;
  bool ok() const { return status == 0; }
};

// A completion callback: a plain function and context, so submitting allocates nothing.
using Callback = void (*)(void* ctx, uint64_t tag, const Completion& completion);

enum class DataDir : uint8_t { kNone, kHostToController, kControllerToHost };

struct QueueOptions {
  uint16_t qid = 0;
  uint16_t depth = 32;  // command slots = most commands in flight
  bool hdr_digest = false;
  bool data_digest = false;
  coalesce::Config coalesce;  // forced to Policy::kOff on the admin queue
  Nanos command_timeout = 30 * kSecond;
  uint32_t max_transfer = 1u << 20;      // largest command data length (bounds received plen)
  uint32_t max_h2c_window = 8;           // H2CData PDUs of one command queued at once
  transport::TlsContext* tls = nullptr;  // TLS 1.3 with this PSK before ICReq (null: plain)
  // The caller names each command's cid (submitv's `cid`): a shared connection partitions
  // the cid space among its submitters. The queue then keeps no free list.
  bool external_cids = false;
  // Commands are submitted (under a lock) from threads other than the reactor's: submit
  // touches nothing of the reactor, PDUs leave at once, and a send error is left to the
  // reactor's thread to act on.
  bool remote_submit = false;
};

// Most iovecs one command's data may have.
inline constexpr int kMaxIov = 32;

struct QueueCounters {
  uint64_t submitted = 0, completed = 0;
  uint64_t incapsule_writes = 0, r2ts = 0, h2c_pdus = 0, c2h_pdus = 0, c2h_success = 0;
};

// H2CData for one R2T: the next PDU's offset and length, given what was already queued.
struct H2CChunk {
  uint32_t offset = 0, length = 0;
  bool last = false;  // DATA_LAST: the final PDU of this R2T's range
};
// A failed TLS handshake's error, with a hint for the usual cause (no PSK for the identity).
std::string tls_handshake_error(const transport::TlsChannel& tls);

// Splits the R2T range [r2t_offset, r2t_end) into PDUs of at most maxh2cdata bytes; `issued` is
// the offset where the next one starts. length == 0 when the range is covered.
H2CChunk next_h2c_chunk(uint32_t issued, uint32_t r2t_end, uint32_t maxh2cdata);

class Queue final : public EventHandler,
                    public transport::PduReader::Sink,
                    public transport::SendQueue::Owner {
 public:
  enum class State : uint8_t { kIdle, kIcWait, kOpen, kFailed, kClosed };

  Queue(Reactor& reactor, const QueueOptions& options);
  ~Queue() override;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Connects to `addr` and exchanges ICReq/ICResp, driving the reactor until done or
  // `deadline` (so it must not be called from a reactor callback). Returns "" or an error.
  // (open() and open_fd() live in queue_setup.cc, beside the non-blocking set-up.)
  std::string open(const sockaddr* addr, socklen_t addr_len, Nanos deadline);
  // The same over a socket already connected (tests use a socketpair); takes ownership.
  std::string open_fd(int fd, Nanos deadline);
  // The non-blocking start: over a connected socket (and its TLS channel, handshake done, if
  // the queue uses TLS), sends ICReq and returns at once ("" or an error; takes the socket).
  // The queue is kIcWait until the reactor delivers ICResp (on_open) or fails it (on_failure).
  std::string begin(int fd, std::unique_ptr<transport::TlsChannel> tls);

  // Queues a command. The queue sets the cid and the SGL (in-capsule when the data fits, else
  // transport); `buf` stays the caller's until the callback runs. Returns false when no slot
  // is free or the queue is not open (the callback is then never called).
  bool submit(const nvme::Sqe& sqe, void* buf, uint32_t len, DataDir dir, Callback cb, void* ctx,
              uint64_t tag);
  // The same with the data in `iovcnt` (1..kMaxIov) iovecs of `len` bytes in all; the array
  // stays the caller's, valid until the callback. With external_cids, `cid` is the caller's
  // pick (< depth, not in flight); otherwise it must be -1.
  bool submitv(const nvme::Sqe& sqe, const iovec* iov, int iovcnt, uint32_t len, DataDir dir,
               Callback cb, void* ctx, uint64_t tag, int cid = -1);
  Reactor& reactor() const { return reactor_; }
  bool external_cids() const { return options_.external_cids; }
  // Fails the queue from its reactor's thread after a remote submitter's send failed.
  void check_remote_error();

  // Fails every command in flight with kStatusHostPathError (callbacks run), closes the socket.
  void close(const std::string& why = "closed by the host");

  State state() const { return state_; }
  bool is_open() const { return state_ == State::kOpen; }
  const std::string& error() const { return error_; }
  uint16_t qid() const { return options_.qid; }
  uint16_t depth() const { return options_.depth; }
  uint32_t inflight() const { return inflight_; }
  uint32_t maxh2cdata() const { return maxh2cdata_; }
  const char* tls_records() const { return tls_ ? tls_->records() : ""; }
  pdu::Digests digests() const { return digests_; }
  // In-capsule bytes for non-Fabrics commands: 8 KiB on the admin queue; on an I/O queue
  // IOCCSZ * 16 - 64 once the controller's Identify is known.
  void set_incapsule_limit(uint32_t bytes) { incapsule_limit_ = bytes; }
  uint32_t incapsule_limit() const { return incapsule_limit_; }

  const QueueCounters& counters() const { return counters_; }
  const transport::SendQueue& send_queue() const { return *send_; }
  transport::SendQueue& send_queue() { return *send_; }
  const transport::RecvCounters& recv_counters() const { return reader_.counters(); }
  // Receives into the caller's staging buffer from now on (see PduReader::use_staging).
  bool use_staging(uint8_t* mem, size_t bytes) { return reader_.use_staging(mem, bytes); }

  // Observes queue failures (the controller tears down, perf reports).
  void set_on_failure(void (*fn)(void* ctx, Queue& q), void* ctx) {
    on_failure_ = fn;
    on_failure_ctx_ = ctx;
  }
  // Observes ICResp (kIcWait -> kOpen), on the reactor's thread: a set-up that did not wait.
  void set_on_open(void (*fn)(void* ctx, Queue& q), void* ctx) {
    on_open_ = fn;
    on_open_ctx_ = ctx;
  }

 private:
  struct __attribute__((packed)) H2CSlot {
    pdu::DataHeader hdr;
    uint32_t hdgst;  // right behind the header, as the wire wants it
    uint32_t ddgst;
  };
  struct Slot {
    pdu::HeaderSlot hdr;         // the CapsuleCmd header and its digest
    uint32_t ddgst = 0;          // in-capsule data digest
    const iovec* iov = nullptr;  // the data: the caller's list, or &one
    iovec one{};
    uint16_t iovcnt = 0;
    uint32_t len = 0;
    DataDir dir = DataDir::kNone;
    bool active = false;
    bool in_capsule = false;
    bool responded = false;
    // A write whose data waits for the target's R2T (it did not fit in the capsule).
    bool by_r2t() const { return dir == DataDir::kHostToController && !in_capsule; }
    bool timed_out = false;
    uint8_t opcode = 0;
    uint32_t received = 0;    // C2HData bytes so far
    uint32_t h2c_issued = 0;  // H2CData queued up to this offset
    uint32_t r2t_end = 0;     // end of the current R2T's range
    uint16_t ttag = 0;
    uint16_t pending_sends = 0;  // PDUs queued and not yet in the kernel
    uint16_t h2c_inflight = 0;
    uint32_t h2c_next = 0;  // ring index into this slot's H2C headers
    Completion result;
    uint32_t watchdog_runs = 0;  // the queue's watchdog run count at submission
    Callback cb = nullptr;
    void* ctx = nullptr;
    uint64_t tag = 0;
  };

  // EventHandler
  void on_event(uint32_t events) override;
  // PduReader::Sink
  bool on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) override;
  bool on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) override;
  void on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) override;
  // SendQueue::Owner
  void want_writable(bool on) override;
  void on_send_error(int err) override;
  uint32_t pdus_in_progress() const override;

  bool on_icresp(const pdu::ICResp& resp);
  bool on_capsule_resp(const pdu::CapsuleResp& resp);
  bool on_c2h_data(const pdu::DataHeader& hdr);
  bool on_r2t(const pdu::R2T& r2t);
  void issue_h2c(uint16_t cid);
  static void on_cmd_sent(void* ctx, uint64_t cid);
  static void on_h2c_sent(void* ctx, uint64_t cid);
  void maybe_complete(uint16_t cid);
  void complete(uint16_t cid);
  // A protocol violation by the controller: send an H2CTermReq, fail the queue.
  bool protocol_error(uint16_t fes, uint32_t fei, const void* header, uint32_t len,
                      const std::string& why);
  void fail(const std::string& why, uint16_t status = kStatusHostPathError);
  void on_watchdog();

  Reactor& reactor_;
  QueueOptions options_;
  State state_ = State::kIdle;
  int fd_ = -1;
  std::string error_;
  std::unique_ptr<transport::TlsChannel> tls_;
  transport::PduReader reader_;
  std::unique_ptr<transport::SendQueue> send_;
  pdu::Digests digests_;
  uint32_t maxh2cdata_ = 0;
  uint32_t incapsule_limit_;
  uint32_t epoll_events_ = 0;
  std::vector<Slot> slots_;
  std::vector<H2CSlot> h2c_;  // max_h2c_window per slot
  std::vector<uint16_t> free_;
  uint32_t inflight_ = 0;
  // Data of the writes in flight that go by R2T (not in the capsule): what the target waits
  // for. issue_h2c() sends a group of H2CData once it holds half of it (see there).
  uint64_t r2t_write_bytes_ = 0;
  pdu::HeaderSlot ic_slot_;
  pdu::HeaderSlot term_slot_;
  Timer watchdog_;
  Nanos watchdog_tick_ = 0;     // how often the watchdog checks command ages
  uint32_t watchdog_runs_ = 0;  // how often it has
  QueueCounters counters_;
  std::atomic<int> remote_send_error_{0};  // errno of a remote submitter's failed send
  void (*on_failure_)(void*, Queue&) = nullptr;
  void* on_failure_ctx_ = nullptr;
  void (*on_open_)(void*, Queue&) = nullptr;
  void* on_open_ctx_ = nullptr;
};

}  // namespace sens::host
