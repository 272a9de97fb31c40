// NVMe/TCP queue: what the Fabrics and admin command sets ask of the transport beyond a
// command's own answer (Connect, authentication, Disconnect, Keep Alive, AERs), live
// retuning and the per-connection statistics.
#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>

#include "coalesce/stats_json.h"
#include "common/log.h"
#include "target/dhchap.h"
#include "target/target.h"
#include "target/tcp_queue.h"
#include "wire/nvme_build.h"

namespace sens::target {

namespace st = nvme::status;
using S = ReqState;

namespace {
// DH-HMAC-CHAP must end by then after Connect (an ffdhe8192 exchange in a slow VM included).
constexpr Nanos kAuthTimeout = 30 * kSecond;
// A host is dropped once no admin command arrived for kato plus one KAS granule, so a host
// that sends Keep Alive at exactly kato (as older Linux hosts do) is not dropped by a race.
constexpr Nanos kKeepAliveGrace = kKasUnits * 100 * kMilli;
}  // namespace

void TcpQueue::set_max_plen() {
  reader_.set_max_plen(pdu::kMaxHlen + 2 * pdu::kDigestLen +
                       std::max(inline_limit(), ctx_.config.max_h2c_data));
}

void TcpQueue::on_connected(Subsystem* sub, std::shared_ptr<Controller> ctrl, uint16_t qid,
                            uint32_t sq_entries, bool sq_flow_disabled,
                            std::shared_ptr<const HostAuth> auth) {
  subsystem_ = sub;
  ctrl_ = std::move(ctrl);
  qid_ = qid;
  sq_entries_ = sq_entries;
  io_metrics_.reserve(sq_entries);
  sqhd_ = uint16_t(1 % sq_entries_);
  sqflow_disabled_ = sq_flow_disabled;
  cids_.assign(65536 / 64, 0);
  if (auth) {
    // The set-up deadline now bounds the authentication: a host that connects and never
    // proves its key is dropped.
    dhchap_ = std::make_unique<DhchapSession>(
        std::move(auth), sub->dhchap_hashes, sub->dhchap_dhgroups,
        DhchapSession::Identity{ctrl_->hostnqn, sub->nqn, ctrl_->cntlid, qid});
    state_ = State::kAuthenticating;
    ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kAuthTimeout);
  } else {
    state_ = State::kReady;
    ctx_.reactor.cancel(setup_timer_);
  }
  set_max_plen();
  if (qid_ != 0) resv_cache_.assign(sub->namespace_count(), ResvCache{});
  if (qid_ != 0) {
    // Under tyche the staging buffer comes coloured from the reactor's staging pool: the
    // heads of many connections' buffers then spread over the cache sets.
    uint8_t* mem = ctx_.staging_pool ? ctx_.staging_pool->get(kIoStaging) : nullptr;
    if (mem && reader_.use_staging(mem, kIoStaging)) {
      staging_mem_ = mem;
    } else {
      if (mem) ctx_.staging_pool->put(mem, kIoStaging);
      reader_.set_staging(kIoStaging);
    }
    // I/O queues coalesce: as the subsystem was retuned live, else as the target is now
    sendq_.set_config(sub->coalescing().value_or(ctx_.coalescing()));
  }
  // Keep alive starts once the host may send one: a host computing its DH value sends nothing.
  if (qid_ == 0 && ctrl_->kato_ms && !auth) reset_keep_alive();
  start_stall_watch();  // issue 29 hook
}

void TcpQueue::on_authenticated(bool ok) {
  if (closed_ || state_ == State::kClosing) return;
  if (ok && state_ == State::kAuthenticating) {
    state_ = State::kReady;
    ctx_.reactor.cancel(setup_timer_);
    set_max_plen();
    if (qid_ == 0) ctrl_->admin_authenticated = true;
    if (qid_ == 0 && ctrl_->kato_ms) reset_keep_alive();
    LOG_DEBUG("connection %llu: host '%s' authenticated on qid %u",
              static_cast<unsigned long long>(id_), ctrl_->hostnqn.c_str(), qid_);
  } else if (!ok && state_ == State::kReady) {
    // A failed re-authentication: no command runs until one succeeds, within the deadline.
    state_ = State::kAuthenticating;
    if (qid_ == 0) ctrl_->admin_authenticated = false;
    ctx_.reactor.arm(setup_timer_, ctx_.reactor.now() + kAuthTimeout);
  }
}

void TcpQueue::disconnect(Request& r) {
  decide(r, ReqAction::kDisconnect);  // its response is the last PDU (drive())
}

void TcpQueue::keep_alive_changed() {
  if (ctrl_->kato_ms)
    reset_keep_alive();
  else
    ctx_.reactor.cancel(ka_timer_);
}

bool TcpQueue::park_aer(Request& r) {
  // Closing, it is dropped instead (drive()), so the limit does not matter then.
  if (!closing() && aer_outstanding_ >= kAerLimit) return false;
  decide(r, ReqAction::kParkAer);
  return true;
}

