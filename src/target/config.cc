#include "target/config.h"

#include <arpa/inet.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/units.h"
#include "storage/device.h"

namespace sens::target {

using nlohmann::json;

void apply_defaults(TargetConfig& c) {
  if (c.listen.empty()) c.listen.push_back({"127.0.0.1", 4420});
  if (c.subsystems.empty()) c.subsystems.push_back({kDefaultNqn, {}, {}});
  for (auto& s : c.subsystems)
    if (s.namespaces.empty()) s.namespaces.push_back("ram:1G");
}

bool parse_listen(const std::string& text, ListenAddress* out, std::string* error) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      *error = "listen address '" + text + "': expected [IPv6]:PORT";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) {
      *error = "listen address '" + text + "': expected ADDR:PORT";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  unsigned char buf[16];
  if (inet_pton(AF_INET, host.c_str(), buf) != 1 && inet_pton(AF_INET6, host.c_str(), buf) != 1) {
    *error = "listen address '" + text + "': '" + host + "' is not a numeric IPv4/IPv6 address";
    return false;
  }
  char* end = nullptr;
  unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p == 0 || p > 65535) {
    *error = "listen address '" + text + "': port must be 1..65535";
    return false;
  }
  out->host = host;
  out->port = uint16_t(p);
  return true;
}

static bool valid_nqn(const std::string& nqn) {
  return nqn.size() > 4 && nqn.size() <= 223 && nqn.rfind("nqn.", 0) == 0;
}

std::string validate(const TargetConfig& c) {
  if (c.listen.empty()) return "no listen address";
  if (c.subsystems.empty()) return "no subsystem";
  std::set<std::string> nqns;
  for (auto& s : c.subsystems) {
    if (!valid_nqn(s.nqn))
      return "subsystem NQN '" + s.nqn + "' must start with 'nqn.' and be at most 223 bytes";
    if (s.nqn == "nqn.2014-08.org.nvmexpress.discovery")
      return "the discovery NQN cannot name an I/O subsystem";
    if (!nqns.insert(s.nqn).second) return "subsystem NQN '" + s.nqn + "' given twice";
    if (s.namespaces.empty()) return "subsystem '" + s.nqn + "' has no namespace";
    if (s.namespaces.size() > 1024)
      return "subsystem '" + s.nqn + "' has more than 1024 namespaces";
    for (auto& ns : s.namespaces) {
      std::string err = storage::check_spec(ns);
      if (!err.empty()) return "namespace '" + ns + "': " + err;
    }
    for (auto& h : s.allowed_hosts)
      if (!valid_nqn(h)) return "allowed host '" + h + "' is not an NQN (nqn.…)";
  }
  if (c.inline_data % 16 != 0 || c.inline_data > 1024 * 1024)
    return "--inline-data must be a multiple of 16 and at most 1 MiB";
  if (c.max_h2c_data < 4096 || c.max_h2c_data % 4 != 0 || c.max_h2c_data > 16 * 1024 * 1024)
    return "--max-h2c-data must be a multiple of 4 in 4 KiB..16 MiB";
  if (c.max_io < 4096 || (c.max_io & (c.max_io - 1)) || c.max_io > 8 * 1024 * 1024)
    return "--max-io must be a power of two in 4 KiB..8 MiB";
  if (c.queue_size < 2 || c.queue_size > 1024) return "--queue-size must be in 2..1024";
  if (c.max_io_queues < 1 || c.max_io_queues > 1024) return "--max-io-queues must be in 1..1024";
  if (c.cores < 1 || c.cores > 256) return "--cores must be in 1..256";
  if (c.max_connections < 1 || c.max_connections > 1000000)
    return "--max-connections must be in 1..1000000";
  if (c.buffer_pool < 4 * uint64_t(c.max_io) || c.buffer_pool > (1ull << 40))
    return "--buffer-pool must be at least 4 x --max-io (and at most 1 TiB)";
  if (c.coalesce.pdus < 1 || c.coalesce.pdus > 1024) return "--pg-pdus must be in 1..1024";
  if (c.coalesce.ctrl_pdus < 1 || c.coalesce.ctrl_pdus > 1024)
    return "--ctrl-pdus must be in 1..1024";
  if (c.coalesce.bytes < 512) return "--pg-bytes must be at least 512";
  if (c.coalesce.timeout < 0 || c.coalesce.ctrl_timeout < 0) return "timeouts must be >= 0";
  std::set<std::pair<std::string, uint16_t>> seen;
  for (auto& l : c.listen)
    if (!seen.insert({l.host, l.port}).second)
      return "listen address " + l.host + ":" + std::to_string(l.port) + " given twice";
  for (auto& l : c.listen)
    if (c.discovery_port && l.port == c.discovery_port)
      return "port " + std::to_string(l.port) + " is both an I/O and the discovery port";
  return "";
}

