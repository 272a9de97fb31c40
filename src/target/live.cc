// Live changes to a running target: subsystems, namespaces, hosts, controllers, coalescing.
//
// Each change runs on a management thread (the RPC server, SIGHUP), one at a time under the
// registry's management lock, and is all-or-nothing: everything is checked before anything
// changes. Reactors never take that lock. They see a change in one of two ways:
//  - publication: a namespace slot, a host list or a key is swapped atomically (or under a
//    lock taken only at Connect), and the old object lives on while anything uses it;
//  - a message: work posted to each reactor (Reactor::post), run between its passes.
// A namespace taken out of the table is destroyed only after a grace period (every reactor
// has run a message, so no pass still holds a pointer it loaded before) and once no request
// holds it (Namespace::held()).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <thread>

#include "common/log.h"
#include "target/names.h"
#include "target/ns_options.h"
#include "target/target.h"

namespace sens::target {

namespace {

SubsystemConfig* find_config(TargetConfig& c, const std::string& nqn) {
  for (auto& s : c.subsystems)
    if (s.nqn == nqn) return &s;
  return nullptr;
}

}  // namespace

void Target::on_every_reactor(const std::function<void(ReactorContext&)>& fn) {
  if (!running_) {  // (no reactor thread runs: nothing to wait for)
    for (auto& ctx : ctxs_) fn(*ctx);
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  for (auto& ctx : ctxs_) {
    ReactorContext* c = ctx.get();
    c->reactor.post([&, c] {
      fn(*c);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == ctxs_.size(); });
}

TargetConfig Target::live_config() {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  return live_;
}

void Target::notify_namespace_changed(Subsystem* sub, uint32_t nsid) {
  for (auto& c : registry_.controllers()) {
    if (c->subsystem != sub) continue;
    c->note_namespace_changed(nsid);
    deliver_events(*c);
  }
}

void Target::disconnect_where(const std::function<bool(const Controller&)>& match) {
  for (auto& c : registry_.controllers()) {
    if (!match(*c)) continue;
    // Every queue, the admin queue included: the host sees the connection drop and (Linux)
    // reconnects after its reconnect delay, to be refused if it is no longer allowed.
    std::lock_guard<std::mutex> lock(c->mu);
    for (auto& ref : c->queues) {
      if (!ref.ctx) continue;
      ReactorContext* ctx = ref.ctx;
      uint64_t id = ref.conn_id;
      ctx->reactor.post([ctx, id] { ctx->close_connection(id, "disconnected by the operator"); });
    }
  }
}

bool Target::drain_namespace(Namespace* ns, Nanos drain) {
  on_every_reactor([](ReactorContext&) {});  // grace period: see the top of this file
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(drain);
  while (ns->held() != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void Target::destroy_namespace(std::unique_ptr<Namespace> ns) {
  const Namespace* raw = ns.get();
  on_every_reactor([raw](ReactorContext& ctx) { ctx.forget_namespace(raw); });
  ns->reservations.worker().stop();
  if (int rc = ns->device->sync(); rc < 0)
    LOG_WARN("namespace %u removed: its final flush failed: %s", ns->nsid, std::strerror(-rc));
  ns.reset();  // closes the device
}

void Target::sweep_draining() {
  for (auto it = draining_.begin(); it != draining_.end();) {
    if (it->ns->held() != 0) {
      ++it;
      continue;
    }
    LOG_INFO("%s: the last command finished; its device is closed", it->name.c_str());
    destroy_namespace(std::move(it->ns));
    it = draining_.erase(it);
  }
}

std::string Target::retire_namespace(Subsystem* sub, uint32_t nsid, Nanos drain,
                                     std::string* note) {
  auto ns = sub->unpublish(nsid);
  if (!ns) return namespace_name(sub->nqn, nsid) + " does not exist";
  notify_namespace_changed(sub, nsid);
  if (!drain_namespace(ns.get(), drain)) {
    uint64_t left = ns->held();
    std::string name = namespace_name(sub->nqn, nsid);
    if (note)
      *note = std::to_string(left) +
              " command(s) still running on it; its device closes when they finish";
    LOG_INFO("%s removed with %llu command(s) still running", name.c_str(),
             static_cast<unsigned long long>(left));
    draining_.push_back({std::move(ns), name});
    return "";
  }
  destroy_namespace(std::move(ns));
  return "";
}

// ---------------------------------------------------------------------------- subsystems

std::string Target::create_subsystem(const SubsystemConfig& sc) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  sweep_draining();
  if (find_config(live_, sc.nqn) || registry_.find(sc.nqn))
    return "subsystem '" + sc.nqn + "' exists";
  TargetConfig candidate = live_;
  candidate.subsystems.push_back(sc);
  if (auto error = validate(candidate); !error.empty()) return error;
  if (auto error = registry_.add_subsystem(sc); !error.empty()) return error;
  live_ = std::move(candidate);
  if (!sc.qos.empty()) publish_qos(registry_.find(sc.nqn), sc.qos);
  discovery_changed();
  LOG_INFO("subsystem %s created (%zu namespace(s))", sc.nqn.c_str(), sc.namespaces.size());
  return "";
}

std::string Target::delete_subsystem(const std::string& nqn) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  sweep_draining();
  Subsystem* sub = registry_.find(nqn);
  if (!sub || sub->discovery) return "no subsystem '" + nqn + "'";
  registry_.remove_subsystem(sub);  // no new Connect finds it
  disconnect_where([sub](const Controller& c) { return c.subsystem == sub; });
  publish_qos(sub, {});  // its limiters go (their waiters were on its connections)
  for (Namespace* ns : sub->active_namespaces()) {
    std::string note;
    retire_namespace(sub, ns->nsid, 5 * kSecond, &note);
  }
  auto& subs = live_.subsystems;
  subs.erase(std::remove_if(subs.begin(), subs.end(),
                            [&](const SubsystemConfig& s) { return s.nqn == nqn; }),
             subs.end());
  discovery_changed();
  LOG_INFO("subsystem %s deleted", nqn.c_str());
  return "";
}

// ---------------------------------------------------------------------------- namespaces

std::string Target::add_namespace(const std::string& nqn, const std::string& spec, uint32_t nsid,
                                  uint32_t* assigned) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  sweep_draining();
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  if (auto error = check_namespace_spec(spec); !error.empty()) return error;
  NamespaceOptions opts;
  std::string error;
  parse_namespace_options(spec, &opts, &error);
  if (nsid && opts.nsid && nsid != opts.nsid)
    return "nsid " + std::to_string(nsid) + " and the spec's nsid=" + std::to_string(opts.nsid) +
           " differ";
  if (!nsid) nsid = opts.nsid;
  if (nsid > kMaxNsid) return "nsid must be 1.." + std::to_string(kMaxNsid);
  if (!nsid) {
    for (uint32_t i = 1; i <= kMaxNsid && !nsid; ++i)
      if (!sub->ns(i)) nsid = i;
    if (!nsid) return nqn + " has " + std::to_string(kMaxNsid) + " namespaces already";
  } else if (sub->ns(nsid)) {
    return namespace_name(nqn, nsid) + " exists";
  }
  for (auto& d : draining_)
    if (d.name == namespace_name(nqn, nsid))
      return namespace_name(nqn, nsid) + " is still draining its last commands; try again";
  auto ns = registry_.make_namespace(nqn, nsid, spec, &error);
  if (!ns) return error;
  LOG_INFO("%s added: %s", namespace_name(nqn, nsid).c_str(), ns->device->describe().c_str());
  sub->publish(std::move(ns));
  sc->namespaces.push_back(spec_with_nsid(spec, nsid));
  notify_namespace_changed(sub, nsid);
  if (assigned) *assigned = nsid;
  return "";
}

std::string Target::remove_namespace(const std::string& nqn, uint32_t nsid, Nanos drain,
                                     std::string* note) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  sweep_draining();
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  if (!sub->ns(nsid)) return namespace_name(nqn, nsid) + " does not exist";
  // The saved configuration names every namespace with its nsid from now on (a gap).
  std::vector<std::string> kept;
  uint32_t next = 0;
  for (auto& spec : sc->namespaces) {
    next = spec_nsid(spec, next);
    if (next != nsid) kept.push_back(spec_with_nsid(spec, next));
  }
  if (auto error = retire_namespace(sub, nsid, drain, note); !error.empty()) return error;
  sc->namespaces = std::move(kept);
  LOG_INFO("%s removed", namespace_name(nqn, nsid).c_str());
  return "";
}

std::string Target::resize_namespace(const std::string& nqn, uint32_t nsid, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  if (!sub || sub->discovery) return "no subsystem '" + nqn + "'";
  Namespace* ns = sub->ns(nsid);
  if (!ns) return namespace_name(nqn, nsid) + " does not exist";
  uint64_t block = uint64_t(1) << ns->block_shift;
  if (bytes % block)
    return "the size must be a multiple of the block size (" + std::to_string(block) + " bytes)";
  uint64_t before = ns->blocks;
  if (auto error = ns->device->resize(bytes); !error.empty())
    return namespace_name(nqn, nsid) + ": " + error;
  uint64_t now = ns->device->size() >> ns->block_shift;
  ns->blocks = now;
  LOG_INFO("%s resized: %llu -> %llu blocks of %llu bytes", namespace_name(nqn, nsid).c_str(),
           static_cast<unsigned long long>(before), static_cast<unsigned long long>(now),
           static_cast<unsigned long long>(block));
  if (now != before) notify_namespace_changed(sub, nsid);
  return "";
}

// ---------------------------------------------------------------------------- hosts

std::string Target::allow_host(const std::string& nqn, const std::string& host,
                               const std::string& host_key, const std::string& ctrl_key,
                               const std::string& key_file, const std::string& ctrl_key_file) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  if (host.empty() || host.size() > 223) return "a host NQN is 1..223 bytes";
  if (!ctrl_key.empty() && host_key.empty()) return "a controller key needs a host key";
  SubsystemConfig next = *sc;
  if (std::find(next.allowed_hosts.begin(), next.allowed_hosts.end(), host) ==
      next.allowed_hosts.end())
    next.allowed_hosts.push_back(host);
  auto drop = [&](std::vector<std::pair<std::string, std::string>>& keys) {
    keys.erase(std::remove_if(keys.begin(), keys.end(), [&](auto& k) { return k.first == host; }),
               keys.end());
  };
  std::shared_ptr<const HostAuth> auth;
  if (!host_key.empty()) {
    std::string error;
    auth = Registry::make_host_auth(host, nqn, host_key, ctrl_key, &error);
    if (!auth) return error;
    drop(next.host_keys);
    drop(next.ctrl_keys);
    next.host_keys.push_back({host, host_key});
    if (!ctrl_key.empty()) next.ctrl_keys.push_back({host, ctrl_key});
    next.host_key_files.erase(host);
    next.ctrl_key_files.erase(host);
    if (!key_file.empty()) next.host_key_files[host] = key_file;
    if (!ctrl_key_file.empty()) next.ctrl_key_files[host] = ctrl_key_file;
  }
  next.allow_any_host = false;
  TargetConfig candidate = live_;
  *find_config(candidate, nqn) = next;
  if (auto error = validate(candidate); !error.empty()) return error;
  // Published: a Connect from now on sees the new list and keys; sessions that began with
  // an old key keep it (HostAuth is shared, never changed in place).
  std::map<std::string, std::shared_ptr<const HostAuth>> keys;
  for (auto& h : sub->keyed_hosts()) keys[h] = sub->auth_for(h);
  if (auth) keys[host] = auth;
  sub->set_hosts(next.allowed_hosts, std::move(keys));
  sub->set_allow_any_host(false);
  live_ = std::move(candidate);
  discovery_changed();
  LOG_INFO("%s: host %s allowed%s", nqn.c_str(), host.c_str(),
           auth ? (ctrl_key.empty() ? " (DH-HMAC-CHAP key set)" : " (DH-HMAC-CHAP keys set)") : "");
  return "";
}

