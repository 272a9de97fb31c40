#include "transport/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace sens::transport {

namespace {

constexpr const char* kSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";
constexpr size_t kReadAhead = 64 * 1024;  // OpenSSL's receive buffer per connection

std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// The channel's own BIO. OpenSSL's socket BIO writes each record with its own write(), and
// write() raises SIGPIPE in whatever thread writes to a peer that has gone (killing an
// application that embeds the host library). This one appends records to the channel's buffer,
// which sends them in batches with MSG_NOSIGNAL (EPIPE comes back as an error), and reads with
// recv().
TlsChannel* channel_of(BIO* b) {
  return static_cast<TlsChannel*>(BIO_get_data(b));
}

int bio_write(BIO* b, const char* buf, int len) {
  BIO_clear_retry_flags(b);
  int n = channel_of(b)->bio_write(buf, len);
  if (n < 0) BIO_set_retry_write(b);
  return n;
}

int bio_read(BIO* b, char* buf, int len) {
  BIO_clear_retry_flags(b);
  int n = channel_of(b)->bio_read(buf, len);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return n;
}

long bio_ctrl(BIO* b, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:  // the handshake flushes each flight before it waits for an answer
      BIO_clear_retry_flags(b);
      if (channel_of(b)->bio_flush()) return 1;
      BIO_set_retry_write(b);
      return 0;
    default:
      return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

// The descriptor belongs to the connection, which closes it.
int bio_destroy(BIO*) {
  return 1;
}

BIO* channel_bio(TlsChannel* channel) {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                 "sens batched records (MSG_NOSIGNAL)");
    if (m) {
      BIO_meth_set_write(m, bio_write);
      BIO_meth_set_read(m, bio_read);
      BIO_meth_set_ctrl(m, bio_ctrl);
      BIO_meth_set_create(m, bio_create);
      BIO_meth_set_destroy(m, bio_destroy);
    }
    return m;
  }();
  BIO* b = method ? BIO_new(method) : nullptr;
  if (b) BIO_set_data(b, channel);
  return b;
}

// A session carrying an external PSK for the cipher suite of its hash.
SSL_SESSION* psk_session(SSL* ssl, const TlsPsk& psk) {
  const unsigned char id[2] = {0x13, uint8_t(psk.hash == 2 ? 0x02 : 0x01)};
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, id);
  SSL_SESSION* s = cipher ? SSL_SESSION_new() : nullptr;
  if (!s) return nullptr;
  if (SSL_SESSION_set1_master_key(s, psk.key.data(), psk.key.size()) != 1 ||
      SSL_SESSION_set_cipher(s, cipher) != 1 ||
      SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int find_session(SSL* ssl, const unsigned char* identity, size_t len, SSL_SESSION** sess) {
  auto* ctx = static_cast<TlsContext*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  auto* ch = static_cast<TlsChannel*>(SSL_get_app_data(ssl));
  *sess = nullptr;
  std::string id(reinterpret_cast<const char*>(identity), len);
  TlsPsk psk;
  std::string why;
  if (!ctx->lookup()(id, &psk, &why)) {
    ch->lookup_error_ = why;  // no session: the handshake fails
    return 1;
  }
  *sess = psk_session(ssl, psk);
  auth::wipe(psk.key);
  if (*sess) ch->peer_identity_ = id;
  return 1;
}

int use_session(SSL* ssl, const EVP_MD*, const unsigned char** id, size_t* idlen,
                SSL_SESSION** sess) {
  auto* ctx = static_cast<TlsContext*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  const TlsPsk& psk = ctx->psk();
  *sess = psk_session(ssl, psk);
  *id = reinterpret_cast<const unsigned char*>(psk.identity.data());
  *idlen = psk.identity.size();
  return *sess ? 1 : 0;
}

// OpenSSL announces each secret of the handshake as a key log line; the traffic secrets are
// what sens's record layer needs (the kernel gets the same from OpenSSL for kTLS).
void key_log(const SSL* ssl, const char* line) {
  if (auto* ch = static_cast<TlsChannel*>(SSL_get_app_data(ssl))) ch->key_log(line);
}

SSL_CTX* new_ctx(bool server, std::string* error) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(ctx, kSuites) != 1) {
    *error = "TLS context: " + ssl_errors();
    SSL_CTX_free(ctx);
    return nullptr;
  }
  // Partial writes: the send queue accounts bytes per record; moving buffer: a retry after
  // want-write passes the same bytes from the queue's (re-gathered) buffer.
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read-ahead: one recv() takes every record that has arrived (up to the buffer), where
  // OpenSSL would otherwise read each record's 5-byte header and then its body.
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_default_read_buffer_len(ctx, kReadAhead);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);  // external PSKs only; no resumption tickets
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_keylog_callback(ctx, key_log);
  return ctx;
}

}  // namespace

