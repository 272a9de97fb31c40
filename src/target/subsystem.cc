#include "target/subsystem.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "auth/dhchap.h"
#include "common/log.h"
#include "target/ns_options.h"
#include "wire/nvme.h"

namespace sens::target {

HostAuth::~HostAuth() {
  auth::wipe(host_key);
  auth::wipe(ctrl_key);
}

bool Subsystem::host_allowed(const std::string& hostnqn) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return allow_any_ ||
         std::find(allowed_hosts_.begin(), allowed_hosts_.end(), hostnqn) != allowed_hosts_.end();
}

std::shared_ptr<const HostAuth> Subsystem::auth_for(const std::string& hostnqn) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  auto it = host_auth_.find(hostnqn);
  return it == host_auth_.end() ? nullptr : it->second;
}

std::vector<std::string> Subsystem::allowed_hosts() const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return allowed_hosts_;
}

std::vector<std::string> Subsystem::keyed_hosts() const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  std::vector<std::string> out;
  for (auto& [host, auth] : host_auth_) out.push_back(host);
  return out;
}

void Subsystem::set_hosts(std::vector<std::string> allowed,
                          std::map<std::string, std::shared_ptr<const HostAuth>> auth) {
  // A subsystem with keys admits only the hosts it lists, so no unkeyed host slips in beside
  // them: naming a key for a host puts it on the allow-list.
  for (auto& [host, keys] : auth)
    if (std::find(allowed.begin(), allowed.end(), host) == allowed.end()) allowed.push_back(host);
  std::lock_guard<std::mutex> lock(hosts_mu_);
  if (!allowed.empty()) allow_any_ = false;
  allowed_hosts_ = std::move(allowed);
  host_auth_ = std::move(auth);
}

bool Subsystem::tls_required(const std::string& hostnqn) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return require_tls_.applies(hostnqn);
}

bool Subsystem::auth_required(const std::string& hostnqn) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return require_auth_.applies(hostnqn);
}

void Subsystem::set_requirements(const Requirement& tls, const Requirement& auth) {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  require_tls_ = tls;
  require_auth_ = auth;
}

std::pair<Requirement, Requirement> Subsystem::requirements() const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return {require_tls_, require_auth_};
}

bool Subsystem::allow_any_host() const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return allow_any_;
}

void Subsystem::set_allow_any_host(bool allow) {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  allow_any_ = allow;
}

std::optional<coalesce::Config> Subsystem::coalescing() const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  return coalesce_;
}

void Subsystem::set_coalescing(const std::optional<coalesce::Config>& config) {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  coalesce_ = config;
}

std::vector<Namespace*> Subsystem::active_namespaces() const {
  std::vector<Namespace*> out;
  for (auto& slot : ns_table_)
    if (Namespace* ns = slot.load(std::memory_order_acquire)) out.push_back(ns);
  return out;
}

std::vector<uint32_t> Subsystem::active_nsids() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < kMaxNsid; ++i)
    if (ns_table_[i].load(std::memory_order_acquire)) out.push_back(i + 1);
  return out;
}

void Subsystem::publish(std::unique_ptr<Namespace> ns) {
  uint32_t i = ns->nsid - 1;
  if (ns->device->volatile_cache()) volatile_cache = true;
  ns_table_[i].store(ns.get(), std::memory_order_release);
  owned_[i] = std::move(ns);
  ns_count_.fetch_add(1);
}

std::unique_ptr<Namespace> Subsystem::unpublish(uint32_t nsid) {
  if (nsid < 1 || nsid > kMaxNsid || !owned_[nsid - 1]) return nullptr;
  ns_table_[nsid - 1].store(nullptr, std::memory_order_release);
  ns_count_.fetch_sub(1);
  return std::move(owned_[nsid - 1]);
}

uint64_t Namespace::next_generation() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

uint64_t Namespace::held() const {
  uint64_t taken = 0, dropped = 0;
  for (uint32_t i = 0; i < hold_slots; ++i) {
    // dropped first: a drop is always after its take, so this never reads more drops than takes
    dropped += holds[i].dropped.load(std::memory_order_acquire);
    taken += holds[i].taken.load(std::memory_order_acquire);
  }
  return taken - dropped;
}

