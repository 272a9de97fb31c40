#pragma once
// TLS 1.3 with an external PSK for NVMe/TCP (TP 8011): OpenSSL's handshake, then the records
// by the kernel (kTLS) where it has the `tls` module, else by sens in user space
// (tls_records.h); a context per side and a channel per connection, driven by the reactor on
// a non-blocking socket. The PduReader and SendQueue use the channel instead of readv/sendmsg
// when one is set (a single predictable branch per call when it is not).
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "auth/dhchap.h"
#include "transport/tls_records.h"

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

// Who protects the records once the handshake is done:
// - kSens: sens (tls_records.h: encrypted from the caller's pieces into the send batch,
//   decrypted into the caller's buffer);
// - kOpenSsl: OpenSSL's own record layer (SSL_read/SSL_write; kept for the tests that check
//   the others against it);
// - kKernel: the kernel's TLS (kTLS: setsockopt TCP_ULP "tls", then the keys of each
//   direction): the socket carries plaintext for sens, the kernel encrypts in its own copy of
//   the payload into socket buffers and decrypts straight into the reader's buffer, so the
//   copy user-space TLS adds is gone. A connection fails if the kernel refuses;
// - kAuto (the default): kKernel where the kernel takes the keys, else kSens; each
//   connection reports which (records(), and why not the kernel: kernel_refusal()).
enum class TlsRecords { kSens, kOpenSsl, kKernel, kAuto };
const char* tls_records_name(TlsRecords r);  // "sens", "openssl", "kernel", "auto"
// The process's choice for the contexts made from now on (the command lines' --tls-records,
// the host library's set_tls_records): "auto", "kernel" or "sens"; another name: false and
// *error says what was expected.
bool set_tls_records(const std::string& name, std::string* error);
TlsRecords tls_records();
// What this process knows of the kernel's TLS: "not tried yet", "in use", or why it is not
// ("setsockopt(TCP_ULP, tls): No such file or directory: this kernel has no tls module").
std::string kernel_tls_status();

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
  // For channels made after the call.
  void use_records(TlsRecords r) { records_ = r; }
  TlsRecords records() const { return records_; }

 private:
  TlsContext() = default;
  ::ssl_ctx_st* ctx_ = nullptr;
  bool server_ = false;
  Lookup lookup_;
  TlsPsk psk_;
  TlsRecords records_ = tls_records();
};

// Records leave in batches: OpenSSL encrypts each record into the channel's own buffer (the
// BIO below never writes to the socket by itself), and one send() hands the kernel every record
// a call made; a read fetches as many records as have arrived (read-ahead) instead of a header
// and a body per record. What a send() counts as sent is plaintext whose records have all
// reached the kernel, as for a plain socket.
class TlsChannel {
 public:
  enum class Io { kOk, kWantRead, kWantWrite, kClosed, kError };
  TlsChannel(TlsContext& ctx, int fd);
  ~TlsChannel();
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;

  // One step of the handshake; kOk once it is complete and its last flight has left.
  Io handshake();
  bool established() const { return established_; }
  // Decrypted bytes into `buf` (> 0), or 0 and *io says why.
  size_t read(void* buf, size_t len, Io* io);
  // Encrypts the plaintext of `iov` (from `skip` bytes into iov[0]) in records of up to
  // 16 KiB, past what earlier calls took already, and sends the records. Returns how many
  // plaintext bytes, from the start of `iov`, have now reached the kernel (records of earlier
  // calls included): the caller may reuse them, and passes the rest again next time, from the
  // first byte not yet counted. *io: kOk (nothing waits in the channel), kWantWrite (records
  // wait for the socket: call again once it is writable), kClosed or kError.
  size_t send(const iovec* iov, size_t iovcnt, size_t skip, Io* io);
  // One buffer (tests, simple callers).
  size_t write(const void* buf, size_t len, Io* io);
  // send() and recv() system calls so far (the counters of the queues that use the channel).
  uint64_t send_syscalls() const { return send_syscalls_; }
  uint64_t recv_syscalls() const { return recv_syscalls_; }
  // Encrypted bytes waiting for the socket.
  bool out_pending() const { return out_head_ < out_len_; }
  // Data OpenSSL holds already, decrypted or not (no socket event will announce it).
  bool pending() const;
  // What went wrong (handshake or I/O), for the log.
  const std::string& error() const { return error_; }
  std::string cipher() const;
  // Starts a TLS 1.3 KeyUpdate that asks the peer to update too (RFC 8446 4.6.3); it leaves
  // with the next send(). Long-lived connections may rotate keys; the tests use it. Not on
  // kernel records (false): a kernel before 6.14 cannot change a socket's keys.
  bool request_key_update();
  // Who protects the records: "kernel", "sens" or "openssl" (TlsRecords; valid once
  // established).
  const char* records() const { return kernel_ ? "kernel" : own_records_ ? "sens" : "openssl"; }
  bool kernel_records() const { return kernel_; }
  // records(), and why not the kernel's where it was wanted, for the logs:
  // "sens (no kernel TLS: setsockopt(TCP_ULP, tls): ...)".
  std::string records_description() const {
    return kernel_refusal_.empty()
               ? records()
               : std::string(records()) + " (no kernel TLS: " + kernel_refusal_ + ")";
  }
  // Why the kernel does not protect this connection's records when kAuto wanted it to
  // (empty otherwise): "setsockopt(TCP_ULP, tls): ...".
  const std::string& kernel_refusal() const { return kernel_refusal_; }
  // Whose AES-GCM protects them: "kernel", "ipsec-mb" or "openssl" (valid once established).
  const char* aes_gcm() const {
    return kernel_ ? "kernel" : own_records_ ? aes_gcm_name(send_keys_.engine()) : "openssl";
  }
  // sens's record layer on these traffic secrets, with no handshake: what the handshake's end
  // does with the secrets OpenSSL hands over; called directly by the record fuzzer only.
  bool start_records_with(uint16_t suite, bool server, const uint8_t* client_secret,
                          const uint8_t* server_secret, size_t len);
  // The server's view: the identity the host used (valid once established).
  const std::string& peer_identity() const { return peer_identity_; }

