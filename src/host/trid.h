#pragma once
// NVMe transport IDs as SPDK tools and nvme-cli users write them:
//   "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:4420 subnqn:nqn.2024-01.io.example:disk0"
#include <netinet/in.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <string_view>

namespace sens::host {

struct TransportId {
  std::string trtype = "tcp";
  std::string adrfam = "ipv4";  // "ipv4" or "ipv6"
  std::string traddr;           // numeric address
  uint16_t trsvcid = 4420;
  std::string subnqn;   // defaults to the discovery NQN, as SPDK does
  std::string hostnqn;  // optional: empty lets the host generate one

  std::string to_string() const;
};

// Parses space-separated key:value pairs (keys case-insensitive: trtype, adrfam, traddr,
// trsvcid, subnqn, hostnqn). traddr is required. Returns nullopt and sets *error to a message
// naming the offending pair on: unknown or repeated keys, a pair without ':', empty values,
// trtype other than tcp, an address that does not parse for its family, a port outside
// 1..65535, an NQN longer than 223 bytes, a hostnqn not starting with "nqn." (a subnqn may:
// the Linux target takes subsystem names such as "blktests-subsystem-1").
std::optional<TransportId> parse_trid(std::string_view text, std::string* error);

// The socket address of a parsed TRID (traddr is numeric, so this never resolves names).
bool trid_sockaddr(const TransportId& trid, sockaddr_storage* out, socklen_t* len);

}  // namespace sens::host
