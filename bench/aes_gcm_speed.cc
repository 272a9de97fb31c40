// The AES-GCM micro-benchmark behind docs/results.md ("Morning of 2026-12-07") and the README's
// libipsec-mb-dev line: one TLS record sealed as sens's record layer does it (init with the
// nonce and the 5-byte header as AAD, the body, finalize with the tag), OpenSSL's EVP against
// Intel's ipsec-mb, for a 4 KiB PDU, a 16 KiB record and a 25-byte answer. Not part of the build:
//   g++ -O2 bench/aes_gcm_speed.cc -o /tmp/aes_gcm_speed -lIPSec_MB -lcrypto
//   taskset -c 1 /tmp/aes_gcm_speed
#include <intel-ipsec-mb.h>
#include <openssl/evp.h>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
using clk = std::chrono::steady_clock;
int main() {
  IMB_MGR* m = alloc_mb_mgr(0);
  init_mb_mgr_auto(m, nullptr);
  
  printf("ipsec-mb %s arch features 0x%llx\n", imb_get_version_str(), (unsigned long long)m->features);
  uint8_t key[32] = {1,2,3}; uint8_t iv[12] = {5};
  uint8_t aad[5] = {23,3,3,0x40,0x11};
  for (int kb : {16, 32}) for (size_t len : {size_t(4096 + 24 + 1), size_t(16384)}) {
    std::vector<uint8_t> src(len, 7), dst(len + 64);
    uint8_t tag[16];
    const int N = 200000 / (len / 1024);
    // OpenSSL
    EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(c, kb == 16 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), nullptr, key, nullptr);
    auto t0 = clk::now(); int l;
    for (int i = 0; i < N; ++i) {
      iv[11] = i;
      EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv);
      EVP_EncryptUpdate(c, nullptr, &l, aad, 5);
      EVP_EncryptUpdate(c, dst.data(), &l, src.data(), int(len));
      EVP_EncryptFinal_ex(c, dst.data() + l, &l);
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    }
    double ossl = std::chrono::duration<double>(clk::now() - t0).count() / N * 1e9;
    // ipsec-mb
    struct gcm_key_data kd; struct gcm_context_data cd;
    if (kb == 16) IMB_AES128_GCM_PRE(m, key, &kd); else IMB_AES256_GCM_PRE(m, key, &kd);
    t0 = clk::now();
    for (int i = 0; i < N; ++i) {
      iv[11] = i;
      if (kb == 16) {
        IMB_AES128_GCM_INIT_VAR_IV(m, &kd, &cd, iv, 12, aad, 5);
        IMB_AES128_GCM_ENC_UPDATE(m, &kd, &cd, dst.data(), src.data(), len);
        IMB_AES128_GCM_ENC_FINALIZE(m, &kd, &cd, tag, 16);
      } else {
        IMB_AES256_GCM_INIT_VAR_IV(m, &kd, &cd, iv, 12, aad, 5);
        IMB_AES256_GCM_ENC_UPDATE(m, &kd, &cd, dst.data(), src.data(), len);
        IMB_AES256_GCM_ENC_FINALIZE(m, &kd, &cd, tag, 16);
      }
    }
    double imb = std::chrono::duration<double>(clk::now() - t0).count() / N * 1e9;
    // small records (24 B)
    t0 = clk::now();
    for (int i = 0; i < N; ++i) {
      EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv);
      EVP_EncryptUpdate(c, nullptr, &l, aad, 5);
      EVP_EncryptUpdate(c, dst.data(), &l, src.data(), 25);
      EVP_EncryptFinal_ex(c, dst.data() + l, &l);
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, tag);
    }
    double ossl_s = std::chrono::duration<double>(clk::now() - t0).count() / N * 1e9;
    t0 = clk::now();
    for (int i = 0; i < N; ++i) {
      IMB_AES128_GCM_INIT_VAR_IV(m, &kd, &cd, iv, 12, aad, 5);
      IMB_AES128_GCM_ENC_UPDATE(m, &kd, &cd, dst.data(), src.data(), 25);
      IMB_AES128_GCM_ENC_FINALIZE(m, &kd, &cd, tag, 16);
    }
    double imb_s = std::chrono::duration<double>(clk::now() - t0).count() / N * 1e9;
    printf("AES-%d %zu B: openssl %.0f ns (%.2f GB/s), ipsec-mb %.0f ns (%.2f GB/s); 25 B: %.0f vs %.0f ns\n", kb * 8, len, ossl, len / ossl, imb, len / imb, ossl_s, imb_s);
    EVP_CIPHER_CTX_free(c);
  }
}
