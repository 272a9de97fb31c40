#include "transport/tls_records.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#if SENS_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

#include "common/prefetch.h"

namespace sens::transport {

#if SENS_HAVE_IPSEC_MB
// A direction's expanded key and GHASH tables, its running GCM state, and the functions of
// the key's size for the CPU's code path.
struct IpsecMbKeys {
  gcm_key_data key;  // (64-byte aligned: `new` honours it)
  gcm_context_data ctx;
  aes_gcm_init_t init;
  aes_gcm_enc_dec_update_t update;
  aes_gcm_enc_dec_finalize_t finalize;
};
#else
struct IpsecMbKeys {};
#endif

namespace {

#if SENS_HAVE_IPSEC_MB
// One manager for the process: with the direct GCM calls it is only a table of the functions
// init_mb_mgr_auto chose for this CPU (nothing in it changes per call), so every thread may use
// it. Null when the CPU lacks AES-NI or PCLMULQDQ (ipsec-mb would emulate them: OpenSSL then).
IMB_MGR* ipsec_mb() {
  static IMB_MGR* const mgr = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (!m) return static_cast<IMB_MGR*>(nullptr);
    init_mb_mgr_auto(m, nullptr);
    const uint64_t need = IMB_FEATURE_AESNI | IMB_FEATURE_PCLMULQDQ;
    if (imb_get_errno(m) != 0 || (m->features & need) != need) {
      free_mb_mgr(m);
      return static_cast<IMB_MGR*>(nullptr);
    }
    return m;
  }();
  return mgr;
}
#endif

bool ipsec_mb_runs() {
#if SENS_HAVE_IPSEC_MB
  return ipsec_mb() != nullptr;
#else
  return false;
#endif
}

std::atomic<AesGcm> g_aes_gcm{AesGcm::kAuto};

AesGcm resolve(AesGcm want) {
  if (want == AesGcm::kAuto) want = g_aes_gcm.load(std::memory_order_relaxed);
  if (want == AesGcm::kAuto) want = ipsec_mb_runs() ? AesGcm::kIpsecMb : AesGcm::kOpenSsl;
  if (want == AesGcm::kIpsecMb && !ipsec_mb_runs()) want = AesGcm::kOpenSsl;
  return want;
}

struct Suite {
  const char* digest;
  size_t hash_len;
  size_t key_len;
  const EVP_CIPHER* (*cipher)();
};

bool suite_of(uint16_t id, Suite* s) {
  switch (id) {
    case 0x1301:
      *s = {"SHA256", 32, 16, EVP_aes_128_gcm};
      return true;
    case 0x1302:
      *s = {"SHA384", 48, 32, EVP_aes_256_gcm};
      return true;
    default:
      return false;
  }
}

// HKDF-Expand-Label(secret, label, "", length) (RFC 8446 7.1) through OpenSSL's HKDF.
bool expand_label(const char* digest, const uint8_t* secret, size_t secret_len, const char* label,
                  uint8_t* out, size_t len) {
  uint8_t info[2 + 1 + 255 + 1];
  const size_t label_len = 6 + std::strlen(label);  // "tls13 " + label
  info[0] = uint8_t(len >> 8);
  info[1] = uint8_t(len);
  info[2] = uint8_t(label_len);
  std::memcpy(info + 3, "tls13 ", 6);
  std::memcpy(info + 9, label, label_len - 6);
  info[3 + label_len] = 0;  // no context
  const size_t info_len = 4 + label_len;
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* kctx = kdf ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  if (!kctx) return false;
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(digest), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret),
                                        secret_len),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, info_len),
      OSSL_PARAM_construct_end()};
  bool ok = EVP_KDF_derive(kctx, out, len, params) == 1;
  EVP_KDF_CTX_free(kctx);
  return ok;
}

}  // namespace

const char* aes_gcm_name(AesGcm a) {
  switch (a) {
    case AesGcm::kIpsecMb:
      return "ipsec-mb";
    case AesGcm::kOpenSsl:
      return "openssl";
    default:
      return "auto";
  }
}

