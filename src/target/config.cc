#include "target/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <set>
#include <thread>

#include "auth/dhchap.h"
#include "common/units.h"
#include "storage/device.h"
#include "target/names.h"
#include "target/ns_options.h"

namespace sens::target {

SubsystemConfig::~SubsystemConfig() {
  for (auto* keys : {&host_keys, &ctrl_keys})
    for (auto& [host, key] : *keys) auth::wipe_text(key);
}

uint32_t dhchap_negotiation_limit(const TargetConfig& config) {
  if (config.dhchap_negotiations) return config.dhchap_negotiations;
  return std::max(8u, 2 * std::max(1u, std::thread::hardware_concurrency()));
}

void apply_defaults(TargetConfig& c) {
  if (c.listen.empty()) c.listen.push_back({"127.0.0.1", 4420});
  if (c.subsystems.empty()) c.subsystems.push_back({kDefaultNqn, {}, {}});
  for (auto& s : c.subsystems)
    if (s.namespaces.empty()) s.namespaces.push_back("ram:1G");
}

namespace ana {

const char* state_name(uint8_t state) {
  switch (state) {
    case kOptimized:
      return "optimized";
    case kNonOptimized:
      return "non-optimized";
    case kInaccessible:
      return "inaccessible";
    case kPersistentLoss:
      return "persistent-loss";
    case kChange:
      return "change";
    default:
      return "?";
  }
}

bool parse_state(const std::string& text, uint8_t* state) {
  for (uint8_t s : {kOptimized, kNonOptimized, kInaccessible, kPersistentLoss, kChange})
    if (text == state_name(s)) {
      *state = s;
      return true;
    }
  return false;
}

}  // namespace ana

uint8_t ListenAddress::ana_for(uint32_t group) const {
  for (auto& [g, s] : ana_groups)
    if (g == group) return s;
  return ana_state;
}

std::string listen_text(const ListenAddress& l) {
  std::string t = l.host.find(':') != std::string::npos ? "[" + l.host + "]:" : l.host + ":";
  t += std::to_string(l.port);
  if (l.ana_state != ana::kOptimized) t += std::string(",ana=") + ana::state_name(l.ana_state);
  for (auto& [g, s] : l.ana_groups) t += ",ana." + std::to_string(g) + "=" + ana::state_name(s);
  return t;
}

// ",ana=STATE,ana.GROUP=STATE" after the address of a listener.
static bool parse_listen_options(const std::string& text, const std::string& options,
                                 ListenAddress* out, std::string* error) {
  size_t start = 0;
  while (start < options.size()) {
    size_t comma = options.find(',', start);
    std::string item =
        options.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? options.size() : comma + 1;
    auto eq = item.find('=');
    std::string key = item.substr(0, eq),
                value = eq == std::string::npos ? "" : item.substr(eq + 1);
    uint8_t state = 0;
    bool known_state = ana::parse_state(value, &state);
    if (key == "ana") {
      if (!known_state) {
        *error = "listen address '" + text + "': ana='" + value +
                 "' is not optimized, non-optimized, inaccessible, persistent-loss or change";
        return false;
      }
      out->ana_state = state;
    } else if (key.rfind("ana.", 0) == 0) {
      char* end = nullptr;
      std::string num = key.substr(4);
      unsigned long g = std::strtoul(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || g < 1 || g > ana::kMaxGroups) {
        *error = "listen address '" + text + "': '" + key + "': the ANA group must be 1.." +
                 std::to_string(ana::kMaxGroups);
        return false;
      }
      if (!known_state) {
        *error = "listen address '" + text + "': " + key + "='" + value +
                 "' is not optimized, non-optimized, inaccessible, persistent-loss or change";
        return false;
      }
      for (auto& [og, os] : out->ana_groups)
        if (og == g) {
          *error = "listen address '" + text + "': " + key + " given twice";
          return false;
        }
      out->ana_groups.push_back({uint32_t(g), state});
    } else {
      *error = "listen address '" + text + "': unknown option '" + item +
               "' (ana=STATE, ana.GROUP=STATE)";
      return false;
    }
  }
  return true;
}

bool parse_listen(const std::string& full, ListenAddress* out, std::string* error) {
  std::string text = full, options;
  if (auto comma = full.find(','); comma != std::string::npos) {
    text = full.substr(0, comma);
    options = full.substr(comma + 1);
  }
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
  out->ana_state = ana::kOptimized;
  out->ana_groups.clear();
  return parse_listen_options(full, options, out, error);
}

bool parse_host_key(const std::string& text, std::pair<std::string, std::string>* out,
                    std::string* error) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    *error = "expected NQN=DHHC-1:xx:...: (a host NQN, '=', its secret)";
    return false;
  }
  *out = {text.substr(0, eq), text.substr(eq + 1)};
  return true;
}

