// The request state machine of an NVMe/TCP queue (request.h): drive() takes a request from
// its capsule to a free slot, one case per state, through QoS, the buffer pool, R2T, the
// command sets and device I/O. This file is the only code that changes a request's state
// (tests/request_dispatch.sh checks it). Events (tcp_requests.cc, tcp_queue.cc: a capsule or
// its data, a buffer, QoS tokens, device I/O or an offloaded job done, a PDU sent, an AER's
// event, the queue closing) record what happened on the request; the command sets' actions
// (complete(), send_data(), submit(), offload(), park(), park_aer(), disconnect()) record what
// they decided (ReqAction). Both call drive(), which carries the record out. A request that
// cannot go on stays in its state, and the state says what it waits for.
#include <cstring>
#include <utility>

#include "common/crc32c.h"
#include "common/log.h"
#include "target/target.h"
#include "target/tcp_queue.h"
#include "wire/nvme_build.h"

namespace sens::target {

namespace st = nvme::status;
using S = ReqState;
using A = ReqAction;
namespace ev = req_event;

namespace {

// A zero-copy read's data digest from its namespace's block CRCs (a RAM namespace), taken
// when the send queue seals it, on this reactor, the one thread that writes the namespace.
bool digest_from_device(const void* device, const void* bytes, size_t len, uint32_t* crc) {
  return static_cast<const storage::Device*>(device)->mapped_digest(
      static_cast<const uint8_t*>(bytes), len, crc);
}

transport::DigestSource device_digest(storage::Device& device) {
  device.keep_block_crcs();  // from the first read with data digests (a no-op after)
  return {&digest_from_device, &device};
}

constexpr uint8_t kPsdtMask = 0xC0, kPsdtSglContiguous = 0x40, kFuseMask = 0x03;
}  // namespace

void TcpQueue::drive(Request& r) {
  // Called from inside the pass running for `r` (its command set's action, a device that
  // completes inside submit, a PDU sent at once): the record is made, and that pass's loop
  // picks it up. So no step recurses into the machine for the same request.
  if (r.driving) return;
  r.driving = true;
  run_until_waiting(r);
  r.driving = false;
}

void TcpQueue::run_until_waiting(Request& r) {
  for (;;) {
    if (r.action != A::kNone) carry_out(r);  // what its command set decided
    if (closing() && end_if_closing(r)) return;
    switch (r.state) {
      case S::kFree:
        if (!(r.events & ev::kCapsule)) return;
        r.events &= ~ev::kCapsule;
        states_.advance(r, S::kNew);
        ++active_requests_;
        ctx_.reactor.add_outstanding(1);  // hybrid polling: an answer is on its way
        break;
      case S::kCount:
        return;
      case S::kNew:
        if (!(r.events & ev::kCapsuleIn)) return;  // its data is arriving, or it is held
        r.events &= ~ev::kCapsuleIn;
        start(r);
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
        if (r.pending_status != st::kSuccess)
          respond(r, r.pending_status, 0);
        else
          states_.advance(r, S::kReady);
        break;
      case S::kReady:
        execute(r);  // its command set records what it decided: carried out at the loop's top
        break;
      case S::kExecuting:
        return;  // (nothing decided: a command set that forgot to answer; it stays here)
      case S::kWaitingDevice:
        if (!(r.events & ev::kDeviceDone)) return;
        r.events &= ~ev::kDeviceDone;
        after_device(r);  // as in READY: its command set decides again
        break;
      case S::kSendingData:
      case S::kSendingResponse:
        if (!(r.events & ev::kSent)) return;
        r.events &= ~ev::kSent;
        return release(r);
      case S::kAer:
        if (r.events & ev::kRetired) return release(r);
        if (!(r.events & ev::kAnswer)) return;
        r.events &= ~ev::kAnswer;
        respond(r, r.answer_status, r.answer_result);
        break;
    }
  }
}

bool TcpQueue::end_if_closing(Request& r) {
  switch (r.state) {
    case S::kFree:
    case S::kExecuting:  // its command set's decision ends it (carry_out())
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

void TcpQueue::carry_out(Request& r) {
  switch (std::exchange(r.action, A::kNone)) {
    case A::kNone:
      return;
    case A::kRespond:
      return respond(r, r.answer_status, r.answer_result);
    case A::kSendData:
      return send_c2h_data(r);
    case A::kSubmit:
      return start_device_io(r);
    case A::kOffload:
      return start_offload(r);
    case A::kPark:
      states_.advance(r, S::kWaitingDevice);  // until its Resume (park()) posts the answer
      ++inflight_io_;
      return;
    case A::kParkAer:
      if (closing()) return drop(r);  // no event may be reported after the last PDU
      aer_parked_[aer_outstanding_++] = r.index;
      states_.advance(r, S::kAer);  // answered by an event; else freed with the queue
      return deliver_events();      // one may be waiting already
    case A::kDisconnect:
      return send_disconnect_response(r);
  }
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
  if (r.pending_status != st::kSuccess) return respond(r, r.pending_status, 0);
  const nvme::Sqe& s = r.sqe;
  // A CID still outstanding: the host has lost track. Its CQE carries the same CID as the
  // outstanding one, but the first command still runs to completion, intact. Except an AER's:
  // hosts (SPDK's) complete their AERs themselves when they shut a controller down and reuse
  // the CIDs, so the new command retires the AER unanswered and runs (the Linux and SPDK
  // targets accept it too).
  if (cid_in_use(s.cid) && !(qid_ == 0 && retire_aer(s.cid)))
    return respond(r, st::kCidConflict, 0);
  set_cid(s.cid, true);
  r.owns_cid = true;
  // NVMe/TCP carries data in SGLs only (PSDT 01b), and fused operations are not supported.
  if ((s.flags & kPsdtMask) != kPsdtSglContiguous || (s.flags & kFuseMask))
    return respond(r, st::kInvalidField, 0);
  Plan plan;
  if (s.opcode == nvme::kFabricsOpcode)
    plan = fabrics::plan(*this, r);
  else if (state_ != State::kReady)
    plan.status = state_ == State::kAuthenticating ? st::kAuthRequired : st::kCmdSeqError;
  else if (qid_ == 0)
    plan = admin::plan(*this, r);
  else
    plan = nvm::plan(*this, r);
  if (plan.status != st::kSuccess) return respond(r, plan.status, plan.result);
  if (qid_ != 0 && s.opcode != nvme::kFabricsOpcode)
    io_metrics_.on_start(ctx_.io_metrics, *subsystem_, r);
  r.fetch = plan.fetch && !r.in_capsule;  // in-capsule data is there already
  if (plan.buffer_bytes > pool_.max_buffer()) {
    // No buffer that large exists: waiting would hand out a smaller one. A plan asking for
    // it is a target bug, so it is logged, and the command fails instead of overflowing.
    LOG_WARN("opcode 0x%02x asks for a %u-byte buffer, over the pool's largest (%u)", s.opcode,
             plan.buffer_bytes, pool_.max_buffer());
    return respond(r, st::kInternalError, 0);
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

void TcpQueue::execute(Request& r) {
  states_.advance(r, S::kExecuting);
  if (r.sqe.opcode == nvme::kFabricsOpcode) return fabrics::execute(*this, r);
  if (qid_ == 0) return admin::execute(*this, r);
  nvm::execute(*this, r);
}

void TcpQueue::after_device(Request& r) {
  states_.advance(r, S::kExecuting);
  if (OffloadDone done = std::exchange(slots_[r.index]->offload_done, nullptr))
    return done(*this, r, r.answer_status);
  if (r.sqe.opcode == nvme::kFabricsOpcode) return fabrics::device_done(*this, r);
  nvm::device_done(*this, r);
}

void TcpQueue::start_device_io(Request& r) {
  states_.advance(r, S::kWaitingDevice);
  ++inflight_io_;
  storage::Queue* q = ctx_.queue_for(r.ns);
  q->submit(&r.io);  // (submit() recorded r.io) a memory device completes inside: an event
  ctx_.schedule_kick(q);
}

void TcpQueue::start_offload(Request& r) {
  states_.advance(r, S::kWaitingDevice);
  ++inflight_io_;
  Slot& slot = *slots_[r.index];
  WorkerThread* worker = std::exchange(slot.offload_worker, nullptr);
  Reactor* reactor = &ctx_.reactor;
  // The queue and the request outlive the job: inflight_io_ keeps the queue from being reaped,
  // and Target::stop() stops the workers before the reactors go.
  bool posted = worker->post([this, &r, reactor, work = std::move(slot.offload_work)] {
    uint16_t status = work();
    reactor->post([this, &r, status] {
      r.answer_status = status;
      device_event(r);
    });
  });
  slot.offload_work = nullptr;
  if (posted) return;
  // Stopping: no worker runs it; it fails at once.
  slot.offload_done = [](CommandQueue& q, Request& req, uint16_t status) {
    q.complete(req, status);
  };
  r.answer_status = st::kInternalError;
  device_event(r);
}

void TcpQueue::send_c2h_data(Request& r) {
  if (closing()) return drop(r);  // nothing may follow the last PDU
  const void* data = r.out_data;
  const uint32_t len = r.out_len;
  uint8_t* stable = r.out_stable;
  bool success = sqflow_disabled_ && qid_ != 0;
  uint8_t flags = pdu::flag::kDataLast | (success ? pdu::flag::kDataSuccess : 0);
  pdu::build_data(r.data_hdr.data, pdu::Type::kC2HData, r.sqe.cid, 0, 0, len, flags, digests_);
  uint32_t hl = pdu::finish_header(r.data_hdr, digests_);
  iovec iov[4];
  int n = 0;
  iov[n++] = {r.data_hdr.bytes, hl};
  iov[n++] = {const_cast<void*>(data), len};
  const bool digest = digests_.data && len;
  if (digest) {
    // Bytes that may change while they wait (a RAM namespace's) get their digest from the
    // send queue as they leave; a buffer's is taken now, while the device's copy is in cache.
    if (!stable) r.ddgst = crc32c(data, len);
    iov[n++] = {&r.ddgst, 4};
  }
  states_.advance(r, S::kSendingData);
  // Its response (unless the data carries success) goes in the same call: one scheduler
  // decision for the pair.
  const int second = success ? -1 : n;
  if (!success) iov[n++] = response(r, st::kSuccess, 0);
  transport::SentCallback sent{&TcpQueue::on_resp_sent, this, r.index};
  if (stable)
    sendq_.enqueue_changeable(iov, n, 1, stable, data_class(), sent, digest ? &r.ddgst : nullptr,
                              digest ? device_digest(*r.ns->device) : transport::DigestSource{},
                              second);
  else
    sendq_.enqueue(iov, n, data_class(), sent, second);
  if (success) count_done(r, st::kSuccess);
}

void TcpQueue::respond(Request& r, uint16_t status, uint64_t result) {
  if (closing()) return drop(r);  // nothing may follow the last PDU
  iovec iov = response(r, status, result);
  sendq_.enqueue(&iov, 1, data_class(), {&TcpQueue::on_resp_sent, this, r.index});
}

iovec TcpQueue::response(Request& r, uint16_t status, uint64_t result) {
  count_done(r, status);
  // Transient conditions may be retried; everything else carries Do Not Retry.
  // Path errors (SCT 3, ANA) must not carry it: the host retries them on another path.
  bool dnr = status != st::kSuccess && status != st::kConnectControllerBusy &&
             status != st::kNsNotReady && (status >> 8) != 3;
  auto cqe = nvme::make_cqe(r.sqe.cid, qid_, sqhd_, status, uint32_t(result), dnr);
  cqe.dw1 = uint32_t(result >> 32);
  pdu::build_capsule_resp(r.resp_hdr.resp, cqe, digests_);
  uint32_t hl = pdu::finish_header(r.resp_hdr, digests_);
  states_.advance(r, S::kSendingResponse);
  return {r.resp_hdr.bytes, hl};
}

void TcpQueue::send_disconnect_response(Request& r) {
  // Close only once the response has left (the socket may be full), with a deadline.
  states_.advance(r, S::kSendingResponse);
  auto cqe = nvme::make_cqe(r.sqe.cid, qid_, sqhd_, st::kSuccess, 0, false);
  pdu::build_capsule_resp(r.resp_hdr.resp, cqe, digests_);
  send_last({r.resp_hdr.bytes, pdu::finish_header(r.resp_hdr, digests_)});
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

}  // namespace sens::target