bool set_aes_gcm(AesGcm want, std::string* error) {
  if (want == AesGcm::kIpsecMb && !ipsec_mb_runs()) {
#if SENS_HAVE_IPSEC_MB
    *error = "ipsec-mb cannot run here (the CPU has no AES-NI or no PCLMULQDQ)";
#else
    *error = "this build has no ipsec-mb (libipsec-mb-dev was not installed when it was built)";
#endif
    return false;
  }
  g_aes_gcm.store(want, std::memory_order_relaxed);
  return true;
}

bool set_aes_gcm(const std::string& name, std::string* error) {
  for (AesGcm a : {AesGcm::kAuto, AesGcm::kIpsecMb, AesGcm::kOpenSsl})
    if (name == aes_gcm_name(a)) return set_aes_gcm(a, error);
  *error = "'" + name + "': expected auto, ipsec-mb or openssl";
  return false;
}

AesGcm aes_gcm() {
  return resolve(AesGcm::kAuto);
}

std::string aes_gcm_description() {
#if SENS_HAVE_IPSEC_MB
  if (aes_gcm() == AesGcm::kIpsecMb) {
    const IMB_MGR* m = ipsec_mb();
    const char* arch = m->used_arch == IMB_ARCH_AVX512 ? "AVX-512"
                       : m->used_arch == IMB_ARCH_AVX2 ? "AVX2"
                       : m->used_arch == IMB_ARCH_AVX  ? "AVX"
                                                       : "SSE";
    const bool vaes = (m->features & (IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ)) ==
                      (IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ);
    return std::string("ipsec-mb ") + imb_get_version_str() + " (" + arch +
           (vaes && m->used_arch == IMB_ARCH_AVX512 ? ", VAES" : "") + ")";
  }
#endif
  return std::string("OpenSSL ") + OpenSSL_version(OPENSSL_VERSION_STRING) + " (EVP)";
}

bool traffic_key_iv(uint16_t suite, const uint8_t* secret, size_t len, uint8_t key[32],
                    size_t* key_len, uint8_t iv[12]) {
  Suite s{};
  if (!suite_of(suite, &s) || len != s.hash_len) return false;
  *key_len = s.key_len;
  return expand_label(s.digest, secret, len, "key", key, s.key_len) &&
         expand_label(s.digest, secret, len, "iv", iv, 12);
}

bool next_traffic_secret(uint16_t suite, uint8_t* secret, size_t len) {
  Suite s{};
  uint8_t next[48];
  if (!suite_of(suite, &s) || len != s.hash_len ||
      !expand_label(s.digest, secret, len, "traffic upd", next, len))
    return false;
  std::memcpy(secret, next, len);
  OPENSSL_cleanse(next, sizeof next);
  return true;
}

TlsRecordKeys::~TlsRecordKeys() {
  if (imb_) {
    OPENSSL_cleanse(imb_, sizeof *imb_);
    delete imb_;
  }
  EVP_CIPHER_CTX_free(ctx_);
  OPENSSL_cleanse(secret_, sizeof secret_);
  OPENSSL_cleanse(key_, sizeof key_);
  OPENSSL_cleanse(iv_, sizeof iv_);
}

bool TlsRecordKeys::init(uint16_t suite, const uint8_t* secret, size_t len, bool sealing,
                         std::string* error, AesGcm engine) {
  Suite s{};
  if (!suite_of(suite, &s)) {
    *error = "TLS records: cipher suite " + std::to_string(suite) + " is not AES-GCM";
    return false;
  }
  if (len != s.hash_len) {
    *error = "TLS records: a traffic secret of " + std::to_string(len) + " bytes for a " +
             std::to_string(s.hash_len) + "-byte hash";
    return false;
  }
  suite_ = suite;
  sealing_ = sealing;
  hash_len_ = s.hash_len;
  use_ipsec_mb_ = resolve(engine) == AesGcm::kIpsecMb;
  std::memcpy(secret_, secret, len);
  return derive(error);
}

