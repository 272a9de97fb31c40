// The JSON form of TargetConfig: --config files (and nvmetcli's, nvmet_config.h), --dump-config
// and save_config.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "auth/dhchap.h"
#include "common/files.h"
#include "common/units.h"
#include "target/config.h"
#include "target/nvmet_config.h"

namespace sens::target {

using nlohmann::json;
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

// A coalesce object: the keys given replace those of *out.
bool parse_coalesce(const json& v, const std::string& where, coalesce::Config* out,
                    std::string* error) {
  if (!v.is_object()) {
    *error = where + ": expected an object";
    return false;
  }
  for (auto& [k, v2] : v.items()) {
    if (k == "policy") {
      if (!v2.is_string() || !coalesce::parse_policy(v2.get<std::string>(), &out->policy)) {
        *error = where +
                 " key 'policy': expected \"off\", \"eager\", \"uniform\", \"semantic\" or "
                 "\"adaptive\"";
        return false;
      }
      continue;
    }
    uint64_t n = 0;
    if (!json_size(v2, where + "." + k, &n, error)) return false;
    if (n > UINT32_MAX) return *error = where + " key '" + k + "': too large", false;
    if (k == "pg_pdus")
      out->pdus = uint32_t(n);
    else if (k == "pg_timeout_us")
      out->timeout = Nanos(n) * kMicro;
    else if (k == "ctrl_pdus")
      out->ctrl_pdus = uint32_t(n);
    else if (k == "ctrl_timeout_us")
      out->ctrl_timeout = Nanos(n) * kMicro;
    else if (k == "pg_bytes")
      out->bytes = uint32_t(n);
    else {
      *error = "unknown " + where + " key '" + k +
               "' (policy, pg_pdus, pg_timeout_us, ctrl_pdus, ctrl_timeout_us, pg_bytes)";
      return false;
    }
  }
  return true;
}

json coalesce_json(const coalesce::Config& c) {
  return {{"policy", coalesce::policy_name(c.policy)},  {"pg_pdus", c.pdus},
          {"pg_timeout_us", c.timeout / kMicro},        {"ctrl_pdus", c.ctrl_pdus},
          {"ctrl_timeout_us", c.ctrl_timeout / kMicro}, {"pg_bytes", c.bytes}};
}

// A DH-HMAC-CHAP key kept in a file: its first line. Relative paths are taken from the
// config file's directory. A key others can read is taken with a warning.
bool read_key_file(const std::string& path, std::string* secret, std::string* error,
                   std::vector<std::string>* warnings) {
  std::ifstream in(path);
  if (!in) return *error = "cannot read key file '" + path + "': " + std::strerror(errno), false;
  std::getline(in, *secret);
  while (!secret->empty() && (secret->back() == '\r' || secret->back() == ' ')) secret->pop_back();
  if (secret->empty()) return *error = "key file '" + path + "' is empty", false;
  struct stat st {};
  if (warnings && ::stat(path.c_str(), &st) == 0 && (st.st_mode & 077))
    warnings->push_back("key file '" + path + "' can be read by others (chmod 600 it)");
  return true;
}

bool parse_subsystem(const json& s, const std::string& base_dir, SubsystemConfig* out,
                     std::string* error, std::vector<std::string>* warnings) {
  SubsystemConfig& sc = *out;
  for (auto& [k2, v2] : s.items()) {
    if (k2 == "nqn" || k2 == "serial") {
      if (!v2.is_string()) {
        *error = "subsystem key '" + k2 + "': expected a string";
        return false;
      }
      (k2 == "nqn" ? sc.nqn : sc.serial) = v2.get<std::string>();
    } else if (k2 == "namespaces") {
      if (!json_strings(v2, "namespaces", &sc.namespaces, error)) return false;
    } else if (k2 == "allowed_hosts") {
      if (!json_strings(v2, "allowed_hosts", &sc.allowed_hosts, error)) return false;
    } else if (k2 == "allow_any_host") {
      if (!v2.is_boolean()) {
        *error = "subsystem key 'allow_any_host': expected true or false";
        return false;
      }
      sc.allow_any_host = v2.get<bool>();
    } else if (k2 == "host_keys" || k2 == "ctrl_keys") {
      const std::string shape =
          "expected {\"host NQN\": \"DHHC-1:...\"} or {\"host NQN\": {\"file\": PATH}}";
      if (!v2.is_object()) return *error = "subsystem key '" + k2 + "': " + shape, false;
      bool host = k2 == "host_keys";
      auto& keys = host ? sc.host_keys : sc.ctrl_keys;
      auto& files = host ? sc.host_key_files : sc.ctrl_key_files;
      for (auto& [nqn, secret] : v2.items()) {
        std::string where = "subsystem key '" + k2 + "', host '" + nqn + "': ";
        if (secret.is_string()) {
          keys.push_back({nqn, secret.get<std::string>()});
          continue;
        }
        if (!secret.is_object() || secret.size() != 1 || !secret.contains("file") ||
            !secret["file"].is_string())
          return *error = where + shape, false;
        std::string path = secret["file"].get<std::string>(), text;
        if (!path.empty() && path[0] != '/' && !base_dir.empty()) path = base_dir + "/" + path;
        if (!read_key_file(path, &text, error, warnings)) return *error = where + *error, false;
        keys.push_back({nqn, text});
        files[nqn] = path;
      }
    } else if (k2 == "dhchap_hashes" || k2 == "dhchap_dhgroups") {
      std::vector<std::string> items;
      if (!json_strings(v2, k2, &items, error)) return false;
      std::string joined, why;
      for (auto& i : items) joined += (joined.empty() ? "" : ",") + i;
      bool ok = k2 == "dhchap_hashes" ? parse_hash_list(joined, &sc.dhchap_hashes, &why)
                                      : parse_dhgroup_list(joined, &sc.dhchap_dhgroups, &why);
      if (!ok || items.empty()) {
        *error = "subsystem key '" + k2 + "': " + (items.empty() ? "empty list" : why);
        return false;
      }
    } else if (k2 == "require_tls" || k2 == "require_auth") {
      Requirement& req = k2 == "require_tls" ? sc.require_tls : sc.require_auth;
      if (v2.is_boolean()) {
        req.all = v2.get<bool>();
      } else if (!json_strings(v2, k2, &req.hosts, error)) {
        *error = "subsystem key '" + k2 + "': expected true, false or a list of host NQNs";
        return false;
      }
    } else if (k2 == "coalesce") {
      coalesce::Config scratch;  // checked here; applied over the target's once it is read
      if (!parse_coalesce(v2, "subsystem key 'coalesce'", &scratch, error)) return false;
    } else if (k2 == "qos") {
      if (!qos::parse_config(v2, "subsystem key 'qos'", &sc.qos, error)) return false;
    } else {
      *error = "unknown subsystem key '" + k2 +
               "' (nqn, namespaces, allowed_hosts, allow_any_host, host_keys, ctrl_keys, "
               "dhchap_hashes, dhchap_dhgroups, serial, coalesce, require_tls, require_auth, qos)";
      return false;
    }
  }
  return true;
}
}  // namespace