void Controller::note_namespace_changed(uint32_t nsid) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(changed_ns_.begin(), changed_ns_.end(), nsid) == changed_ns_.end()) {
      if (changed_ns_.size() < 1024)
        changed_ns_.push_back(nsid);
      else
        changed_overflow_ = true;
    }
  }
  ns_event_pending = true;
}

std::vector<uint32_t> Controller::take_changed_namespaces() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<uint32_t> out;
  if (changed_overflow_)
    out.push_back(0xFFFFFFFFu);  // more than the page holds: the host rescans everything
  else
    out.swap(changed_ns_);
  std::sort(out.begin(), out.end());
  changed_ns_.clear();
  changed_overflow_ = false;
  return out;
}

Controller::AddQueue Controller::add_queue(const QueueRef& q) {
  std::lock_guard<std::mutex> lock(mu);
  if (dead) return AddQueue::kGone;
  for (auto& r : queues)
    if (r.qid == q.qid) return AddQueue::kDuplicate;
  queues.push_back(q);
  return AddQueue::kAdded;
}

std::vector<QueueRef> Controller::retire() {
  std::lock_guard<std::mutex> lock(mu);
  dead = true;
  return queues;
}

void Controller::remove_queue(QueueCounters* q) {
  std::lock_guard<std::mutex> lock(mu);
  queues.erase(std::remove_if(queues.begin(), queues.end(),
                              [&](const QueueRef& r) { return r.counters == q; }),
               queues.end());
}

void Controller::sum(uint64_t* r, uint64_t* w, uint64_t* rb, uint64_t* wb) {
  std::lock_guard<std::mutex> lock(mu);
  *r = *w = *rb = *wb = 0;
  for (auto& ref : queues) {
    auto* q = ref.counters;
    *r += q->reads.load(std::memory_order_relaxed);
    *w += q->writes.load(std::memory_order_relaxed);
    *rb += q->read_bytes.load(std::memory_order_relaxed);
    *wb += q->write_bytes.load(std::memory_order_relaxed);
  }
}

bool AnaPort::set(uint32_t group, uint8_t state) {
  if (group < 1 || group > ana::kMaxGroups) return false;
  if (states_[group].exchange(state) == state) return false;
  group_chgcnt_[group].fetch_add(1);
  chgcnt_.fetch_add(1);
  return true;
}

// The seed of a namespace's NGUID and UUID when neither uuid= nor the backend names it (see
// ns_options.h): what every gateway serving the same file computes alike.
static std::string identity_seed(const std::string& nqn, uint32_t nsid, const NamespaceOptions& o) {
  if (o.backend.rfind("file:", 0) == 0) {
    std::string path = o.backend.substr(5);
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      path = real;
      std::free(real);
    }
    return "file:" + path + "@" + nqn;
  }
  return "local:" + nqn + "/" + std::to_string(nsid);
}

std::shared_ptr<const HostAuth> Registry::make_host_auth(const std::string& host,
                                                         const std::string& subnqn,
                                                         const std::string& host_secret,
                                                         const std::string& ctrl_secret,
                                                         std::string* error) {
  auto out = std::make_shared<HostAuth>();
  std::string why;
  auto parsed = auth::parse_secret(host_secret, &why);
  if (!parsed) {
    *error = "host key for '" + host + "': " + why;
    return nullptr;
  }
  out->host_key = auth::transform_key(*parsed, host);
  auth::wipe(parsed->key);
  if (!ctrl_secret.empty()) {
    auto ctrl = auth::parse_secret(ctrl_secret, &why);
    if (!ctrl) {
      *error = "controller key for '" + host + "': " + why;
      return nullptr;
    }
    out->ctrl_key = auth::transform_key(*ctrl, subnqn);
    auth::wipe(ctrl->key);
  }
  return out;
}