Request& TcpQueue::unpark_aer(uint32_t i) {
  Request& r = slots_[aer_parked_[i]]->req;
  --aer_outstanding_;
  for (; i < aer_outstanding_; ++i) aer_parked_[i] = aer_parked_[i + 1];
  return r;
}

void TcpQueue::deliver_events() {
  if (closing() || qid_ != 0 || !ctrl_) return;
  // Each notice: its enable bit (Set Features 0Bh), pending and masked flags (masked until
  // the host reads its log page with RAE clear), and the AER's result: Notice (type 2), the
  // information code, the log page.
  struct Notice {
    uint32_t enable_bit;
    std::atomic<bool>& pending;
    std::atomic<bool>& masked;
    uint32_t result;
  };
  Notice notices[] = {
      {1u << 8, ctrl_->ns_event_pending, ctrl_->ns_event_masked,
       0x2u | (0x00u << 8) | (0x04u << 16)},
      {1u << 11, ctrl_->ana_event_pending, ctrl_->ana_event_masked,
       0x2u | (0x03u << 8) | (0x0Cu << 16)},
      {1u << 31, ctrl_->disc_event_pending, ctrl_->disc_event_masked,
       0x2u | (0xF0u << 8) | (0x70u << 16)},
  };
  for (auto& n : notices) {
    if (aer_outstanding_ == 0) return;
    if (!(ctrl_->async_event_config.load() & n.enable_bit)) continue;
    if (n.masked.load() || !n.pending.exchange(false)) continue;
    n.masked = true;
    Request& aer = unpark_aer(0);
    aer.answer_status = st::kSuccess;
    aer.answer_result = n.result;
    aer.events |= req_event::kAnswer;
    drive(aer);
  }
}

void TcpQueue::reset_keep_alive() {
  last_admin_ = ctx_.reactor.now();
  if (!ka_timer_.armed() && ctrl_ && ctrl_->kato_ms)
    ctx_.reactor.arm(ka_timer_, last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace);
}

void TcpQueue::on_keep_alive_timer() {
  if (closed_ || !ctrl_ || !ctrl_->kato_ms) return;
  Nanos due = last_admin_ + Nanos(ctrl_->kato_ms) * kMilli + kKeepAliveGrace;
  if (ctx_.reactor.now() >= due) {
    LOG_INFO("controller %u (%s): no keep alive within %u ms, dropping the host", ctrl_->cntlid,
             ctrl_->hostnqn.c_str(), ctrl_->kato_ms);
    close("keep alive timeout");
    return;
  }
  ctx_.reactor.arm(ka_timer_, due);
}

void TcpQueue::on_setup_timer() {
  if (closed_) return;
  if (state_ == State::kClosing) {  // the TermReq / response could not be sent: close anyway
    close_pending_ = false;
    close("last PDU not sent in time");
    return;
  }
  if (state_ == State::kReady) return;
  LOG_INFO("connection %llu (%s): %s within %lld s, closing", static_cast<unsigned long long>(id_),
           endpoint_.peer.c_str(),
           state_ == State::kAuthenticating ? "not authenticated" : "no ICReq/Connect",
           static_cast<long long>(
               (state_ == State::kAuthenticating ? kAuthTimeout : kSetupTimeout) / kSecond));
  close("setup timeout");
}

void TcpQueue::retune_coalescing(const Subsystem* sub, const coalesce::Config& config) {
  if (closed_ || qid_ == 0 || !subsystem_) return;  // admin queues never coalesce
  // Target-wide: the connections of subsystems that have their own setting keep it.
  if (sub ? sub != subsystem_ : subsystem_->coalescing().has_value()) return;
  sendq_.retune(config);
}

void TcpQueue::reset_counters() {
  sendq_.reset_counters();
  reader_.reset_counters();
  commands_ = 0;
}

nlohmann::json TcpQueue::stats_json() const {
  nlohmann::json j = coalesce::to_json(sendq_.scheduler().stats());
  j["id"] = id_;
  j["peer"] = endpoint_.peer;
  j["qid"] = qid_;
  j["commands"] = commands_;
  j["recv_calls"] = reader_.counters().recv_calls;
  j["recv_bytes"] = reader_.counters().bytes;
  j["recv_holds"] = reader_.counters().holds;
  // Payload that a large read brought into staging behind a header and that was then copied
  // to its command's buffer (the rest was read in place).
  j["recv_copied_payload_bytes"] = reader_.counters().copied_payload_bytes;
  j["sent_bytes"] = sendq_.counters().bytes;
  j["snapshot_bytes"] = sendq_.counters().snapshot_bytes;
  // Data digests of zero-copy reads taken from a RAM namespace's block CRCs, not the bytes.
  j["table_digest_bytes"] = sendq_.counters().digest_source_bytes;
  j["requests"] = states_.to_json();
  return j;
}

}  // namespace sens::target