bool load_json(const std::string& path, TargetConfig* c, std::string* error,
               std::vector<std::string>* warnings) {
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
  if (std::vector<std::string> scratch; is_nvmetcli_json(j)) {
    if (load_nvmetcli(j, c, warnings ? warnings : &scratch, error)) return true;
    return *error = "config file '" + path + "' (nvmetcli's format): " + *error, false;
  }
  // Key files named relative to the config file are found beside it.
  std::string base_dir =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (base_dir.empty()) base_dir = "/";
  std::vector<std::pair<size_t, json>> overrides;  // subsystem index, its "coalesce"
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
    } else if (key == "cntlid_min" || key == "cntlid_max") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 0xFFEF) {
        *error = "config key '" + key + "': expected 1..65519";
        return false;
      }
      (key == "cntlid_min" ? c->cntlid_min : c->cntlid_max) = uint16_t(v.get<uint64_t>());
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
        if (!parse_subsystem(s, base_dir, &sc, error, warnings)) return false;
        if (s.contains("coalesce")) overrides.push_back({c->subsystems.size(), s["coalesce"]});
        c->subsystems.push_back(sc);
      }
    } else if (key == "inline_data" || key == "max_h2c_data" || key == "max_io" ||
               key == "queue_size" || key == "max_io_queues" || key == "cores" ||
               key == "poll_max_us" || key == "sock_buf" || key == "max_connections" ||
               key == "pool_share" || key == "stall_timeout_ms" || key == "dhchap_negotiations" ||
               key == "dhchap_timeout_ms" || key == "dhchap_nice") {
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
      else if (key == "pool_share")
        c->pool_share = uint32_t(n);
      else if (key == "stall_timeout_ms")
        c->stall_timeout_ms = uint32_t(n);
      else if (key == "dhchap_negotiations")
        c->dhchap_negotiations = uint32_t(n);
      else if (key == "dhchap_timeout_ms")
        c->dhchap_timeout_ms = uint32_t(n);
      else if (key == "dhchap_nice" && n > 19)
        return *error = "config key 'dhchap_nice': must be in 0..19, have " + std::to_string(n),
               false;
      else if (key == "dhchap_nice")
        c->dhchap_nice = int(n);
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
    } else if (key == "receive_budget") {
      if (!json_size(v, key, &n, error)) return false;
      c->receive_budget = n;
    } else if (key == "buffers") {
      if (!v.is_string() || !buffers::parse_layout(v.get<std::string>(), &c->buffers)) {
        *error = "config key 'buffers': expected \"naive\" or \"tyche\"";
        return false;
      }
    } else if (key == "coalesce") {
      if (!parse_coalesce(v, "coalesce", &c->coalesce, error)) return false;
    } else if (key == "dhchap_hashes" || key == "dhchap_dhgroups") {
      std::vector<std::string> items;
      if (!json_strings(v, key, &items, error)) return false;
      std::string joined;
      for (auto& i : items) joined += (joined.empty() ? "" : ",") + i;
      std::string why;
      bool ok = key == "dhchap_hashes" ? parse_hash_list(joined, &c->dhchap_hashes, &why)
                                       : parse_dhgroup_list(joined, &c->dhchap_dhgroups, &why);
      if (!ok || items.empty()) {
        *error = "config key '" + key + "': " + (items.empty() ? "empty list" : why);
        return false;
      }
    } else if (key == "tls_listen") {
      std::vector<std::string> items;
      if (!json_strings(v, key, &items, error)) return false;
      c->tls_listen.clear();
      for (auto& s : items) {
        ListenAddress a;
        if (!parse_listen(s, &a, error)) return false;
        c->tls_listen.push_back(a);
      }
    } else if (key == "tls_psk_file" || key == "stats_json" || key == "metrics") {
      if (!v.is_string()) {
        *error =
            "config key '" + key + "': expected " + (key == "metrics" ? "ADDR:PORT" : "a path");
        return false;
      }
      (key == "metrics"      ? c->metrics
       : key == "stats_json" ? c->stats_json
                             : c->tls_psk_file) = v.get<std::string>();
    } else if (key == "dhchap_full_check") {
      if (!v.is_boolean())
        return *error = "config key 'dhchap_full_check': expected true or false", false;
      c->dhchap_full_check = v.get<bool>();
    } else if (key == "strict_nqn") {
      if (!v.is_boolean()) return *error = "config key 'strict_nqn': expected true or false", false;
      c->strict_nqn = v.get<bool>();
    } else {
      *error = "unknown config key '" + key + "'";
      return false;
    }
  }
  for (auto& [index, v] : overrides) {
    coalesce::Config own = c->coalesce;  // the target's, whatever order the keys came in
    if (!parse_coalesce(v, "subsystem key 'coalesce'", &own, error)) return false;
    c->subsystems[index].coalesce = own;
  }
  return true;
}

