#include "target/ns_options.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <cstring>

#include "storage/device.h"

namespace sens::target {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool parse_hex16(const std::string& text, uint8_t out[16], bool dashes) {
  std::string hex;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '-') {
      if (!dashes || (i != 8 && i != 13 && i != 18 && i != 23)) return false;
      continue;
    }
    hex += text[i];
  }
  if (hex.size() != 32) return false;
  if (dashes && text.size() != 36 && text.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

bool all_zero(const uint8_t* p) {
  for (int i = 0; i < 16; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

bool parse_uuid(const std::string& text, uint8_t out[16]) {
  return parse_hex16(text, out, true);
}

bool parse_namespace_options(const std::string& spec, NamespaceOptions* out, std::string* error) {
  *out = NamespaceOptions{};
  std::string kept;
  size_t start = 0;
  bool first = true;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string item =
        spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    auto eq = item.find('=');
    std::string key = first || eq == std::string::npos ? "" : item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    first = false;
    if (key == "uuid") {
      if (out->has_uuid) return *error = "uuid= given twice", false;
      if (!parse_uuid(value, out->uuid) || all_zero(out->uuid))
        return *error = "uuid='" + value + "' is not a non-zero UUID (8-4-4-4-12 hex digits)",
               false;
      out->has_uuid = true;
    } else if (key == "nguid") {
      if (out->has_nguid) return *error = "nguid= given twice", false;
      if (!parse_hex16(value, out->nguid, false) || all_zero(out->nguid))
        return *error = "nguid='" + value + "' is not 32 hex digits (and not all zero)", false;
      out->has_nguid = true;
    } else if (key == "anagrpid") {
      char* end = nullptr;
      unsigned long g = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || g < 1 || g > 32)
        return *error = "anagrpid='" + value + "': the ANA group must be 1..32", false;
      out->anagrpid = uint32_t(g);
    } else if (key == "nsid") {
      char* end = nullptr;
      unsigned long n = std::strtoul(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 1024)
        return *error = "nsid='" + value + "': a namespace ID must be 1..1024", false;
      out->nsid = uint32_t(n);
    } else {
      kept += (kept.empty() ? "" : ",") + item;
    }
  }
  out->backend = kept;
  return true;
}

std::string check_namespace_spec(const std::string& spec) {
  NamespaceOptions o;
  std::string error;
  if (!parse_namespace_options(spec, &o, &error)) return error;
  return storage::check_spec(o.backend);
}

void derive_namespace_ids(const std::string& seed, uint8_t nguid[16], uint8_t uuid[16]) {
  auto sha = [&](const std::string& text, uint8_t out[16]) {
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(text.data(), text.size(), md, &n, EVP_sha256(), nullptr);
    std::memcpy(out, md, 16);
  };
  sha("sens-nguid:" + seed, nguid);
  sha("sens-uuid:" + seed, uuid);
  uuid[6] = uint8_t((uuid[6] & 0x0F) | 0x50);  // RFC 4122 version 5 (name-based, SHA) layout
  uuid[8] = uint8_t((uuid[8] & 0x3F) | 0x80);
}

uint32_t spec_nsid(const std::string& spec, uint32_t previous) {
  NamespaceOptions o;
  std::string e;
  parse_namespace_options(spec, &o, &e);
  return o.nsid ? o.nsid : previous + 1;
}

std::string spec_with_nsid(const std::string& spec, uint32_t nsid) {
  NamespaceOptions o;
  std::string error;
  if (parse_namespace_options(spec, &o, &error) && o.nsid == nsid) return spec;
  return spec + ",nsid=" + std::to_string(nsid);
}

}  // namespace sens::target
