#include "host/trid.h"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>
#include <cstring>

#include "wire/nvme.h"

namespace sens::host {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// NVMe 1.4 5.15.2.2: an NQN is at most 223 bytes of UTF-8. A subsystem may have a name without
// "nqn." (the Linux target takes one, and so does sens target); a host NQN must have it.
bool check_nqn(std::string_view key, std::string_view v, std::string* error) {
  if (v.size() > 223) {
    *error = std::string(key) + " is " + std::to_string(v.size()) + " bytes, at most 223 allowed";
    return false;
  }
  if (key == "hostnqn" && v.substr(0, 4) != "nqn.") {
    *error = std::string(key) + " '" + std::string(v) + "' does not start with 'nqn.'";
    return false;
  }
  return true;
}

}  // namespace

std::string TransportId::to_string() const {
  std::string s = "trtype:" + trtype + " adrfam:" + adrfam + " traddr:" + traddr +
                  " trsvcid:" + std::to_string(trsvcid) + " subnqn:" + subnqn;
  if (!hostnqn.empty()) s += " hostnqn:" + hostnqn;
  return s;
}

std::optional<TransportId> parse_trid(std::string_view text, std::string* error) {
  std::string scratch;
  if (!error) error = &scratch;
  TransportId t;
  bool seen_trtype = false, seen_adrfam = false, seen_traddr = false, seen_trsvcid = false,
       seen_subnqn = false, seen_hostnqn = false;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i == text.size()) break;
    size_t end = i;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    std::string_view pair = text.substr(i, end - i);
    i = end;
    size_t colon = pair.find(':');
    if (colon == std::string_view::npos) {
      *error = "'" + std::string(pair) + "' is not key:value";
      return std::nullopt;
    }
    std::string key = lower(pair.substr(0, colon));
    std::string_view value = pair.substr(colon + 1);
    if (value.empty()) {
      *error = "empty value for " + key;
      return std::nullopt;
    }
    auto once = [&](bool& seen) {
      if (seen) *error = key + " given twice";
      bool first = !seen;
      seen = true;
      return first;
    };
    if (key == "trtype") {
      if (!once(seen_trtype)) return std::nullopt;
      t.trtype = lower(value);
      if (t.trtype != "tcp") {
        *error = "trtype '" + std::string(value) + "' not supported (only tcp)";
        return std::nullopt;
      }
    } else if (key == "adrfam") {
      if (!once(seen_adrfam)) return std::nullopt;
      t.adrfam = lower(value);
      if (t.adrfam != "ipv4" && t.adrfam != "ipv6") {
        *error = "adrfam '" + std::string(value) + "' not supported (ipv4 or ipv6)";
        return std::nullopt;
      }
    } else if (key == "traddr") {
      if (!once(seen_traddr)) return std::nullopt;
      t.traddr = std::string(value);
    } else if (key == "trsvcid") {
      if (!once(seen_trsvcid)) return std::nullopt;
      unsigned port = 0;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), port);
      if (ec != std::errc() || p != value.data() + value.size() || port == 0 || port > 65535) {
        *error = "trsvcid '" + std::string(value) + "' is not a port number (1..65535)";
        return std::nullopt;
      }
      t.trsvcid = uint16_t(port);
    } else if (key == "subnqn") {
      if (!once(seen_subnqn)) return std::nullopt;
      if (!check_nqn(key, value, error)) return std::nullopt;
      t.subnqn = std::string(value);
    } else if (key == "hostnqn") {
      if (!once(seen_hostnqn)) return std::nullopt;
      if (!check_nqn(key, value, error)) return std::nullopt;
      t.hostnqn = std::string(value);
    } else {
      *error =
          "unknown key '" + key + "' (expected trtype, adrfam, traddr, trsvcid, subnqn, hostnqn)";
      return std::nullopt;
    }
  }
  if (!seen_traddr) {
    *error = "traddr missing";
    return std::nullopt;
  }
  // A v6 address given without adrfam is accepted as what it obviously is.
  if (!seen_adrfam && t.traddr.find(':') != std::string::npos) t.adrfam = "ipv6";
  sockaddr_storage ss;
  socklen_t len;
  if (!trid_sockaddr(t, &ss, &len)) {
    *error = "traddr '" + t.traddr + "' is not a numeric " + t.adrfam + " address";
    return std::nullopt;
  }
  if (!seen_subnqn) t.subnqn = std::string(nvme::kDiscoveryNqn);
  return t;
}

bool trid_sockaddr(const TransportId& trid, sockaddr_storage* out, socklen_t* len) {
  std::memset(out, 0, sizeof(*out));
  if (trid.adrfam == "ipv6") {
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(trid.trsvcid);
    if (inet_pton(AF_INET6, trid.traddr.c_str(), &a->sin6_addr) != 1) return false;
    *len = sizeof(*a);
    return true;
  }
  auto* a = reinterpret_cast<sockaddr_in*>(out);
  a->sin_family = AF_INET;
  a->sin_port = htons(trid.trsvcid);
  if (inet_pton(AF_INET, trid.traddr.c_str(), &a->sin_addr) != 1) return false;
  *len = sizeof(*a);
  return true;
}

}  // namespace sens::host
