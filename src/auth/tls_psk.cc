#include "auth/tls_psk.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <cstring>
#include <fstream>

#include "auth/key_text.h"

namespace sens::auth {

namespace {

const char* md_name(uint8_t hash) {
  return hash == 2 ? "SHA384" : "SHA256";
}

// One HKDF step (extract or expand) through OpenSSL's KDF.
Bytes hkdf(int mode, uint8_t hash, View key, View salt_or_info, size_t out_len) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf ? EVP_KDF_CTX_new(kdf) : nullptr;
  Bytes out(out_len);
  OSSL_PARAM params[5];
  int n = 0;
  params[n++] =
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(md_name(hash)), 0);
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
                                                  const_cast<uint8_t*>(key.data()), key.size());
  params[n++] = OSSL_PARAM_construct_octet_string(
      mode == EVP_KDF_HKDF_MODE_EXTRACT_ONLY ? OSSL_KDF_PARAM_SALT : OSSL_KDF_PARAM_INFO,
      const_cast<uint8_t*>(salt_or_info.data()), salt_or_info.size());
  params[n] = OSSL_PARAM_construct_end();
  bool ok = ctx && EVP_KDF_derive(ctx, out.data(), out.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  EVP_KDF_free(kdf);
  if (!ok) out.clear();
  return out;
}

}  // namespace

Bytes hkdf_expand_label(uint8_t hash, View ikm, std::string_view label, std::string_view context,
                        size_t length) {
  const size_t hl = hash_len(hash);
  Bytes zeros(hl, 0);
  Bytes prk = hkdf(EVP_KDF_HKDF_MODE_EXTRACT_ONLY, hash, ikm, zeros, hl);
  // HkdfLabel: uint16 length, opaque label<7..255> = "tls13 " + label, opaque context<0..255>
  Bytes info;
  info.push_back(uint8_t(length >> 8));
  info.push_back(uint8_t(length));
  const std::string full = "tls13 " + std::string(label);
  info.push_back(uint8_t(full.size()));
  info.insert(info.end(), full.begin(), full.end());
  info.push_back(uint8_t(context.size()));
  info.insert(info.end(), context.begin(), context.end());
  Bytes out = prk.empty() ? Bytes{} : hkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, hash, prk, info, length);
  wipe(prk);
  return out;
}

std::optional<ConfiguredPsk> parse_tls_psk(std::string_view text, std::string* error) {
  if (text.rfind("NVMeTLSkey-1:", 0) != 0 || text.size() < 17 || text[15] != ':') {
    *error = "not a PSK in interchange format (expected NVMeTLSkey-1:xx:<base64>:)";
    return std::nullopt;
  }
  const std::string_view hh = text.substr(13, 2);
  if (hh != "00" && hh != "01" && hh != "02") {
    *error = "NVMeTLSkey-1: hash '" + std::string(hh) + "' is not 00, 01 or 02";
    return std::nullopt;
  }
  std::string_view b64 = text.substr(16);
  if (!b64.empty() && b64.back() == ':') b64.remove_suffix(1);
  ConfiguredPsk psk;
  int n = 0;
  switch (decode_key_text(b64, {32, 48}, &psk.key, &n)) {
    case KeyTextError::kNone:
      psk.transform = uint8_t(hh[1] - '0');
      return psk;
    case KeyTextError::kShape:
      *error = "NVMeTLSkey-1: the key part is not base64 of 36 or 52 bytes";
      break;
    case KeyTextError::kBase64:  // undecodable: no bytes of it
    case KeyTextError::kLength:
      *error = "NVMeTLSkey-1: " + std::to_string(n < 0 ? 0 : n) +
               " bytes; a 32- or 48-byte PSK and its CRC expected";
      break;
    case KeyTextError::kCrc:
      *error = "NVMeTLSkey-1: CRC mismatch (a mistyped or truncated key)";
      break;
  }
  return std::nullopt;
}

std::string format_tls_psk(const ConfiguredPsk& psk) {
  char head[24];
  std::snprintf(head, sizeof head, "NVMeTLSkey-1:%02u:", psk.transform);
  return head + encode_key_text(psk.key) + ":";
}

bool load_tls_psk_file(const std::string& path, std::vector<ConfiguredPsk>* out,
                       std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot open PSK file '" + path + "'";
    return false;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line[start] == '#') continue;
    std::string why;
    auto psk = parse_tls_psk(std::string_view(line).substr(start), &why);
    OPENSSL_cleanse(line.data(), line.size());
    if (!psk) {
      *error = path + ":" + std::to_string(number) + ": " + why;
      return false;
    }
    out->push_back(std::move(*psk));
  }
  if (out->empty()) {
    *error = "PSK file '" + path + "' holds no key";
    return false;
  }
  return true;
}

Bytes retained_psk(const ConfiguredPsk& psk, std::string_view hostnqn) {
  if (psk.transform == 0) return psk.key;
  return hkdf_expand_label(psk.transform, psk.key, "HostNQN", hostnqn, psk.key.size());
}

std::string psk_digest(uint8_t hash, View retained, std::string_view hostnqn,
                       std::string_view subnqn) {
  auto text = [](std::string_view s) {
    return View(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  Bytes mac = hmac(hash, retained,
                   {text(hostnqn), text(" "), text(subnqn), text(" "), text("NVMe-over-Fabrics")});
  std::string b64(4 * ((mac.size() + 2) / 3) + 1, '\0');
  b64.resize(size_t(
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), mac.data(), int(mac.size()))));
  return b64;
}

std::string psk_identity(uint8_t hash, std::string_view hostnqn, std::string_view subnqn,
                         std::string_view digest) {
  return "NVMe1R0" + std::to_string(hash) + " " + std::string(hostnqn) + " " + std::string(subnqn) +
         " " + std::string(digest);
}

Bytes tls_psk(uint8_t hash, View retained, std::string_view digest) {
  const std::string context = "0" + std::to_string(hash) + " " + std::string(digest);
  return hkdf_expand_label(hash, retained, "nvme-tls-psk", context, hash_len(hash));
}

std::optional<PskIdentity> parse_psk_identity(std::string_view id) {
  // NVMe1R0h NQNh NQNc digest (an NQN holds no space)
  if (id.size() < 9 || id.substr(0, 7) != "NVMe1R0" || (id[7] != '1' && id[7] != '2') ||
      id[8] != ' ')
    return std::nullopt;
  PskIdentity p;
  p.hash = uint8_t(id[7] - '0');
  std::string_view rest = id.substr(9);
  size_t a = rest.find(' ');
  if (a == std::string_view::npos) return std::nullopt;
  size_t b = rest.find(' ', a + 1);
  if (b == std::string_view::npos || rest.find(' ', b + 1) != std::string_view::npos)
    return std::nullopt;
  p.hostnqn = rest.substr(0, a);
  p.subnqn = rest.substr(a + 1, b - a - 1);
  p.digest = rest.substr(b + 1);
  if (p.hostnqn.empty() || p.subnqn.empty() || p.digest.empty()) return std::nullopt;
  return p;
}

}  // namespace sens::auth