std::string Target::disallow_host(const std::string& nqn, const std::string& host) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  auto allowed = sub->allowed_hosts();
  if (std::find(allowed.begin(), allowed.end(), host) == allowed.end())
    return "host '" + host + "' is not on the allow-list of " + nqn;
  allowed.erase(std::remove(allowed.begin(), allowed.end(), host), allowed.end());
  std::map<std::string, std::shared_ptr<const HostAuth>> keys;
  for (auto& h : sub->keyed_hosts())
    if (h != host) keys[h] = sub->auth_for(h);
  sub->set_hosts(allowed, std::move(keys));
  sub->set_allow_any_host(false);  // the list is what decides now, empty or not
  disconnect_where([&](const Controller& c) { return c.subsystem == sub && c.hostnqn == host; });
  auto drop = [&](std::vector<std::pair<std::string, std::string>>& k) {
    k.erase(std::remove_if(k.begin(), k.end(), [&](auto& e) { return e.first == host; }), k.end());
  };
  sc->allowed_hosts = allowed;
  drop(sc->host_keys);
  drop(sc->ctrl_keys);
  sc->host_key_files.erase(host);
  sc->ctrl_key_files.erase(host);
  sc->allow_any_host = false;
  discovery_changed();
  LOG_INFO("%s: host %s disallowed; its controllers disconnected", nqn.c_str(), host.c_str());
  return "";
}

