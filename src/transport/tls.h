#pragma once
// TLS 1.3 with an external PSK for NVMe/TCP (TP 8011), on OpenSSL in user space (this kernel
// has no kTLS): a context per side and a channel per connection, driven by the reactor on a
// non-blocking socket. The PduReader and SendQueue use the channel instead of readv/sendmsg
// when one is set (a single predictable branch per call when it is not).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "auth/dhchap.h"

struct ssl_ctx_st;
struct ssl_st;

namespace sens::transport {

// The PSK a connection uses: the TLS PSK (32 bytes for TLS_AES_128_GCM_SHA256, 48 for
// TLS_AES_256_GCM_SHA384) under its identity.
struct TlsPsk {
  std::string identity;
  auth::Bytes key;
  uint8_t hash = 1;  // 1 SHA-256, 2 SHA-384: picks the cipher suite
};

class TlsContext {
 public:
  // Server: `lookup(identity, &psk, &why)` finds the PSK of an identity a host offers.
  using Lookup = std::function<bool(const std::string& identity, TlsPsk* psk, std::string* why)>;
  static std::unique_ptr<TlsContext> server(Lookup lookup, std::string* error);
  // Client: offers `psk`.
  static std::unique_ptr<TlsContext> client(TlsPsk psk, std::string* error);
  ~TlsContext();

  ::ssl_ctx_st* ctx() const { return ctx_; }
  bool is_server() const { return server_; }
  const Lookup& lookup() const { return lookup_; }
  const TlsPsk& psk() const { return psk_; }

 private:
  TlsContext() = default;
  ::ssl_ctx_st* ctx_ = nullptr;
  bool server_ = false;
  Lookup lookup_;
  TlsPsk psk_;
};

class TlsChannel {
 public:
  enum class Io { kOk, kWantRead, kWantWrite, kClosed, kError };
  TlsChannel(TlsContext& ctx, int fd);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // One step of the handshake; kOk once it is complete.
  Io handshake();
  bool established() const { return established_; }
  // Decrypted bytes into `buf` (> 0), or 0 and *io says why.
  size_t read(void* buf, size_t len, Io* io);
  // Encrypts and sends; bytes taken (> 0, at least a whole record), or 0 and *io says why. A
  // call after kWantWrite must pass the same bytes first (more may follow).
  size_t write(const void* buf, size_t len, Io* io);
  // Plaintext OpenSSL holds already (no socket event will announce it).
  bool pending() const;
  // What went wrong (handshake or I/O), for the log.
  const std::string& error() const { return error_; }
  std::string cipher() const;
  // The server's view: the identity the host used (valid once established).
  const std::string& peer_identity() const { return peer_identity_; }

  // (OpenSSL callbacks.)
  std::string peer_identity_;
  std::string lookup_error_;

 private:
  Io classify(int ret, const char* what);
  ::ssl_st* ssl_ = nullptr;
  bool established_ = false;
  std::string error_;
};

}  // namespace sens::transport
