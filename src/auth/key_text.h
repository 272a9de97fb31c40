#pragma once
// The part both NVMe key interchange formats share (DHHC-1:xx:<base64>: for DH-HMAC-CHAP
// secrets, NVMeTLSkey-1:xx:<base64>: for TLS PSKs): base64 of the key followed by its CRC-32
// (gzip polynomial, little-endian). Each format words its own errors, so decoding says
// only what went wrong.
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

#include "auth/dhchap.h"

namespace sens::auth {

enum class KeyTextError {
  kNone,
  kShape,   // not base64 characters in whole quads, or longer than any key
  kBase64,  // base64 characters OpenSSL cannot decode
  kLength,  // decoded, but the key plus CRC has none of the allowed lengths
  kCrc,     // the CRC does not match the key
};

// Decodes `b64` (without the format's prefix and trailing ':') into *key, whose length must be
// one of `key_lengths`. *decoded gets the number of bytes decoded (key and CRC; < 0 when
// OpenSSL refused the text). Nothing of the key is left behind on failure.
KeyTextError decode_key_text(std::string_view b64, std::initializer_list<size_t> key_lengths,
                             Bytes* key, int* decoded);

// base64 of `key` and its CRC-32.
std::string encode_key_text(View key);

}  // namespace sens::auth
