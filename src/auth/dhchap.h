#pragma once
// DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5), the computations both ends share: the
// `DHHC-1:xx:<base64>:` secret format that `nvme gen-dhchap-key` writes, the key transform,
// the response values, the augmented challenge and the FFDHE exchange. OpenSSL does every
// hash, HMAC and modular exponentiation; nothing here is cryptography written by hand.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace sens::auth {

using Bytes = std::vector<uint8_t>;
using View = std::span<const uint8_t>;

// HashID (1 SHA-256, 2 SHA-384, 3 SHA-512): digest length, name; 0 / nullptr if unknown.
size_t hash_len(uint8_t hash);
const char* hash_name(uint8_t hash);
bool parse_hash(std::string_view name, uint8_t* out);  // "sha256", "hmac(sha256)", ...
// DHgroupID (0 null, 1..5 ffdhe2048..ffdhe8192): the size of a DH value in bytes (0 for the
// null group), the name; known: whether this side implements it.
bool dh_group_known(uint8_t group);
size_t dh_group_bytes(uint8_t group);
const char* dh_group_name(uint8_t group);
bool parse_dh_group(std::string_view name, uint8_t* out);  // "null", "ffdhe2048", ...

// Overwrites a secret before its memory goes back.
void wipe(Bytes& b);

// A DH-HMAC-CHAP secret: 32, 48 or 64 bytes of key and the hash that transforms it before
// use (0: used as is).
struct Secret {
  uint8_t transform = 0;
  Bytes key;
  bool empty() const { return key.empty(); }
  ~Secret() { wipe(key); }  // every copy (a copy is wiped on its own)
};
// Parses "DHHC-1:xx:<base64 of key || CRC-32 (little-endian)>:". Every refusal names what is
// wrong, never the secret.
std::optional<Secret> parse_secret(std::string_view text, std::string* error);
std::string format_secret(const Secret& secret);
// The key as the exchange uses it: HMAC_transform(key, nqn || "NVMe-over-Fabrics"), or the key
// itself when the transform is 0. The host key is transformed with the host NQN, the
// controller key with the subsystem NQN.
Bytes transform_key(const Secret& secret, std::string_view nqn);

// One-shot digest and HMAC over parts, in order.
Bytes digest(uint8_t hash, View data);
Bytes hmac(uint8_t hash, View key, std::initializer_list<View> parts);
// C' = HMAC(H(session key), C): the challenge when a DH group is in use.
Bytes augmented_challenge(uint8_t hash, View session_key, View challenge);
// R1 = HMAC(Kh, C1' || S1 || T_ID || SC_C || "HostHost" || NQNh || 00h || NQNc) and
// R2 = HMAC(Kc, C2' || S2 || T_ID || SC_C || "Controller" || NQNc || 00h || NQNh).
Bytes host_response(uint8_t hash, View key, View challenge, uint32_t seqnum, uint16_t t_id,
                    std::string_view hostnqn, std::string_view subnqn);
Bytes ctrl_response(uint8_t hash, View key, View challenge, uint32_t seqnum, uint16_t t_id,
                    std::string_view subnqn, std::string_view hostnqn);
// Equal in constant time (responses are compared with it).
bool equal(View a, View b);

// Fills `out` with bytes from OpenSSL's CSPRNG; false if it could not.
bool random_bytes(uint8_t* out, size_t len);
// The same for a secret's text ("DHHC-1:..." in a config copy): overwritten, then emptied.
void wipe_text(std::string& s);
// Wipes the listed secrets when the scope ends, whichever return ends it (error paths too).
class WipeOnExit {
 public:
  WipeOnExit(std::initializer_list<Bytes*> secrets) : secrets_(secrets) {}
  ~WipeOnExit() {
    for (Bytes* b : secrets_) wipe(*b);
  }
  WipeOnExit(const WipeOnExit&) = delete;
  WipeOnExit& operator=(const WipeOnExit&) = delete;

 private:
  std::vector<Bytes*> secrets_;
};

// How a peer's public value y is checked before use (NIST SP 800-56A rev. 3, 5.6.2.3):
// kRange: 1 < y < p - 1 (partial validation). The RFC 7919 groups are safe primes, so the
//   only small subgroup is {1, p - 1}, which this excludes; what is left of an invalid value
//   can reveal one bit of a private key that serves one exchange only. The Linux kernel's
//   DH-HMAC-CHAP checks no more outside FIPS mode.
// kFull: also y^q = 1 (mod p), q = (p - 1) / 2: a full-size exponentiation, about 8x the
//   cost of the rest of the exchange with ffdhe8192 (100 ms here): for FIPS deployments.
enum class PeerCheck : uint8_t { kRange, kFull };

// One side of an FFDHE exchange (RFC 7919 groups).
class DhExchange {
 public:
  DhExchange() = default;
  ~DhExchange();
  DhExchange(const DhExchange&) = delete;
  DhExchange& operator=(const DhExchange&) = delete;

  // A fresh key pair in `group`; its public value g^x, big-endian, padded to the group size.
  bool generate(uint8_t group, Bytes* public_value, std::string* error);
  // g^xy from the peer's public value (checked as `check` says), padded to the group size.
  bool derive(View peer_public, Bytes* shared, std::string* error,
              PeerCheck check = PeerCheck::kRange);
  // The group's prime p, big-endian (for tests of the checks); empty if no key.
  Bytes prime() const;
  void reset();

 private:
  ::evp_pkey_st* key_ = nullptr;
  uint8_t group_ = 0;
};

}  // namespace sens::auth
