// DH-HMAC-CHAP on the host (NVMe Base 2.0 8.13.5): NEGOTIATE, CHALLENGE, REPLY, SUCCESS1 and
// (bidirectional) SUCCESS2 over AUTH_Send / AUTH_Receive on one queue, right after its
// Connect, as the Linux host runs it. A refusal by the controller (FAILURE1) or by the host
// (a wrong controller response: FAILURE2) fails the queue's connect with the reason.
#include <cstring>

#include "auth/dhchap.h"
#include "host/controller.h"
#include "wire/nvme_auth.h"

namespace sens::host {

namespace wa = nvme::auth;

namespace {

constexpr uint32_t kReceiveBytes = 4096;  // AL of every AUTH_Receive (enough for ffdhe8192)

bool listed(const std::vector<uint8_t>& ids, uint8_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::string Controller::reauthenticate() {
  if (!admin_ || !admin_->is_open()) return "admin queue not connected";
  if (!have_host_key_) return "no DH-HMAC-CHAP secret (--dhchap-secret)";
  if (std::string e = authenticate(*admin_, 0); !e.empty()) return e;
  for (auto& q : io_)
    if (std::string e = authenticate(*q, q->qid()); !e.empty()) return e;
  return "";
}

std::string Controller::authenticate(Queue& q, uint16_t qid) {
  const std::string where = "DH-HMAC-CHAP on qid " + std::to_string(qid) + ": ";
  if (!have_host_key_)
    return where +
           "the controller requires authentication (AUTHREQ.ATR) and no secret was "
           "given (--dhchap-secret)";
  const uint16_t t_id = transaction_++;
  std::vector<uint8_t> buf(kReceiveBytes);
  auto send = [&](const void* msg, uint32_t len) -> std::string {
    Completion c =
        wait_command(q, wa::make_auth_send(len, nvme::Xfer::kInCapsule), const_cast<void*>(msg),
                     len, DataDir::kHostToController, admin_timeout());
    if (!c.ok()) return where + "AUTH_Send: " + describe(c);
    return "";
  };
  auto receive = [&](uint8_t expected) -> std::string {
    std::fill(buf.begin(), buf.end(), 0);
    Completion c = wait_command(q, wa::make_auth_receive(kReceiveBytes), buf.data(), kReceiveBytes,
                                DataDir::kControllerToHost, admin_timeout());
    wa::Failure f;
    std::memcpy(&f, buf.data(), sizeof f);
    const bool failure1 = f.auth_type == wa::kTypeCommon && f.auth_id == wa::kIdFailure1;
    // The Linux target drops the connection right after a FAILURE1's data, often before its
    // response: the message that arrived still says why.
    if (!c.ok() && !failure1) return where + "AUTH_Receive: " + describe(c);
    if (failure1)
      return where + "the controller refused (FAILURE1): " + wa::failure_name(f.rescode_exp) +
             (c.ok() ? "" : ", and closed the connection");
    if (f.auth_type != wa::kTypeDhchap || f.auth_id != expected)
      return where + "unexpected message type " + std::to_string(f.auth_type) + "/" +
             std::to_string(f.auth_id);
    if (f.t_id != t_id) return where + "a message for another transaction";
    return "";
  };
  // Our refusal reaches the controller as FAILURE2, then the connect fails.
  auto refuse = [&](uint8_t reason, const std::string& why) {
    wa::Failure f{};
    f.auth_type = wa::kTypeCommon;
    f.auth_id = wa::kIdFailure2;
    f.t_id = t_id;
    f.rescode = wa::kReasonFailed;
    f.rescode_exp = reason;
    send(&f, sizeof f);
    return where + why;
  };

  // NEGOTIATE: every hash and group this host accepts.
  uint8_t neg[sizeof(wa::Negotiate) + sizeof(wa::ProtocolDescriptor)] = {};
  wa::Negotiate n{};
  n.auth_type = wa::kTypeCommon;
  n.auth_id = wa::kIdNegotiate;
  n.t_id = t_id;
  n.sc_c = wa::kScNone;
  n.napd = 1;
  wa::ProtocolDescriptor pd{};
  pd.authid = wa::kAuthIdDhchap;
  pd.halen = uint8_t(std::min<size_t>(options_.dhchap_hashes.size(), wa::kMaxHashIds));
  pd.dhlen = uint8_t(std::min<size_t>(options_.dhchap_dhgroups.size(), wa::kMaxDhIds));
  std::copy_n(options_.dhchap_hashes.begin(), pd.halen, pd.idlist);
  std::copy_n(options_.dhchap_dhgroups.begin(), pd.dhlen, pd.idlist + 30);
  std::memcpy(neg, &n, sizeof n);
  std::memcpy(neg + sizeof n, &pd, sizeof pd);
  if (std::string e = send(neg, sizeof neg); !e.empty()) return e;

  // CHALLENGE
  if (std::string e = receive(wa::kIdChallenge); !e.empty()) return e;
  wa::Challenge ch;
  std::memcpy(&ch, buf.data(), sizeof ch);
  const size_t hl = auth::hash_len(ch.hashid);
  if (!hl || !listed(options_.dhchap_hashes, ch.hashid))
    return refuse(wa::kFailHashUnusable,
                  "the controller chose hash " + std::to_string(ch.hashid) + ", not one offered");
  if (ch.hl != hl) return refuse(wa::kFailIncorrectPayload, "challenge length is not the hash's");
  if (!auth::dh_group_known(ch.dhgid) || !listed(options_.dhchap_dhgroups, ch.dhgid))
    return refuse(wa::kFailDhgroupUnusable, "the controller chose DH group " +
                                                std::to_string(ch.dhgid) + ", not one offered");
  const size_t dhvlen = auth::dh_group_bytes(ch.dhgid);
  if (ch.dhvlen != dhvlen || sizeof ch + hl + dhvlen > kReceiveBytes)
    return refuse(wa::kFailIncorrectPayload, "DH value length is not the group's");
  const uint8_t* c1 = buf.data() + sizeof ch;
  auth::Bytes challenge(c1, c1 + hl), session_key, host_public, r1, c2v, want;
  // The session key and what is derived from it, on every way out (a refusal too).
  auth::WipeOnExit wiped{&challenge, &session_key, &r1, &c2v, &want};
  if (dhvlen) {
    auth::DhExchange dh;
    std::string why;
    if (!dh.generate(ch.dhgid, &host_public, &why) ||
        !dh.derive({c1 + hl, dhvlen}, &session_key, &why))
      return refuse(wa::kFailDhgroupUnusable, "DH exchange: " + why);
    challenge = auth::augmented_challenge(ch.hashid, session_key, challenge);
  }
  r1 =
      auth::host_response(ch.hashid, host_key_, challenge, ch.seqnum, t_id, hostnqn_, trid_.subnqn);

  // REPLY, with C2 when the controller is to prove its key too.
  const bool bidirectional = have_ctrl_key_;
  uint8_t c2[wa::kMaxHashLen] = {};
  uint32_t s2 = 0;
  if (bidirectional) {
    bool ok = auth::random_bytes(c2, hl);
    while (ok && s2 == 0) ok = auth::random_bytes(reinterpret_cast<uint8_t*>(&s2), sizeof s2);
    if (!ok) return refuse(wa::kFailFailed, "no random bytes");
  }
  std::vector<uint8_t> rep(sizeof(wa::Reply) + 2 * hl + dhvlen, 0);
  wa::Reply r{};
  r.auth_type = wa::kTypeDhchap;
  r.auth_id = wa::kIdReply;
  r.t_id = t_id;
  r.hl = uint8_t(hl);
  r.cvalid = bidirectional ? 1 : 0;
  r.dhvlen = uint16_t(dhvlen);
  r.seqnum = s2;
  std::memcpy(rep.data(), &r, sizeof r);
  std::memcpy(rep.data() + sizeof r, r1.data(), hl);
  std::memcpy(rep.data() + sizeof r + hl, c2, hl);
  if (dhvlen) std::memcpy(rep.data() + sizeof r + 2 * hl, host_public.data(), dhvlen);
  if (std::string e = send(rep.data(), uint32_t(rep.size())); !e.empty()) return e;

  // SUCCESS1 (with R2 when bidirectional)
  if (std::string e = receive(wa::kIdSuccess1); !e.empty()) return e;
  wa::Success1 s1;
  std::memcpy(&s1, buf.data(), sizeof s1);
  if (s1.hl != hl) return refuse(wa::kFailHashUnusable, "SUCCESS1 hash length is not the hash's");
  if (bidirectional) {
    c2v.assign(c2, c2 + hl);
    if (dhvlen) c2v = auth::augmented_challenge(ch.hashid, session_key, c2v);
    want = auth::ctrl_response(ch.hashid, ctrl_key_, c2v, s2, t_id, trid_.subnqn, hostnqn_);
    if (!(s1.rvalid & 1) || !auth::equal(want, {buf.data() + sizeof s1, hl}))
      return refuse(wa::kFailFailed,
                    "the controller's response does not match its secret: not the controller "
                    "the secret belongs to");
    wa::Success2 s2msg{};
    s2msg.auth_type = wa::kTypeDhchap;
    s2msg.auth_id = wa::kIdSuccess2;
    s2msg.t_id = t_id;
    if (std::string e = send(&s2msg, sizeof s2msg); !e.empty()) return e;
  }
  if (qid == 0) {
    auth_hash_ = ch.hashid;
    auth_dhgroup_ = ch.dhgid;
  }
  ++authentications_;
  return "";
}

}  // namespace sens::host
