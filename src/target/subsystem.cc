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
  return allowed_hosts.empty() ||
         std::find(allowed_hosts.begin(), allowed_hosts.end(), hostnqn) != allowed_hosts.end();
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

std::string Registry::build(const TargetConfig& config) {
  config_ = config;
  discovery_.nqn = std::string(nvme::kDiscoveryNqn);
  discovery_.discovery = true;
  discovery_.serial = "sens-discovery";
  int index = 0;
  for (auto& sc : config.subsystems) {
    auto sub = std::make_unique<Subsystem>();
    sub->nqn = sc.nqn;
    sub->allowed_hosts = sc.allowed_hosts;
    sub->dhchap_hashes = sc.dhchap_hashes.empty() ? config.dhchap_hashes : sc.dhchap_hashes;
    sub->dhchap_dhgroups = sc.dhchap_dhgroups.empty() ? config.dhchap_dhgroups : sc.dhchap_dhgroups;
    for (auto& [host, secret] : sc.host_keys) {
      std::string why;
      auto parsed = auth::parse_secret(secret, &why);
      if (!parsed) return "host key for '" + host + "': " + why;
      sub->host_auth[host].host_key = auth::transform_key(*parsed, host);
      auth::wipe(parsed->key);
      // Naming a key for a host puts it on the allow-list; a subsystem with keys admits
      // only the hosts it lists, so no unkeyed host slips in beside them.
      if (std::find(sub->allowed_hosts.begin(), sub->allowed_hosts.end(), host) ==
          sub->allowed_hosts.end())
        sub->allowed_hosts.push_back(host);
    }
    for (auto& [host, secret] : sc.ctrl_keys) {
      std::string why;
      auto parsed = auth::parse_secret(secret, &why);
      if (!parsed) return "controller key for '" + host + "': " + why;
      sub->host_auth[host].ctrl_key = auth::transform_key(*parsed, sc.nqn);
      auth::wipe(parsed->key);
    }
    uint64_t h = std::hash<std::string>{}(sc.nqn);
    char serial[21];
    std::snprintf(serial, sizeof(serial), "SENS%016llx", static_cast<unsigned long long>(h));
    sub->serial = sc.serial.empty() ? serial : sc.serial;
    uint32_t nsid = 1;
    for (auto& spec : sc.namespaces) {
      std::string error;
      NamespaceOptions opts;
      if (!parse_namespace_options(spec, &opts, &error))
        return "namespace " + std::to_string(nsid) + " of " + sc.nqn + ": " + error;
      auto dev = storage::Device::open(opts.backend, &error, config.read_only);
      if (!dev) return "namespace " + std::to_string(nsid) + " of " + sc.nqn + ": " + error;
      auto ns = std::make_unique<Namespace>();
      ns->nsid = nsid;
      ns->spec = spec;
      ns->block_shift = uint32_t(std::countr_zero(dev->block_size()));
      ns->blocks = dev->size() >> ns->block_shift;
      sub->volatile_cache |= dev->volatile_cache();
      ns->device = std::move(dev);
      ns->anagrpid = opts.anagrpid;
      // The same identity on every gateway: from uuid=, or the backing store (ns_options.h).
      if (opts.has_uuid) {
        char text[37];
        const uint8_t* u = opts.uuid;
        std::snprintf(text, sizeof text,
                      "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                      u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                      u[13], u[14], u[15]);
        derive_namespace_ids(std::string("uuid:") + text, ns->nguid, ns->uuid);
        std::memcpy(ns->uuid, opts.uuid, 16);
      } else if (!ns->device->stable_identity(ns->nguid, ns->uuid)) {
        // Shared storage that names itself (an RBD image) gave both ids; else the seed.
        derive_namespace_ids(identity_seed(sc.nqn, nsid, opts), ns->nguid, ns->uuid);
      }
      if (opts.has_nguid) std::memcpy(ns->nguid, opts.nguid, 16);
      // Shared with the other gateways where the backend can (RBD), else kept here.
      ns->reservations.share(ns->device->shared_record(),
                             "namespace " + std::to_string(nsid) + " of " + sc.nqn);
      sub->namespaces.push_back(std::move(ns));
      ++nsid;
    }
    subsystems_.push_back(std::move(sub));
    ++index;
  }
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
  for (auto& s : subsystems_)
    if (s->nqn == nqn) return s.get();
  return nullptr;
}

std::shared_ptr<Controller> Registry::create_controller(Subsystem* subsystem,
                                                        const std::string& hostnqn,
                                                        const uint8_t hostid[16],
                                                        uint32_t kato_ms) {
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
  for (auto& s : subsystems_)
    for (auto& ns : s->namespaces) ns->reservations.worker().stop();
}

void Registry::sync_all() {
  for (auto& s : subsystems_)
    for (auto& ns : s->namespaces) ns->device->sync();
}

}  // namespace sens::target