std::string Target::set_allow_any_host(const std::string& nqn, bool allow) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  if (allow && !sc->host_keys.empty())
    return nqn + " has hosts with DH-HMAC-CHAP keys: any host would get in without one";
  sub->set_allow_any_host(allow);
  sc->allow_any_host = allow;
  discovery_changed();
  if (!allow)  // hosts connected that are not on the list go
    disconnect_where(
        [&](const Controller& c) { return c.subsystem == sub && !sub->host_allowed(c.hostnqn); });
  return "";
}

std::string Target::set_security(const std::string& nqn, const Requirement& tls,
                                 const Requirement& auth) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  TargetConfig candidate = live_;
  find_config(candidate, nqn)->require_tls = tls;
  find_config(candidate, nqn)->require_auth = auth;
  if (auto error = validate(candidate); !error.empty()) return error;
  sub->set_requirements(tls, auth);
  live_ = std::move(candidate);
  disconnect_where([&](const Controller& c) {
    return c.subsystem == sub &&
           ((tls.applies(c.hostnqn) && !c.over_tls) || (auth.applies(c.hostnqn) && !c.auth));
  });
  discovery_changed();  // plain listeners leave the log of hosts that need TLS
  auto text = [](const Requirement& r) {
    if (r.all) return std::string("every host");
    std::string s;
    for (auto& h : r.hosts) s += (s.empty() ? "" : ", ") + h;
    return s.empty() ? std::string("no host") : s;
  };
  LOG_INFO("%s: TLS required of %s; authentication required of %s", nqn.c_str(), text(tls).c_str(),
           text(auth).c_str());
  return "";
}

