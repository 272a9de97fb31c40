#pragma once
// One NVMe command on the target, from its capsule to its last PDU, independent of the
// transport that carried it. Its progress is an explicit state; every change goes through
// RequestStates::advance(), which refuses a transition the machine does not have and keeps
// per-state counts for the stats JSON (a stuck command shows where it is).
//
//   FREE -> NEW -> [THROTTLED] -> NEED_BUFFER -> [AWAITING_H2C] -> READY -> EXECUTING
//        <-> WAITING_DEVICE
//        -> [SENDING_DATA] -> SENDING_RESPONSE -> FREE
// THROTTLED: an I/O command waits there for QoS tokens (qos.h) before its buffer.
// Errors jump from NEW/READY/EXECUTING/AWAITING_H2C (after the data has passed) straight to
// SENDING_RESPONSE; an Asynchronous Event Request parks in AER until an event or the end.
// A queue that is closing (its last PDU, a C2HTermReq or a Disconnect's response, queued)
// sends nothing more: each request ends where it is, unanswered, once nothing else holds it
// (RequestStates::drop; the device and its own queued PDUs do).
//
// The transport drives the machine (TcpQueue::drive, tcp_drive.cc), and nothing else moves a
// request (tests/request_dispatch.sh checks it): one function takes a request as far as it
// can go. Events (req_event) only record what happened, and the command sets only record
// what they decided (ReqAction); both then call drive(), which carries the record out in the
// state the request is in. Between two drive() passes the state alone says what the request
// waits for.
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

#include "storage/device.h"
#include "wire/nvme.h"
#include "wire/pdu.h"