bool TlsRecordKeys::update(std::string* error) {
  if (!next_traffic_secret(suite_, secret_, hash_len_)) {
    *error = "TLS records: key update derivation failed";
    return false;
  }
  return derive(error);
}

bool TlsRecordKeys::derive(std::string* error) {
  Suite s{};
  suite_of(suite_, &s);
  size_t key_len = 0;
  if (!traffic_key_iv(suite_, secret_, hash_len_, key_, &key_len, iv_)) {
    *error = "TLS records: key derivation failed";
    return false;
  }
#if SENS_HAVE_IPSEC_MB
  if (use_ipsec_mb_) {
    // The key expanded once (and its GHASH powers); each record starts from its nonce.
    IMB_MGR* m = ipsec_mb();
    if (!imb_) imb_ = new IpsecMbKeys;
    const bool aes256 = s.key_len == 32;
    (aes256 ? m->gcm256_pre : m->gcm128_pre)(key_, &imb_->key);
    imb_->init = aes256 ? m->gcm256_init : m->gcm128_init;
    imb_->update = sealing_ ? (aes256 ? m->gcm256_enc_update : m->gcm128_enc_update)
                            : (aes256 ? m->gcm256_dec_update : m->gcm128_dec_update);
    imb_->finalize = sealing_ ? (aes256 ? m->gcm256_enc_finalize : m->gcm128_enc_finalize)
                              : (aes256 ? m->gcm256_dec_finalize : m->gcm128_dec_finalize);
    seq_ = 0;
    return true;
  }
#endif
  if (!ctx_ && !(ctx_ = EVP_CIPHER_CTX_new())) {
    *error = "TLS records: no cipher context";
    return false;
  }
  // The key once; each record sets only its nonce.
  int ok = sealing_ ? EVP_EncryptInit_ex(ctx_, s.cipher(), nullptr, key_, nullptr)
                    : EVP_DecryptInit_ex(ctx_, s.cipher(), nullptr, key_, nullptr);
  if (ok != 1) {
    *error = "TLS records: cipher set-up failed";
    return false;
  }
  seq_ = 0;
  return true;
}

void TlsRecordKeys::nonce(uint8_t out[12]) const {
  std::memcpy(out, iv_, 12);
  for (int i = 0; i < 8; ++i) out[4 + i] ^= uint8_t(seq_ >> (56 - 8 * i));
}

