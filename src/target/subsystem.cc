#include "target/subsystem.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>

#include "wire/nvme.h"

namespace sens::target {

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

// Stable identifiers derived from the NQN and nsid, so a restarted target looks the same.
static void derive_id(const std::string& seed, uint8_t out[16]) {
  uint64_t a = std::hash<std::string>{}(seed);
  uint64_t b = std::hash<std::string>{}(seed + "#sens");
  std::memcpy(out, &a, 8);
  std::memcpy(out + 8, &b, 8);
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
    uint64_t h = std::hash<std::string>{}(sc.nqn);
    char serial[21];
    std::snprintf(serial, sizeof(serial), "SENS%016llx", static_cast<unsigned long long>(h));
    sub->serial = serial;
    uint32_t nsid = 1;
    for (auto& spec : sc.namespaces) {
      std::string error;
      auto dev = storage::Device::open(spec, &error, config.read_only);
      if (!dev) return "namespace " + std::to_string(nsid) + " of " + sc.nqn + ": " + error;
      auto ns = std::make_unique<Namespace>();
      ns->nsid = nsid;
      ns->spec = spec;
      ns->block_shift = uint32_t(std::countr_zero(dev->block_size()));
      ns->blocks = dev->size() >> ns->block_shift;
      sub->volatile_cache |= dev->volatile_cache();
      ns->device = std::move(dev);
      derive_id(sc.nqn + "/" + std::to_string(nsid), ns->nguid);
      derive_id(sc.nqn + "/uuid/" + std::to_string(nsid), ns->uuid);
      ns->uuid[6] = uint8_t((ns->uuid[6] & 0x0F) | 0x40);  // RFC 4122 version 4 layout
      ns->uuid[8] = uint8_t((ns->uuid[8] & 0x3F) | 0x80);
      sub->namespaces.push_back(std::move(ns));
      ++nsid;
    }
    subsystems_.push_back(std::move(sub));
    ++index;
  }
  return "";
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
  // cntlid 1..0xFFEF; skip ids still in use after a wrap.
  for (int tries = 0; tries < 0xFFEF; ++tries) {
    uint16_t id = next_cntlid_;
    next_cntlid_ = next_cntlid_ >= 0xFFEF ? 1 : uint16_t(next_cntlid_ + 1);
    bool used = std::any_of(controllers_.begin(), controllers_.end(),
                            [&](auto& c) { return c->cntlid == id; });
    if (used) continue;
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

void Registry::sync_all() {
  for (auto& s : subsystems_)
    for (auto& ns : s->namespaces) ns->device->sync();
}

}  // namespace sens::target