std::string to_json_text(const TargetConfig& c, bool with_secrets) {
  json j;
  j["listen"] = json::array();
  for (auto& l : c.listen) j["listen"].push_back(listen_text(l));
  j["discovery_port"] = c.discovery_port;
  if (!c.tls_listen.empty()) {
    j["tls_listen"] = json::array();
    for (auto& l : c.tls_listen) j["tls_listen"].push_back(listen_text(l));
    j["tls_psk_file"] = c.tls_psk_file;
  }
  j["subsystems"] = json::array();
  for (auto& s : c.subsystems) {
    json sub = {{"nqn", s.nqn}, {"namespaces", s.namespaces}, {"allowed_hosts", s.allowed_hosts}};
    if (!s.allow_any_host) sub["allow_any_host"] = false;
    // The dump names which hosts have keys; the keys only when asked (save_config).
    for (bool host : {true, false})
      for (auto& [nqn, secret] : host ? s.host_keys : s.ctrl_keys) {
        auto& files = host ? s.host_key_files : s.ctrl_key_files;
        auto file = files.find(nqn);
        json& out = sub[host ? "host_keys" : "ctrl_keys"][nqn];
        if (file != files.end())
          out = {{"file", file->second}};  // where the key is, not the key
        else
          out = with_secrets ? secret : "(secret)";
      }
    for (uint8_t h : s.dhchap_hashes) sub["dhchap_hashes"].push_back(auth::hash_name(h));
    for (uint8_t g : s.dhchap_dhgroups) sub["dhchap_dhgroups"].push_back(auth::dh_group_name(g));
    if (!s.serial.empty()) sub["serial"] = s.serial;
    if (s.coalesce) sub["coalesce"] = coalesce_json(*s.coalesce);
    for (bool tls : {true, false}) {
      const Requirement& req = tls ? s.require_tls : s.require_auth;
      if (req.all)
        sub[tls ? "require_tls" : "require_auth"] = true;
      else if (!req.hosts.empty())
        sub[tls ? "require_tls" : "require_auth"] = req.hosts;
    }
    if (!s.qos.empty()) sub["qos"] = qos::config_json(s.qos);
    j["subsystems"].push_back(sub);
  }
  std::vector<std::string> hashes, groups;
  for (uint8_t h : c.dhchap_hashes) hashes.push_back(auth::hash_name(h));
  for (uint8_t g : c.dhchap_dhgroups) groups.push_back(auth::dh_group_name(g));
  j["dhchap_hashes"] = hashes;
  j["dhchap_dhgroups"] = groups;
  j["inline_data"] = c.inline_data;
  j["max_h2c_data"] = c.max_h2c_data;
  j["max_io"] = c.max_io;
  j["queue_size"] = c.queue_size;
  j["max_io_queues"] = c.max_io_queues;
  j["cntlid_min"] = c.cntlid_min;
  j["cntlid_max"] = c.cntlid_max;
  j["cores"] = c.cores;
  j["poll"] = poll_mode_name(c.poll);
  j["poll_max_us"] = c.poll_max_us;
  j["sock_buf"] = c.sock_buf;
  j["max_connections"] = c.max_connections;
  j["dhchap_negotiations"] = c.dhchap_negotiations;
  j["dhchap_timeout_ms"] = c.dhchap_timeout_ms;
  j["dhchap_nice"] = c.dhchap_nice;
  j["buffer_pool"] = c.buffer_pool;
  j["buffers"] = buffers::layout_name(c.buffers);
  j["receive_budget"] = c.receive_budget;
  j["pool_share"] = c.pool_share;
  j["stall_timeout_ms"] = c.stall_timeout_ms;
  j["coalesce"] = coalesce_json(c.coalesce);
  if (!c.stats_json.empty()) j["stats_json"] = c.stats_json;
  if (c.strict_nqn) j["strict_nqn"] = true;
  if (c.dhchap_full_check) j["dhchap_full_check"] = true;
  if (!c.metrics.empty()) j["metrics"] = c.metrics;
  return j.dump(2);
}

