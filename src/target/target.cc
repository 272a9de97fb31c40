#include "target/target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>

#include "coalesce/stats_json.h"
#include "common/log.h"
#include "storage/memory_pages.h"
#include "target/listener.h"
#include "target/tcp_queue.h"

namespace sens::target {

// ---------------------------------------------------------------------------- reactor context

// Reaps a device queue's completions when its eventfd fires.
class ReactorContext::QueueWatcher final : public EventHandler {
 public:
  QueueWatcher(ReactorContext& ctx, storage::Queue* q) : ctx_(ctx), q_(q) {}
  storage::Queue* queue() const { return q_; }
  void on_event(uint32_t) override {
    q_->reap();
    ctx_.schedule_kick(q_);  // completions may have queued more device I/O
  }

 private:
  ReactorContext& ctx_;
  storage::Queue* q_;
};

namespace {

// `throttled`: the general pool, whose R2T data buffers count against the receive budget. The
// in-capsule pool never is: a capsule waiting there stops its connection's reader, and the
// data that would free the budget may be behind it.
buffers::PoolOptions pool_options(const Target& t, uint64_t limit, uint32_t max_buffer,
                                  bool throttled) {
  const TargetConfig& c = t.config();
  buffers::PoolOptions o;
  o.limit_bytes = limit;
  o.max_buffer = max_buffer;
  o.layout = c.buffers;
  o.share_bytes = limit * c.pool_share / 100;  // issue 29: no connection holds more
  if (c.buffers != buffers::Layout::kTyche) return o;
  o.geometry = t.cache_geometry();
  if (throttled)
    o.receive_budget = c.receive_budget
                           ? c.receive_budget
                           : buffers::default_receive_budget(o.geometry, 4 * uint64_t(c.max_io));
  return o;
}

}  // namespace

ReactorContext::ReactorContext(Target& t, int index)
    : reactor(index),
      target(t),
      registry(t.registry()),
      config(t.config()),
      pool(pool_options(t, t.config().buffer_pool,
                        std::max({t.config().max_io, kAdminDataMax, uint32_t(64 * 1024)}), true)),
      inline_pool(pool_options(t, std::max<uint64_t>(t.config().buffer_pool / 8, 1 << 20),
                               std::max(t.config().inline_data, kAdminDataMax), false)),
      qos(reactor, &TcpQueue::on_qos_release),
      next_id_(uint64_t(index) << 48),
      coalesce_(t.config().coalesce) {
  if (t.config().buffers == buffers::Layout::kTyche) {
    buffers::PoolOptions o =
        pool_options(t, uint64_t(t.config().max_connections) * 64 * 1024, 64 * 1024, false);
    o.spread_heads = true;  // every read lands at the start of the staging buffer
    staging_pool = std::make_unique<BufferPool>(o);
  }
}

ReactorContext::~ReactorContext() {
  conns_.clear();
  for (auto& [ns, q] : queues_)
    if (q->event_fd() >= 0) reactor.remove(q->event_fd());
}

storage::Queue* ReactorContext::queue_for(const Namespace* ns) {
  auto it = queues_.find(ns);
  if (it != queues_.end()) return it->second.get();
  // First I/O to this namespace from this thread: its own queue (io_uring for files).
  auto q = ns->device->make_queue(config.queue_size * 4);
  storage::Queue* raw = q.get();
  queues_.emplace(ns, std::move(q));
  if (raw->event_fd() >= 0) {
    watchers_.push_back(std::make_unique<QueueWatcher>(*this, raw));
    reactor.add(raw->event_fd(), EPOLLIN, watchers_.back().get());
  }
  return raw;
}

void ReactorContext::schedule_kick(storage::Queue* q) {
  if (q->event_fd() < 0) return;  // memory devices complete inline
  if (std::find(kick_list_.begin(), kick_list_.end(), q) != kick_list_.end()) return;
  if (kick_list_.empty())
    reactor.defer([this] {
      for (auto* k : kick_list_) k->kick();
      kick_list_.clear();
    });
  kick_list_.push_back(q);
}

void ReactorContext::adopt(int fd, TcpQueue::Endpoint endpoint) {
  uint64_t id = ++next_id_;
  conns_.emplace(id, std::make_unique<TcpQueue>(*this, fd, id, std::move(endpoint)));
}

void ReactorContext::schedule_resume(TcpQueue* q) {
  if (resume_list_.empty())
    reactor.defer([this] {
      // Resumed queues may free buffers that resume others: run until the list stays empty.
      while (!resume_list_.empty()) {
        std::vector<TcpQueue*> batch;
        batch.swap(resume_list_);
        for (TcpQueue* t : batch) t->run_resumed();
      }
    });
  resume_list_.push_back(q);
}

void ReactorContext::close_connection(uint64_t id, const char* why) {
  auto it = conns_.find(id);
  if (it != conns_.end()) it->second->close(why);
}

void ReactorContext::forget_namespace(const Namespace* ns) {
  auto it = queues_.find(ns);
  if (it == queues_.end()) return;
  storage::Queue* q = it->second.get();
  kick_list_.erase(std::remove(kick_list_.begin(), kick_list_.end(), q), kick_list_.end());
  for (auto& w : watchers_)
    if (w->queue() == q) reactor.remove(q->event_fd(), w.get());
  watchers_.erase(
      std::remove_if(watchers_.begin(), watchers_.end(), [q](auto& w) { return w->queue() == q; }),
      watchers_.end());
  queues_.erase(it);
}

void ReactorContext::retune_coalescing(const Subsystem* sub, const coalesce::Config& config) {
  if (!sub) coalesce_ = config;
  for (auto& [id, c] : conns_) c->retune_coalescing(sub, config);
}

void ReactorContext::reset_stats() {
  for (auto& [id, c] : conns_) c->reset_counters();
  closed_coalesce_ = coalesce::Stats{};
  closed_holds_ = 0;
  closed_connections_ = 0;
  reactor.reset_stats();
  qos.reset_counters();
}

void ReactorContext::deliver_events(uint64_t id) {
  auto it = conns_.find(id);
  if (it != conns_.end()) it->second->deliver_events();
}

void ReactorContext::close_all(const char* why) {
  for (auto& [id, c] : conns_) c->close(why);
}

uint32_t ReactorContext::inflight_io() const {
  uint32_t n = 0;
  for (auto& [id, c] : conns_) n += c->inflight_io();
  return n;
}

void ReactorContext::schedule_reap() {
  if (reap_scheduled_) return;
  reap_scheduled_ = true;
  reactor.defer([this] {
    reap_scheduled_ = false;
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second->reapable()) {
        closed_coalesce_.merge(it->second->coalesce_stats());
        closed_holds_ += it->second->recv_counters().holds;
        ++closed_connections_;
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  });
}

coalesce::Stats ReactorContext::total_stats() const {
  coalesce::Stats total = closed_coalesce_;
  for (auto& [id, c] : conns_) total.merge(c->coalesce_stats());
  return total;
}

nlohmann::json ReactorContext::stats_json() {
  nlohmann::json per = nlohmann::json::array();
  nlohmann::json states = nlohmann::json::object();
  uint64_t recv_calls = 0, holds = closed_holds_;
  for (auto& [id, c] : conns_) {
    recv_calls += c->recv_counters().recv_calls;
    holds += c->recv_counters().holds;
    c->request_states().merge_into(states);
    per.push_back(c->stats_json());
  }
  nlohmann::json j;
  j["index"] = reactor.index();
  j["connections"] = per;
  j["connections_closed"] = closed_connections_;
  j["recv_calls_open"] = recv_calls;
  j["open_connections"] = conns_.size();
  j["requests"] = states;  // where the requests of open connections are, by state
  const auto& ps = pool.stats();
  j["buffer_pool"] = {{"allocated_bytes", ps.allocated_bytes},
                      {"in_use_bytes", ps.in_use_bytes},
                      {"gets", ps.gets},
                      {"waits", ps.waits},
                      {"waiting", ps.waiting},
                      {"inline_allocated_bytes", inline_pool.stats().allocated_bytes},
                      {"inline_waits", inline_pool.stats().waits},
                      {"reader_holds", holds},
                      {"layout", buffers::layout_name(pool.layout())},
                      // issue 29: fair shares (buffer_pool.h)
                      {"share_bytes", pool.share_bytes()},
                      {"share_capped", ps.share_capped},
                      {"reserve_gets", ps.reserve_gets},
                      {"held_back_bytes", ps.held_back},
                      {"inline_share_capped", inline_pool.stats().share_capped}};
  // issue 29: connections ended by a stall deadline (stall_watch.h)
  j["stalled_connections"] = {{"send", io_metrics.stalled[int(StallWatch::Kind::kSend)]},
                              {"h2c", io_metrics.stalled[int(StallWatch::Kind::kH2C)]},
                              {"pdu", io_metrics.stalled[int(StallWatch::Kind::kPdu)]}};
  if (pool.layout() == buffers::Layout::kTyche) {
    auto& b = j["buffer_pool"];
    const auto& colours = pool.colour_in_use();
    uint64_t lo = colours.empty() ? 0 : UINT64_MAX, hi = 0, sum = 0;
    for (uint64_t c : colours) {
      lo = std::min(lo, c);
      hi = std::max(hi, c);
      sum += c;
    }
    b["pages"] = pool.page_kind();
    b["huge_page_bytes"] = pool.huge_bytes() + inline_pool.huge_bytes();
    b["colours"] = colours.size();
    b["colour_in_use_bytes"] = {
        {"min", lo}, {"max", hi}, {"mean", colours.empty() ? 0.0 : double(sum) / colours.size()}};
    b["receive_budget"] = pool.receive_budget();
    b["receive_in_use_bytes"] = ps.receive_in_use_bytes;
    b["throttled"] = ps.throttled;
    b["stride_64k"] = pool.stride_of_class(64 * 1024);
  }
  uint64_t waited = 0, retried = 0, flushes = 0;
  for (auto& [ns, q] : queues_) {
    waited += q->waited();
    retried += q->retried();
    flushes += q->cache_flushes();
  }
  // Device queues: requests that waited for room, kernel refusals retried, cache flushes.
  j["device"] = {{"waited", waited}, {"retried", retried}, {"cache_flushes", flushes}};
  j["reactor"] = reactor.stats_json();
  j["wakeups"] = reactor.stats().wakeups;  // (also in "reactor"; kept for older readers)
  j["timers_fired"] = reactor.stats().timers_fired;
  j["qos"] = qos.stats_json();  // commands QoS held (throttled), and their total wait
  return j;
}

// ---------------------------------------------------------------------------- target

namespace {
// The cores the process may use, read before any reactor is pinned: the DH workers run on any
// of them (the reactors' own pins do not confine them), within what the operator gave the
// target (taskset, a systemd CPUAffinity=).
std::vector<int> startup_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}
}  // namespace