namespace {

// Reads an unsigned number or a size string ("128k") from a JSON value.
bool json_size(const json& v, const std::string& key, uint64_t* out, std::string* error) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_string()) {
    if (auto s = parse_size(v.get<std::string>())) {
      *out = *s;
      return true;
    }
  }
  *error = "config key '" + key + "': expected a non-negative number or a size like \"128k\"";
  return false;
}

bool json_strings(const json& v, const std::string& key, std::vector<std::string>* out,
                  std::string* error) {
  if (!v.is_array()) {
    *error = "config key '" + key + "': expected an array of strings";
    return false;
  }
  out->clear();
  for (auto& e : v) {
    if (!e.is_string()) {
      *error = "config key '" + key + "': expected an array of strings";
      return false;
    }
    out->push_back(e.get<std::string>());
  }
  return true;
}

}  // namespace

bool load_json(const std::string& path, TargetConfig* c, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open config file '" + path + "'";
    return false;
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    *error = "config file '" + path + "': " + e.what();
    return false;
  }
  if (!j.is_object()) {
    *error = "config file '" + path + "': expected a JSON object";
    return false;
  }
  for (auto& [key, v] : j.items()) {
    uint64_t n = 0;
    if (key == "listen") {
      std::vector<std::string> items;
      if (!json_strings(v, key, &items, error)) return false;
      c->listen.clear();
      for (auto& s : items) {
        ListenAddress a;
        if (!parse_listen(s, &a, error)) return false;
        c->listen.push_back(a);
      }
    } else if (key == "discovery_port") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > 65535) {
        *error = "config key 'discovery_port': expected 0..65535";
        return false;
      }
      c->discovery_port = uint16_t(v.get<uint64_t>());
    } else if (key == "subsystems") {
      if (!v.is_array()) {
        *error = "config key 'subsystems': expected an array of objects";
        return false;
      }
      c->subsystems.clear();
      for (auto& s : v) {
        if (!s.is_object()) {
          *error = "config key 'subsystems': expected an array of objects";
          return false;
        }
        SubsystemConfig sc;
        for (auto& [k2, v2] : s.items()) {
          if (k2 == "nqn") {
            if (!v2.is_string()) {
              *error = "subsystem key 'nqn': expected a string";
              return false;
            }
            sc.nqn = v2.get<std::string>();
          } else if (k2 == "namespaces") {
            if (!json_strings(v2, "namespaces", &sc.namespaces, error)) return false;
          } else if (k2 == "allowed_hosts") {
            if (!json_strings(v2, "allowed_hosts", &sc.allowed_hosts, error)) return false;
          } else {
            *error = "unknown subsystem key '" + k2 + "' (nqn, namespaces, allowed_hosts)";
            return false;
          }
        }
        c->subsystems.push_back(sc);
      }
    } else if (key == "inline_data" || key == "max_h2c_data" || key == "max_io" ||
               key == "queue_size" || key == "max_io_queues" || key == "cores" ||
               key == "poll_max_us" || key == "sock_buf" || key == "max_connections") {
      if (!json_size(v, key, &n, error)) return false;
      if (n > UINT32_MAX) {
        *error = "config key '" + key + "': too large";
        return false;
      }
      if (key == "inline_data")
        c->inline_data = uint32_t(n);
      else if (key == "max_h2c_data")
        c->max_h2c_data = uint32_t(n);
      else if (key == "max_io")
        c->max_io = uint32_t(n);
      else if (key == "queue_size")
        c->queue_size = uint32_t(n);
      else if (key == "max_io_queues")
        c->max_io_queues = uint32_t(n);
      else if (key == "cores")
        c->cores = int(n);
      else if (key == "sock_buf")
        c->sock_buf = uint32_t(n);
      else if (key == "max_connections")
        c->max_connections = uint32_t(n);
      else
        c->poll_max_us = n;
    } else if (key == "poll") {
      if (!v.is_string() || !parse_poll_mode(v.get<std::string>(), &c->poll)) {
        *error = "config key 'poll': expected \"off\", \"adaptive\" or \"always\"";
        return false;
      }
    } else if (key == "buffer_pool") {
      if (!json_size(v, key, &n, error)) return false;
      c->buffer_pool = n;
    } else if (key == "coalesce") {
      if (!v.is_object()) {
        *error = "config key 'coalesce': expected an object";
        return false;
      }
      for (auto& [k2, v2] : v.items()) {
        if (k2 == "policy") {
          if (!v2.is_string() ||
              !coalesce::parse_policy(v2.get<std::string>(), &c->coalesce.policy)) {
            *error =
                "coalesce key 'policy': expected \"off\", \"eager\", \"uniform\", "
                "\"semantic\" or \"adaptive\"";
            return false;
          }
          continue;
        }
        if (!json_size(v2, "coalesce." + k2, &n, error)) return false;
        if (k2 == "pg_pdus")
          c->coalesce.pdus = uint32_t(n);
        else if (k2 == "pg_timeout_us")
          c->coalesce.timeout = Nanos(n) * kMicro;
        else if (k2 == "ctrl_pdus")
          c->coalesce.ctrl_pdus = uint32_t(n);
        else if (k2 == "ctrl_timeout_us")
          c->coalesce.ctrl_timeout = Nanos(n) * kMicro;
        else if (k2 == "pg_bytes")
          c->coalesce.bytes = uint32_t(n);
        else {
          *error = "unknown coalesce key '" + k2 +
                   "' (policy, pg_pdus, pg_timeout_us, ctrl_pdus, ctrl_timeout_us, pg_bytes)";
          return false;
        }
      }
    } else if (key == "stats_json") {
      if (!v.is_string()) {
        *error = "config key 'stats_json': expected a path";
        return false;
      }
      c->stats_json = v.get<std::string>();
    } else {
      *error = "unknown config key '" + key + "'";
      return false;
    }
  }
  return true;
}