// ---------------------------------------------------------------------------- controllers

std::string Target::disconnect_controller(uint16_t cntlid) {
  auto c = registry_.find_controller(cntlid);
  if (!c) return "no controller " + std::to_string(cntlid);
  disconnect_where([cntlid](const Controller& x) { return x.cntlid == cntlid; });
  LOG_INFO("controller %u (%s) disconnected by the operator", cntlid, c->hostnqn.c_str());
  return "";
}

// ---------------------------------------------------------------------------- listeners

std::string Target::add_listener(const ListenAddress& addr, bool tls, Bound* added) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  if (tls && !tls_) return "no TLS here: the target was started without --tls PSKFILE";
  for (auto& b : bound())
    if (b.host == addr.host && b.port == addr.port && addr.port != 0)
      return addr.host + ":" + std::to_string(addr.port) + " is a listener already";
  // Its ANA view first (a host may connect the moment it listens); kept if the open fails.
  AnaPort* ana = registry_.add_ana_port(addr);
  if (auto error = open_live_listener(addr, false, tls, ana, added); !error.empty()) return error;
  ListenAddress saved = addr;
  saved.port = added->port;
  (tls ? live_.tls_listen : live_.listen).push_back(saved);
  LOG_INFO("listening on %s:%u (I/O%s), added live", added->host.c_str(), added->port,
           tls ? ", TLS 1.3" : "");
  open_discovery_for(addr.host);
  discovery_changed();
  return "";
}

// A host that learns of the new address (a referral, its own configuration) finds discovery
// there as on the start's addresses: the same port, when the target has one.
void Target::open_discovery_for(const std::string& host) {
  uint16_t port = config_.discovery_port;
  if (!port) return;
  bool v6 = host.find(':') != std::string::npos;
  for (auto& b : bound()) {
    if (!b.discovery) continue;
    // (a wildcard of the same family covers the address; binding it would fail anyway)
    if (b.host == host || (is_wildcard(b.host) && (b.host.find(':') != std::string::npos) == v6))
      return;
  }
  Bound opened;
  if (auto error = open_live_listener({host, port}, true, false, nullptr, &opened);
      !error.empty()) {
    LOG_WARN("no discovery on %s: %s", host.c_str(), error.c_str());
    return;
  }
  live_discovery_hosts_.push_back(host);
  LOG_INFO("listening on %s:%u (discovery), added live", host.c_str(), port);
}

void Target::close_discovery_if_unused(const std::string& host) {
  auto it = std::find(live_discovery_hosts_.begin(), live_discovery_hosts_.end(), host);
  if (it == live_discovery_hosts_.end()) return;  // the start's: they stay
  for (auto& b : bound())
    if (!b.discovery && b.host == host) return;  // still an I/O address
  live_discovery_hosts_.erase(it);
  if (close_live_listener(host, config_.discovery_port, true))
    LOG_INFO("discovery listener %s:%u removed (no I/O listener left there)", host.c_str(),
             config_.discovery_port);
}

void Target::discovery_changed() {
  registry_.discovery_changed();
  // Discovery Log Page Change notices for the discovery controllers connected (a Linux host's
  // persistent discovery connection runs `nvme connect-all` on it).
  for (auto& c : registry_.controllers()) {
    if (!c->subsystem || !c->subsystem->discovery) continue;
    c->disc_event_pending = true;
    deliver_events(*c);
  }
}

