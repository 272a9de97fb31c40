// The request state machine of an NVMe/TCP queue (request.h): drive() takes a request from
// its capsule to a free slot, one case per state, through QoS, the buffer pool, R2T, the
// command sets and device I/O. Events (the capsule or its data arrived, a buffer, QoS
// tokens, device I/O or an offloaded job done, a PDU sent, an AER's event, the queue
// closing) record what happened on the request and call drive(); no step calls the next. A
// request that cannot go on stays in its state, and the state says what it waits for.
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

namespace {
constexpr uint8_t kPsdtMask = 0xC0, kPsdtSglContiguous = 0x40, kFuseMask = 0x03;
}  // namespace

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
    release(unpark_aer(i));
    return true;
  }
  return false;
}

void TcpQueue::drive(Request& r) {
  for (;;) {
    if (closing() && end_if_closing(r)) return;
    switch (r.state) {
      case S::kFree:
      case S::kCount:
        return;
      case S::kNew:  // its capsule (with any in-capsule data) is in
        start(r);
        if (r.state == S::kNew) return;  // held: the target is stopping
        break;
      case S::kThrottled: {
        if (!(r.events & ev::kQosTokens)) return;
        r.events &= ~ev::kQosTokens;
        Slot& slot = *slots_[r.index];
        if (!qos_next(slot)) return;  // the next limiter holds it
        plan_buffer(r, slot.plan_bytes);
        break;
      }
      case S::kNeedBuffer:
        if (r.buf_bytes && !r.buf && !obtain_buffer(r)) return;
        if (!r.fetch) {
          states_.advance(r, S::kReady);
          break;
        }
        states_.advance(r, S::kAwaitingH2C);
        return send_r2t(r);
      case S::kAwaitingH2C:
        if (r.received < r.xfer_len) return;
        if (r.pending_status != st::kSuccess) return complete(r, r.pending_status);
        states_.advance(r, S::kReady);
        break;
      case S::kReady:
        return execute(r);  // the command set answers it, starts device I/O or parks it
      case S::kExecuting:
        return;  // in its command set, which moves it on
      case S::kWaitingDevice:
        if (!(r.events & ev::kDeviceDone)) return;
        r.events &= ~ev::kDeviceDone;
        return after_device(r);
      case S::kSendingData:
      case S::kSendingResponse:
        if (!(r.events & ev::kSent)) return;
        r.events &= ~ev::kSent;
        return release(r);
      case S::kAer:
        if (!(r.events & ev::kAnswer)) return;
        r.events &= ~ev::kAnswer;
        return complete(r, r.answer_status, r.answer_result);
    }
  }
}

bool TcpQueue::end_if_closing(Request& r) {
  switch (r.state) {
    case S::kFree:
    case S::kExecuting:  // its command set's answer ends it (complete(), send_data())
      return true;
    case S::kWaitingDevice:
      // The device may still write into its buffer: it ends once the device is done.
      if (!(r.events & ev::kDeviceDone)) return true;
      r.events &= ~ev::kDeviceDone;
      break;
    case S::kSendingData:
    case S::kSendingResponse:
      return false;  // its PDUs were queued before the last one: freed once they have left
    default:
      break;
  }
  drop(r);
  return true;
}

void TcpQueue::start(Request& r) {
  r.started = ctx_.reactor.pass_start();  // the pass that read its capsule (no clock read)
  if (quiescing_) {
    // Stopping: held in NEW until the connection closes, its in-capsule data dropped now
    // (the in-capsule pool feeds the reader, which the commands still running may need).
    give_back_buffer(r);
    ++held_;
    return;
  }
  if (r.pending_status != st::kSuccess) return complete(r, r.pending_status);
  const nvme::Sqe& s = r.sqe;
  // A CID still outstanding: the host has lost track. Its CQE carries the same CID as the
  // outstanding one, but the first command still runs to completion, intact. Except an AER's:
  // hosts (SPDK's) complete their AERs themselves when they shut a controller down and reuse
  // the CIDs, so the new command retires the AER unanswered and runs (the Linux and SPDK
  // targets accept it too).
  if (cid_in_use(s.cid) && !(qid_ == 0 && retire_aer(s.cid))) return complete(r, st::kCidConflict);
  set_cid(s.cid, true);
  r.owns_cid = true;
  // NVMe/TCP carries data in SGLs only (PSDT 01b), and fused operations are not supported.
  if ((s.flags & kPsdtMask) != kPsdtSglContiguous || (s.flags & kFuseMask))
    return complete(r, st::kInvalidField);
  Plan plan;
  if (s.opcode == nvme::kFabricsOpcode)
    plan = fabrics::plan(*this, r);
  else if (state_ != State::kReady)
    plan.status = state_ == State::kAuthenticating ? st::kAuthRequired : st::kCmdSeqError;
  else if (qid_ == 0)
    plan = admin::plan(*this, r);
  else
    plan = nvm::plan(*this, r);
  if (plan.status != st::kSuccess) return complete(r, plan.status, plan.result);
  if (qid_ != 0 && s.opcode != nvme::kFabricsOpcode)
    io_metrics_.on_start(ctx_.io_metrics, *subsystem_, r);
  r.fetch = plan.fetch && !r.in_capsule;  // in-capsule data is there already
  if (plan.buffer_bytes > pool_.max_buffer()) {
    // No buffer that large exists: waiting would hand out a smaller one. A plan asking for
    // it is a target bug, so it is logged, and the command fails instead of overflowing.
    LOG_WARN("opcode 0x%02x asks for a %u-byte buffer, over the pool's largest (%u)", s.opcode,
             plan.buffer_bytes, pool_.max_buffer());
    return complete(r, st::kInternalError);
  }
  // QoS: after the plan (the namespace and the length are known), before a buffer is taken
  // or data asked for, so a throttled command pins no pool buffer and holds no R2T.
  // Unlimited, this is the generation compare and one branch.
  if (qid_ != 0) {
    if (ctx_.qos.generation() != qos_gen_) qos_refresh();
    if (qos_sub_ || qos_host_) {
      Slot& slot = *slots_[r.index];
      slot.qos_stage = 0;
      slot.plan_bytes = plan.buffer_bytes;
      if (!qos_next(slot)) return states_.advance(r, S::kThrottled);
    }
  }
  plan_buffer(r, plan.buffer_bytes);
}