// ---------------------------------------------------------------------------- secrets as files

namespace {

// A file name from NQNs: what is not [A-Za-z0-9._-] becomes '_' (NQNs hold ':' and may hold
// '/'); a short hash of the exact names keeps two that map alike apart.
std::string key_file_name(const std::string& sub, const std::string& host, bool host_key) {
  auto clean = [](std::string s) {
    for (char& ch : s)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') ch = '_';
    return s;
  };
  char tag[9];
  std::snprintf(tag, sizeof(tag), "%08x",
                uint32_t(std::hash<std::string>{}(sub + '\n' + host) & 0xFFFFFFFFu));
  return clean(sub) + "." + clean(host) + "." + tag + (host_key ? ".host" : ".ctrl") + ".key";
}

}  // namespace

std::string secrets_to_files(TargetConfig& c, const std::string& dir) {
  if (dir.empty() || dir[0] != '/') return "secrets_dir '" + dir + "': an absolute path";
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create '" + dir + "': " + std::strerror(errno);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return "secrets_dir '" + dir + "' is not a directory";
  for (auto& s : c.subsystems)
    for (bool host : {true, false})
      for (auto& [nqn, secret] : host ? s.host_keys : s.ctrl_keys) {
        auto& files = host ? s.host_key_files : s.ctrl_key_files;
        if (files.count(nqn)) continue;  // in its file already
        std::string path = dir + "/" + key_file_name(s.nqn, nqn, host);
        if (auto error = write_private_file(path, secret + "\n"); !error.empty()) return error;
        files[nqn] = path;
      }
  return "";
}

}  // namespace sens::target