std::unique_ptr<Namespace> Registry::make_namespace(const std::string& nqn, uint32_t nsid,
                                                    const std::string& spec, std::string* error) {
  std::string why;
  NamespaceOptions opts;
  auto fail = [&](const std::string& e) {
    *error = "namespace " + std::to_string(nsid) + " of " + nqn + ": " + e;
    return nullptr;
  };
  if (!parse_namespace_options(spec, &opts, &why)) return fail(why);
  auto dev = storage::Device::open(opts.backend, &why, config_.read_only);
  if (!dev) return fail(why);
  auto ns = std::make_unique<Namespace>();
  ns->nsid = nsid;
  ns->spec = spec;
  ns->block_shift = uint32_t(std::countr_zero(dev->block_size()));
  ns->blocks = dev->size() >> ns->block_shift;
  ns->device = std::move(dev);
  ns->anagrpid = opts.anagrpid;
  ns->hold_slots = uint32_t(std::max(config_.cores, 1));
  ns->holds = std::make_unique<Namespace::Holds[]>(ns->hold_slots);
  // The same identity on every gateway: from uuid=, or the backing store (ns_options.h).
  if (opts.has_uuid) {
    char text[37];
    const uint8_t* u = opts.uuid;
    std::snprintf(text, sizeof text,
                  "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                  u[14], u[15]);
    derive_namespace_ids(std::string("uuid:") + text, ns->nguid, ns->uuid);
    std::memcpy(ns->uuid, opts.uuid, 16);
  } else if (!ns->device->stable_identity(ns->nguid, ns->uuid)) {
    // Shared storage that names itself (an RBD image) gave both ids; else the seed.
    derive_namespace_ids(identity_seed(nqn, nsid, opts), ns->nguid, ns->uuid);
  }
  if (opts.has_nguid) std::memcpy(ns->nguid, opts.nguid, 16);
  // Shared with the other gateways where the backend can (RBD), else kept here.
  ns->reservations.share(ns->device->shared_record(),
                         "namespace " + std::to_string(nsid) + " of " + nqn);
  return ns;
}

std::string Registry::add_subsystem(const SubsystemConfig& sc, Subsystem** out) {
  auto sub = std::make_unique<Subsystem>();
  sub->nqn = sc.nqn;
  sub->dhchap_hashes = sc.dhchap_hashes.empty() ? config_.dhchap_hashes : sc.dhchap_hashes;
  sub->dhchap_dhgroups = sc.dhchap_dhgroups.empty() ? config_.dhchap_dhgroups : sc.dhchap_dhgroups;
  std::map<std::string, std::shared_ptr<const HostAuth>> keys;
  for (auto& [host, secret] : sc.host_keys) {
    std::string ctrl_secret, error;
    for (auto& [h, c] : sc.ctrl_keys)
      if (h == host) ctrl_secret = c;
    auto a = make_host_auth(host, sc.nqn, secret, ctrl_secret, &error);
    if (!a) return error;
    keys[host] = std::move(a);
  }
  for (auto& [host, secret] : sc.ctrl_keys)
    if (!keys.count(host)) return "controller key for '" + host + "' without a host key";
  sub->set_hosts(sc.allowed_hosts, std::move(keys));
  if (!sc.allow_any_host) sub->set_allow_any_host(false);
  uint64_t h = std::hash<std::string>{}(sc.nqn);
  char serial[21];
  std::snprintf(serial, sizeof(serial), "SENS%016llx", static_cast<unsigned long long>(h));
  sub->serial = sc.serial.empty() ? serial : sc.serial;
  sub->set_coalescing(sc.coalesce);
  sub->set_requirements(sc.require_tls, sc.require_auth);
  uint32_t nsid = 0;
  for (auto& spec : sc.namespaces) {
    std::string error;
    nsid = spec_nsid(spec, nsid);
    if (nsid > kMaxNsid) return sc.nqn + ": more than " + std::to_string(kMaxNsid) + " nsids";
    if (sub->ns(nsid)) return sc.nqn + ": nsid " + std::to_string(nsid) + " given twice";
    auto ns = make_namespace(sc.nqn, nsid, spec, &error);
    if (!ns) return error;  // (the namespaces made so far close with `sub`)
    sub->publish(std::move(ns));
  }
  if (out) *out = sub.get();
  std::lock_guard<std::mutex> lock(subsystems_mu_);
  subsystems_.push_back(std::move(sub));
  return "";
}

void Registry::remove_subsystem(Subsystem* sub) {
  std::lock_guard<std::mutex> lock(subsystems_mu_);
  for (auto it = subsystems_.begin(); it != subsystems_.end(); ++it)
    if (it->get() == sub) {
      deleted_.push_back(std::move(*it));
      subsystems_.erase(it);
      return;
    }
}

AnaPort* Registry::add_ana_port(const ListenAddress& l) {
  for (auto& p : ana_ports_)  // a listener removed and added again: the same view
    if (p->host == l.host && p->port == l.port && l.port != 0) {
      for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) p->set(g, l.ana_for(g));
      return p.get();
    }
  auto port = std::make_unique<AnaPort>();
  port->host = l.host;
  port->port = l.port;
  for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) port->set(g, l.ana_for(g));
  ana_ports_.push_back(std::move(port));
  return ana_ports_.back().get();
}