std::string Target::remove_listener(const std::string& host, uint16_t port) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  if (!close_live_listener(host, port, false))
    return "no I/O listener " + host + ":" + std::to_string(port) + " (listener_list shows them)";
  close_discovery_if_unused(host);
  for (auto* list : {&live_.listen, &live_.tls_listen})
    list->erase(
        std::remove_if(list->begin(), list->end(),
                       [&](const ListenAddress& l) { return l.host == host && l.port == port; }),
        list->end());
  discovery_changed();
  LOG_INFO("listener %s:%u removed (its connections stay)", host.c_str(), port);
  return "";
}

std::string Target::set_namespace_ana_group(const std::string& nqn, uint32_t nsid, uint32_t group) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  Namespace* ns = sub->ns(nsid);
  if (!ns) return namespace_name(nqn, nsid) + " does not exist";
  if (group < 1 || group > ana::kMaxGroups) return "the ANA group must be 1..32";
  if (ns->anagrpid == group) return "";
  ns->anagrpid = group;
  // The saved spec says it too.
  uint32_t next = 0;
  for (auto& spec : sc->namespaces) {
    next = spec_nsid(spec, next);
    if (next != nsid) continue;
    std::string kept;
    size_t start = 0;
    while (start <= spec.size()) {  // the spec without its anagrpid= option
      size_t comma = spec.find(',', start);
      std::string item = spec.substr(start, comma == std::string::npos ? comma : comma - start);
      start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
      if (item.rfind("anagrpid=", 0) != 0) kept += (kept.empty() ? "" : ",") + item;
    }
    spec = spec_with_nsid(kept + ",anagrpid=" + std::to_string(group), nsid);
    break;
  }
  notify_namespace_changed(sub, nsid);
  for (auto& port : registry_.ana_ports()) notify_ana_change(port.get());
  notify_ana_change(registry_.default_ana());
  LOG_INFO("%s moved to ANA group %u", namespace_name(nqn, nsid).c_str(), group);
  return "";
}

// ---------------------------------------------------------------------------- coalescing

coalesce::Config Target::coalescing(const std::string& nqn, std::string* error) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  if (nqn.empty()) return live_.coalesce;
  Subsystem* sub = registry_.find(nqn);
  if (!sub || sub->discovery) {
    *error = "no subsystem '" + nqn + "'";
    return {};
  }
  return sub->coalescing().value_or(live_.coalesce);
}

std::string Target::set_coalescing(const std::string& nqn, const coalesce::Config& config) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  TargetConfig candidate = live_;
  candidate.coalesce = config;
  if (auto error = validate(candidate); !error.empty()) return error;
  Subsystem* sub = nullptr;
  if (!nqn.empty()) {
    sub = registry_.find(nqn);
    SubsystemConfig* sc = find_config(live_, nqn);
    if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
    sub->set_coalescing(config);
    sc->coalesce = config;  // (saved by save_config)
  } else {
    live_.coalesce = config;
  }
  on_every_reactor([sub, config](ReactorContext& ctx) { ctx.retune_coalescing(sub, config); });
  LOG_INFO("coalescing of %s: %s, B %u, T %lld us, c2 %u, Tc %lld us",
           nqn.empty() ? "every subsystem" : nqn.c_str(), coalesce::policy_name(config.policy),
           config.pdus, static_cast<long long>(config.timeout / kMicro), config.ctrl_pdus,
           static_cast<long long>(config.ctrl_timeout / kMicro));
  return "";
}

std::string Target::clear_coalescing(const std::string& nqn) {
  std::lock_guard<std::mutex> lock(registry_.management_mutex());
  Subsystem* sub = registry_.find(nqn);
  SubsystemConfig* sc = find_config(live_, nqn);
  if (!sub || sub->discovery || !sc) return "no subsystem '" + nqn + "'";
  sub->set_coalescing(std::nullopt);
  sc->coalesce.reset();
  coalesce::Config config = live_.coalesce;
  on_every_reactor([sub, config](ReactorContext& ctx) { ctx.retune_coalescing(sub, config); });
  LOG_INFO("coalescing of %s: the target's again", nqn.c_str());
  return "";
}

void Target::reset_stats() {
  on_every_reactor([](ReactorContext& ctx) { ctx.reset_stats(); });
  reset_metrics();  // the Prometheus counters too (a counter reset, as Prometheus allows)
  auth_succeeded_ = 0;
  auth_failed_ = 0;
}

}  // namespace sens::target