size_t TlsRecordKeys::seal(const iovec* iov, size_t iovcnt, size_t* index, size_t* offset,
                           size_t plain, uint8_t type, uint8_t* out) {
  const size_t inner = plain + 1;  // the content type follows the content (no padding)
  const size_t total = kTlsHeaderBytes + inner + kTlsTagBytes;
  out[0] = tls_content::kApplicationData;  // the outer type of every protected record
  out[1] = 0x03;
  out[2] = 0x03;
  out[3] = uint8_t((inner + kTlsTagBytes) >> 8);
  out[4] = uint8_t(inner + kTlsTagBytes);
  uint8_t n[12];
  nonce(n);
  ++seq_;
  int len = 0;
  // The header is the AAD.
#if SENS_HAVE_IPSEC_MB
  if (imb_) imb_->init(&imb_->key, &imb_->ctx, n, out, kTlsHeaderBytes);
#endif
  if (!imb_) {
    EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, n);
    EVP_EncryptUpdate(ctx_, nullptr, &len, out, int(kTlsHeaderBytes));
  }
  // GCM is a stream: each piece's ciphertext is as long as the piece.
  auto encrypt = [this](uint8_t* dst, const uint8_t* src, size_t k) {
#if SENS_HAVE_IPSEC_MB
    if (imb_) return imb_->update(&imb_->key, &imb_->ctx, dst, src, k);
#endif
    int l = 0;
    EVP_EncryptUpdate(ctx_, dst, &l, src, int(k));
  };
  uint8_t* p = out + kTlsHeaderBytes;
  size_t i = *index, off = *offset, left = plain;
  // A read's payload comes from pages the cache has long lost (a RAM namespace larger than
  // it): the lines of the next kLookahead bytes of the record are asked for while a piece is
  // encrypted, so that the cipher does not wait for memory one line at a time (about a fifth
  // of the seal's time for 4 KiB pieces from random pages, measured). Counted in bytes, not
  // pieces: an answer's 4 KiB follows its 24-byte header, whose encryption gives no time.
  constexpr size_t kLookahead = 4096;
  size_t ask = i, asked = 0;  // the next piece to ask for; bytes asked for from here on
  auto ask_ahead = [&](size_t want) {
    while (asked < want && asked < left && ask < iovcnt) {
      const size_t from = ask == i ? off : 0;
      const size_t n = std::min(iov[ask].iov_len - from, left - asked);
      prefetch_lines(static_cast<const uint8_t*>(iov[ask].iov_base) + from, n);
      asked += n;
      ++ask;
    }
  };
  while (left > 0 && i < iovcnt) {
    const size_t k = std::min(iov[i].iov_len - off, left);
    if (k > 0) {
      ask_ahead(k + kLookahead);
      encrypt(p, static_cast<const uint8_t*>(iov[i].iov_base) + off, k);
      p += k;
      left -= k;
      off += k;
      asked -= k;
    }
    if (off == iov[i].iov_len) {
      ++i;
      off = 0;
    }
  }
  *index = i;
  *offset = off;
  encrypt(p, &type, 1);
  p += 1;
#if SENS_HAVE_IPSEC_MB
  if (imb_) imb_->finalize(&imb_->key, &imb_->ctx, p, kTlsTagBytes);
#endif
  if (!imb_) {
    EVP_EncryptFinal_ex(ctx_, p, &len);  // (GCM: no bytes)
    EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, int(kTlsTagBytes), p);
  }
  return total;
}

long TlsRecordKeys::open(const uint8_t* rec, size_t len, uint8_t* out, uint8_t* type) {
  if (len < kTlsHeaderBytes + 1 + kTlsTagBytes) return -1;
  const size_t body = len - kTlsHeaderBytes - kTlsTagBytes;
  uint8_t tag[kTlsTagBytes];
  std::memcpy(tag, rec + len - kTlsTagBytes, kTlsTagBytes);  // (before an in-place decrypt)
  uint8_t n[12];
  nonce(n);
  ++seq_;
#if SENS_HAVE_IPSEC_MB
  if (imb_) {
    uint8_t computed[kTlsTagBytes];
    imb_->init(&imb_->key, &imb_->ctx, n, rec, kTlsHeaderBytes);
    imb_->update(&imb_->key, &imb_->ctx, out, rec + kTlsHeaderBytes, body);
    imb_->finalize(&imb_->key, &imb_->ctx, computed, kTlsTagBytes);
    if (CRYPTO_memcmp(computed, tag, kTlsTagBytes) != 0) return -1;
  }
#endif
  if (!imb_) {
    int outl = 0, fin = 0;
    if (EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, n) != 1 ||
        EVP_DecryptUpdate(ctx_, nullptr, &outl, rec, int(kTlsHeaderBytes)) != 1 ||
        EVP_DecryptUpdate(ctx_, out, &outl, rec + kTlsHeaderBytes, int(body)) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, int(kTlsTagBytes), tag) != 1 ||
        EVP_DecryptFinal_ex(ctx_, out + outl, &fin) != 1)
      return -1;
  }
  // The inner plaintext ends with the content type, then zero padding.
  size_t end = body;
  while (end > 0 && out[end - 1] == 0) --end;
  if (end == 0) return -1;
  *type = out[end - 1];
  return long(end - 1);
}

}  // namespace sens::transport
