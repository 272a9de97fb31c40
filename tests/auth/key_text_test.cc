// The key text both interchange formats share (DHHC-1 secrets, NVMeTLSkey-1 PSKs): each kind
// of malformed key is refused with its format's exact message.
#include "auth/key_text.h"

#include <gtest/gtest.h>

#include <string>

#include "auth/dhchap.h"
#include "auth/tls_psk.h"

namespace sens::auth {
namespace {

// Key 00 01 .. 1f and its CRC (as nvme gen-dhchap-key --secret=000102..1f writes it).
constexpr const char* kKey32 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR";

std::string secret_error(const std::string& b64) {
  std::string err;
  EXPECT_FALSE(parse_secret("DHHC-1:00:" + b64 + ":", &err));
  return err;
}

std::string psk_error(const std::string& b64) {
  std::string err;
  EXPECT_FALSE(parse_tls_psk("NVMeTLSkey-1:01:" + b64 + ":", &err));
  return err;
}

TEST(KeyText, EncodesKeyAndCrc) {
  Bytes key;
  for (uint8_t i = 0; i < 32; ++i) key.push_back(i);
  EXPECT_EQ(encode_key_text(key), kKey32);
  Bytes back;
  int n = 0;
  EXPECT_EQ(decode_key_text(kKey32, {32}, &back, &n), KeyTextError::kNone);
  EXPECT_EQ(back, key);
  EXPECT_EQ(n, 36);
  EXPECT_EQ(decode_key_text(kKey32, {48, 64}, &back, &n), KeyTextError::kLength);
}

TEST(KeyText, EachFormatWordsEachRefusal) {
  std::string bad_crc = kKey32;
  bad_crc[10] = bad_crc[10] == 'A' ? 'B' : 'A';
  EXPECT_EQ(secret_error(bad_crc), "DHHC-1 secret: CRC mismatch (a mistyped or truncated key)");
  EXPECT_EQ(psk_error(bad_crc), "NVMeTLSkey-1: CRC mismatch (a mistyped or truncated key)");

  EXPECT_EQ(secret_error("AAEC*wQF"),
            "DHHC-1 secret: the key part is not base64 of 36, 52 or 68 bytes");
  EXPECT_EQ(psk_error("AAEC*wQF"), "NVMeTLSkey-1: the key part is not base64 of 36 or 52 bytes");

  const std::string b21 = "AAECAwQFBgcICQoLDA0ODxAREhMU";  // 21 bytes
  EXPECT_EQ(secret_error(b21),
            "DHHC-1 secret: 21 bytes of key and CRC; 32, 48 or 64 bytes of key (plus 4 of CRC) "
            "expected");
  EXPECT_EQ(psk_error(b21), "NVMeTLSkey-1: 21 bytes; a 32- or 48-byte PSK and its CRC expected");

  // (kBase64 is a guard only: EVP_DecodeBlock refuses only characters the shape check has
  // already refused, so no text reaches it.)

  // A 64-byte key is a DH-HMAC-CHAP secret, not a TLS PSK.
  Bytes key64(64, 7);
  const std::string b68 = encode_key_text(key64);
  std::string err;
  EXPECT_TRUE(parse_secret("DHHC-1:03:" + b68 + ":", &err)) << err;
  EXPECT_EQ(psk_error(b68), "NVMeTLSkey-1: 68 bytes; a 32- or 48-byte PSK and its CRC expected");
}

}  // namespace
}  // namespace sens::auth
