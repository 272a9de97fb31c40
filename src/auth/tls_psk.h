#pragma once
// NVMe/TCP TLS PSKs (NVMe/TCP Transport 1.1, TP 8011): the PSK interchange format that
// `nvme gen-tls-key` writes ("NVMeTLSkey-1:xx:<base64 of PSK || CRC-32>:"), the retained PSK,
// the PSK identity "NVMe1R0h <host NQN> <subsystem NQN> <PSK digest>" and the TLS PSK derived
// from them with HKDF (RFC 5869, HKDF-Expand-Label of RFC 8446). OpenSSL computes everything.
#include <optional>
#include <string>
#include <string_view>

#include "auth/dhchap.h"

namespace sens::auth {

struct ConfiguredPsk {
  uint8_t transform = 0;  // xx: 0 used as is, 1 SHA-256, 2 SHA-384 (retained PSK derivation)
  Bytes key;              // 32 bytes (TLS_AES_128_GCM_SHA256) or 48 (TLS_AES_256_GCM_SHA384)
  // The hash of the cipher suite this PSK is for: 1 SHA-256, 2 SHA-384 (by its length).
  uint8_t cipher_hash() const { return key.size() == 48 ? 2 : 1; }
};

std::optional<ConfiguredPsk> parse_tls_psk(std::string_view text, std::string* error);
std::string format_tls_psk(const ConfiguredPsk& psk);
// Every key of a PSK file: one per line, '#' comments and blank lines skipped.
bool load_tls_psk_file(const std::string& path, std::vector<ConfiguredPsk>* out,
                       std::string* error);

// HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, length) with `hash` (1 or 2).
Bytes hkdf_expand_label(uint8_t hash, View ikm, std::string_view label, std::string_view context,
                        size_t length);
// Retained PSK = HKDF-Expand-Label(PRK, "HostNQN", NQNh, len) (the configured PSK when its
// transform is 0).
Bytes retained_psk(const ConfiguredPsk& psk, std::string_view hostnqn);
// PSK digest = Base64(HMAC(retained, NQNh || " " || NQNc || " " || "NVMe-over-Fabrics")).
std::string psk_digest(uint8_t hash, View retained, std::string_view hostnqn,
                       std::string_view subnqn);
// "NVMe1R0h NQNh NQNc digest" and the TLS PSK = HKDF-Expand-Label(PRK(retained),
// "nvme-tls-psk", "0h digest", hash length).
std::string psk_identity(uint8_t hash, std::string_view hostnqn, std::string_view subnqn,
                         std::string_view digest);
Bytes tls_psk(uint8_t hash, View retained, std::string_view digest);

// A parsed identity.
struct PskIdentity {
  uint8_t hash = 0;
  std::string hostnqn, subnqn, digest;
};
std::optional<PskIdentity> parse_psk_identity(std::string_view identity);

}  // namespace sens::auth