std::unique_ptr<TlsContext> TlsContext::server(Lookup lookup, std::string* error) {
  std::unique_ptr<TlsContext> t(new TlsContext);
  t->ctx_ = new_ctx(true, error);
  if (!t->ctx_) return nullptr;
  t->server_ = true;
  t->lookup_ = std::move(lookup);
  SSL_CTX_set_app_data(t->ctx_, t.get());
  SSL_CTX_set_psk_find_session_callback(t->ctx_, find_session);
  return t;
}

std::unique_ptr<TlsContext> TlsContext::client(TlsPsk psk, std::string* error) {
  std::unique_ptr<TlsContext> t(new TlsContext);
  t->ctx_ = new_ctx(false, error);
  if (!t->ctx_) return nullptr;
  // Offer only the suite of the PSK's hash: the server may not pick one the PSK cannot serve.
  if (SSL_CTX_set_ciphersuites(
          t->ctx_, psk.hash == 2 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256") != 1) {
    *error = "TLS context: " + ssl_errors();
    return nullptr;
  }
  t->psk_ = std::move(psk);
  SSL_CTX_set_app_data(t->ctx_, t.get());
  SSL_CTX_set_psk_use_session_callback(t->ctx_, use_session);
  // The PSK alone authenticates the server: there is no certificate to check.
  SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_NONE, nullptr);
  return t;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(ctx_);
  auth::wipe(psk_.key);
}

TlsChannel::TlsChannel(TlsContext& ctx, int fd)
    : ssl_(SSL_new(ctx.ctx())),
      fd_(fd),
      own_records_(ctx.records() != TlsRecords::kOpenSsl),
      want_(ctx.records()) {
  if (!ssl_) return;
  SSL_set_app_data(ssl_, this);
  // sens takes over the socket after the handshake: OpenSSL must not read past its end.
  if (own_records_) SSL_set_read_ahead(ssl_, 0);
  BIO* bio = channel_bio(this);
  if (!bio) {
    SSL_free(ssl_);
    ssl_ = nullptr;  // handshake() reports "no session"
    return;
  }
  SSL_set_bio(ssl_, bio, bio);  // one reference, for both directions
  if (ctx.is_server())
    SSL_set_accept_state(ssl_);
  else
    SSL_set_connect_state(ssl_);
}

TlsChannel::~TlsChannel() {
  SSL_free(ssl_);
  OPENSSL_cleanse(client_secret_, sizeof client_secret_);
  OPENSSL_cleanse(server_secret_, sizeof server_secret_);
  OPENSSL_cleanse(kernel_rx_secret_, sizeof kernel_rx_secret_);
}

TlsChannel::Io TlsChannel::classify(int ret, const char* what) {
  int e = SSL_get_error(ssl_, ret);
  switch (e) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      error_ = "peer closed the TLS session";
      return Io::kClosed;
    case SSL_ERROR_SYSCALL: {
      int err = errno;
      std::string q = ssl_errors();
      if (ret == 0 || err == 0) {
        error_ = std::string(what) + ": connection closed";
        return Io::kClosed;
      }
      error_ = std::string(what) + ": " + std::strerror(err) + (q.empty() ? "" : " (" + q + ")");
      return Io::kError;
    }
    default:
      error_ = std::string(what) + ": " + ssl_errors();
      if (!lookup_error_.empty()) error_ += " (" + lookup_error_ + ")";
      return Io::kError;
  }
}

TlsChannel::Io TlsChannel::handshake() {
  if (!ssl_) {
    error_ = "TLS: no session";
    return Io::kError;
  }
  if (!established_) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl_);
    if (r != 1) {
      Io io = classify(r, "TLS handshake");
      if (io == Io::kClosed && !lookup_error_.empty()) error_ += " (" + lookup_error_ + ")";
      if (io == Io::kWantRead && out_pending()) {  // our flight first
        Io f = flush_out();
        if (f != Io::kOk) return f;
      }
      return io;
    }
    established_ = true;
    records_owed_ = own_records_;
  }
  // The last flight (perhaps still waiting from an earlier call) leaves under OpenSSL's
  // records before the kernel's may take the socket.
  Io f = flush_out();
  return f == Io::kOk && records_owed_ ? take_over_records() : f;
}

size_t TlsChannel::read(void* buf, size_t len, Io* io) {
  if (kernel_) return read_kernel(buf, len, io);
  if (records_on_) return read_records(buf, len, io);
  size_t n = 0;
  ERR_clear_error();
  int r = SSL_read_ex(ssl_, buf, len, &n);
  // A read may make OpenSSL answer (a key update, an alert): it leaves now if the socket takes
  // it, else with the next send.
  if (out_pending()) flush_out();
  if (r == 1) {
    *io = Io::kOk;
    return n;
  }
  *io = classify(r, "TLS read");
  return 0;
}

