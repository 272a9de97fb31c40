#pragma once
// Deadlines for a connection that stops halfway (issue 29). A host may stop reading (our
// sends make no progress), never send the H2CData an R2T asked for, or stop in the middle of
// a PDU; without a deadline it pins its buffers and its slot for ever (with KATO=0 nothing
// else ever ends it). The queue looks every timeout/4 (a timer, nothing per I/O) and hands
// what it sees to look(); a stall is what has not moved for the timeout since it was first
// seen, so a connection is ended between timeout and 1.25 x timeout after it stopped.
//
// Pure logic, with the time passed in: tests/target drive it with an injected clock.
#include <cstdint>
#include <vector>

#include "common/clock.h"

namespace sens::target {

class StallWatch {
 public:
  enum class Kind : uint8_t { kNone, kSend, kH2C, kPdu };
  static const char* kind_name(Kind kind);  // "send", "h2c", "pdu"

  // What a connection shows at one look.
  struct Sample {
    uint64_t sent_bytes = 0;      // bytes the socket has taken so far
    bool send_waiting = false;    // PDUs queued that the socket has not taken
    uint64_t received_bytes = 0;  // bytes read so far
    // A PDU begun (header or payload) and not finished, and the connection wants its rest
    // (not held back by the target itself).
    bool pdu_unfinished = false;
  };

  explicit StallWatch(Nanos timeout = 0) : timeout_(timeout) {}
  Nanos timeout() const { return timeout_; }
  bool enabled() const { return timeout_ > 0; }
  Nanos period() const { return timeout_ / 4; }  // how often the queue should look

  // The send and PDU deadlines: kSend or kPdu once that has not moved for the timeout.
  Kind look(const Sample& s, Nanos now);
  // A request waiting for H2CData in `slot`. `command` tells its command apart from the
  // slot's earlier ones (e.g. when it started); `received`: its data bytes so far. True once
  // it has had no new byte for the timeout. Requests not reported at a look are forgotten.
  bool h2c_stalled(uint32_t slot, int64_t command, uint32_t received, Nanos now);
  // Starts a look at the H2C waiters (call before the h2c_stalled() calls of one look).
  void begin_h2c_look() { ++look_; }

 private:
  struct Mark {
    bool on = false;
    uint64_t at = 0;  // the progress counter when first seen unmoved
    Nanos since = 0;
  };
  // True once `progress` has stayed put for the timeout while `waiting`.
  bool stuck(Mark& m, bool waiting, uint64_t progress, Nanos now) const;

  struct H2cMark {
    int64_t command = 0;
    uint32_t received = 0;
    uint64_t look = UINT64_MAX;  // the look that last saw it (none yet)
    Nanos since = 0;
  };

  Nanos timeout_;
  Mark send_, pdu_;
  uint64_t look_ = 0;
  std::vector<H2cMark> h2c_;  // by slot; grows with the queue's slots (at a look, not per I/O)
};

}  // namespace sens::target
