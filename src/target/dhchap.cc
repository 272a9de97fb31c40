// DH-HMAC-CHAP on the target: the per-queue session (dhchap.h) and the AUTH_Send /
// AUTH_Receive Fabrics commands that carry it.
#include "target/dhchap.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "target/command_queue.h"
#include "target/target.h"
#include "wire/nvme_auth.h"

namespace sens::target {

namespace wa = nvme::auth;
namespace st = nvme::status;

namespace {

// The largest AUTH_Send / AUTH_Receive accepted: an ffdhe8192 reply with SHA-512 is
// 16 + 2 * 64 + 1024 bytes; the Linux host asks for 4096 in AUTH_Receive.
constexpr uint32_t kAuthDataMax = 8192;

bool offered(const uint8_t* ids, uint32_t n, uint8_t id) {
  return std::find(ids, ids + n, id) != ids + n;
}

}  // namespace

DhchapSession::DhchapSession(std::shared_ptr<const HostAuth> keys,
                             const std::vector<uint8_t>& hashes,
                             const std::vector<uint8_t>& dhgroups, Identity id)
    : keys_(std::move(keys)), hashes_(hashes), dhgroups_(dhgroups), id_(std::move(id)) {}

DhchapSession::~DhchapSession() {
  clear_exchange();
}

void DhchapSession::clear_exchange() {
  // The slot goes to the next negotiation in line (or an expired ticket becomes idle).
  if (slots_ && ticket_->state() != Negotiations::Ticket::kIdle) slots_->release(*ticket_);
  auth::wipe(session_key_);
  dh_.reset();
  std::memset(c1_, 0, sizeof c1_);
  std::memset(c2_, 0, sizeof c2_);
  bidirectional_ = false;
}

DhchapSession::Outcome DhchapSession::fail(uint8_t reason, const char* why) {
  failure_ = reason;
  step_ = Step::kFailure1;
  clear_exchange();
  // Never the key, nor a response value: who, which queue, and why.
  LOG_INFO("dhchap: host '%s' controller %u qid %u: %s (%s)", id_.hostnqn.c_str(), id_.cntlid,
           id_.qid, why, wa::failure_name(reason));
  return Outcome::kNone;  // counted when the host is told (FAILURE1)
}

bool DhchapSession::dh_step_next(bool send) const {
  if (dhgroup_ == wa::kDhNull) return false;
  return send ? step_ == Step::kReply : step_ == Step::kChallenge;
}

void DhchapSession::run_off_reactor(bool send, uint8_t* data, uint32_t len) {
  last_outcome_ = send ? on_send(data, len) : on_receive(data, len);
}

bool DhchapSession::slot_still_held() {
  if (dhgroup_ == wa::kDhNull || !slots_ || ticket_->state() == Negotiations::Ticket::kHeld)
    return true;
  fail(wa::kFailFailed, "the negotiation took longer than the target allows (--dhchap-timeout-ms)");
  return false;
}

DhchapSession::Outcome DhchapSession::on_send(const uint8_t* d, uint32_t len) {
  if (len < sizeof(wa::Header))
    return fail(wa::kFailIncorrectPayload, "message shorter than 6 bytes");
  wa::Header h;
  std::memcpy(&h, d, sizeof h);
  if (h.auth_type == wa::kTypeCommon && h.auth_id == wa::kIdNegotiate) return negotiate(d, len);
  if (h.auth_type == wa::kTypeCommon && h.auth_id == wa::kIdFailure2) {
    if (len < sizeof(wa::Failure)) return fail(wa::kFailIncorrectPayload, "short FAILURE2");
    wa::Failure f;
    std::memcpy(&f, d, sizeof f);
    failure_ = f.rescode_exp;
    step_ = Step::kNegotiate;
    clear_exchange();
    LOG_INFO("dhchap: host '%s' controller %u qid %u: the host failed the exchange (%s)",
             id_.hostnqn.c_str(), id_.cntlid, id_.qid, wa::failure_name(f.rescode_exp));
    authenticated_ = false;
    return Outcome::kFailed;
  }
  if (h.auth_type != wa::kTypeDhchap)
    return fail(wa::kFailIncorrectMessage, "unknown message type");
  if (h.auth_id == wa::kIdReply && step_ == Step::kReply) {
    if (h.t_id != t_id_) return fail(wa::kFailIncorrectPayload, "REPLY for another transaction");
    if (!slot_still_held()) return Outcome::kNone;
    return reply(d, len);
  }
  if (h.auth_id == wa::kIdSuccess2 && step_ == Step::kSuccess2) {
    if (h.t_id != t_id_) return fail(wa::kFailIncorrectPayload, "SUCCESS2 for another transaction");
    if (len < sizeof(wa::Success2)) return fail(wa::kFailIncorrectPayload, "short SUCCESS2");
    step_ = Step::kNegotiate;
    clear_exchange();
    authenticated_ = true;
    return Outcome::kAuthenticated;
  }
  return fail(wa::kFailIncorrectMessage, "message out of sequence");
}

DhchapSession::Outcome DhchapSession::negotiate(const uint8_t* d, uint32_t len) {
  clear_exchange();
  if (++negotiations_ > kMaxNegotiations)
    return fail(wa::kFailFailed, "too many negotiations on one queue");
  if (len < sizeof(wa::Negotiate) + sizeof(wa::ProtocolDescriptor))
    return fail(wa::kFailIncorrectPayload, "NEGOTIATE without a protocol descriptor");
  wa::Negotiate n;
  std::memcpy(&n, d, sizeof n);
  t_id_ = n.t_id;
  if (n.sc_c != wa::kScNone)
    return fail(wa::kFailConcatMismatch, "secure channel concatenation asked for");
  if (n.napd == 0 || uint64_t(n.napd) * sizeof(wa::ProtocolDescriptor) + sizeof n > len)
    return fail(wa::kFailIncorrectPayload, "NAPD does not match the message length");
  // The first DH-HMAC-CHAP descriptor is the one that counts.
  const wa::ProtocolDescriptor* pd = nullptr;
  wa::ProtocolDescriptor buf;
  for (uint32_t i = 0; i < n.napd && !pd; ++i) {
    std::memcpy(&buf, d + sizeof n + i * sizeof buf, sizeof buf);
    if (buf.authid == wa::kAuthIdDhchap) pd = &buf;
  }
  if (!pd) return fail(wa::kFailNotUsable, "no DH-HMAC-CHAP protocol descriptor");
  if (pd->halen > wa::kMaxHashIds || pd->dhlen > wa::kMaxDhIds)
    return fail(wa::kFailIncorrectPayload, "HALEN or DHLEN above 30");
  hash_ = 0;
  for (uint8_t h : hashes_)
    if (offered(pd->idlist, pd->halen, h)) {
      hash_ = h;
      break;
    }
  if (!hash_) return fail(wa::kFailHashUnusable, "no hash function in common");
  bool found = false;
  for (uint8_t g : dhgroups_)
    if (offered(pd->idlist + 30, pd->dhlen, g)) {
      dhgroup_ = g;
      found = true;
      break;
    }
  if (!found) return fail(wa::kFailDhgroupUnusable, "no DH group in common");
  step_ = Step::kChallenge;
  return Outcome::kNone;
}

DhchapSession::Outcome DhchapSession::reply(const uint8_t* d, uint32_t len) {
  if (len < sizeof(wa::Reply)) return fail(wa::kFailIncorrectPayload, "short REPLY");
  wa::Reply r;
  std::memcpy(&r, d, sizeof r);
  const size_t hl = auth::hash_len(hash_);
  if (r.hl != hl) return fail(wa::kFailIncorrectPayload, "REPLY hash length is not the hash's");
  if (sizeof r + 2 * size_t(hl) + r.dhvlen > len)
    return fail(wa::kFailIncorrectPayload, "REPLY longer than its AUTH_Send");
  if (r.dhvlen != auth::dh_group_bytes(dhgroup_))
    return fail(wa::kFailIncorrectPayload, "REPLY DH value length is not the group's");
  const uint8_t* rval = d + sizeof r;
  const uint8_t* c2 = rval + hl;
  const uint8_t* dhv = c2 + hl;
  if (dhgroup_ != wa::kDhNull) {
    std::string why;
    // (slots_ is set: the CHALLENGE took a slot.)
    if (!dh_.derive({dhv, r.dhvlen}, &session_key_, &why,
                    slots_ ? slots_->peer_check() : auth::PeerCheck::kRange))
      return fail(wa::kFailDhgroupUnusable, "the host's DH value is not valid");
  }
  auth::Bytes challenge(c1_, c1_ + hl);
  if (dhgroup_ != wa::kDhNull)
    challenge = auth::augmented_challenge(hash_, session_key_, challenge);
  auth::Bytes want =
      auth::host_response(hash_, keys_->host_key, challenge, s1_, t_id_, id_.hostnqn, id_.subnqn);
  if (want.empty() || !auth::equal(want, {rval, hl}))
    return fail(wa::kFailFailed, "the host's response does not match its key");
  bidirectional_ = r.cvalid & 1;
  if (bidirectional_) {
    if (keys_->ctrl_key.empty())
      return fail(wa::kFailFailed,
                  "the host asks to authenticate the controller, which has no key "
                  "for it (--ctrl-key)");
    if (r.seqnum == 0) return fail(wa::kFailIncorrectPayload, "C2 valid with sequence number 0");
    s2_ = r.seqnum;
    std::memcpy(c2_, c2, hl);
  }
  step_ = Step::kSuccess1;
  return Outcome::kNone;
}

DhchapSession::Outcome DhchapSession::on_receive(uint8_t* out, uint32_t al) {
  std::memset(out, 0, al);
  const size_t hl = auth::hash_len(hash_);
  switch (step_) {
    case Step::kChallenge: {
      if (!slot_still_held()) break;
      const size_t dhvlen = auth::dh_group_bytes(dhgroup_);
      if (sizeof(wa::Challenge) + hl + dhvlen > al) {
        fail(wa::kFailIncorrectPayload, "AUTH_Receive too short for the CHALLENGE");
        break;  // the FAILURE1 goes out now
      }
      wa::Challenge c{};
      c.auth_type = wa::kTypeDhchap;
      c.auth_id = wa::kIdChallenge;
      c.t_id = t_id_;
      c.hl = uint8_t(hl);
      c.hashid = hash_;
      c.dhgid = dhgroup_;
      c.dhvlen = uint16_t(dhvlen);
      s1_ = 0;
      bool have_random = true;
      while (s1_ == 0 && have_random)  // S1 is never 0
        have_random = auth::random_bytes(reinterpret_cast<uint8_t*>(&s1_), sizeof s1_);
      if (!have_random || !auth::random_bytes(c1_, hl)) {
        fail(wa::kFailFailed, "no random bytes for the challenge");
        break;
      }
      c.seqnum = s1_;
      std::memcpy(out, &c, sizeof c);
      std::memcpy(out + sizeof c, c1_, hl);
      if (dhvlen) {
        auth::Bytes pub;
        std::string why;
        if (!dh_.generate(dhgroup_, &pub, &why)) {
          LOG_WARN("dhchap: %s", why.c_str());
          std::memset(out, 0, al);
          fail(wa::kFailDhgroupUnusable, "DH key generation failed");
          break;
        }
        std::memcpy(out + sizeof c + hl, pub.data(), pub.size());
      }
      step_ = Step::kReply;
      return Outcome::kNone;
    }
    case Step::kSuccess1: {
      if (sizeof(wa::Success1) + (bidirectional_ ? hl : 0) > al) {
        fail(wa::kFailIncorrectPayload, "AUTH_Receive too short for SUCCESS1");
        break;
      }
      wa::Success1 s{};
      s.auth_type = wa::kTypeDhchap;
      s.auth_id = wa::kIdSuccess1;
      s.t_id = t_id_;
      s.hl = uint8_t(hl);
      if (bidirectional_) {
        auth::Bytes challenge(c2_, c2_ + hl);
        if (dhgroup_ != wa::kDhNull)
          challenge = auth::augmented_challenge(hash_, session_key_, challenge);
        auth::Bytes r2 = auth::ctrl_response(hash_, keys_->ctrl_key, challenge, s2_, t_id_,
                                             id_.subnqn, id_.hostnqn);
        s.rvalid = 1;
        std::memcpy(out + sizeof s, r2.data(), std::min(r2.size(), hl));
        step_ = Step::kSuccess2;  // the host checks R2 and answers SUCCESS2 (or FAILURE2)
        std::memcpy(out, &s, sizeof s);
        return Outcome::kNone;
      }
      std::memcpy(out, &s, sizeof s);
      step_ = Step::kNegotiate;
      clear_exchange();
      authenticated_ = true;
      return Outcome::kAuthenticated;
    }
    case Step::kFailure1:
      break;
    default:
      fail(wa::kFailIncorrectMessage, "AUTH_Receive out of sequence");
      break;
  }
  // FAILURE1: the host learns why, and may negotiate again (a failed re-authentication ends
  // the queue's access until one succeeds).
  if (al >= sizeof(wa::Failure)) {
    wa::Failure f{};
    f.auth_type = wa::kTypeCommon;
    f.auth_id = wa::kIdFailure1;
    f.t_id = t_id_;
    f.rescode = wa::kReasonFailed;
    f.rescode_exp = failure_;
    std::memcpy(out, &f, sizeof f);
  }
  step_ = Step::kNegotiate;
  authenticated_ = false;
  return Outcome::kFailed;
}

// ---------------------------------------------------------------------------- the commands

CommandQueue::CommandQueue(ReactorContext& ctx)
    : ctx_(ctx), reactor_index_(uint32_t(ctx.reactor.index())) {}
CommandQueue::~CommandQueue() = default;

namespace dhchap {

Plan plan(CommandQueue& q, Request& r) {
  Plan p;
  const nvme::Sqe& s = r.sqe;
  if (!q.dhchap()) {
    p.status = st::kCmdSeqError;  // no key for this host: nothing to authenticate with
    return p;
  }
  if (wa::secp(s) != wa::kSecpDhchap || wa::spsp0(s) != wa::kSpsp || wa::spsp1(s) != wa::kSpsp) {
    p.status = st::kInvalidField;
    return p;
  }
  const uint32_t len = wa::length(s);
  const uint32_t sgl_len = s.sgl.length;
  if (len == 0 || len > kAuthDataMax) {
    p.status = st::kInvalidField;
    return p;
  }
  if (s.fctype() == nvme::fctype::kAuthSend) {
    if (r.in_capsule ? r.xfer_len != len : sgl_len != len) {
      p.status = st::kSglInvalidDataLength;
      return p;
    }
    if (!r.in_capsule) {
      r.xfer_len = len;
      p.buffer_bytes = len;
      p.fetch = true;
    }
    return p;
  }
  if (r.in_capsule || sgl_len != len) {  // AUTH_Receive moves data to the host only
    p.status = r.in_capsule ? st::kInvalidField : st::kSglInvalidDataLength;
    return p;
  }
  r.xfer_len = len;
  p.buffer_bytes = len;
  return p;
}

namespace {

// A status the DH steps hand back to the reactor: the wait for a slot was refused.
constexpr uint16_t kNoSlot = 1;

bool is_send(const Request& r) {
  return r.sqe.fctype() == nvme::fctype::kAuthSend;
}

void finish(CommandQueue& q, Request& r, DhchapSession::Outcome o) {
  if (o == DhchapSession::Outcome::kAuthenticated) {
    q.ctx().target.count_authentication(true);
    q.on_authenticated(true);
  } else if (o == DhchapSession::Outcome::kFailed) {
    q.ctx().target.count_authentication(false);
    q.on_authenticated(false);
  }
  if (is_send(r)) return q.complete(r, st::kSuccess);
  q.send_data(r, r.buf, r.xfer_len);
}

// Back on the reactor from a worker (or a refused wait).
void dh_step_done(CommandQueue& q, Request& r, uint16_t status) {
  DhchapSession& session = *q.dhchap();
  session.set_busy(false);
  if (status == kNoSlot) {
    session.refuse("no negotiation slot within the timeout (--dhchap-negotiations)");
    return finish(q, r, session.on_receive(r.buf, r.xfer_len));  // the FAILURE1, no DH
  }
  finish(q, r, session.last_outcome());
}

void post_dh_step(CommandQueue& q, Request& r, Negotiations& slots) {
  DhchapSession* session = q.dhchap();
  const bool send = is_send(r);
  q.offload(
      r, slots.worker(),
      [session, &r, send] {
        session->run_off_reactor(send, r.buf, r.xfer_len);
        return uint16_t(0);
      },
      dh_step_done);
}

}  // namespace

void execute(CommandQueue& q, Request& r) {
  DhchapSession& session = *q.dhchap();
  const bool send = is_send(r);
  // One message at a time: the session is on a worker (or waiting for a slot).
  if (session.busy()) return q.complete(r, st::kCmdSeqError);
  if (!session.dh_step_next(send))
    return finish(
        q, r, send ? session.on_send(r.buf, r.xfer_len) : session.on_receive(r.buf, r.xfer_len));
  Negotiations& slots = q.ctx().target.negotiations();
  const auto& ticket = session.ticket(&slots);
  session.set_busy(true);
  if (send || !session.needs_slot()) return post_dh_step(q, r, slots);
  // The CHALLENGE: the first DH step takes a slot of the target's, now or in turn.
  WorkerThread* worker = &slots.worker();
  DhchapSession* s = &session;
  Request* req = &r;
  auto admit = slots.acquire(ticket, [&]() -> Negotiations::Wake {
    CommandQueue::Resume resume = q.park(r, dh_step_done);
    return [resume, worker, s, req](bool granted) {
      if (!granted) return resume(kNoSlot);
      // The request stays parked (in flight) while the worker runs the step.
      bool posted = worker->post([resume, s, req] {
        s->run_off_reactor(false, req->buf, req->xfer_len);
        resume(0);
      });
      if (!posted) resume(kNoSlot);  // stopping
    };
  });
  switch (admit) {
    case Negotiations::Admit::kNow:
      return post_dh_step(q, r, slots);
    case Negotiations::Admit::kQueued:
      return;  // parked
    case Negotiations::Admit::kRefused:
      session.set_busy(false);
      session.refuse("too many negotiations waiting on this target (--dhchap-negotiations)");
      return finish(q, r, session.on_receive(r.buf, r.xfer_len));
  }
}

}  // namespace dhchap

}  // namespace sens::target