Target::Target(TargetConfig config) : config_(std::move(config)) {
  // A worker per two cores for the DH steps (the reactors keep the rest), at most four.
  const uint32_t cores = std::max(1u, std::thread::hardware_concurrency());
  negotiations_ = std::make_unique<Negotiations>(
      dhchap_negotiation_limit(config_), std::chrono::milliseconds(config_.dhchap_timeout_ms),
      std::clamp(cores / 2, 1u, 4u), WorkerPlacement{config_.dhchap_nice, startup_cpus()},
      config_.dhchap_full_check ? auth::PeerCheck::kFull : auth::PeerCheck::kRange);
  if (config_.buffers == buffers::Layout::kTyche) {
    std::string why;
    geometry_ = buffers::CacheGeometry::detect(&why);
    if (!why.empty())
      LOG_WARN("buffers: %s; assuming %s", why.c_str(), geometry_.describe().c_str());
  }
}

Target::~Target() {
  stop();
}

std::string Target::start() {
  std::string error = registry_.build(config_);
  live_ = config_;
  if (!error.empty()) return error;
  for (int i = 0; i < config_.cores; ++i)
    ctxs_.push_back(std::make_unique<ReactorContext>(*this, i));
  for (auto& sc : config_.subsystems)
    if (!sc.qos.empty()) publish_qos(registry_.find(sc.nqn), sc.qos);

  if (!config_.tls_listen.empty()) {
    if (!auth::load_tls_psk_file(config_.tls_psk_file, &tls_keys_, &error)) return error;
    tls_ = transport::TlsContext::server(
        [this](const std::string& id, transport::TlsPsk* psk, std::string* why) {
          return find_tls_psk(id, psk, why);
        },
        &error);
    if (!tls_) return error;
  }
  if (auto error = open_listeners(); !error.empty()) return error;

  running_ = true;
  for (int i = 0; i < config_.cores; ++i) {
    threads_.emplace_back([this, i] {
      if (config_.first_core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(config_.first_core + i, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      }
      ctxs_[i]->reactor.set_poll(config_.poll, Nanos(config_.poll_max_us) * kMicro);
      ctxs_[i]->reactor.run();
    });
  }
  return "";
}

// TLS server PSK lookup: the identity names the host and subsystem; the host must be allowed
// there, and the PSK digest in the identity picks the configured key it was made from.
bool Target::find_tls_psk(const std::string& identity, transport::TlsPsk* psk, std::string* why) {
  auto id = auth::parse_psk_identity(identity);
  if (!id) {
    *why = "PSK identity is not 'NVMe1R0h <host NQN> <subsystem NQN> <digest>'";
    return false;
  }
  Subsystem* sub = registry_.find(id->subnqn);
  if (!sub) {
    *why = "PSK identity names an unknown subsystem";
    return false;
  }
  if (!sub->host_allowed(id->hostnqn)) {
    *why = "host '" + id->hostnqn + "' is not allowed on '" + id->subnqn + "'";
    return false;
  }
  for (auto& key : tls_keys_) {
    if (key.cipher_hash() != id->hash) continue;
    auth::Bytes retained = auth::retained_psk(key, id->hostnqn);
    if (auth::psk_digest(id->hash, retained, id->hostnqn, id->subnqn) != id->digest) {
      auth::wipe(retained);
      continue;
    }
    psk->identity = identity;
    psk->hash = id->hash;
    psk->key = auth::tls_psk(id->hash, retained, id->digest);
    auth::wipe(retained);
    return true;
  }
  *why = "no PSK of the PSK file matches the identity of host '" + id->hostnqn + "' (wrong key?)";
  return false;
}

int Target::set_ana_state(size_t port, uint32_t group, uint8_t state) {
  const auto& ports = registry_.ana_ports();
  if (port >= ports.size()) return 0;
  AnaPort* p = ports[port].get();
  int changed = 0;
  for (uint32_t g = 1; g <= ana::kMaxGroups; ++g)
    if ((group == 0 || g == group) && p->set(g, state)) ++changed;
  if (changed) notify_ana_change(p);
  return changed;
}

std::vector<std::string> Target::reload_ana(const TargetConfig& config) {
  std::vector<std::string> out;
  const auto& ports = registry_.ana_ports();
  std::vector<const ListenAddress*> wanted;
  for (auto* list : {&config.listen, &config.tls_listen})
    for (auto& l : *list) wanted.push_back(&l);
  for (size_t i = 0; i < ports.size(); ++i) {
    AnaPort* p = ports[i].get();
    const ListenAddress* l = nullptr;
    for (auto* w : wanted)
      if (w->host == p->host && w->port == p->port) l = w;
    std::string name = p->host + ":" + std::to_string(p->port);
    if (!l) {
      out.push_back(name + ": not in the new configuration; ANA states kept");
      continue;
    }
    int changed = 0;
    for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) changed += p->set(g, l->ana_for(g));
    if (changed) notify_ana_change(p);
    out.push_back(name + ": ANA " + listen_text(*l) + (changed ? " (changed)" : " (unchanged)"));
  }
  return out;
}

