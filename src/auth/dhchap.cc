#include "auth/dhchap.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>

#include <cstring>

#include "auth/key_text.h"

namespace sens::auth {

namespace {

const char* digest_name(uint8_t hash) {
  switch (hash) {
    case 1:
      return "SHA256";
    case 2:
      return "SHA384";
    case 3:
      return "SHA512";
    default:
      return nullptr;
  }
}

std::string openssl_error(const char* what) {
  unsigned long e = ERR_get_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return std::string(what) + (e ? std::string(": ") + buf : "");
}

View text_view(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Bytes response(uint8_t hash, View key, View challenge, uint32_t seqnum, uint16_t t_id,
               std::string_view role, std::string_view nqn1, std::string_view nqn2) {
  const uint8_t s[4] = {uint8_t(seqnum), uint8_t(seqnum >> 8), uint8_t(seqnum >> 16),
                        uint8_t(seqnum >> 24)};
  const uint8_t t[2] = {uint8_t(t_id), uint8_t(t_id >> 8)};
  const uint8_t zero[1] = {0};  // SC_C (no secure channel), then the NQN separator
  return hmac(hash, key,
              {challenge, View(s, 4), View(t, 2), View(zero, 1), text_view(role), text_view(nqn1),
               View(zero, 1), text_view(nqn2)});
}

}  // namespace

size_t hash_len(uint8_t hash) {
  switch (hash) {
    case 1:
      return 32;
    case 2:
      return 48;
    case 3:
      return 64;
    default:
      return 0;
  }
}

const char* hash_name(uint8_t hash) {
  switch (hash) {
    case 1:
      return "sha256";
    case 2:
      return "sha384";
    case 3:
      return "sha512";
    default:
      return nullptr;
  }
}

bool parse_hash(std::string_view name, uint8_t* out) {
  if (name.rfind("hmac(", 0) == 0 && name.size() > 6 && name.back() == ')')
    name = name.substr(5, name.size() - 6);
  for (uint8_t h = 1; h <= 3; ++h)
    if (name == hash_name(h)) {
      *out = h;
      return true;
    }
  return false;
}

bool dh_group_known(uint8_t group) {
  return group <= 5;
}

size_t dh_group_bytes(uint8_t group) {
  static constexpr size_t kBytes[] = {0, 256, 384, 512, 768, 1024};
  return group <= 5 ? kBytes[group] : 0;
}

const char* dh_group_name(uint8_t group) {
  static constexpr const char* kNames[] = {"null",      "ffdhe2048", "ffdhe3072",
                                           "ffdhe4096", "ffdhe6144", "ffdhe8192"};
  return group <= 5 ? kNames[group] : nullptr;
}

bool parse_dh_group(std::string_view name, uint8_t* out) {
  for (uint8_t g = 0; g <= 5; ++g)
    if (name == dh_group_name(g)) {
      *out = g;
      return true;
    }
  return false;
}

std::optional<Secret> parse_secret(std::string_view text, std::string* error) {
  // DHHC-1:xx:<base64>: (the trailing ':' as nvme-cli writes it; tolerated without)
  if (text.rfind("DHHC-1:", 0) != 0 || text.size() < 11 || text[9] != ':') {
    *error = "not a DH-HMAC-CHAP secret (expected DHHC-1:xx:<base64>:)";
    return std::nullopt;
  }
  const std::string_view hash = text.substr(7, 2);
  if (hash != "00" && hash != "01" && hash != "02" && hash != "03") {
    *error = "DHHC-1 secret: transform '" + std::string(hash) + "' is not 00, 01, 02 or 03";
    return std::nullopt;
  }
  std::string_view b64 = text.substr(10);
  if (!b64.empty() && b64.back() == ':') b64.remove_suffix(1);
  Secret s;
  int n = 0;
  switch (decode_key_text(b64, {32, 48, 64}, &s.key, &n)) {
    case KeyTextError::kNone:
      s.transform = uint8_t(hash[1] - '0');
      return s;
    case KeyTextError::kShape:
      *error = "DHHC-1 secret: the key part is not base64 of 36, 52 or 68 bytes";
      break;
    case KeyTextError::kBase64:
      *error = "DHHC-1 secret: the key part is not valid base64";
      break;
    case KeyTextError::kLength:
      *error = "DHHC-1 secret: " + std::to_string(n) +
               " bytes of key and CRC; 32, 48 or 64 bytes of key (plus 4 of CRC) expected";
      break;
    case KeyTextError::kCrc:
      *error = "DHHC-1 secret: CRC mismatch (a mistyped or truncated key)";
      break;
  }
  return std::nullopt;
}

std::string format_secret(const Secret& secret) {
  char head[16];
  std::snprintf(head, sizeof head, "DHHC-1:%02u:", secret.transform);
  return head + encode_key_text(secret.key) + ":";
}

Bytes transform_key(const Secret& secret, std::string_view nqn) {
  if (secret.transform == 0) return secret.key;
  return hmac(secret.transform, secret.key, {text_view(nqn), text_view("NVMe-over-Fabrics")});
}

Bytes digest(uint8_t hash, View data) {
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int n = 0;
  const EVP_MD* md = EVP_get_digestbyname(digest_name(hash));
  if (!md || EVP_Digest(data.data(), data.size(), out.data(), &n, md, nullptr) != 1) return {};
  out.resize(n);
  return out;
}

Bytes hmac(uint8_t hash, View key, std::initializer_list<View> parts) {
  const char* name = digest_name(hash);
  if (!name) return {};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  Bytes out(hash_len(hash));
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(name), 0),
      OSSL_PARAM_construct_end()};
  bool ok = ctx && EVP_MAC_init(ctx, key.data(), key.size(), params) == 1;
  for (View p : parts) ok = ok && EVP_MAC_update(ctx, p.data(), p.size()) == 1;
  size_t n = 0;
  ok = ok && EVP_MAC_final(ctx, out.data(), &n, out.size()) == 1 && n == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  if (!ok) out.clear();
  return out;
}