namespace sens::target {

struct Namespace;
struct NsIoMetrics;

// What happened that a request's state waits for: an event sets its bit and drives the
// request; the state that waits for it consumes the bit. (A buffer arriving is recorded as
// Request::buf, H2C data as Request::received.)
namespace req_event {
inline constexpr uint8_t kDeviceDone = 1;  // WAITING_DEVICE: device I/O or an offloaded job ended
inline constexpr uint8_t kSent = 2;        // SENDING_DATA / SENDING_RESPONSE: its last PDU left
inline constexpr uint8_t kQosTokens = 4;   // THROTTLED: a QoS limiter let it go
inline constexpr uint8_t kAnswer = 8;      // AER: an event to report (answer_status/result)
inline constexpr uint8_t kCapsule = 16;    // FREE: a capsule took the slot (sqe recorded)
inline constexpr uint8_t kCapsuleIn = 32;  // NEW: its in-capsule data is in (or it has none)
inline constexpr uint8_t kRetired = 64;    // AER: a new command took its CID: ends unanswered
}  // namespace req_event

// What a command set decided for a request in EXECUTING (through CommandQueue), recorded on
// it until drive() carries it out: the decision's details are on the request too.
enum class ReqAction : uint8_t {
  kNone,
  kRespond,     // answer_status / answer_result -> SENDING_RESPONSE
  kSendData,    // out_data / out_len / out_stable, then the response -> SENDING_DATA
  kSubmit,      // io (op, offset, length, buf) to the device -> WAITING_DEVICE
  kOffload,     // the transport's recorded job to a worker -> WAITING_DEVICE
  kPark,        // until another thread resumes it -> WAITING_DEVICE
  kParkAer,     // an Asynchronous Event Request -> AER
  kDisconnect,  // the last response, then the connection closes -> SENDING_RESPONSE
};

enum class ReqState : uint8_t {
  kFree,
  kNew,              // capsule received (its in-capsule data may still be arriving)
  kNeedBuffer,       // waits for the reactor's buffer pool
  kAwaitingH2C,      // R2T sent, H2CData arriving
  kReady,            // data in place, about to execute
  kExecuting,        // a command set works on it
  kWaitingDevice,    // device I/O in flight
  kSendingData,      // C2HData queued
  kSendingResponse,  // CapsuleResp queued
  kAer,              // Asynchronous Event Request outstanding
  kThrottled,        // waits for QoS tokens (qos.h) before its buffer and the device
  kCount
};

const char* state_name(ReqState s);

// The machine's transitions, one bit per target state for each source state: advance()
// checks every move of every command, so the check is one load and one test.
constexpr uint16_t state_bit(ReqState s) {
  return uint16_t(1u << unsigned(s));
}
inline constexpr std::array<uint16_t, size_t(ReqState::kCount)> kTransitions = [] {
  using S = ReqState;
  std::array<uint16_t, size_t(S::kCount)> t{};
  auto allow = [&t](S from, std::initializer_list<S> to) {
    for (S s : to) t[size_t(from)] |= state_bit(s);
  };
  allow(S::kFree, {S::kNew});
  allow(S::kNew, {S::kNeedBuffer, S::kReady, S::kSendingResponse, S::kThrottled});
  allow(S::kThrottled, {S::kNeedBuffer, S::kReady});
  allow(S::kNeedBuffer, {S::kAwaitingH2C, S::kReady});
  allow(S::kAwaitingH2C, {S::kReady, S::kSendingResponse});
  allow(S::kReady, {S::kExecuting});
  allow(S::kExecuting, {S::kWaitingDevice, S::kSendingData, S::kSendingResponse, S::kAer});
  allow(S::kWaitingDevice, {S::kExecuting});
  allow(S::kSendingData, {S::kSendingResponse, S::kFree});
  allow(S::kSendingResponse, {S::kFree});
  allow(S::kAer, {S::kSendingResponse, S::kFree});
  return t;
}();
constexpr bool transition_allowed(ReqState from, ReqState to) {
  return from < ReqState::kCount && to < ReqState::kCount &&
         (kTransitions[size_t(from)] & state_bit(to)) != 0;
}

// What a command needs before it can execute (decided by its command set).
struct Plan {
  uint16_t status = 0;        // non-zero: fail at once with this status
  uint64_t result = 0;        // with status: the CQE's result (Connect's IATTR/IPO)
  uint32_t buffer_bytes = 0;  // a pool buffer of this size
  bool fetch = false;         // host-to-controller data to ask for with R2T (xfer_len bytes)
};

struct Request {
  uint16_t index = 0;  // the ttag of its R2T
  ReqState state = ReqState::kFree;
  nvme::Sqe sqe{};
  uint8_t* buf = nullptr;       // from the pool (or null)
  uint32_t buf_bytes = 0;       // size asked of the pool
  bool buf_inline = false;      // from the in-capsule pool (else the general one)
  bool buf_receive = false;     // holds data the host sends (the pool's receive budget)
  uint32_t xfer_len = 0;        // bytes this command moves over the wire
  uint32_t received = 0;        // H2C bytes received so far
  uint16_t pending_status = 0;  // an error found while data was still arriving
  bool in_capsule = false;      // the data came with the capsule
  bool fetch = false;           // its data is asked for with R2T
  bool owns_cid = false;        // its CID is marked outstanding on the queue
  uint8_t events = 0;           // req_event bits recorded, not yet consumed
  uint16_t answer_status = 0;   // kRespond, kAnswer (AER): the CQE's; kDeviceDone: a job's
  uint64_t answer_result = 0;   // kRespond, kAnswer: the CQE's result
  uint64_t offset = 0;          // device byte offset
  Namespace* ns = nullptr;
  uint32_t walk_next = 0, walk_count = 0;  // range / namespace walks (DSM, flush, shutdown)
  storage::Request io;
  pdu::HeaderSlot data_hdr{}, resp_hdr{}, r2t_hdr{};
  uint32_t ddgst = 0;
  int64_t started = 0;             // ns: the pass that started it (metrics latency)
  NsIoMetrics* metrics = nullptr;  // an I/O command's counters while it is in flight
  // Its command set's decision, recorded until drive() carries it out (with answer_*, io).
  ReqAction action = ReqAction::kNone;
  const void* out_data = nullptr;  // kSendData: the bytes to send the host
  uint32_t out_len = 0;
  uint8_t* out_stable = nullptr;  // kSendData: see CommandQueue::send_data's `stable`
  // A drive() pass runs for it: an action or event on it only records, that pass goes on.
  bool driving = false;
};

// The per-state counts of one queue's requests.
class RequestStates {
 public:
  // Moves `r` to `to`. A transition the machine does not have is a bug: it is counted (and
  // aborts debug builds) and the move still happens, so the command is not lost.
  void advance(Request& r, ReqState to) {
    if (!transition_allowed(r.state, to)) [[unlikely]]
      disallowed(r, to);
    --counts_[size_t(r.state)];
    ++counts_[size_t(to)];
    r.state = to;
  }
  // The queue is closing: `r` ends in the state it is in, unanswered (-> FREE from anywhere).
  void drop(Request& r);
  uint64_t dropped() const { return dropped_; }
  void add_free(uint32_t n) { counts_[size_t(ReqState::kFree)] += n; }
  uint32_t count(ReqState s) const { return counts_[size_t(s)]; }
  uint64_t bad_transitions() const { return bad_; }
  nlohmann::json to_json() const;  // {"new": n, ...} for the states with requests in them
  void merge_into(nlohmann::json& totals) const;

 private:
  void disallowed(const Request& r, ReqState to);  // counts and logs it (the move goes on)
  std::array<uint32_t, size_t(ReqState::kCount)> counts_{};
  uint64_t bad_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace sens::target