std::string to_json_text(const TargetConfig& c) {
  json j;
  j["listen"] = json::array();
  for (auto& l : c.listen)
    j["listen"].push_back(l.host.find(':') != std::string::npos
                              ? "[" + l.host + "]:" + std::to_string(l.port)
                              : l.host + ":" + std::to_string(l.port));
  j["discovery_port"] = c.discovery_port;
  j["subsystems"] = json::array();
  for (auto& s : c.subsystems)
    j["subsystems"].push_back(
        {{"nqn", s.nqn}, {"namespaces", s.namespaces}, {"allowed_hosts", s.allowed_hosts}});
  j["inline_data"] = c.inline_data;
  j["max_h2c_data"] = c.max_h2c_data;
  j["max_io"] = c.max_io;
  j["queue_size"] = c.queue_size;
  j["max_io_queues"] = c.max_io_queues;
  j["cores"] = c.cores;
  j["poll"] = poll_mode_name(c.poll);
  j["poll_max_us"] = c.poll_max_us;
  j["sock_buf"] = c.sock_buf;
  j["max_connections"] = c.max_connections;
  j["buffer_pool"] = c.buffer_pool;
  j["coalesce"] = {
      {"policy", coalesce::policy_name(c.coalesce.policy)},  {"pg_pdus", c.coalesce.pdus},
      {"pg_timeout_us", c.coalesce.timeout / kMicro},        {"ctrl_pdus", c.coalesce.ctrl_pdus},
      {"ctrl_timeout_us", c.coalesce.ctrl_timeout / kMicro}, {"pg_bytes", c.coalesce.bytes}};
  if (!c.stats_json.empty()) j["stats_json"] = c.stats_json;
  return j.dump(2);
}

}  // namespace sens::target
