#pragma once
// The controller's side of DH-HMAC-CHAP on one queue (NVMe Base 2.0 8.13.5): a state
// machine fed by AUTH_Send data and asked for AUTH_Receive data. A message out of step, of
// the wrong length or for another transaction moves it to FAILURE1 with the reason the spec
// names; the next AUTH_Receive tells the host. Memory is fixed per queue: the largest
// message (an ffdhe8192 reply) is parsed in place from the command's buffer.
#include <cstdint>
#include <string>

#include "auth/dhchap.h"
#include "target/negotiations.h"
#include "target/subsystem.h"
#include "wire/nvme_auth.h"

namespace sens::target {

class DhchapSession {
 public:
  struct Identity {
    std::string hostnqn, subnqn;
    uint16_t cntlid = 0, qid = 0;
  };
  // What a message did to the queue.
  enum class Outcome { kNone, kAuthenticated, kFailed };

  // `hashes` / `dhgroups`: what the subsystem accepts, preferred first (they outlive this).
  DhchapSession(std::shared_ptr<const HostAuth> keys, const std::vector<uint8_t>& hashes,
                const std::vector<uint8_t>& dhgroups, Identity id);
  ~DhchapSession();

  // AUTH_Send's `len` bytes. The command itself succeeds (the reason of a refusal reaches
  // the host in the FAILURE1 its next AUTH_Receive gets), as in NVMe Base 2.0 8.13.5.
  Outcome on_send(const uint8_t* data, uint32_t len);
  // AUTH_Receive: writes the next message into `out` (`al` bytes, zero-filled).
  Outcome on_receive(uint8_t* out, uint32_t al);

  bool authenticated() const { return authenticated_; }
  // Why the last exchange failed (a failure explanation code), for the log.
  uint8_t failure() const { return failure_; }
  // More negotiations than a queue is allowed (the DH work each costs is bounded per queue).
  static constexpr uint32_t kMaxNegotiations = 16;

  // Off the reactor (negotiations.h). Whether the message `send` (AUTH_Send) or not
  // (AUTH_Receive) brings next runs a DH step: key generation for the CHALLENGE, the peer's
  // value and the shared secret for a REPLY. Those run on a worker, with a slot of the
  // target's (the CHALLENGE takes it); nothing else touches the session meanwhile (busy).
  bool dh_step_next(bool send) const;
  bool needs_slot() const { return ticket_->state() == Negotiations::Ticket::kIdle; }
  const std::shared_ptr<Negotiations::Ticket>& ticket(Negotiations* slots) {
    slots_ = slots;
    return ticket_;
  }
  bool busy() const { return busy_; }
  void set_busy(bool busy) { busy_ = busy; }
  // Runs the message on a worker; the outcome waits in last_outcome() for the reactor.
  void run_off_reactor(bool send, uint8_t* data, uint32_t len);
  Outcome last_outcome() const { return last_outcome_; }
  // No slot for this negotiation (too many waiting, or the wait timed out): the next
  // AUTH_Receive answers FAILURE1.
  void refuse(const char* why) { fail(nvme::auth::kFailFailed, why); }

 private:
  enum class Step { kNegotiate, kChallenge, kReply, kSuccess1, kSuccess2, kFailure1 };
  Outcome fail(uint8_t reason, const char* why);
  Outcome negotiate(const uint8_t* d, uint32_t len);
  Outcome reply(const uint8_t* d, uint32_t len);
  void clear_exchange();

  std::shared_ptr<const HostAuth> keys_;  // this session's (a rotation replaces the subsystem's)
  const std::vector<uint8_t>& hashes_;
  const std::vector<uint8_t>& dhgroups_;
  Identity id_;
  Step step_ = Step::kNegotiate;
  bool authenticated_ = false;
  bool bidirectional_ = false;
  uint8_t failure_ = 0;
  uint16_t t_id_ = 0;
  uint8_t hash_ = 0, dhgroup_ = 0;
  uint32_t s1_ = 0, s2_ = 0;
  uint32_t negotiations_ = 0;
  uint8_t c1_[64]{}, c2_[64]{};
  auth::DhExchange dh_;
  auth::Bytes session_key_;
  // The target's negotiation slot (set on the first DH step) and the off-reactor hand-off.
  Negotiations* slots_ = nullptr;
  std::shared_ptr<Negotiations::Ticket> ticket_ = std::make_shared<Negotiations::Ticket>();
  bool busy_ = false;
  Outcome last_outcome_ = Outcome::kNone;
  // False (and the exchange failed) when the slot was lost to the timeout.
  bool slot_still_held();
};

}  // namespace sens::target
