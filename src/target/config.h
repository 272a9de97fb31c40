#pragma once
// What a target serves and how: from the command line or a JSON file (same keys).
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "buffers/buffer_pool.h"
#include "coalesce/scheduler.h"
#include "reactor/reactor.h"
#include "target/qos.h"

namespace sens::target {

// A security requirement of a subsystem: for every host, or for the hosts named.
struct Requirement {
  bool all = false;
  std::vector<std::string> hosts;
  bool applies(const std::string& host) const {
    return all || std::find(hosts.begin(), hosts.end(), host) != hosts.end();
  }
  bool any() const { return all || !hosts.empty(); }
  bool operator==(const Requirement&) const = default;
};

struct SubsystemConfig {
  std::string nqn;
  std::vector<std::string> namespaces;     // "ram:1G", "file:/path", "null:1G", "rbd:pool/image"
  std::vector<std::string> allowed_hosts;  // empty: any host (but see host_keys)
  // false: only the hosts named (none when the list is empty: every host was disallowed live)
  bool allow_any_host = true;
  // DH-HMAC-CHAP secrets ("DHHC-1:xx:...:") per host NQN: a host with a key must
  // authenticate, and is on the allow-list. ctrl_keys: the controller's key for that host
  // (bidirectional authentication, when the host asks for it).
  std::vector<std::pair<std::string, std::string>> host_keys, ctrl_keys;
  // host NQN -> the file a key was read from (config {"file": PATH}; save_config "files"):
  // saved as that reference, and re-read by SIGHUP (a key rotated in its file).
  std::map<std::string, std::string> host_key_files, ctrl_key_files;
  // Overrides of the target's dhchap_hashes / dhchap_dhgroups for this subsystem (empty: the
  // target's).
  std::vector<uint8_t> dhchap_hashes, dhchap_dhgroups;
  std::string serial;  // Identify Controller SN (1..20 ASCII); empty: derived from the NQN
  // This subsystem's own coalescing (coalescing_set --nqn, or "coalesce" in its JSON object:
  // the target's settings with the keys given there replaced); none: the target's.
  std::optional<coalesce::Config> coalesce;
  // Hosts that must connect over TLS (on any listener: a host known by its PSK cannot be
  // impersonated on a plain port with its public NQN), and hosts that must authenticate with
  // DH-HMAC-CHAP (a host without a key is refused). JSON: true, or a list of host NQNs.
  Requirement require_tls, require_auth;
  // IOPS and bandwidth limits per namespace and per host ("qos" in its JSON object; qos_set).
  qos::Config qos;
  // The secrets' text is overwritten before a copy's memory goes back (config copies are
  // many: the command line's, the file's, the running and the live one, RPC answers).
  ~SubsystemConfig();
};

// ANA (Asymmetric Namespace Access) states, as the ANA log page codes them (NVMe Base 2.0
// 8.1.3): what a host reaching the namespaces of a group through a listener gets.
namespace ana {
inline constexpr uint8_t kOptimized = 0x01, kNonOptimized = 0x02, kInaccessible = 0x03,
                         kPersistentLoss = 0x04, kChange = 0x0F;
inline constexpr uint32_t kMaxGroups = 32;  // ANAGRPMAX = NANAGRPID; group ids 1..32
// "optimized", "non-optimized", "inaccessible", "persistent-loss", "change".
const char* state_name(uint8_t state);
bool parse_state(const std::string& text, uint8_t* state);
}  // namespace ana

struct ListenAddress {
  std::string host;  // numeric IPv4/IPv6
  uint16_t port = 0;
  // The ANA state of every group through this listener (ana=STATE), and per-group overrides
  // (ana.GROUP=STATE). A host connected here sees these in the ANA log page.
  uint8_t ana_state = ana::kOptimized;
  std::vector<std::pair<uint32_t, uint8_t>> ana_groups;
  // The state of `group` (1..kMaxGroups) through this listener.
  uint8_t ana_for(uint32_t group) const;
};

struct TargetConfig {
  std::vector<ListenAddress> listen;  // I/O listeners (default 127.0.0.1:4420)
  // TLS 1.3 listeners (NVMe/TCP 1.1): every connection there runs a TLS handshake with a PSK of
  // tls_psk_file (interchange format) first.
  std::vector<ListenAddress> tls_listen;
  std::string tls_psk_file;
  uint16_t discovery_port = 8009;  // 0: no discovery controller
  std::vector<SubsystemConfig> subsystems;
  uint32_t inline_data = 8192;         // in-capsule data bytes on I/O queues
  uint32_t max_h2c_data = 128 * 1024;  // ICResp maxh2cdata
  uint32_t max_io = 128 * 1024;        // MDTS, bytes (a power of two >= 4 KiB)
  uint32_t queue_size = 1024;          // entries per queue (CAP.MQES + 1); slots grow on demand
  uint32_t max_io_queues = 64;
  // Controller IDs are drawn from cntlid_min..cntlid_max. Gateways of one subsystem give each
  // other disjoint ranges, because the Linux host needs cntlids unique within a subsystem.
  uint16_t cntlid_min = 1;
  uint16_t cntlid_max = 0xFFEF;
  int cores = 1;
  int first_core = -1;                  // pin reactor i to core first_core + i; -1: no pinning
  PollMode poll = PollMode::kAdaptive;  // how reactors wait for events (--poll)
  uint64_t poll_max_us = 50;            // the longest adaptive spin (--poll-max-us)
  uint32_t sock_buf = 0;                // SO_SNDBUF of accepted sockets; 0: the kernel's default
  uint32_t max_connections = 4096;      // open connections (all queues of all hosts)
  uint64_t buffer_pool = 256ull << 20;  // I/O buffer bytes per reactor (in-flight data bound)
  buffers::Layout buffers = buffers::Layout::kNaive;  // --buffers naive|tyche
  uint64_t receive_budget = 0;  // tyche: R2T data buffers in use at once; 0: from the caches
  // Issue 29: the most one connection may hold of its reactor's buffer pools, in percent
  // (each also keeps a reserve of one largest buffer, see buffers/buffer_pool.h).
  uint32_t pool_share = 25;
  // A send that makes no progress, H2CData that does not come after its R2T, or a PDU left
  // unfinished for this long ends the connection (stall_watch.h); 0: never.
  uint32_t stall_timeout_ms = 30000;
  coalesce::Config coalesce;
  // DH-HMAC-CHAP: the hash functions and DH groups this target accepts, preferred first
  // (HashIDs 1..3, DHgroupIDs 0 null .. 5 ffdhe8192).
  std::vector<uint8_t> dhchap_hashes = {1, 2, 3};
  std::vector<uint8_t> dhchap_dhgroups = {0, 1, 2, 3, 4, 5};
  // Negotiations with a DH group in progress at once on the whole target (0: 2 x the
  // machine's cores, at least 8); more wait in turn, 8 per slot at most, then are refused.
  // Each holds its slot for dhchap_timeout_ms at most.
  uint32_t dhchap_negotiations = 0;
  uint32_t dhchap_timeout_ms = 10000;
  // How much lower (nice, 0..19, added to the target's own) the DH workers run than the
  // reactors, for machines whose reactors keep their cores busy. 0 by default: on the 2-core
  // bench (bench/auth_storm.py) 10 or 19 did not lower the I/O's p99 during a storm and made
  // the storm last longer.
  int dhchap_nice = 0;
  // Check a host's DH value fully (y^q = 1 mod p, for FIPS deployments) rather than its range
  // only (auth::PeerCheck): the full check costs most of an ffdhe8192 negotiation's CPU.
  bool dhchap_full_check = false;
  std::string stats_json;  // written at exit and on SIGUSR1
  std::string metrics;     // ADDR:PORT of the Prometheus endpoint (src/mgmt); "": none
  bool read_only = false;
  // Refuse subsystem names without "nqn." (the Linux target takes them; sens warns).
  bool strict_nqn = false;
};

// dhchap_negotiations, with 0 resolved.
uint32_t dhchap_negotiation_limit(const TargetConfig& config);
// Fills defaults the command line leaves open (listener, the RAM subsystem).
void apply_defaults(TargetConfig& config);
// Checks every field; returns "" or the first error, precise enough to fix the input. What is
// taken but worth a word (a subsystem name without "nqn.") goes to *warnings.
std::string validate(const TargetConfig& config, std::vector<std::string>* warnings = nullptr);
// Parses "ADDR:PORT" / "[v6]:PORT", optionally followed by listener options
// ",ana=STATE" and ",ana.GROUP=STATE".
bool parse_listen(const std::string& text, ListenAddress* out, std::string* error);
// Parses "NQN=SECRET" (--host-key, --ctrl-key).
bool parse_host_key(const std::string& text, std::pair<std::string, std::string>* out,
                    std::string* error);
// Parses "MIN-MAX" (--cntlid-range), both in 1..65519 and MIN <= MAX.
bool parse_cntlid_range(const std::string& text, uint16_t* min, uint16_t* max, std::string* error);
// Parses "sha256,sha384" / "null,ffdhe2048" (--dhchap-hash, --dhchap-dhgroup).
bool parse_hash_list(const std::string& text, std::vector<uint8_t>* out, std::string* error);
bool parse_dhgroup_list(const std::string& text, std::vector<uint8_t>* out, std::string* error);
// Loads a JSON config (the keys of TargetConfig, see the README). Unknown keys are errors.
// A file with the shape of `nvmetcli save`'s (the Linux target's) is read as that
// (nvmet_config.h); what it cannot carry goes to *warnings.
bool load_json(const std::string& path, TargetConfig* config, std::string* error,
               std::vector<std::string>* warnings = nullptr);
// "ADDR:PORT[,ana=...]" as parse_listen() reads it back.
std::string listen_text(const ListenAddress& l);
// The effective configuration as JSON (printed by --dump-config, written by save_config).
// A key read from a file is written as {"file": PATH}; other secrets as "(secret)" unless
// `with_secrets` (save_config's "inline").
std::string to_json_text(const TargetConfig& config, bool with_secrets = false);
// save_config's "files": writes every key not already in a file to DIR/<subsystem>.<host>.
// {host,ctrl}.key (mode 0600; DIR is created 0700) and points the config at it. "" or why not.
std::string secrets_to_files(TargetConfig& config, const std::string& dir);

// No "ns:" anywhere in it: SPDK's tools look for that key in the whole transport ID string.
inline constexpr const char* kDefaultNqn = "nqn.2026-11.io.sens-target:ram0";

// 0.0.0.0 or :: (listen on every address).
inline bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0";
}

}  // namespace sens::target
