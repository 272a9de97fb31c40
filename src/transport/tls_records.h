#pragma once
// TLS 1.3 record protection (RFC 8446 section 5) after OpenSSL's handshake, as the kernel's
// kTLS does it: OpenSSL negotiates, hands over the traffic secrets (its key log callback), and
// the records are sealed and opened here with OpenSSL's AEAD (EVP, AES-GCM), so that a record
// is encrypted straight from the caller's pieces into the send batch (no gather, no copy out
// of OpenSSL's write buffer) and decrypted straight from the receive buffer into the PDU's
// place (no copy out of OpenSSL's read buffer). Key derivation is HKDF-Expand-Label through
// OpenSSL's HKDF; no cryptography is written here.
//
// The AES-GCM itself is Intel's ipsec-mb library when it is built in and the CPU has AES-NI
// and PCLMULQDQ: it picks the widest code the CPU runs (VAES with AVX-512 here), 2.6x
// OpenSSL 3.0's for a 16 KiB record and 5x for a 25-byte one on this machine (OpenSSL 3.0 does
// not use VAES). OpenSSL's EVP is the fallback, and the choice an operator can make (a
// FIPS-validated provider, say).
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

struct evp_cipher_ctx_st;

namespace sens::transport {

// The 5-byte header and the 16-byte tag around a record's protected bytes.
inline constexpr size_t kTlsHeaderBytes = 5;
inline constexpr size_t kTlsTagBytes = 16;
inline constexpr size_t kTlsMaxPlain = 16384;
// The largest ciphertext a peer may send (RFC 8446 5.2: 2^14 + 256).
inline constexpr size_t kTlsMaxCipher = kTlsMaxPlain + 256;

namespace tls_content {
inline constexpr uint8_t kAlert = 21;
inline constexpr uint8_t kHandshake = 22;
inline constexpr uint8_t kApplicationData = 23;
}  // namespace tls_content

// Which AES-GCM seals and opens the records. kAuto: ipsec-mb where it can run, else OpenSSL.
enum class AesGcm { kAuto, kIpsecMb, kOpenSsl };
// The process's choice for the keys made from now on (start-up, before connections); false
// with *error when ipsec-mb is asked for and cannot run here.
bool set_aes_gcm(AesGcm want, std::string* error);
// The same by name, "auto", "ipsec-mb" or "openssl" (the command lines' --tls-aes-gcm, the host
// library's set_tls_aes_gcm); another name: false and *error says what was expected.
bool set_aes_gcm(const std::string& name, std::string* error);
// The implementation keys made now use (kIpsecMb or kOpenSsl), and its description for logs:
// "ipsec-mb 1.3.0 (AVX-512)", "OpenSSL 3.0.19 (EVP)".
AesGcm aes_gcm();
std::string aes_gcm_description();
const char* aes_gcm_name(AesGcm a);  // "ipsec-mb", "openssl" ("auto" for kAuto)

// For the kernel's records (kTLS), which take keys, not secrets: the AEAD key (16 or 32 bytes,
// *key_len) and the 12-byte IV of a traffic secret (RFC 8446 7.3); and, for a KeyUpdate, the
// next traffic secret in place (7.2). False if `suite` is not AES-GCM, the secret is not its
// hash's length, or the derivation fails.
bool traffic_key_iv(uint16_t suite, const uint8_t* secret, size_t len, uint8_t key[32],
                    size_t* key_len, uint8_t iv[12]);
bool next_traffic_secret(uint16_t suite, uint8_t* secret, size_t len);

struct IpsecMbKeys;

// One direction's keys: the traffic secret, the AEAD key and IV derived from it, and the
// record sequence number.
class TlsRecordKeys {
 public:
  TlsRecordKeys() = default;
  ~TlsRecordKeys();
  TlsRecordKeys(const TlsRecordKeys&) = delete;
  TlsRecordKeys& operator=(const TlsRecordKeys&) = delete;

  // `suite` is the TLS 1.3 cipher suite (0x1301 or 0x1302); `secret` the traffic secret.
  // `engine` kAuto: the process's choice (set_aes_gcm); the tests name one.
  bool init(uint16_t suite, const uint8_t* secret, size_t len, bool sealing, std::string* error,
            AesGcm engine = AesGcm::kAuto);
  // KeyUpdate: the next traffic secret, its key and IV, and sequence 0.
  bool update(std::string* error);
  bool ready() const { return ctx_ != nullptr || imb_ != nullptr; }
  // Who seals and opens: kIpsecMb or kOpenSsl (fixed at init(), kept across key updates).
  AesGcm engine() const { return imb_ ? AesGcm::kIpsecMb : AesGcm::kOpenSsl; }

  // Seals `plain` bytes taken from `iov` (from *index / *offset on, which advance) with the
  // inner content type `type` into `out` (room for header, plain + 1 and the tag). Returns the
  // record's size.
  size_t seal(const iovec* iov, size_t iovcnt, size_t* index, size_t* offset, size_t plain,
              uint8_t type, uint8_t* out);
  // Opens the record `rec` (header included, `len` bytes) into `out` (room for len - 5 - 16
  // bytes; may be rec + 5: in place). Returns the inner plaintext length (content type and
  // padding removed) and sets *type, or -1 if the record does not authenticate or carries no
  // content type.
  long open(const uint8_t* rec, size_t len, uint8_t* out, uint8_t* type);

 private:
  bool derive(std::string* error);
  void nonce(uint8_t out[12]) const;
  evp_cipher_ctx_st* ctx_ = nullptr;  // OpenSSL's, or
  IpsecMbKeys* imb_ = nullptr;        // ipsec-mb's expanded keys and context
  uint16_t suite_ = 0;
  bool sealing_ = false;
  size_t hash_len_ = 0;
  bool use_ipsec_mb_ = false;
  uint8_t secret_[48] = {};
  uint8_t key_[32] = {};
  uint8_t iv_[12] = {};
  uint64_t seq_ = 0;
};

}  // namespace sens::transport
