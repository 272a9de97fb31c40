#pragma once
// What a target serves and how: from the command line or a JSON file (same keys).
#include <cstdint>
#include <string>
#include <vector>

#include "coalesce/scheduler.h"

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
  uint64_t busy_poll_us = 0;
  uint32_t sock_buf = 0;  // SO_SNDBUF of accepted sockets; 0: the kernel's default
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

inline constexpr const char* kDefaultNqn = "nqn.2026-11.dev.sens:ram0";

}  // namespace sens::target
