#include "auth/key_text.h"

#include <isa-l/crc.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>

namespace sens::auth {

KeyTextError decode_key_text(std::string_view b64, std::initializer_list<size_t> key_lengths,
                             Bytes* key, int* decoded) {
  *decoded = 0;
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 128 ||
      b64.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") !=
          std::string_view::npos)
    return KeyTextError::kShape;
  uint8_t buf[96];
  int n = EVP_DecodeBlock(buf, reinterpret_cast<const unsigned char*>(b64.data()), int(b64.size()));
  if (n >= 0) {
    // EVP_DecodeBlock counts the bytes '=' padding stands for: take them off.
    for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) --n;
  }
  *decoded = n;
  KeyTextError result = KeyTextError::kNone;
  if (n < 0) {
    result = KeyTextError::kBase64;
  } else if (n < 4 || std::find(key_lengths.begin(), key_lengths.end(), size_t(n) - 4) ==
                          key_lengths.end()) {
    result = KeyTextError::kLength;
  } else {
    const size_t len = size_t(n) - 4;
    uint32_t got;
    std::memcpy(&got, buf + len, 4);
    if (got != crc32_gzip_refl(0, buf, len)) {
      result = KeyTextError::kCrc;
    } else {
      key->assign(buf, buf + len);
    }
  }
  OPENSSL_cleanse(buf, sizeof buf);
  return result;
}

std::string encode_key_text(View key) {
  Bytes raw(key.begin(), key.end());
  const uint32_t crc = crc32_gzip_refl(0, raw.data(), raw.size());
  for (int i = 0; i < 4; ++i) raw.push_back(uint8_t(crc >> (8 * i)));
  std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw.data(), int(raw.size()));
  b64.resize(size_t(n));
  wipe(raw);
  return b64;
}

}  // namespace sens::auth
