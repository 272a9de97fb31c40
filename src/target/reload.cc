// SIGHUP and load_config: a configuration file applied to the running target as the live
// changes of live.cc, one at a time, each all-or-nothing.
#include <algorithm>
#include <map>

#include "target/names.h"
#include "target/ns_options.h"
#include "target/target.h"

namespace sens::target {

namespace {

std::map<uint32_t, std::string> by_nsid(const SubsystemConfig& sc) {
  std::map<uint32_t, std::string> out;
  uint32_t next = 0;
  for (auto& spec : sc.namespaces) {
    next = spec_nsid(spec, next);
    out[next] = spec;
  }
  return out;
}

std::string key_of(const std::vector<std::pair<std::string, std::string>>& keys,
                   const std::string& host) {
  for (auto& [h, k] : keys)
    if (h == host) return k;
  return "";
}

std::string file_of(const std::map<std::string, std::string>& files, const std::string& host) {
  auto it = files.find(host);
  return it == files.end() ? "" : it->second;
}

}  // namespace

std::vector<std::string> Target::apply_config(const TargetConfig& fresh) {
  std::vector<std::string> out;
  if (auto error = validate(fresh); !error.empty()) return {"not applied: " + error};
  TargetConfig now = live_config();
  auto note = [&](const std::string& what, const std::string& error) {
    out.push_back(error.empty() ? what : what + ": refused: " + error);
  };
  for (auto& old : now.subsystems)
    if (std::none_of(fresh.subsystems.begin(), fresh.subsystems.end(),
                     [&](auto& s) { return s.nqn == old.nqn; }))
      note("subsystem " + old.nqn + " deleted", delete_subsystem(old.nqn));
  for (auto& want : fresh.subsystems) {
    auto it = std::find_if(now.subsystems.begin(), now.subsystems.end(),
                           [&](auto& s) { return s.nqn == want.nqn; });
    if (it == now.subsystems.end()) {
      note("subsystem " + want.nqn + " created", create_subsystem(want));
      continue;
    }
    const SubsystemConfig& have = *it;
    auto old_ns = by_nsid(have), new_ns = by_nsid(want);
    for (auto& [nsid, spec] : old_ns)
      if (!new_ns.count(nsid) || new_ns[nsid] != spec)
        note(namespace_name(want.nqn, nsid) + " removed",
             remove_namespace(want.nqn, nsid, 5 * kSecond, nullptr));
    for (auto& [nsid, spec] : new_ns)
      if (!old_ns.count(nsid) || old_ns[nsid] != spec)
        note(namespace_name(want.nqn, nsid) + " added (" + spec + ")",
             add_namespace(want.nqn, spec, nsid, nullptr));
    for (auto& host : have.allowed_hosts)
      if (std::find(want.allowed_hosts.begin(), want.allowed_hosts.end(), host) ==
              want.allowed_hosts.end() &&
          key_of(want.host_keys, host).empty())
        note(want.nqn + ": host " + host + " disallowed", disallow_host(want.nqn, host));
    std::vector<std::string> hosts = want.allowed_hosts;
    for (auto& [host, key] : want.host_keys)
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    for (auto& host : hosts) {
      std::string key = key_of(want.host_keys, host), ctrl = key_of(want.ctrl_keys, host);
      std::string key_file = file_of(want.host_key_files, host),
                  ctrl_file = file_of(want.ctrl_key_files, host);
      bool listed = std::find(have.allowed_hosts.begin(), have.allowed_hosts.end(), host) !=
                    have.allowed_hosts.end();
      if (listed && key == key_of(have.host_keys, host) && ctrl == key_of(have.ctrl_keys, host) &&
          key_file == file_of(have.host_key_files, host) &&
          ctrl_file == file_of(have.ctrl_key_files, host))
        continue;
      note(want.nqn + ": host " + host + (key.empty() ? " allowed" : " allowed with its keys"),
           allow_host(want.nqn, host, key, ctrl, key_file, ctrl_file));
    }
    bool any = want.allow_any_host && want.allowed_hosts.empty() && want.host_keys.empty();
    bool had = have.allow_any_host && have.allowed_hosts.empty() && have.host_keys.empty();
    if (any != had)
      note(want.nqn + (any ? ": any host allowed" : ": only listed hosts allowed"),
           set_allow_any_host(want.nqn, any));
    if (want.require_tls != have.require_tls || want.require_auth != have.require_auth)
      note(want.nqn + ": security requirements changed",
           set_security(want.nqn, want.require_tls, want.require_auth));
    if (want.qos != have.qos)
      note(want.nqn + ": qos limits " + (want.qos.empty() ? "lifted" : "set"),
           set_qos(want.nqn, want.qos));
    if (want.coalesce != have.coalesce)
      note(want.nqn + ": coalescing " + (want.coalesce ? "retuned" : "the target's again"),
           want.coalesce ? set_coalescing(want.nqn, *want.coalesce) : clear_coalescing(want.nqn));
  }
  const auto& a = now.coalesce;
  const auto& b = fresh.coalesce;
  if (a.policy != b.policy || a.pdus != b.pdus || a.timeout != b.timeout ||
      a.ctrl_pdus != b.ctrl_pdus || a.ctrl_timeout != b.ctrl_timeout || a.bytes != b.bytes)
    note("coalescing retuned", set_coalescing("", b));
  // Listeners by address (port 0 asks for any port: nothing to compare).
  for (bool tls : {false, true}) {
    const auto& want = tls ? fresh.tls_listen : fresh.listen;
    const auto& have = tls ? now.tls_listen : now.listen;
    auto in = [](const std::vector<ListenAddress>& list, const ListenAddress& l) {
      return std::any_of(list.begin(), list.end(),
                         [&](auto& x) { return x.host == l.host && x.port == l.port; });
    };
    for (auto& l : have)
      if (l.port && !in(want, l))
        note("listener " + listen_text(l) + " removed", remove_listener(l.host, l.port));
    for (auto& l : want)
      if (l.port && !in(have, l)) {
        Bound added;
        note("listener " + listen_text(l) + " added", add_listener(l, tls, &added));
      }
  }
  {
    std::lock_guard<std::mutex> lock(registry_.management_mutex());
    for (auto& line : reload_ana(fresh)) out.push_back(line);
  }
  if (to_json_text(TargetConfig{fresh}) != to_json_text(TargetConfig{now})) {
    // What no live change covers: listeners (beyond their ANA states), threads, pools, limits.
    TargetConfig a2 = fresh, b2 = live_config();
    a2.subsystems = b2.subsystems = {};
    a2.coalesce = b2.coalesce;
    a2.listen = b2.listen;
    a2.tls_listen = b2.tls_listen;
    if (to_json_text(a2) != to_json_text(b2))
      out.push_back("other settings differ from the running ones; they take a restart");
  }
  return out;
}

}  // namespace sens::target