void Target::deliver_events(Controller& c) {
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& ref : c.queues) {
    if (ref.qid != 0 || !ref.ctx) continue;
    ReactorContext* ctx = ref.ctx;
    uint64_t id = ref.conn_id;
    ctx->reactor.post([ctx, id] { ctx->deliver_events(id); });
  }
}

void Target::notify_ana_change(AnaPort* port) {
  for (auto& c : registry_.controllers()) {
    if (c->ana != port) continue;
    c->ana_event_pending = true;
    deliver_events(*c);
  }
}

void Target::close_controller_queues(Controller* ctrl) {
  for (auto& ref : ctrl->retire()) {
    if (!ref.ctx) continue;
    ReactorContext* ctx = ref.ctx;
    uint64_t id = ref.conn_id;
    ctx->reactor.post([ctx, id] { ctx->close_connection(id, "controller gone"); });
  }
}

nlohmann::json Target::stats_json() {
  struct Part {
    coalesce::Stats stats;
    nlohmann::json info;
  };
  std::vector<std::future<Part>> parts;
  for (auto& ctx : ctxs_) {
    auto p = std::make_shared<std::promise<Part>>();
    parts.push_back(p->get_future());
    ReactorContext* c = ctx.get();
    auto collect = [c, p] { p->set_value({c->total_stats(), c->stats_json()}); };
    if (running_)
      c->reactor.post(collect);
    else
      collect();
  }
  coalesce::Stats total;
  nlohmann::json per = nlohmann::json::array(), reactors = nlohmann::json::array();
  for (auto& f : parts) {
    if (f.wait_for(std::chrono::seconds(5)) != std::future_status::ready) continue;
    Part part = f.get();
    total.merge(part.stats);
    for (auto& c : part.info["connections"]) per.push_back(c);
    part.info.erase("connections");
    reactors.push_back(part.info);
  }
  nlohmann::json j = coalesce::to_json(total);
  j["policy"] = coalesce::policy_name(config_.coalesce.policy);
  nlohmann::json namespaces = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(registry_.management_mutex());  // (see active_namespaces)
  for (Subsystem* s : registry_.subsystems())
    for (Namespace* ns : s->active_namespaces()) {
      nlohmann::json entry = {
          {"nqn", s->nqn}, {"nsid", ns->nsid}, {"spec", ns->spec}, {"syncs", ns->device->syncs()}};
      storage::MemoryPages p;  // a RAM namespace: how its memory is paged now
      if (storage::ram_memory_pages(*ns->device, &p))
        entry["pages"] = {{"kind", p.kind},
                          {"madvise_hugepage", p.advised},
                          {"thp_enabled", p.thp_enabled},
                          {"smaps_found", p.known},
                          {"thp_eligible", p.thp_eligible},
                          {"resident_bytes", p.resident_bytes},
                          {"huge_bytes", p.huge_bytes},
                          {"address", p.address},
                          {"block_crc_table_bytes", p.block_crc_bytes},
                          {"block_crcs_kept", p.block_crcs_kept}};
      namespaces.push_back(entry);
    }
  j["namespaces"] = namespaces;  // syncs: whole-device flushes (shutdown, CC.SHN)
  const Negotiations::Stats ns = negotiations_->stats();
  j["auth"] = {{"succeeded", auth_succeeded_.load()},
               {"failed", auth_failed_.load()},
               {"negotiations",
                {{"limit", negotiations_->limit()},
                 {"active", ns.active},
                 {"waiting", ns.waiting},
                 {"admitted", ns.admitted},
                 {"queued", ns.queued},
                 {"refused", ns.refused},
                 {"timed_out", ns.timed_out}}}};
  nlohmann::json qos = {{"limited_commands", 0}, {"throttled", 0}, {"delay_us", 0}};
  for (auto& r : reactors)
    if (r.contains("qos"))
      for (auto& [k, v] : r["qos"].items()) qos[k] = qos[k].get<uint64_t>() + v.get<uint64_t>();
  j["qos"] = qos;  // summed over the reactors
  j["reactors"] = reactors;
  j["connections"] = per;
  return j;
}

}  // namespace sens::target
