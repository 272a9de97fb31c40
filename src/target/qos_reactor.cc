#include "target/qos_reactor.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace sens::target {

ReactorQos::ReactorQos(Reactor& reactor, Resume resume) : reactor_(reactor), resume_(resume) {}

ReactorQos::~ReactorQos() = default;

ReactorQos::Entry::Entry(ReactorQos& owner)
    : limiter(owner.reactor_.clock()), owner_(owner), timer([this] { fire(); }) {}

void ReactorQos::Entry::arm() {
  Nanos at = limiter.next_ready();
  if (at == qos::Limiter::kNever) return owner_.reactor_.cancel(timer);
  owner_.reactor_.arm(timer, std::max(at, owner_.reactor_.now() + kMinTick));
}

void ReactorQos::Entry::fire() {
  while (qos::Waiter* w = limiter.release()) owner_.resume_(*w);
  arm();
}

const ReactorQos::Sub* ReactorQos::find(const Subsystem* sub) const {
  auto it = subs_.find(sub);
  return it == subs_.end() ? nullptr : &it->second;
}

ReactorQos::Entry* ReactorQos::host_entry(const Subsystem* sub, const std::string& host) const {
  const Sub* s = find(sub);
  if (!s) return nullptr;
  auto it = s->hosts.find(host);
  return it == s->hosts.end() ? nullptr : it->second.get();
}

void ReactorQos::retire(std::unique_ptr<Entry> e) {
  if (!e) return;
  while (qos::Waiter* w = e->limiter.drop_first()) resume_(*w);
  const auto& c = e->limiter.counters();
  retired_.admitted += c.admitted;
  retired_.throttled += c.throttled;
  retired_.delay_ns += c.delay_ns;
}

void ReactorQos::apply(const Subsystem* sub, const qos::Config& config, uint32_t share) {
  ++generation_;
  Sub& s = subs_[sub];
  // Namespaces.
  uint32_t top = config.namespaces.empty() ? 0 : config.namespaces.rbegin()->first;
  for (uint32_t nsid = 1; nsid <= s.ns.size(); ++nsid)
    if (!config.namespaces.count(nsid)) retire(std::move(s.ns[nsid - 1]));
  if (s.ns.size() < top) s.ns.resize(top);
  for (auto& [nsid, limits] : config.namespaces) {
    auto& e = s.ns[nsid - 1];
    if (!e) e = std::make_unique<Entry>(*this);
    e->limiter.configure(limits, share);
    if (e->limiter.waiting()) e->arm();  // by the new rates
  }
  while (!s.ns.empty() && !s.ns.back()) s.ns.pop_back();
  // Hosts.
  for (auto it = s.hosts.begin(); it != s.hosts.end();) {
    if (config.hosts.count(it->first)) {
      ++it;
      continue;
    }
    retire(std::move(it->second));
    it = s.hosts.erase(it);
  }
  for (auto& [host, limits] : config.hosts) {
    auto& e = s.hosts[host];
    if (!e) e = std::make_unique<Entry>(*this);
    e->limiter.configure(limits, share);
    if (e->limiter.waiting()) e->arm();
  }
  if (s.ns.empty() && s.hosts.empty()) subs_.erase(sub);
}

void ReactorQos::lift_all() {
  ++generation_;
  for (auto& [sub, s] : subs_) {
    for (auto& e : s.ns) retire(std::move(e));
    for (auto& [host, e] : s.hosts) retire(std::move(e));
  }
  subs_.clear();
}

qos::Counters ReactorQos::totals() const {
  qos::Counters t = retired_;
  auto add = [&t](const Entry* e) {
    if (!e) return;
    t.admitted += e->limiter.counters().admitted;
    t.throttled += e->limiter.counters().throttled;
    t.delay_ns += e->limiter.counters().delay_ns;
  };
  for (auto& [sub, s] : subs_) {
    for (auto& e : s.ns) add(e.get());
    for (auto& [host, e] : s.hosts) add(e.get());
  }
  return t;
}

nlohmann::json ReactorQos::stats_json() const {
  qos::Counters t = totals();
  return {{"limited_commands", t.admitted},
          {"throttled", t.throttled},
          {"delay_us", t.delay_ns / kMicro}};
}

void ReactorQos::reset_counters() {
  retired_ = qos::Counters{};
  for (auto& [sub, s] : subs_) {
    for (auto& e : s.ns)
      if (e) e->limiter.reset_counters();
    for (auto& [host, e] : s.hosts) e->limiter.reset_counters();
  }
}

}  // namespace sens::target
