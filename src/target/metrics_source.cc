// The target's side of the Prometheus metrics: the per-reactor counters the I/O queues add to,
// and the snapshot a scrape gathers on each reactor's thread (see metrics_source.h).
#include "target/metrics_source.h"

#include <chrono>
#include <future>

#include "target/target.h"
#include "target/tcp_queue.h"

namespace sens::target {

const char* io_kind_name(IoKind k) {
  switch (k) {
    case IoKind::kRead:
      return "read";
    case IoKind::kWrite:
      return "write";
    case IoKind::kFlush:
      return "flush";
    case IoKind::kWriteZeroes:
      return "write_zeroes";
    case IoKind::kDsm:
      return "dsm";
    default:
      return "other";
  }
}

IoKind io_kind(uint8_t opcode) {
  switch (opcode) {
    case nvme::io_op::kRead:
      return IoKind::kRead;
    case nvme::io_op::kWrite:
      return IoKind::kWrite;
    case nvme::io_op::kFlush:
      return IoKind::kFlush;
    case nvme::io_op::kWriteZeroes:
      return IoKind::kWriteZeroes;
    case nvme::io_op::kDatasetMgmt:
      return IoKind::kDsm;
    default:
      return IoKind::kOther;
  }
}

void NsIoMetrics::reset() {
  ops = {};
  errors.clear();
}

NsIoMetrics* IoMetrics::entry(const std::string& nqn, uint32_t nsid) {
  auto& e = entries_[{nqn, nsid}];
  if (!e) {
    e = std::make_unique<NsIoMetrics>();
    e->nqn = nqn;
    e->nsid = nsid;
  }
  return e.get();
}

void IoMetrics::reset() {
  for (auto& [key, e] : entries_) e->reset();
  tls_handshake_failures = 0;
  for (auto& n : tls_sessions) n = 0;
  for (auto& n : stalled) n = 0;
}

// ---------------------------------------------------------------------------- per queue

NsIoMetrics* QueueIoMetrics::lookup(IoMetrics& m, const Subsystem& sub, uint32_t nsid) {
  if (!sub.ns(nsid)) nsid = 0;  // no single namespace: one entry, not one per bad NSID
  if (nsid >= by_nsid_.size()) by_nsid_.resize(nsid + 1, nullptr);
  NsIoMetrics*& e = by_nsid_[nsid];
  if (!e) e = m.entry(sub.nqn, nsid);
  return e;
}

void QueueIoMetrics::on_start(IoMetrics& m, const Subsystem& sub, Request& r) {
  r.metrics = lookup(m, sub, r.sqe.nsid);
}

QueueIoMetrics::~QueueIoMetrics() {
  reactor_.cancel_pass_end(*this);
  on_pass_end();  // (a queue closed mid-pass: its last answers still count)
}

void QueueIoMetrics::on_pass_end() {
  if (waiting_.empty()) return;
  const Nanos now = reactor_.now();
  for (const Answered& a : waiting_) a.latency->record(now - a.started);
  waiting_.clear();
}

void QueueIoMetrics::on_complete(IoMetrics& m, const Subsystem* sub, Request& r, uint16_t status) {
  NsIoMetrics* e = r.metrics;
  if (!e) {
    if (!sub) return;
    e = lookup(m, *sub, r.sqe.nsid);
  }
  r.metrics = nullptr;  // answered: no longer in flight
  IoKind kind = io_kind(r.sqe.opcode);
  auto& op = e->ops[size_t(kind)];
  ++op.commands;
  if (waiting_.empty()) reactor_.at_pass_end(*this);
  waiting_.push_back({&op.latency, r.started});
  if (status != nvme::status::kSuccess)
    e->count_error(status);
  else if (kind == IoKind::kRead || kind == IoKind::kWrite)
    op.bytes += r.xfer_len;
}

// ---------------------------------------------------------------------------- TcpQueue

void TcpQueue::count_done(Request& r, uint16_t status) {
  if (qid_ != 0 && r.sqe.opcode != nvme::kFabricsOpcode)
    io_metrics_.on_complete(ctx_.io_metrics, subsystem_, r, status);
}

uint64_t TcpQueue::tally_inflight() const {
  uint64_t n = 0;
  for (auto& s : slots_) {
    const Request& r = s->req;
    if (r.state == ReqState::kFree || r.state == ReqState::kAer) continue;
    if (r.metrics) ++r.metrics->inflight;
    // Commands not yet answered (an answered one waits only for its PDUs to leave).
    if (r.state != ReqState::kSendingResponse && r.state != ReqState::kSendingData) ++n;
  }
  return n;
}

// ---------------------------------------------------------------------------- reactor, target

ReactorSnapshot ReactorContext::collect_metrics() {
  ReactorSnapshot s;
  s.index = reactor.index();
  for (auto& [key, e] : io_metrics.entries()) e->inflight = 0;
  for (auto& [id, c] : conns_) {
    if (c->closed()) continue;
    s.inflight += c->tally_inflight();
    ++s.connections[c->subsystem() ? c->subsystem()->nqn : std::string()];
  }
  for (auto& [key, e] : io_metrics.entries()) s.namespaces.push_back(*e);
  s.pool = pool.stats();
  s.inline_pool = inline_pool.stats();
  s.pool_limit = pool.limit();
  s.inline_pool_limit = inline_pool.limit();
  s.reactor = reactor.stats();
  s.coalesce = total_stats();
  s.tls_handshake_failures = io_metrics.tls_handshake_failures;
  for (int k = 0; k < 4; ++k) s.tls_sessions[k] = io_metrics.tls_sessions[k];
  for (int k = 0; k < 4; ++k) s.stalled[k] = io_metrics.stalled[k];
  s.connections_closed = closed_connections_;
  qos::Counters q = qos.totals();
  s.qos_throttled = q.throttled;
  s.qos_delay_ns = q.delay_ns;
  return s;
}

void ReactorContext::reset_metrics() {
  io_metrics.reset();
}

MetricsSnapshot Target::metrics_snapshot() {
  MetricsSnapshot m;
  std::vector<std::future<ReactorSnapshot>> parts;
  for (auto& ctx : ctxs_) {
    auto p = std::make_shared<std::promise<ReactorSnapshot>>();
    parts.push_back(p->get_future());
    ReactorContext* c = ctx.get();
    auto collect = [c, p] { p->set_value(c->collect_metrics()); };
    if (running_)
      c->reactor.post(collect);
    else
      collect();
  }
  for (auto& f : parts)
    if (f.wait_for(std::chrono::seconds(5)) == std::future_status::ready)
      m.reactors.push_back(f.get());
  // (nsids only: this thread is no reactor, so a namespace removed meanwhile may be gone)
  for (Subsystem* sub : registry_.subsystems()) {
    m.subsystems.push_back(sub->nqn);
    m.controllers[sub->nqn] = 0;
    for (uint32_t nsid : sub->active_nsids()) m.namespaces.emplace_back(sub->nqn, nsid);
  }
  for (auto& ctrl : registry_.controllers())
    if (!ctrl->dead && ctrl->subsystem) ++m.controllers[ctrl->subsystem->nqn];
  m.auth_succeeded = auth_succeeded_.load();
  m.auth_failed = auth_failed_.load();
  const Negotiations::Stats ns = negotiations_->stats();
  m.negotiations_limit = negotiations_->limit();
  m.negotiations_active = ns.active;
  m.negotiations_waiting = ns.waiting;
  m.negotiations_admitted = ns.admitted;
  m.negotiations_queued = ns.queued;
  m.negotiations_refused = ns.refused;
  m.negotiations_timed_out = ns.timed_out;
  m.open_connections = open_connections_.load();
  m.coalesce_policy = coalesce::policy_name(config_.coalesce.policy);
  return m;
}

void Target::reset_metrics() {
  std::vector<std::future<void>> done;
  for (auto& ctx : ctxs_) {
    auto p = std::make_shared<std::promise<void>>();
    done.push_back(p->get_future());
    ReactorContext* c = ctx.get();
    auto reset = [c, p] {
      c->reset_metrics();
      p->set_value();
    };
    if (running_)
      c->reactor.post(reset);
    else
      reset();
  }
  for (auto& f : done) f.wait_for(std::chrono::seconds(5));
}

}  // namespace sens::target