  // (OpenSSL callbacks.)
  std::string peer_identity_;
  std::string lookup_error_;
  int bio_write(const char* buf, int len);
  int bio_read(char* buf, int len);
  bool bio_flush();
  void key_log(const char* line);

 private:
  // Ciphertext of up to 4 full records waits here, plus one record's worth of room.
  static constexpr size_t kRecordPlain = 16384;
  static constexpr size_t kRecordRoom = kRecordPlain + 256;  // a record's largest ciphertext
  static constexpr size_t kOutBatch = 4 * kRecordRoom;       // encrypt no further ahead
  static constexpr size_t kOutCap = kOutBatch + kRecordRoom;
  static constexpr size_t kMaxRecords = 16;          // records of one batch (4 full + short ones)
  static constexpr size_t kRecordAlignPiece = 8192;  // pieces this large start a record
  struct Record {
    size_t cipher_end;  // in out_
    size_t plain;
  };
  Io classify(int ret, const char* what);
  // The end of the handshake (its last flight sent): the kernel's records or sens's take over.
  Io take_over_records();
  // The kernel's records (tls_kernel.cc): both directions' keys in (kIn), or *why not:
  // refused before any key went in (the socket is as it was: kRefused), or the send keys in
  // and the receive keys refused (the connection cannot go on: kHalfIn).
  enum class KernelKeys { kIn, kRefused, kHalfIn };
  KernelKeys start_kernel_records(uint16_t suite, const uint8_t* tx_secret,
                                  const uint8_t* rx_secret, size_t len, std::string* why);
  size_t send_kernel(const iovec* iov, size_t iovcnt, size_t skip, Io* io);
  size_t read_kernel(void* buf, size_t len, Io* io);
  Io kernel_control(const uint8_t* bytes, size_t len, uint8_t type);
  // sens's record layer (TlsRecords::kSens).
  size_t send_records(const iovec* iov, size_t iovcnt, size_t skip, Io* io);
  size_t read_records(void* buf, size_t len, Io* io);
  bool buffered_record() const;  // a whole record waits in in_
  Io control_record(const uint8_t* plain, size_t len, uint8_t type);
  Io fail(Io io, std::string why);
  Io flush_out();           // sends what waits in out_; kOk once it is empty
  size_t take_delivered();  // plaintext of the records now wholly in the kernel
  ::ssl_st* ssl_ = nullptr;
  int fd_ = -1;
  bool established_ = false;
  std::string error_;
  std::unique_ptr<uint8_t[]> out_;  // records not yet in the kernel [out_head_, out_len_)
  size_t out_head_ = 0;
  size_t out_len_ = 0;
  Record records_[kMaxRecords];  // application records in out_, oldest first
  size_t nrecords_ = 0;
  size_t first_record_ = 0;
  size_t taken_ = 0;                   // plaintext encrypted whose records have not all left
  std::unique_ptr<uint8_t[]> gather_;  // one record's plaintext, gathered from the iovecs
  size_t gather_len_ = 0;
  uint64_t send_syscalls_ = 0;
  uint64_t recv_syscalls_ = 0;
  // sens's record layer: the keys of each direction, the traffic secrets OpenSSL's key log
  // hands over during the handshake (wiped once used), and the received records: ciphertext
  // in in_ [in_head_, in_tail_), a record's plaintext decrypted in place and not yet taken in
  // [plain_head_, plain_end_).
  // own_records_: sens takes over the socket after the handshake (with its records or the
  // kernel's); want_: whose records it asked for; kernel_: the kernel's are on.
  bool own_records_ = false;
  bool records_on_ = false;
  TlsRecords want_ = TlsRecords::kSens;
  bool records_owed_ = false;  // handshake done, its last flight not yet all sent
  bool kernel_ = false;
  std::string kernel_refusal_;
  // Kernel records: the receive direction's traffic secret (a peer's KeyUpdate derives the
  // next one), and the bytes of a control record (alert, handshake message) read so far.
  uint16_t suite_ = 0;
  uint8_t kernel_rx_secret_[48] = {};
  size_t kernel_secret_len_ = 0;
  std::string control_;
  uint8_t control_type_ = 0;
  bool key_update_owed_ = false;  // a KeyUpdate of ours leaves with the next records
  bool key_update_ask_ = false;   // ... asking the peer to update too
  bool peer_closed_ = false;
  TlsRecordKeys send_keys_, recv_keys_;
  uint8_t client_secret_[48] = {}, server_secret_[48] = {};
  size_t client_secret_len_ = 0, server_secret_len_ = 0;
  static constexpr size_t kInCap = 64 * 1024 + kTlsHeaderBytes + kTlsMaxCipher;
  std::unique_ptr<uint8_t[]> in_;
  size_t in_head_ = 0, in_tail_ = 0;
  size_t plain_head_ = 0, plain_end_ = 0;
};

}  // namespace sens::transport
