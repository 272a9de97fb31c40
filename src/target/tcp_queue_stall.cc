// Issue 29: the stall deadlines of a queue (stall_watch.h), kept out of tcp_queue.cc so that
// the hooks there stay small. Nothing here runs per I/O: a timer every stall timeout / 4.
#include "common/log.h"
#include "target/target.h"
#include "target/tcp_queue.h"

namespace sens::target {

using S = ReqState;

void TcpQueue::start_stall_watch() {
  if (!stall_.enabled() || stall_timer_.armed() || closed_) return;
  ctx_.reactor.arm(stall_timer_, ctx_.reactor.now() + stall_.period());
}

void TcpQueue::on_stall_timer() {
  if (closed_ || state_ == State::kClosing) return;  // (the close deadline rules there)
  const Nanos now = ctx_.reactor.now();
  StallWatch::Sample s;
  s.sent_bytes = sendq_.counters().bytes;
  s.send_waiting = !sendq_.idle();
  s.received_bytes = reader_.counters().bytes;
  // A reader the target holds (no in-capsule buffer yet) waits for us, not for the host.
  s.pdu_unfinished = reader_.mid_pdu() && !reader_.held();
  StallWatch::Kind kind = stall_.look(s, now);
  if (kind == StallWatch::Kind::kNone && !reader_.held()) {
    stall_.begin_h2c_look();
    for (auto& slot : slots_) {
      const Request& r = slot->req;
      if (r.state == S::kAwaitingH2C && stall_.h2c_stalled(r.index, r.started, r.received, now)) {
        kind = StallWatch::Kind::kH2C;
        break;
      }
    }
  }
  if (kind == StallWatch::Kind::kNone) {
    ctx_.reactor.arm(stall_timer_, now + stall_.period());
    return;
  }
  ++ctx_.io_metrics.stalled[int(kind)];
  static const char* const what[] = {"", "a send made no progress", "H2CData did not come",
                                     "a PDU stayed unfinished"};
  LOG_WARN("connection %llu (%s, qid %u): %s for %lld ms, closing it (stall timeout)",
           static_cast<unsigned long long>(id_), endpoint_.peer.c_str(), qid_, what[int(kind)],
           static_cast<long long>(stall_.timeout() / kMilli));
  close_pending_ = false;
  close(StallWatch::kind_name(kind));
}

}  // namespace sens::target