template <class Parse>
static bool parse_id_list(const std::string& text, std::vector<uint8_t>* out, Parse parse,
                          const char* what, std::string* error) {
  out->clear();
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint8_t id = 0;
    if (!parse(item, &id)) {
      *error = "'" + item + "' is not " + what;
      return false;
    }
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

bool parse_cntlid_range(const std::string& text, uint16_t* min, uint16_t* max, std::string* error) {
  // Digits only: "1-x", " 5-9" and "-3" are errors, not a range that strtoul half-read.
  auto number = [](const std::string& s, uint16_t* out) {
    if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
    unsigned long n = std::stoul(s);
    if (n < 1 || n > 0xFFEF) return false;
    *out = uint16_t(n);
    return true;
  };
  size_t dash = text.find('-');
  uint16_t lo = 0, hi = 0;
  if (dash == std::string::npos || !number(text.substr(0, dash), &lo) ||
      !number(text.substr(dash + 1), &hi)) {
    *error = "'" + text + "' is not MIN-MAX with both in 1..65519 (e.g. 1-32767)";
    return false;
  }
  if (lo > hi) {
    *error = "'" + text + "': MIN is above MAX";
    return false;
  }
  *min = lo;
  *max = hi;
  return true;
}

bool parse_hash_list(const std::string& text, std::vector<uint8_t>* out, std::string* error) {
  return parse_id_list(
      text, out, [](const std::string& s, uint8_t* id) { return auth::parse_hash(s, id); },
      "a DH-HMAC-CHAP hash (sha256, sha384, sha512)", error);
}

bool parse_dhgroup_list(const std::string& text, std::vector<uint8_t>* out, std::string* error) {
  return parse_id_list(
      text, out, [](const std::string& s, uint8_t* id) { return auth::parse_dh_group(s, id); },
      "a DH group (null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192)", error);
}

static bool valid_nqn(const std::string& nqn) {
  return nqn.size() > 4 && nqn.size() <= 223 && nqn.rfind("nqn.", 0) == 0;
}

std::string validate(const TargetConfig& c, std::vector<std::string>* warnings) {
  if (c.listen.empty()) return "no listen address";
  if (c.subsystems.empty()) return "no subsystem";
  std::set<std::string> nqns;
  for (auto& s : c.subsystems) {
    std::string warning, err = check_subsystem_nqn(s.nqn, c.strict_nqn, &warning);
    if (!err.empty()) return err;
    if (!warning.empty() && warnings) warnings->push_back(warning);
    if (!s.serial.empty() && !(err = check_serial(s.serial)).empty())
      return "subsystem '" + s.nqn + "': serial " + err;
    if (s.nqn == "nqn.2014-08.org.nvmexpress.discovery")
      return "the discovery NQN cannot name an I/O subsystem";
    if (!nqns.insert(s.nqn).second) return "subsystem NQN '" + s.nqn + "' given twice";
    if (s.namespaces.empty()) return "subsystem '" + s.nqn + "' has no namespace";
    if (auto e = qos::check_config(s.qos); !e.empty()) return "subsystem '" + s.nqn + "': " + e;
    if (s.namespaces.size() > 1024)
      return "subsystem '" + s.nqn + "' has more than 1024 namespaces";
    std::set<uint32_t> nsids;  // nsid=N, or the one after the previous namespace's
    uint32_t nsid = 0;
    for (auto& ns : s.namespaces) {
      std::string err = check_namespace_spec(ns);
      if (!err.empty()) return "namespace '" + ns + "': " + err;
      nsid = spec_nsid(ns, nsid);
      if (nsid > 1024 || !nsids.insert(nsid).second)
        return "subsystem '" + s.nqn + "': nsid " + std::to_string(nsid) +
               (nsid > 1024 ? " is past 1024" : " given twice");
    }
    for (auto& h : s.allowed_hosts)
      if (!valid_nqn(h)) return "allowed host '" + h + "' is not an NQN (nqn.…)";
    // Secrets are checked here so that a typo stops the target at start; errors name the
    // host, never the secret.
    for (auto* keys : {&s.host_keys, &s.ctrl_keys}) {
      const char* kind = keys == &s.host_keys ? "host key" : "controller key";
      std::set<std::string> hosts;
      for (auto& [host, secret] : *keys) {
        if (!valid_nqn(host)) return std::string(kind) + " for '" + host + "': not an NQN";
        if (!hosts.insert(host).second)
          return std::string(kind) + " for '" + host + "' given twice";
        std::string why;
        if (!auth::parse_secret(secret, &why))
          return std::string(kind) + " for '" + host + "' of '" + s.nqn + "': " + why;
      }
    }
    for (auto& ctrl_key : s.ctrl_keys) {
      const std::string& host = ctrl_key.first;
      bool has_host_key = std::any_of(s.host_keys.begin(), s.host_keys.end(),
                                      [&](auto& k) { return k.first == host; });
      if (!has_host_key)
        return "controller key for '" + host +
               "' without a host key: the host must authenticate first (--host-key)";
    }
  }
  if (!c.tls_listen.empty() && c.tls_psk_file.empty())
    return "--tls-listen needs --tls PSKFILE (the PSKs in interchange format)";
  if (c.tls_listen.empty() && !c.tls_psk_file.empty())
    return "--tls PSKFILE needs a --tls-listen ADDR:PORT to serve TLS on";
  for (auto& t : c.tls_listen)
    for (auto& l : c.listen)
      if (t.port != 0 && t.host == l.host && t.port == l.port)
        return "listen address " + t.host + ":" + std::to_string(t.port) +
               " is both a TLS and a plain listener";
  if (c.dhchap_hashes.empty()) return "--dhchap-hash: no hash function left";
  if (c.dhchap_dhgroups.empty()) return "--dhchap-dhgroup: no DH group left";
  if (c.dhchap_negotiations > 4096)
    return "--dhchap-negotiations must be in 1..4096 (0: 2 x cores, at least 8), have " +
           std::to_string(c.dhchap_negotiations);
  if (c.dhchap_nice < 0 || c.dhchap_nice > 19)
    return "--dhchap-nice must be in 0..19, have " + std::to_string(c.dhchap_nice);
  if (c.dhchap_timeout_ms < 100 || c.dhchap_timeout_ms > 600000)
    return "--dhchap-timeout-ms must be in 100..600000, have " +
           std::to_string(c.dhchap_timeout_ms);
  if (c.inline_data % 16 != 0 || c.inline_data > 1024 * 1024)
    return "--inline-data must be a multiple of 16 and at most 1 MiB";
  if (c.max_h2c_data < 4096 || c.max_h2c_data % 4 != 0 || c.max_h2c_data > 16 * 1024 * 1024)
    return "--max-h2c-data must be a multiple of 4 in 4 KiB..16 MiB";
  if (c.max_io < 4096 || (c.max_io & (c.max_io - 1)) || c.max_io > 8 * 1024 * 1024)
    return "--max-io must be a power of two in 4 KiB..8 MiB";
  if (c.queue_size < 2 || c.queue_size > 1024) return "--queue-size must be in 2..1024";
  if (c.max_io_queues < 1 || c.max_io_queues > 1024) return "--max-io-queues must be in 1..1024";
  if (c.cntlid_min < 1 || c.cntlid_max > 0xFFEF || c.cntlid_min > c.cntlid_max)
    return "--cntlid-range must be MIN-MAX with 1 <= MIN <= MAX <= 65519 (have " +
           std::to_string(c.cntlid_min) + "-" + std::to_string(c.cntlid_max) + ")";
  if (c.cores < 1 || c.cores > 256) return "--cores must be in 1..256";
  if (c.max_connections < 1 || c.max_connections > 1000000)
    return "--max-connections must be in 1..1000000";
  if (c.buffer_pool < 4 * uint64_t(c.max_io) || c.buffer_pool > (1ull << 40))
    return "--buffer-pool must be at least 4 x --max-io (and at most 1 TiB)";
  if (c.pool_share < 1 || c.pool_share > 100)
    return "--pool-share must be a percentage in 1..100 (have " + std::to_string(c.pool_share) +
           ")";
  if (c.stall_timeout_ms != 0 && (c.stall_timeout_ms < 100 || c.stall_timeout_ms > 3600000))
    return "--stall-timeout must be 0 (never) or in 100ms..3600s (have " +
           std::to_string(c.stall_timeout_ms) + " ms)";
  if (c.coalesce.pdus < 1 || c.coalesce.pdus > 1024) return "--pg-pdus must be in 1..1024";
  if (c.coalesce.ctrl_pdus < 1 || c.coalesce.ctrl_pdus > 1024)
    return "--ctrl-pdus must be in 1..1024";
  if (c.coalesce.bytes < 512) return "--pg-bytes must be at least 512";
  if (c.coalesce.timeout < 0 || c.coalesce.ctrl_timeout < 0) return "timeouts must be >= 0";
  for (auto& s : c.subsystems) {
    if (s.require_tls.any() && c.tls_listen.empty())
      return "subsystem " + s.nqn +
             ": require_tls, but the target has no TLS listener (--tls-listen, --tls)";
    for (auto* req : {&s.require_tls, &s.require_auth})
      for (auto& h : req->hosts)
        if (!valid_nqn(h))
          return "subsystem " + s.nqn + ": " +
                 (req == &s.require_tls ? "require_tls" : "require_auth") + " host '" + h +
                 "' is not an NQN";
    for (auto& h : s.require_auth.hosts)
      if (std::none_of(s.host_keys.begin(), s.host_keys.end(),
                       [&](auto& k) { return k.first == h; }))
        return "subsystem " + s.nqn + ": require_auth for host '" + h +
               "', which has no DH-HMAC-CHAP key (host_keys)";
  }
  for (auto& s : c.subsystems) {
    if (!s.coalesce) continue;
    const auto& o = *s.coalesce;
    std::string where = "subsystem " + s.nqn + ": coalesce ";
    if (o.pdus < 1 || o.pdus > 1024) return where + "pg_pdus must be in 1..1024";
    if (o.ctrl_pdus < 1 || o.ctrl_pdus > 1024) return where + "ctrl_pdus must be in 1..1024";
    if (o.bytes < 512) return where + "pg_bytes must be at least 512";
  }
  std::set<std::pair<std::string, uint16_t>> seen;
  for (auto& l : c.listen)
    if (!seen.insert({l.host, l.port}).second)
      return "listen address " + l.host + ":" + std::to_string(l.port) + " given twice";
  for (auto& l : c.listen)
    if (c.discovery_port && l.port == c.discovery_port)
      return "port " + std::to_string(l.port) + " is both an I/O and the discovery port";
  return "";
}

}  // namespace sens::target