Bytes augmented_challenge(uint8_t hash, View session_key, View challenge) {
  Bytes hashed = digest(hash, session_key);
  Bytes out = hmac(hash, hashed, {challenge});
  wipe(hashed);
  return out;
}

Bytes host_response(uint8_t hash, View key, View challenge, uint32_t seqnum, uint16_t t_id,
                    std::string_view hostnqn, std::string_view subnqn) {
  return response(hash, key, challenge, seqnum, t_id, "HostHost", hostnqn, subnqn);
}

Bytes ctrl_response(uint8_t hash, View key, View challenge, uint32_t seqnum, uint16_t t_id,
                    std::string_view subnqn, std::string_view hostnqn) {
  return response(hash, key, challenge, seqnum, t_id, "Controller", subnqn, hostnqn);
}

bool equal(View a, View b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool random_bytes(uint8_t* out, size_t len) {
  return RAND_bytes(out, int(len)) == 1;
}

void wipe(Bytes& b) {
  if (!b.empty()) OPENSSL_cleanse(b.data(), b.size());
  b.clear();
}

void wipe_text(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

// ---------------------------------------------------------------------------- FFDHE

DhExchange::~DhExchange() {
  reset();
}

void DhExchange::reset() {
  EVP_PKEY_free(key_);
  key_ = nullptr;
  group_ = 0;
}

bool DhExchange::generate(uint8_t group, Bytes* public_value, std::string* error) {
  reset();
  if (group == 0 || !dh_group_known(group)) {
    *error = "no DH group to generate a key in";
    return false;
  }
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
                                       const_cast<char*>(dh_group_name(group)), 0),
      OSSL_PARAM_construct_end()};
  bool ok = ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_CTX_set_params(ctx, params) == 1 &&
            EVP_PKEY_generate(ctx, &key_) == 1;
  EVP_PKEY_CTX_free(ctx);
  BIGNUM* pub = nullptr;
  ok = ok && EVP_PKEY_get_bn_param(key_, OSSL_PKEY_PARAM_PUB_KEY, &pub) == 1;
  if (ok) {
    public_value->assign(dh_group_bytes(group), 0);
    ok = BN_bn2binpad(pub, public_value->data(), int(public_value->size())) ==
         int(public_value->size());
  }
  BN_free(pub);
  if (!ok) {
    *error = openssl_error("DH key generation");
    reset();
    return false;
  }
  group_ = group;
  return true;
}

Bytes DhExchange::prime() const {
  Bytes p;
  BIGNUM* bn = nullptr;
  if (key_ && EVP_PKEY_get_bn_param(key_, OSSL_PKEY_PARAM_FFC_P, &bn) == 1) {
    p.assign(dh_group_bytes(group_), 0);
    if (BN_bn2binpad(bn, p.data(), int(p.size())) != int(p.size())) p.clear();
  }
  BN_free(bn);
  return p;
}

bool DhExchange::derive(View peer_public, Bytes* shared, std::string* error, PeerCheck check) {
  if (!key_) {
    *error = "no DH key generated";
    return false;
  }
  const size_t bytes = dh_group_bytes(group_);
  if (peer_public.size() != bytes) {
    *error = "DH value of " + std::to_string(peer_public.size()) + " bytes, the group's are " +
             std::to_string(bytes);
    return false;
  }
  BIGNUM* y = BN_bin2bn(peer_public.data(), int(peer_public.size()), nullptr);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  OSSL_PARAM* params = nullptr;
  EVP_PKEY* peer = nullptr;
  EVP_PKEY_CTX* from = EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr);
  bool ok = y && bld &&
            OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, dh_group_name(group_),
                                            0) == 1 &&
            OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_PUB_KEY, y) == 1 &&
            (params = OSSL_PARAM_BLD_to_param(bld)) != nullptr && from &&
            EVP_PKEY_fromdata_init(from) == 1 &&
            EVP_PKEY_fromdata(from, &peer, EVP_PKEY_PUBLIC_KEY, params) == 1;
  EVP_PKEY_CTX* ctx = ok ? EVP_PKEY_CTX_new_from_pkey(nullptr, key_, nullptr) : nullptr;
  size_t n = bytes;
  // The peer's value is checked before use (PeerCheck: OpenSSL's quick check is the range,
  // its full one adds y^q = 1); the secret is padded to the group size, as the Linux kernel's
  // kpp writes it.
  EVP_PKEY_CTX* check_ctx = ok ? EVP_PKEY_CTX_new_from_pkey(nullptr, peer, nullptr) : nullptr;
  ok = ok && check_ctx &&
       (check == PeerCheck::kFull ? EVP_PKEY_public_check(check_ctx)
                                  : EVP_PKEY_public_check_quick(check_ctx)) == 1;
  EVP_PKEY_CTX_free(check_ctx);
  ok = ok && ctx && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_CTX_set_dh_pad(ctx, 1) == 1 &&
       EVP_PKEY_derive_set_peer_ex(ctx, peer, 0) == 1;
  if (ok) {
    shared->assign(bytes, 0);
    ok = EVP_PKEY_derive(ctx, shared->data(), &n) == 1 && n == bytes;
  }
  if (!ok) *error = openssl_error("DH shared secret (the peer's value is not in the group?)");
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_CTX_free(from);
  EVP_PKEY_free(peer);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  BN_free(y);
  if (!ok) wipe(*shared);
  return ok;
}

}  // namespace sens::auth
