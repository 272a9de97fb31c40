// The events and actions of an NVMe/TCP queue's requests (request.h). Events (the buffer
// pool served it, QoS tokens, device I/O or an offloaded job done, a PDU sent, an AER
// retired, the queue closing) record what happened on the request; the command sets' actions
// (submit(), offload(), park() here; complete(), send_data() in tcp_queue.cc; park_aer(),
// disconnect() in tcp_control.cc) record what they decided. Both call drive()
// (tcp_drive.cc), the only code that moves a request from state to state.
#include <cstring>
#include <string>
#include <utility>

#include "common/log.h"
#include "target/target.h"
#include "target/tcp_queue.h"

namespace sens::target {

namespace st = nvme::status;
using S = ReqState;
namespace ev = req_event;

bool TcpQueue::cid_in_use(uint16_t cid) const {
  return !cids_.empty() && (cids_[cid >> 6] >> (cid & 63)) & 1;
}

void TcpQueue::set_cid(uint16_t cid, bool on) {
  if (cids_.empty()) return;
  if (on)
    cids_[cid >> 6] |= uint64_t(1) << (cid & 63);
  else
    cids_[cid >> 6] &= ~(uint64_t(1) << (cid & 63));
}

bool TcpQueue::retire_aer(uint16_t cid) {
  for (uint32_t i = 0; i < aer_outstanding_; ++i) {
    if (slots_[aer_parked_[i]]->req.sqe.cid != cid) continue;
    Request& aer = unpark_aer(i);
    aer.events |= ev::kRetired;
    drive(aer);  // ends it unanswered
    return true;
  }
  return false;
}

bool TcpQueue::qos_next(Slot& slot) {
  Request& r = slot.req;
  if (ctx_.qos.generation() != qos_gen_) qos_refresh();  // (changed while it waited)
  // Reads and writes count by commands and by the bytes they move; Write Zeroes counts as a
  // write command that moves no data. Other commands (Flush, DSM, reservations) are not
  // limited.
  uint8_t op = r.sqe.opcode;
  if (op != nvme::io_op::kRead && op != nvme::io_op::kWrite && op != nvme::io_op::kWriteZeroes)
    return true;
  qos::Dir dir = op == nvme::io_op::kRead ? qos::Dir::kRead : qos::Dir::kWrite;
  uint32_t bytes = op == nvme::io_op::kWriteZeroes ? 0 : r.xfer_len;
  if (slot.qos_stage == 0) {
    slot.qos_stage = 1;
    ReactorQos::Entry* ns = qos_sub_ ? qos_sub_->ns_entry(r.sqe.nsid) : nullptr;
    if (ns && !ns->admit(slot.qos_wait, dir, bytes)) return false;
  }
  if (slot.qos_stage == 1) {
    slot.qos_stage = 2;
    if (qos_host_ && !qos_host_->admit(slot.qos_wait, dir, bytes)) return false;
  }
  return true;
}

void TcpQueue::qos_refresh() {
  qos_gen_ = ctx_.qos.generation();
  qos_sub_ = subsystem_ ? ctx_.qos.find(subsystem_) : nullptr;
  qos_host_ = qos_sub_ && ctrl_ ? ctx_.qos.host_entry(subsystem_, ctrl_->hostnqn) : nullptr;
}

void TcpQueue::on_qos_release(qos::Waiter& w) {
  auto* slot = static_cast<Slot*>(w.owner);
  slot->req.events |= ev::kQosTokens;
  // Driven from the event loop, as a buffer wait is (run_resumed()).
  slot->queue->resumed_.push_back(slot->req.index);
  slot->queue->schedule_resume();
}

bool TcpQueue::obtain_buffer(Request& r) {
  Slot& slot = *slots_[r.index];
  if (slot.queued) return false;  // waiting already
  // Data the host is asked for (R2T) counts against the receive budget: over it, the R2T
  // leaves once buffers drain.
  r.buf_receive = r.fetch;
  if ((r.buf = pool_.get(r.buf_bytes, r.buf_receive, &pool_account_)) != nullptr) return true;
  slot.bytes = r.buf_bytes;
  slot.receive = r.buf_receive;
  pool_.wait(&slot);  // on_slot_buffer() resumes it
  return false;
}

void TcpQueue::on_slot_buffer(BufferPool::Waiter* w) {
  auto* slot = static_cast<Slot*>(w);
  slot->req.buf = w->buf;
  // Driven from the event loop, not from inside whoever gave the buffer back.
  slot->queue->resumed_.push_back(slot->req.index);
  slot->queue->schedule_resume();
}

void TcpQueue::schedule_resume() {
  if (resume_scheduled_) return;
  resume_scheduled_ = true;
  ctx_.schedule_resume(this);
}

void TcpQueue::run_resumed() {
  resume_scheduled_ = false;
  if (closed_) {
    resumed_.clear();
    if (reapable()) ctx_.on_queue_closed();
    return;
  }
  for (size_t i = 0; i < resumed_.size() && !closed_; ++i) drive(slots_[resumed_[i]]->req);
  resumed_.clear();
  if (!closed_ && reader_.held() && reader_ready_) {
    reader_ready_ = false;
    auto status = reader_.resume();
    handle_read_status(status);
    if (!closed_ && !reader_.held() && state_ != State::kClosing) {
      watch(true, want_out_);
      // Plaintext OpenSSL holds announces itself with no socket event: read it now.
      if (tls_ && tls_->pending()) handle_read_status(reader_.read_from(fd_, 256 * 1024));
    }
  }
}

void TcpQueue::submit(Request& r, storage::Op op, uint64_t offset, uint64_t len, void* buf) {
  r.io.op = op;
  r.io.offset = offset;
  r.io.length = len;
  r.io.buf = buf;
  r.io.result = 0;
  if (op != storage::Op::kWrite && op != storage::Op::kWriteZeroes) r.io.fua = false;
  decide(r, ReqAction::kSubmit);
}

void TcpQueue::offload(Request& r, WorkerThread& worker, std::function<uint16_t()> work,
                       OffloadDone done) {
  Slot& slot = *slots_[r.index];
  slot.offload_worker = &worker;
  slot.offload_work = std::move(work);
  slot.offload_done = done;
  decide(r, ReqAction::kOffload);
}

void TcpQueue::on_device_done(storage::Request* req) {
  auto* slot = static_cast<Slot*>(req->user);
  slot->queue->device_event(slot->req);
}

void TcpQueue::device_event(Request& r) {
  --inflight_io_;
  r.events |= ev::kDeviceDone;
  drive(r);
  if (closed_ && reapable()) ctx_.on_queue_closed();  // its last device I/O: reap it now
}

void TcpQueue::on_resp_sent(void* ctx, uint64_t index) {
  auto* self = static_cast<TcpQueue*>(ctx);
  Request& r = self->slots_[index]->req;
  r.events |= ev::kSent;
  self->drive(r);
}

void TcpQueue::on_closing() {
  for (auto& s : slots_) {
    Request& r = s->req;
    if (&r == current_) continue;  // (its payload is not read any more either)
    switch (r.state) {
      case S::kNew:  // held (a stop), or its payload would have come after the last PDU
      case S::kThrottled:
      case S::kNeedBuffer:
      case S::kAwaitingH2C:
      case S::kAer:
        drive(r);  // ends it: nothing it waits for will come
        break;
      default:
        break;
    }
  }
}

uint32_t TcpQueue::pdus_in_progress() const {
  // Commands that will queue a PDU (an R2T, data, a response) by themselves: those not yet
  // answered. Ones already answering wait on the queued PDUs; an idle host sends nothing.
  uint32_t n = 0;
  for (S s : {S::kNew, S::kThrottled, S::kNeedBuffer, S::kAwaitingH2C, S::kReady, S::kExecuting,
              S::kWaitingDevice})
    n += states_.count(s);
  return n;
}

void TcpQueue::give_back_buffer(Request& r) {
  if (r.buf_inline)  // issue 29 hook: each pool's share of this connection
    inline_pool_.put(r.buf, r.buf_bytes, r.buf_receive, &inline_account_);
  else
    pool_.put(r.buf, r.buf_bytes, r.buf_receive, &pool_account_);
  r.buf = nullptr;
  r.buf_inline = false;
  r.buf_receive = false;
}

void TcpQueue::free_slot(Request& r) {
  if (r.owns_cid) set_cid(r.sqe.cid, false);
  r.owns_cid = false;
  r.events = 0;
  r.action = ReqAction::kNone;
  give_back_buffer(r);
  r.buf_bytes = 0;
  bind_ns(r, nullptr);
  r.metrics = nullptr;
  --active_requests_;
  ctx_.reactor.add_outstanding(-1);
  free_.push_back(r.index);
}

// Hook (wip/auth-worker, DH-HMAC-CHAP off the reactor): a request parked until another
// thread resumes it; it waits as offload()'s do, and its answer comes back as a device event.
CommandQueue::Resume TcpQueue::park(Request& r, OffloadDone done) {
  slots_[r.index]->offload_done = done;
  decide(r, ReqAction::kPark);  // (the Resume posts its answer: it runs after this pass)
  Reactor* reactor = &ctx_.reactor;
  return [this, &r, reactor](uint16_t status) {
    reactor->post([this, &r, status] {
      r.answer_status = status;
      device_event(r);
    });
  };
}

uint32_t TcpQueue::unanswered() const {
  uint32_t n = 0;
  for (S s : {S::kThrottled, S::kNeedBuffer, S::kAwaitingH2C, S::kReady, S::kExecuting,
              S::kWaitingDevice, S::kSendingData, S::kSendingResponse})
    n += states_.count(s);
  return n;
}

std::string TcpQueue::describe_unanswered() const {
  std::string s = "connection " + std::to_string(id_) + " (" + endpoint_.peer + ", qid " +
                  std::to_string(qid_) + "): " + std::to_string(unanswered()) + " unanswered (";
  const char* sep = "";
  for (S st : {S::kThrottled, S::kNeedBuffer, S::kAwaitingH2C, S::kReady, S::kExecuting,
               S::kWaitingDevice, S::kSendingData, S::kSendingResponse})
    if (uint32_t c = states_.count(st)) {
      s += sep + std::string(state_name(st)) + " " + std::to_string(c);
      sep = ", ";
    }
  return s + ")";
}

}  // namespace sens::target
