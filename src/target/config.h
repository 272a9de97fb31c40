#pragma once
// What a target serves and how: from the command line or a JSON file (same keys).
#include <cstdint>
#include <string>
#include <vector>

#include "coalesce/scheduler.h"
#include "reactor/reactor.h"

namespace sens::target {

struct SubsystemConfig {
  std::string nqn;
  std::vector<std::string> namespaces;     // "ram:1G", "file:/path", "null:1G"
  std::vector<std::string> allowed_hosts;  // empty: any host
};

struct ListenAddress {
  std::string host;  // numeric IPv4/IPv6
  uint16_t port = 0;
};

struct TargetConfig {
  std::vector<ListenAddress> listen;  // I/O listeners (default 127.0.0.1:4420)
  uint16_t discovery_port = 8009;     // 0: no discovery controller
  std::vector<SubsystemConfig> subsystems;
  uint32_t inline_data = 8192;         // in-capsule data bytes on I/O queues
  uint32_t max_h2c_data = 128 * 1024;  // ICResp maxh2cdata
  uint32_t max_io = 128 * 1024;        // MDTS, bytes (a power of two >= 4 KiB)
  uint32_t queue_size = 128;           // entries per queue (CAP.MQES + 1)
  uint32_t max_io_queues = 64;
  int cores = 1;
  int first_core = -1;  // pin reactor i to core first_core + i; -1: no pinning
  PollMode poll = PollMode::kAdaptive;  // how reactors wait for events (--poll)
  uint64_t poll_max_us = 50;             // the longest adaptive spin (--poll-max-us)
  uint32_t sock_buf = 0;                // SO_SNDBUF of accepted sockets; 0: the kernel's default
  uint32_t max_connections = 4096;      // open connections (all queues of all hosts)
  uint64_t buffer_pool = 256ull << 20;  // I/O buffer bytes per reactor (in-flight data bound)
  coalesce::Config coalesce;
  std::string stats_json;  // written at exit and on SIGUSR1
  bool read_only = false;
};

// Fills defaults the command line leaves open (listener, the RAM subsystem).
void apply_defaults(TargetConfig& config);
// Checks every field; returns "" or the first error, precise enough to fix the input.
std::string validate(const TargetConfig& config);
// Parses "ADDR:PORT" / "[v6]:PORT".
bool parse_listen(const std::string& text, ListenAddress* out, std::string* error);
// Loads a JSON config (the keys of TargetConfig, see the README). Unknown keys are errors.
bool load_json(const std::string& path, TargetConfig* config, std::string* error);
// The effective configuration as JSON (printed by --dump-config).
std::string to_json_text(const TargetConfig& config);

// No "ns:" anywhere in it: SPDK's tools look for that key in the whole transport ID string.
inline constexpr const char* kDefaultNqn = "nqn.2026-11.io.sens-target:ram0";

// 0.0.0.0 or :: (listen on every address).
inline bool is_wildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0";
}

}  // namespace sens::target