void TcpQueue::plan_buffer(Request& r, uint32_t buffer_bytes) {
  if (buffer_bytes > r.buf_bytes) {
    give_back_buffer(r);
    r.buf_bytes = buffer_bytes;
    return states_.advance(r, S::kNeedBuffer);
  }
  // The buffer it has will do (its in-capsule data's, or none is needed).
  states_.advance(r, r.fetch ? S::kNeedBuffer : S::kReady);
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

void TcpQueue::execute(Request& r) {
  states_.advance(r, S::kExecuting);
  if (r.sqe.opcode == nvme::kFabricsOpcode) return fabrics::execute(*this, r);
  if (qid_ == 0) return admin::execute(*this, r);
  nvm::execute(*this, r);
}

void TcpQueue::submit(Request& r, storage::Op op, uint64_t offset, uint64_t len, void* buf) {
  states_.advance(r, S::kWaitingDevice);
  r.io.op = op;
  r.io.offset = offset;
  r.io.length = len;
  r.io.buf = buf;
  r.io.result = 0;
  if (op != storage::Op::kWrite && op != storage::Op::kWriteZeroes) r.io.fua = false;
  ++inflight_io_;
  storage::Queue* q = ctx_.queue_for(r.ns);
  q->submit(&r.io);  // memory devices complete inside; the request may be gone after this
  ctx_.schedule_kick(q);
}

void TcpQueue::offload(Request& r, WorkerThread& worker, std::function<uint16_t()> work,
                       OffloadDone done) {
  states_.advance(r, S::kWaitingDevice);
  ++inflight_io_;
  slots_[r.index]->offload_done = done;
  Reactor* reactor = &ctx_.reactor;
  // The queue and the request outlive the job: inflight_io_ keeps the queue from being reaped,
  // and Target::stop() stops the workers before the reactors go.
  bool posted = worker.post([this, &r, reactor, work = std::move(work)] {
    uint16_t status = work();
    reactor->post([this, &r, status] {
      r.answer_status = status;
      device_event(r);
    });
  });
  if (posted) return;
  // Stopping: no worker runs it; it fails at once.
  slots_[r.index]->offload_done = [](CommandQueue& q, Request& req, uint16_t status) {
    q.complete(req, status);
  };
  r.answer_status = st::kInternalError;
  device_event(r);
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

void TcpQueue::after_device(Request& r) {
  states_.advance(r, S::kExecuting);
  if (OffloadDone done = std::exchange(slots_[r.index]->offload_done, nullptr))
    return done(*this, r, r.answer_status);
  if (r.sqe.opcode == nvme::kFabricsOpcode) return fabrics::device_done(*this, r);
  nvm::device_done(*this, r);
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

void TcpQueue::release(Request& r) {
  free_slot(r);
  states_.advance(r, S::kFree);
}

void TcpQueue::drop(Request& r) {
  Slot& slot = *slots_[r.index];
  pool_.cancel(&slot);                                            // NEED_BUFFER
  if (slot.qos_wait.on) slot.qos_wait.on->cancel(slot.qos_wait);  // THROTTLED
  slot.offload_done = nullptr;
  if (r.state == S::kAer)
    for (uint32_t i = 0; i < aer_outstanding_; ++i)
      if (aer_parked_[i] == r.index) {
        unpark_aer(i);
        break;
      }
  free_slot(r);
  states_.drop(r);
}

void TcpQueue::free_slot(Request& r) {
  if (r.owns_cid) set_cid(r.sqe.cid, false);
  r.owns_cid = false;
  r.events = 0;
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
  states_.advance(r, S::kWaitingDevice);
  ++inflight_io_;
  slots_[r.index]->offload_done = done;
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