std::vector<Subsystem*> Registry::subsystems() const {
  std::lock_guard<std::mutex> lock(subsystems_mu_);
  std::vector<Subsystem*> out;
  for (auto& s : subsystems_) out.push_back(s.get());
  return out;
}

std::string Registry::build(const TargetConfig& config) {
  config_ = config;
  discovery_.nqn = std::string(nvme::kDiscoveryNqn);
  discovery_.discovery = true;
  discovery_.serial = "sens-discovery";
  for (auto& sc : config.subsystems)
    if (auto error = add_subsystem(sc); !error.empty()) return error;
  for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) default_ana_.set(g, ana::kOptimized);
  for (auto* list : {&config.listen, &config.tls_listen})
    for (auto& l : *list) {
      auto port = std::make_unique<AnaPort>();
      port->host = l.host;
      port->port = l.port;
      for (uint32_t g = 1; g <= ana::kMaxGroups; ++g) port->set(g, l.ana_for(g));
      ana_ports_.push_back(std::move(port));
    }
  return "";
}

std::vector<std::shared_ptr<Controller>> Registry::controllers() {
  std::lock_guard<std::mutex> lock(mu_);
  return controllers_;
}

Subsystem* Registry::find(const std::string& nqn) {
  if (nqn == discovery_.nqn) return config_.discovery_port ? &discovery_ : nullptr;
  std::lock_guard<std::mutex> lock(subsystems_mu_);
  for (auto& s : subsystems_)
    if (s->nqn == nqn) return s.get();
  return nullptr;
}

std::shared_ptr<Controller> Registry::create_controller(
    Subsystem* subsystem, const std::string& hostnqn, const uint8_t hostid[16], uint32_t kato_ms,
    const std::function<void(Controller&)>& fill) {
  std::lock_guard<std::mutex> lock(mu_);
  // cntlid drawn at random from the configured range: a host that could guess another's
  // cntlid would only need its NQN and host ID to attach I/O queues to it. From the random
  // start, the first id not in use is taken, so a nearly full range still finds the last one.
  uint32_t lo = config_.cntlid_min, span = uint32_t(config_.cntlid_max) - lo + 1;
  if (controllers_.size() >= span) return nullptr;
  uint16_t r = 0;
  if (!auth::random_bytes(reinterpret_cast<uint8_t*>(&r), sizeof r)) return nullptr;
  std::vector<bool> used(span);
  for (auto& c : controllers_)
    if (c->cntlid >= lo && c->cntlid - lo < span) used[c->cntlid - lo] = true;
  for (uint32_t step = 0; step < span; ++step) {
    uint16_t id = uint16_t(lo + (r + step) % span);
    if (used[id - lo]) continue;
    auto c = std::make_shared<Controller>();
    c->cntlid = id;
    c->subsystem = subsystem;
    c->hostnqn = hostnqn;
    std::memcpy(c->hostid, hostid, 16);
    c->kato_ms = kato_ms;
    if (fill) fill(*c);  // before anyone else can find it
    controllers_.push_back(c);
    return c;
  }
  return nullptr;
}

std::shared_ptr<Controller> Registry::find_controller(uint16_t cntlid) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : controllers_)
    if (c->cntlid == cntlid) return c;
  return nullptr;
}

void Registry::remove_controller(uint16_t cntlid) {
  std::lock_guard<std::mutex> lock(mu_);
  controllers_.erase(std::remove_if(controllers_.begin(), controllers_.end(),
                                    [&](auto& c) { return c->cntlid == cntlid; }),
                     controllers_.end());
}

void Registry::stop_workers() {
  for (Subsystem* s : subsystems())
    for (Namespace* ns : s->active_namespaces()) ns->reservations.worker().stop();
}

void Registry::sync_all() {
  for (Subsystem* s : subsystems())
    for (Namespace* ns : s->active_namespaces()) ns->device->sync();
}

}  // namespace sens::target
