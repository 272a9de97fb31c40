#pragma once
// --allow ADDR/PREFIX: the sources a server answers. Empty means everybody.
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sens::netblk {

class AddressFilter {
 public:
  // "10.0.0.0/8", "192.168.1.7" (one host), "fd00::/8", "::1". Returns false and sets *error on
  // anything else.
  bool add(std::string_view network, std::string* error);
  bool empty() const { return networks_.empty(); }
  // IPv4-mapped IPv6 sources (from a dual-stack socket) match IPv4 networks.
  bool allows(const sockaddr* address) const;

 private:
  struct Network {
    int family;  // AF_INET or AF_INET6
    std::array<uint8_t, 16> bytes;
    unsigned prefix;
  };
  std::vector<Network> networks_;
};

}  // namespace sens::netblk