int TlsChannel::bio_write(const char* buf, int len) {
  if (!out_) out_.reset(new uint8_t[kOutCap]);
  if (out_len_ == out_head_ && nrecords_ == 0) out_len_ = out_head_ = 0;
  if (kOutCap - out_len_ < size_t(len)) {
    errno = EAGAIN;
    return -1;  // full: OpenSSL keeps the record and retries it (send() makes room first)
  }
  std::memcpy(out_.get() + out_len_, buf, size_t(len));
  out_len_ += size_t(len);
  return len;
}

int TlsChannel::bio_read(char* buf, int len) {
  ++recv_syscalls_;
  return int(::recv(fd_, buf, size_t(len), 0));
}

bool TlsChannel::bio_flush() {
  return flush_out() == Io::kOk;
}

TlsChannel::Io TlsChannel::flush_out() {
  while (out_head_ < out_len_) {
    ssize_t n = ::send(fd_, out_.get() + out_head_, out_len_ - out_head_, MSG_NOSIGNAL);
    ++send_syscalls_;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kWantWrite;
      error_ = std::string("TLS write: ") + std::strerror(errno);
      return errno == EPIPE || errno == ECONNRESET ? Io::kClosed : Io::kError;
    }
    out_head_ += size_t(n);
  }
  return Io::kOk;
}

size_t TlsChannel::take_delivered() {
  size_t plain = 0;
  while (nrecords_ > 0 && records_[first_record_].cipher_end <= out_head_) {
    plain += records_[first_record_].plain;
    first_record_ = (first_record_ + 1) % kMaxRecords;
    --nrecords_;
  }
  taken_ -= plain;
  return plain;
}

size_t TlsChannel::send(const iovec* iov, size_t iovcnt, size_t skip, Io* io) {
  if (kernel_) return send_kernel(iov, iovcnt, skip, io);
  if (records_on_) return send_records(iov, iovcnt, skip, io);
  *io = flush_out();
  const size_t taken_before = taken_;  // the caller's list starts with these bytes
  size_t delivered = take_delivered();
  if (*io != Io::kOk) return delivered;  // the socket still holds us up (or failed)
  out_head_ = out_len_ = 0;              // everything encrypted has left: start at the front
  if (!gather_) gather_.reset(new uint8_t[kRecordPlain]);
  // The first byte not taken yet: `taken_before` bytes into the list (after `skip`).
  size_t i = 0, off = skip + taken_before;
  while (i < iovcnt && off >= iov[i].iov_len) off -= iov[i++].iov_len;
  while (out_len_ < kOutBatch && nrecords_ < kMaxRecords) {
    if (gather_len_ == 0) {  // (else: a record OpenSSL could not write last time, again)
      while (i < iovcnt && gather_len_ < kRecordPlain) {
        const size_t k = std::min(iov[i].iov_len - off, kRecordPlain - gather_len_);
        std::memcpy(gather_.get() + gather_len_, static_cast<const uint8_t*>(iov[i].iov_base) + off,
                    k);
        gather_len_ += k;
        off += k;
        if (off == iov[i].iov_len) {
          ++i;
          off = 0;
        }
      }
      if (gather_len_ == 0) break;  // all taken
      taken_ += gather_len_;
    }
    size_t n = 0;
    ERR_clear_error();
    if (SSL_write_ex(ssl_, gather_.get(), gather_len_, &n) != 1) {
      Io e = classify(0, "TLS write");
      if (e != Io::kWantWrite && e != Io::kWantRead) {
        *io = e;
        return delivered;
      }
      break;  // kept in gather_ (and counted as taken): OpenSSL retries it next time
    }
    records_[(first_record_ + nrecords_) % kMaxRecords] = {out_len_, n};
    ++nrecords_;
    if (n < gather_len_) std::memmove(gather_.get(), gather_.get() + n, gather_len_ - n);
    gather_len_ -= n;
  }
  *io = flush_out();
  delivered += take_delivered();
  if (*io == Io::kOk && gather_len_ > 0) *io = Io::kWantWrite;
  return delivered;
}

size_t TlsChannel::write(const void* buf, size_t len, Io* io) {
  iovec v{const_cast<void*>(buf), len};
  return send(&v, 1, 0, io);
}

bool TlsChannel::pending() const {
  if (kernel_) return false;  // the kernel holds it: the socket is readable
  if (records_on_) return plain_head_ < plain_end_ || buffered_record();
  return ssl_ && SSL_has_pending(ssl_) == 1;
}

bool TlsChannel::request_key_update() {
  if (!established_) return false;
  if (kernel_) {
    error_ = "a KeyUpdate is not sent on kernel TLS records";
    return false;
  }
  if (!records_on_) return SSL_key_update(ssl_, SSL_KEY_UPDATE_REQUESTED) == 1;
  key_update_owed_ = key_update_ask_ = true;
  return true;
}

std::string TlsChannel::cipher() const {
  const SSL_CIPHER* c = ssl_ ? SSL_get_current_cipher(ssl_) : nullptr;
  return c ? SSL_CIPHER_get_name(c) : "";
}

}  // namespace sens::transport
