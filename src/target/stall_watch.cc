#include "target/stall_watch.h"

namespace sens::target {

const char* StallWatch::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kSend:
      return "send";
    case Kind::kH2C:
      return "h2c";
    case Kind::kPdu:
      return "pdu";
    default:
      return "none";
  }
}

bool StallWatch::stuck(Mark& m, bool waiting, uint64_t progress, Nanos now) const {
  if (!waiting) {
    m.on = false;
    return false;
  }
  if (!m.on || m.at != progress) {
    m.on = true;
    m.at = progress;
    m.since = now;
    return false;
  }
  return now - m.since >= timeout_;
}

StallWatch::Kind StallWatch::look(const Sample& s, Nanos now) {
  if (!enabled()) return Kind::kNone;
  if (stuck(send_, s.send_waiting, s.sent_bytes, now)) return Kind::kSend;
  if (stuck(pdu_, s.pdu_unfinished, s.received_bytes, now)) return Kind::kPdu;
  return Kind::kNone;
}

bool StallWatch::h2c_stalled(uint32_t slot, int64_t command, uint32_t received, Nanos now) {
  if (!enabled()) return false;
  if (slot >= h2c_.size()) h2c_.resize(slot + 1);
  H2cMark& m = h2c_[slot];
  // New to this look's predecessor (not seen at the last look), another command, or data
  // came: the clock starts again.
  const bool seen_last = m.look + 1 == look_;
  m.look = look_;
  if (!seen_last || m.command != command || m.received != received) {
    m.command = command;
    m.received = received;
    m.since = now;
    return false;
  }
  return now - m.since >= timeout_;
}

}  // namespace sens::target
