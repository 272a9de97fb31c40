// DH-HMAC-CHAP on the host (NVMe Base 2.0 8.13.5): NEGOTIATE, CHALLENGE, REPLY, SUCCESS1 and
// (bidirectional) SUCCESS2 over AUTH_Send / AUTH_Receive on one queue, right after its
// Connect, as the Linux host runs it. A refusal by the controller (FAILURE1) or by the host
// (a wrong controller response: FAILURE2) fails the queue's connect with the reason. The
// messages and checks are DhchapExchange's; Controller::authenticate drives it by waiting,
// the non-blocking queue set-up (host/queue_setup.cc) from the reactor.
#include <algorithm>
#include <cstring>

#include "auth/dhchap.h"
#include "host/controller.h"
#include "wire/nvme_auth.h"

namespace sens::host {

namespace wa = nvme::auth;

namespace {

bool listed(const std::vector<uint8_t>& ids, uint8_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

template <typename T>
std::vector<uint8_t> bytes_of(const T& msg) {
  const auto* p = reinterpret_cast<const uint8_t*>(&msg);
  return std::vector<uint8_t>(p, p + sizeof msg);
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
  DhchapExchange x(*this, qid);
  std::vector<uint8_t> buf(DhchapExchange::kReceiveBytes);
  // Sends what the step says; its error (a refusal's, else the send's) or "".
  auto send = [&](const DhchapExchange::Step& s) -> std::string {
    if (s.send.empty()) return s.error;
    Completion c =
        wait_command(q, wa::make_auth_send(uint32_t(s.send.size()), nvme::Xfer::kInCapsule),
                     const_cast<uint8_t*>(s.send.data()), uint32_t(s.send.size()),
                     DataDir::kHostToController, admin_timeout());
    if (!s.error.empty()) return s.error;
    return c.ok() ? "" : x.send_failed(c);
  };
  auto receive = [&]() {
    std::fill(buf.begin(), buf.end(), 0);
    return wait_command(q, wa::make_auth_receive(DhchapExchange::kReceiveBytes), buf.data(),
                        DhchapExchange::kReceiveBytes, DataDir::kControllerToHost, admin_timeout());
  };
  if (std::string e = send(x.negotiate()); !e.empty()) return e;
  Completion c = receive();
  if (std::string e = send(x.on_challenge(c, buf.data())); !e.empty()) return e;
  c = receive();
  if (std::string e = send(x.on_success1(c, buf.data())); !e.empty()) return e;
  x.finished();
  return "";
}

// ---- DhchapExchange ----

DhchapExchange::DhchapExchange(Controller& ctrl, uint16_t qid)
    : ctrl_(ctrl), qid_(qid), where_("DH-HMAC-CHAP on qid " + std::to_string(qid) + ": ") {}

DhchapExchange::~DhchapExchange() {
  auth::wipe(session_key_);
}

DhchapExchange::Step DhchapExchange::refuse(uint8_t reason, const std::string& why) const {
  // Our refusal reaches the controller as FAILURE2, then the connect fails.
  wa::Failure f{};
  f.auth_type = wa::kTypeCommon;
  f.auth_id = wa::kIdFailure2;
  f.t_id = t_id_;
  f.rescode = wa::kReasonFailed;
  f.rescode_exp = reason;
  return {where_ + why, bytes_of(f)};
}

std::string DhchapExchange::send_failed(const Completion& c) const {
  return where_ + "AUTH_Send: " + describe(c);
}

std::string DhchapExchange::check(const Completion& c, const uint8_t* msg, uint8_t expected) const {
  wa::Failure f;
  std::memcpy(&f, msg, sizeof f);
  const bool failure1 = f.auth_type == wa::kTypeCommon && f.auth_id == wa::kIdFailure1;
  // The Linux target drops the connection right after a FAILURE1's data, often before its
  // response: the message that arrived still says why.
  // When even that data is lost with the connection, a connection closed right after our
  // REPLY is still most likely a refusal of our response: say so, not only "transport".
  if (!c.ok() && !failure1 && expected == wa::kIdSuccess1 && c.status == kStatusHostPathError)
    return where_ +
           "the controller closed the connection after our REPLY, before its answer "
           "arrived: it most likely refused our response (wrong key?); " +
           describe(c);
  if (!c.ok() && !failure1) return where_ + "AUTH_Receive: " + describe(c);
  if (failure1)
    return where_ + "the controller refused (FAILURE1): " + wa::failure_name(f.rescode_exp) +
           (c.ok() ? "" : ", and closed the connection");
  if (f.auth_type != wa::kTypeDhchap || f.auth_id != expected)
    return where_ + "unexpected message type " + std::to_string(f.auth_type) + "/" +
           std::to_string(f.auth_id);
  if (f.t_id != t_id_) return where_ + "a message for another transaction";
  return "";
}

DhchapExchange::Step DhchapExchange::negotiate() {
  if (!ctrl_.have_host_key_)
    return {where_ +
                "the controller requires authentication (AUTHREQ.ATR) and no secret was "
                "given (--dhchap-secret)",
            {}};
  t_id_ = ctrl_.transaction_++;
  const ControllerOptions& o = ctrl_.options_;
  uint8_t neg[sizeof(wa::Negotiate) + sizeof(wa::ProtocolDescriptor)] = {};
  wa::Negotiate n{};
  n.auth_type = wa::kTypeCommon;
  n.auth_id = wa::kIdNegotiate;
  n.t_id = t_id_;
  n.sc_c = wa::kScNone;
  n.napd = 1;
  wa::ProtocolDescriptor pd{};
  pd.authid = wa::kAuthIdDhchap;
  pd.halen = uint8_t(std::min<size_t>(o.dhchap_hashes.size(), wa::kMaxHashIds));
  pd.dhlen = uint8_t(std::min<size_t>(o.dhchap_dhgroups.size(), wa::kMaxDhIds));
  std::copy_n(o.dhchap_hashes.begin(), pd.halen, pd.idlist);
  std::copy_n(o.dhchap_dhgroups.begin(), pd.dhlen, pd.idlist + 30);
  std::memcpy(neg, &n, sizeof n);
  std::memcpy(neg + sizeof n, &pd, sizeof pd);
  return {"", std::vector<uint8_t>(neg, neg + sizeof neg)};
}

DhchapExchange::Step DhchapExchange::on_challenge(const Completion& c, const uint8_t* msg) {
  if (std::string e = check(c, msg, wa::kIdChallenge); !e.empty()) return {e, {}};
  const ControllerOptions& o = ctrl_.options_;
  wa::Challenge ch;
  std::memcpy(&ch, msg, sizeof ch);
  hashid_ = ch.hashid;
  dhgid_ = ch.dhgid;
  hl_ = auth::hash_len(ch.hashid);
  if (!hl_ || !listed(o.dhchap_hashes, ch.hashid))
    return refuse(wa::kFailHashUnusable,
                  "the controller chose hash " + std::to_string(ch.hashid) + ", not one offered");
  if (ch.hl != hl_) return refuse(wa::kFailIncorrectPayload, "challenge length is not the hash's");
  if (!auth::dh_group_known(ch.dhgid) || !listed(o.dhchap_dhgroups, ch.dhgid))
    return refuse(wa::kFailDhgroupUnusable, "the controller chose DH group " +
                                                std::to_string(ch.dhgid) + ", not one offered");
  dhvlen_ = auth::dh_group_bytes(ch.dhgid);
  if (ch.dhvlen != dhvlen_ || sizeof ch + hl_ + dhvlen_ > kReceiveBytes)
    return refuse(wa::kFailIncorrectPayload, "DH value length is not the group's");
  const uint8_t* c1 = msg + sizeof ch;
  auth::Bytes challenge(c1, c1 + hl_), host_public, r1;
  // What is derived from the session key, on every way out (a refusal too); the key itself
  // is the exchange's, wiped when it finishes or goes.
  auth::WipeOnExit wiped{&challenge, &r1};
  if (dhvlen_) {
    auth::DhExchange dh;
    std::string why;
    if (!dh.generate(ch.dhgid, &host_public, &why) ||
        !dh.derive({c1 + hl_, dhvlen_}, &session_key_, &why))
      return refuse(wa::kFailDhgroupUnusable, "DH exchange: " + why);
    challenge = auth::augmented_challenge(ch.hashid, session_key_, challenge);
  }
  r1 = auth::host_response(ch.hashid, ctrl_.host_key_, challenge, ch.seqnum, t_id_, ctrl_.hostnqn_,
                           ctrl_.trid_.subnqn);

  // REPLY, with C2 when the controller is to prove its key too.
  const bool bidirectional = ctrl_.have_ctrl_key_;
  if (bidirectional) {
    bool ok = auth::random_bytes(c2_, hl_);
    while (ok && s2_ == 0) ok = auth::random_bytes(reinterpret_cast<uint8_t*>(&s2_), sizeof s2_);
    if (!ok) return refuse(wa::kFailFailed, "no random bytes");
  }
  std::vector<uint8_t> rep(sizeof(wa::Reply) + 2 * hl_ + dhvlen_, 0);
  wa::Reply r{};
  r.auth_type = wa::kTypeDhchap;
  r.auth_id = wa::kIdReply;
  r.t_id = t_id_;
  r.hl = uint8_t(hl_);
  r.cvalid = bidirectional ? 1 : 0;
  r.dhvlen = uint16_t(dhvlen_);
  r.seqnum = s2_;
  std::memcpy(rep.data(), &r, sizeof r);
  std::memcpy(rep.data() + sizeof r, r1.data(), hl_);
  std::memcpy(rep.data() + sizeof r + hl_, c2_, hl_);
  if (dhvlen_) std::memcpy(rep.data() + sizeof r + 2 * hl_, host_public.data(), dhvlen_);
  return {"", std::move(rep)};
}

DhchapExchange::Step DhchapExchange::on_success1(const Completion& c, const uint8_t* msg) {
  if (std::string e = check(c, msg, wa::kIdSuccess1); !e.empty()) return {e, {}};
  wa::Success1 s1;
  std::memcpy(&s1, msg, sizeof s1);
  if (s1.hl != hl_) return refuse(wa::kFailHashUnusable, "SUCCESS1 hash length is not the hash's");
  if (!ctrl_.have_ctrl_key_) return {};
  auth::Bytes c2v(c2_, c2_ + hl_), want;
  auth::WipeOnExit wiped{&c2v, &want};
  if (dhvlen_) c2v = auth::augmented_challenge(hashid_, session_key_, c2v);
  want = auth::ctrl_response(hashid_, ctrl_.ctrl_key_, c2v, s2_, t_id_, ctrl_.trid_.subnqn,
                             ctrl_.hostnqn_);
  if (!(s1.rvalid & 1) || !auth::equal(want, {msg + sizeof s1, hl_}))
    return refuse(wa::kFailFailed,
                  "the controller's response does not match its secret: not the controller "
                  "the secret belongs to");
  wa::Success2 s2msg{};
  s2msg.auth_type = wa::kTypeDhchap;
  s2msg.auth_id = wa::kIdSuccess2;
  s2msg.t_id = t_id_;
  return {"", bytes_of(s2msg)};
}

void DhchapExchange::finished() {
  auth::wipe(session_key_);
  if (qid_ == 0) {
    ctrl_.auth_hash_ = hashid_;
    ctrl_.auth_dhgroup_ = dhgid_;
  }
  ++ctrl_.authentications_;
}

}  // namespace sens::host
