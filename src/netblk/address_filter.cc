#include "netblk/address_filter.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>

namespace sens::netblk {

namespace {

bool prefix_matches(const uint8_t* a, const uint8_t* b, unsigned prefix) {
  unsigned whole = prefix / 8, rest = prefix % 8;
  if (std::memcmp(a, b, whole) != 0) return false;
  if (rest == 0) return true;
  uint8_t mask = uint8_t(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

}  // namespace

bool AddressFilter::add(std::string_view network, std::string* error) {
  auto slash = network.find('/');
  std::string address(network.substr(0, slash));
  Network net{};
  unsigned max_prefix;
  if (inet_pton(AF_INET, address.c_str(), net.bytes.data()) == 1) {
    net.family = AF_INET;
    max_prefix = 32;
  } else if (inet_pton(AF_INET6, address.c_str(), net.bytes.data()) == 1) {
    net.family = AF_INET6;
    max_prefix = 128;
  } else {
    *error = "--allow " + std::string(network) + ": '" + address +
             "' is not an IPv4 or IPv6 address (expected ADDR/PREFIX, e.g. 10.0.0.0/8)";
    return false;
  }
  net.prefix = max_prefix;
  if (slash != std::string_view::npos) {
    std::string_view digits = network.substr(slash + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), net.prefix);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
        net.prefix > max_prefix) {
      *error =
          "--allow " + std::string(network) + ": prefix must be 0.." + std::to_string(max_prefix);
      return false;
    }
  }
  networks_.push_back(net);
  return true;
}

bool AddressFilter::allows(const sockaddr* address) const {
  if (networks_.empty()) return true;
  int family = address->sa_family;
  const uint8_t* bytes = nullptr;
  if (family == AF_INET) {
    bytes =
        reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr);
  } else if (family == AF_INET6) {
    const auto* a6 = &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
    bytes = a6->s6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a6)) {
      family = AF_INET;
      bytes += 12;
    }
  } else {
    return false;
  }
  for (const Network& net : networks_)
    if (net.family == family && prefix_matches(bytes, net.bytes.data(), net.prefix)) return true;
  return false;
}

}  // namespace sens::netblk
