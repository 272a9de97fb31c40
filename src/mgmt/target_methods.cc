#include "mgmt/target_methods.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/log.h"
#include "common/units.h"
#include "mgmt/rpc_server.h"
#include "target/target.h"

namespace sens::mgmt {

using nlohmann::json;
using target::Target;

namespace {

// A refused change: the target said why, nothing changed.
void check(const std::string& error) {
  if (!error.empty()) throw RpcError{kRefused, error};
}

std::string str(const json& p, const char* name, const std::string& fallback = "") {
  return p.contains(name) ? p[name].get<std::string>() : fallback;
}

uint64_t num(const json& p, const char* name, uint64_t fallback = 0) {
  return p.contains(name) ? p[name].get<uint64_t>() : fallback;
}

uint64_t size_param(const json& p, const char* name) {
  if (!p.contains(name)) return 0;
  const json& v = p[name];
  return v.is_string() ? *parse_size(v.get<std::string>()) : v.get<uint64_t>();
}

std::vector<std::string> strings(const json& p, const char* name) {
  return p.contains(name) ? p[name].get<std::vector<std::string>>() : std::vector<std::string>{};
}

std::string hex(const uint8_t* b, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

json controller_json(target::Controller& c) {
  json queues = json::array();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto& q : c.queues) queues.push_back(q.qid);
  }
  return {{"cntlid", c.cntlid},
          {"subsystem", c.subsystem->nqn},
          {"hostnqn", c.hostnqn},
          {"hostid", hex(c.hostid, 16)},
          {"address", c.peer},
          {"kato_ms", c.kato_ms},
          {"authenticated", c.auth != nullptr},
          {"queues", queues}};
}

json subsystem_json(Target& t, target::Subsystem& s) {
  json namespaces = json::array();
  for (target::Namespace* ns : s.active_namespaces())
    namespaces.push_back({{"nsid", ns->nsid},
                          {"spec", ns->spec},
                          {"device", ns->device->describe()},
                          {"size_bytes", ns->blocks.load() << ns->block_shift},
                          {"block_size", 1u << ns->block_shift},
                          {"anagrpid", ns->anagrpid.load()},
                          {"nguid", hex(ns->nguid, 16)},
                          {"uuid", hex(ns->uuid, 16)}});
  json listeners = json::array();
  for (auto& b : t.bound())
    if (!b.discovery) listeners.push_back({{"address", b.host}, {"port", b.port}, {"tls", b.tls}});
  json controllers = json::array();
  for (auto& c : t.registry().controllers())
    if (c->subsystem == &s) controllers.push_back(controller_json(*c));
  auto [tls, auth] = s.requirements();
  auto req = [](const target::Requirement& r) { return r.all ? json(true) : json(r.hosts); };
  return {{"nqn", s.nqn},
          {"serial", s.serial},
          {"require_tls", req(tls)},
          {"require_auth", req(auth)},
          {"allow_any_host", s.allow_any_host()},
          {"allowed_hosts", s.allowed_hosts()},
          {"hosts_with_keys", s.keyed_hosts()},
          {"namespaces", namespaces},
          {"listeners", listeners},
          {"controllers", controllers}};
}

json coalescing_json(const coalesce::Config& c) {
  return {{"policy", coalesce::policy_name(c.policy)},  {"pdus", c.pdus},
          {"timeout_us", c.timeout / kMicro},           {"ctrl_pdus", c.ctrl_pdus},
          {"ctrl_timeout_us", c.ctrl_timeout / kMicro}, {"bytes", c.bytes}};
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

void write_private(const std::string& path, const std::string& text) {
  if (auto error = write_private_file(path, text); !error.empty()) throw RpcError{kRefused, error};
}

}  // namespace

std::map<std::string, Handler> target_handlers(Target& t) {
  std::map<std::string, Handler> h;
  h["rpc_get_methods"] = [](const json&) {
    json out = json::array();
    for (auto& m : method_specs()) {
      json params = json::array();
      for (auto& p : m.params)
        params.push_back({{"name", p.name},
                          {"type", param_type_name(p.type)},
                          {"required", p.required},
                          {"help", p.help}});
      out.push_back({{"name", m.name}, {"help", m.help}, {"params", params}});
    }
    return out;
  };
  h["framework_wait_init"] = [&t](const json&) {
    json listeners = json::array();
    for (auto& b : t.bound())
      listeners.push_back(
          {{"address", b.host}, {"port", b.port}, {"discovery", b.discovery}, {"tls", b.tls}});
    return json{{"ready", true}, {"listeners", listeners}};
  };
  h["subsystem_list"] = [&t](const json& p) {
    std::lock_guard<std::mutex> lock(t.registry().management_mutex());  // namespaces stay
    json out = json::array();
    std::string only = str(p, "nqn");
    for (target::Subsystem* s : t.registry().subsystems())
      if (only.empty() || s->nqn == only) out.push_back(subsystem_json(t, *s));
    if (!only.empty() && out.empty()) throw RpcError{kRefused, "no subsystem '" + only + "'"};
    return out;
  };
  h["subsystem_create"] = [&t](const json& p) {
    target::SubsystemConfig sc;
    sc.nqn = str(p, "nqn");
    sc.namespaces = strings(p, "namespaces");
    sc.allowed_hosts = strings(p, "allowed_hosts");
    sc.allow_any_host =
        p.contains("allow_any_host") ? p["allow_any_host"].get<bool>() : sc.allowed_hosts.empty();
    if (sc.allow_any_host && !sc.allowed_hosts.empty())
      throw RpcError{kInvalidParams, "allow_any_host is true but allowed_hosts names hosts"};
    check(t.create_subsystem(sc));
    return json{{"nqn", sc.nqn}};
  };
  h["subsystem_delete"] = [&t](const json& p) {
    check(t.delete_subsystem(str(p, "nqn")));
    return json(true);
  };
  h["subsystem_allow_any_host"] = [&t](const json& p) {
    check(t.set_allow_any_host(str(p, "nqn"), p["allow"].get<bool>()));
    return json(true);
  };
  h["subsystem_set_security"] = [&t](const json& p) {
    std::string nqn = str(p, "nqn"), host = str(p, "host");
    if (!p.contains("require_tls") && !p.contains("require_auth"))
      throw RpcError{kInvalidParams, "give require_tls and/or require_auth"};
    target::TargetConfig now = t.live_config();
    auto it = std::find_if(now.subsystems.begin(), now.subsystems.end(),
                           [&](auto& s) { return s.nqn == nqn; });
    if (it == now.subsystems.end()) throw RpcError{kRefused, "no subsystem '" + nqn + "'"};
    target::Requirement tls = it->require_tls, auth = it->require_auth;
    auto apply = [&](const char* name, target::Requirement& req) {
      if (!p.contains(name)) return;
      bool on = p[name].get<bool>();
      if (host.empty()) {
        req = {on, {}};
        return;
      }
      auto& hosts = req.hosts;
      hosts.erase(std::remove(hosts.begin(), hosts.end(), host), hosts.end());
      if (on) hosts.push_back(host);
    };
    apply("require_tls", tls);
    apply("require_auth", auth);
    check(t.set_security(nqn, tls, auth));
    auto out = [](const target::Requirement& r) { return r.all ? json(true) : json(r.hosts); };
    return json{{"require_tls", out(tls)}, {"require_auth", out(auth)}};
  };
  h["namespace_add"] = [&t](const json& p) {
    uint32_t nsid = 0;
    uint64_t want = num(p, "nsid");
    if (want > target::kMaxNsid)
      throw RpcError{kInvalidParams, "nsid must be 1.." + std::to_string(target::kMaxNsid)};
    check(t.add_namespace(str(p, "nqn"), str(p, "spec"), uint32_t(want), &nsid));
    return json{{"nsid", nsid}};
  };
  h["namespace_remove"] = [&t](const json& p) {
    std::string note;
    uint64_t nsid = num(p, "nsid");
    if (nsid == 0 || nsid > target::kMaxNsid)
      throw RpcError{kInvalidParams, "nsid must be 1.." + std::to_string(target::kMaxNsid)};
    check(t.remove_namespace(str(p, "nqn"), uint32_t(nsid),
                             Nanos(num(p, "drain_ms", 5000)) * kMilli, &note));
    json out{{"removed", true}};
    if (!note.empty()) out["note"] = note;
    return out;
  };
  h["namespace_resize"] = [&t](const json& p) {
    uint64_t nsid = num(p, "nsid");
    if (nsid == 0 || nsid > target::kMaxNsid)
      throw RpcError{kInvalidParams, "nsid must be 1.." + std::to_string(target::kMaxNsid)};
    std::string nqn = str(p, "nqn");
    check(t.resize_namespace(nqn, uint32_t(nsid), size_param(p, "size")));
    std::lock_guard<std::mutex> lock(t.registry().management_mutex());
    target::Subsystem* sub = t.registry().find(nqn);
    target::Namespace* ns = sub ? sub->ns(uint32_t(nsid)) : nullptr;
    return json{{"size_bytes", ns ? ns->blocks.load() << ns->block_shift : 0}};
  };
  h["host_allow"] = [&t](const json& p) {
    check(t.allow_host(str(p, "nqn"), str(p, "host"), str(p, "key"), str(p, "ctrl_key")));
    return json(true);
  };
  h["host_disallow"] = [&t](const json& p) {
    check(t.disallow_host(str(p, "nqn"), str(p, "host")));
    return json(true);
  };
  h["controller_list"] = [&t](const json& p) {
    json out = json::array();
    std::string only = str(p, "nqn");
    for (auto& c : t.registry().controllers())
      if (only.empty() || c->subsystem->nqn == only) out.push_back(controller_json(*c));
    return out;
  };
  h["controller_disconnect"] = [&t](const json& p) {
    uint64_t id = num(p, "cntlid");
    if (id == 0 || id > 0xFFEF) throw RpcError{kInvalidParams, "cntlid must be 1..65519"};
    check(t.disconnect_controller(uint16_t(id)));
    return json(true);
  };
  h["namespace_set_ana_group"] = [&t](const json& p) {
    uint64_t nsid = num(p, "nsid"), group = num(p, "group");
    if (nsid == 0 || nsid > target::kMaxNsid)
      throw RpcError{kInvalidParams, "nsid must be 1.." + std::to_string(target::kMaxNsid)};
    if (group == 0 || group > target::ana::kMaxGroups)
      throw RpcError{kInvalidParams, "group must be 1..32"};
    check(t.set_namespace_ana_group(str(p, "nqn"), uint32_t(nsid), uint32_t(group)));
    return json(true);
  };
  h["listener_add"] = [&t](const json& p) {
    uint64_t port = num(p, "port");
    if (port > 65535) throw RpcError{kInvalidParams, "port must be 0..65535"};
    std::string text = str(p, "address");
    // (parse_listen wants a port; 0, any free one, is set after)
    text = (text.find(':') != std::string::npos ? "[" + text + "]" : text) + ":" +
           std::to_string(port ? port : 1);
    if (p.contains("ana")) {
      std::string ana = str(p, "ana");
      text += ana.rfind("ana", 0) == 0 ? "," + ana : ",ana=" + ana;
    }
    target::ListenAddress addr;
    std::string error;
    if (!target::parse_listen(text, &addr, &error)) throw RpcError{kInvalidParams, error};
    addr.port = uint16_t(port);
    target::Target::Bound added;
    check(t.add_listener(addr, p.value("tls", false), &added));
    return json{{"address", added.host}, {"port", added.port}, {"tls", added.tls}};
  };
  h["listener_remove"] = [&t](const json& p) {
    uint64_t port = num(p, "port");
    if (port == 0 || port > 65535) throw RpcError{kInvalidParams, "port must be 1..65535"};
    check(t.remove_listener(str(p, "address"), uint16_t(port)));
    return json(true);
  };
  h["listener_list"] = [&t](const json&) {
    std::lock_guard<std::mutex> lock(t.registry().management_mutex());
    json out = json::array();
    const auto& ports = t.registry().ana_ports();
    for (auto& b : t.bound()) {
      json l{{"address", b.host}, {"port", b.port}, {"discovery", b.discovery}, {"tls", b.tls}};
      for (auto& port : ports)
        if (!b.discovery && port->host == b.host && port->port == b.port) {
          json groups = json::object();
          for (uint32_t g = 1; g <= target::ana::kMaxGroups; ++g)
            groups[std::to_string(g)] = target::ana::state_name(port->state(g));
          l["ana"] = groups;
        }
      out.push_back(l);
    }
    return out;
  };
  h["listener_set_ana"] = [&t](const json& p) {
    uint8_t state;
    if (!target::ana::parse_state(str(p, "state"), &state))
      throw RpcError{kInvalidParams, "state '" + str(p, "state") +
                                         "': optimized, non-optimized, inaccessible, "
                                         "persistent-loss or change"};
    uint64_t group = num(p, "group");
    if (group > target::ana::kMaxGroups)
      throw RpcError{kInvalidParams, "group must be 1..32 (or left out: every group)"};
    std::string address = str(p, "address");
    uint64_t port = num(p, "port");
    std::lock_guard<std::mutex> lock(t.registry().management_mutex());
    const auto& ports = t.registry().ana_ports();
    for (size_t i = 0; i < ports.size(); ++i)
      if (ports[i]->host == address && ports[i]->port == port) {
        int changed = t.set_ana_state(i, uint32_t(group), state);
        return json{{"groups_changed", changed}};
      }
    throw RpcError{kRefused, "no I/O listener " + address + ":" + std::to_string(port) +
                                 " (listener_list shows them)"};
  };
  h["coalescing_get"] = [&t](const json& p) {
    std::string error;
    auto c = t.coalescing(str(p, "nqn"), &error);
    check(error);
    return coalescing_json(c);
  };
  h["coalescing_set"] = [&t](const json& p) {
    std::string nqn = str(p, "nqn"), error;
    if (p.contains("inherit") && p["inherit"].get<bool>()) {
      if (nqn.empty()) throw RpcError{kInvalidParams, "inherit needs nqn (the subsystem)"};
      if (p.size() > 2) throw RpcError{kInvalidParams, "inherit takes no other setting"};
      check(t.clear_coalescing(nqn));
      return coalescing_json(t.coalescing(nqn, &error));
    }
    coalesce::Config c = t.coalescing(nqn, &error);
    check(error);
    if (p.contains("policy") && !coalesce::parse_policy(str(p, "policy"), &c.policy))
      throw RpcError{kInvalidParams,
                     "policy '" + str(p, "policy") + "': off, uniform, sens, eager or adaptive"};
    auto u32 = [&](const char* name, uint32_t& field) {
      if (!p.contains(name)) return;
      uint64_t v = num(p, name);
      if (v > UINT32_MAX) throw RpcError{kInvalidParams, std::string(name) + " is too large"};
      field = uint32_t(v);
    };
    auto us = [&](const char* name, Nanos& field) {
      if (!p.contains(name)) return;
      uint64_t v = num(p, name);
      if (v > 10'000'000) throw RpcError{kInvalidParams, std::string(name) + ": at most 10 s"};
      field = Nanos(v) * kMicro;
    };
    u32("pdus", c.pdus);
    u32("ctrl_pdus", c.ctrl_pdus);
    u32("bytes", c.bytes);
    us("timeout_us", c.timeout);
    us("ctrl_timeout_us", c.ctrl_timeout);
    // (the same bounds validate() holds the command line to, named as the RPC names them)
    if (c.pdus < 1 || c.pdus > 1024) throw RpcError{kInvalidParams, "pdus must be in 1..1024"};
    if (c.ctrl_pdus < 1 || c.ctrl_pdus > 1024)
      throw RpcError{kInvalidParams, "ctrl_pdus must be in 1..1024"};
    if (c.bytes < 512) throw RpcError{kInvalidParams, "bytes must be at least 512"};
    check(t.set_coalescing(nqn, c));
    return coalescing_json(c);
  };
  h["stats_get"] = [&t](const json&) { return t.stats_json(); };
  h["stats_reset"] = [&t](const json&) {
    t.reset_stats();
    return json(true);
  };
  h["log_get_level"] = [](const json&) { return json(level_name(g_log_level.load())); };
  h["log_set_level"] = [](const json& p) {
    std::string name = str(p, "level");
    for (LogLevel l : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug})
      if (name == level_name(l)) {
        g_log_level = l;
        return json(name);
      }
    throw RpcError{kInvalidParams, "level '" + name + "': error, warn, info or debug"};
  };
  h["save_config"] = [&t](const json& p) {
    std::string secrets = str(p, "secrets", "redact"), path = str(p, "path");
    if (secrets != "redact" && secrets != "inline" && secrets != "files")
      throw RpcError{kInvalidParams, "secrets '" + secrets + "': redact, inline or files"};
    target::TargetConfig config = t.live_config();
    std::string dir = str(p, "secrets_dir");
    if (secrets == "files") {
      if (dir.empty() && path.find('/') != std::string::npos)
        dir = path.substr(0, path.rfind('/')) + "/keys";  // beside the config
      if (dir.empty() || dir[0] != '/')
        throw RpcError{kInvalidParams,
                       "secrets files: secrets_dir (an absolute path) or an absolute path"};
      check(target::secrets_to_files(config, dir));
    } else if (p.contains("secrets_dir")) {
      throw RpcError{kInvalidParams, "secrets_dir goes with secrets files"};
    }
    std::string text = target::to_json_text(config, secrets == "inline");
    if (path.empty()) return json::parse(text);
    write_private(path, text + "\n");
    LOG_INFO("configuration saved to %s%s", path.c_str(),
             secrets == "files" ? (" (keys in " + dir + ")").c_str() : "");
    return json{{"path", path}};
  };
  h["load_config"] = [&t](const json& p) {
    // The file (sens's or nvmetcli's) over the running configuration: what it names is
    // applied through the live changes; keys it leaves out keep their running values.
    std::string path = str(p, "path"), error;
    target::TargetConfig fresh = t.live_config();
    std::vector<std::string> warnings;
    if (!target::load_json(path, &fresh, &error, &warnings)) throw RpcError{kRefused, error};
    target::apply_defaults(fresh);
    if (auto why = target::validate(fresh, &warnings); !why.empty())
      throw RpcError{kRefused, path + ": " + why};
    json changes = json::array();
    for (auto& line : t.apply_config(fresh)) {
      LOG_INFO("load_config %s: %s", path.c_str(), line.c_str());
      changes.push_back(line);
    }
    return json{{"changes", changes}, {"warnings", warnings}};
  };
  h["qos_get"] = [&t](const json& p) {
    std::string error;
    target::qos::Config c = t.qos_config(str(p, "nqn"), &error);
    check(error);
    return target::qos::config_json(c);
  };
  h["qos_set"] = [&t](const json& p) {
    namespace qos = target::qos;
    std::string nqn = str(p, "nqn"), error;
    bool by_ns = p.contains("nsid"), by_host = p.contains("host");
    if (by_ns == by_host)
      throw RpcError{kInvalidParams, "give nsid (a namespace's limits) or host (a host's)"};
    qos::Config c = t.qos_config(nqn, &error);
    check(error);
    uint64_t nsid = num(p, "nsid");
    std::string host = str(p, "host");
    if (by_ns && (nsid < 1 || nsid > 1024)) throw RpcError{kInvalidParams, "nsid must be 1..1024"};
    qos::Limits l = by_ns ? c.namespaces[uint32_t(nsid)] : c.hosts[host];
    json given = json::object();
    for (const char* key : qos::kKeys)
      if (p.contains(key)) given[key] = p[key];
    bool clear = p.contains("clear") && p["clear"].get<bool>();
    if (given.empty() && !clear)
      throw RpcError{kInvalidParams,
                     "no limit given (read_iops, write_iops, total_iops, read_mibps, "
                     "write_mibps, total_mibps; or clear)"};
    if (clear && !given.empty()) throw RpcError{kInvalidParams, "clear takes no limit with it"};
    if (clear) l = qos::Limits{};
    if (!qos::parse_limits(given, "qos_set", &l, &error)) throw RpcError{kInvalidParams, error};
    (by_ns ? c.namespaces[uint32_t(nsid)] : c.hosts[host]) = l;
    check(t.set_qos(nqn, c));
    json out = {{"nqn", nqn}, {"limits", qos::limits_json(l)}};
    if (by_ns)
      out["nsid"] = nsid;
    else
      out["host"] = host;
    return out;
  };
  return h;
}

}  // namespace sens::mgmt
