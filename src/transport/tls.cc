#include "transport/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace sens::transport {

namespace {

constexpr const char* kSuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384";

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

// The socket BIO OpenSSL offers writes with write(), so a peer that has gone raises SIGPIPE
// in whatever thread writes, and kills an application that embeds the host library. This
// one sends with MSG_NOSIGNAL (EPIPE comes back as an error instead), as the plain path does.
int fd_of(BIO* b) {
  return int(reinterpret_cast<intptr_t>(BIO_get_data(b)));
}

int bio_write(BIO* b, const char* buf, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::send(fd_of(b), buf, size_t(len), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
  return int(n);
}

int bio_read(BIO* b, char* buf, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::recv(fd_of(b), buf, size_t(len), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
  return int(n);
}

long bio_ctrl(BIO* b, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // nothing is buffered here
    case BIO_C_GET_FD:
      return fd_of(b);
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

BIO* socket_bio(int fd) {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "sens socket (MSG_NOSIGNAL)");
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
  if (b) BIO_set_data(b, reinterpret_cast<void*>(intptr_t(fd)));
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
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);  // external PSKs only; no resumption tickets
  SSL_CTX_set_num_tickets(ctx, 0);
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

TlsChannel::TlsChannel(TlsContext& ctx, int fd) : ssl_(SSL_new(ctx.ctx())) {
  if (!ssl_) return;
  SSL_set_app_data(ssl_, this);
  BIO* bio = socket_bio(fd);
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
  if (established_) return Io::kOk;
  ERR_clear_error();
  int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    established_ = true;
    return Io::kOk;
  }
  Io io = classify(r, "TLS handshake");
  if (io == Io::kClosed && !lookup_error_.empty()) error_ += " (" + lookup_error_ + ")";
  return io;
}

size_t TlsChannel::read(void* buf, size_t len, Io* io) {
  size_t n = 0;
  ERR_clear_error();
  int r = SSL_read_ex(ssl_, buf, len, &n);
  if (r == 1) {
    *io = Io::kOk;
    return n;
  }
  *io = classify(r, "TLS read");
  return 0;
}

size_t TlsChannel::write(const void* buf, size_t len, Io* io) {
  size_t n = 0;
  ERR_clear_error();
  int r = SSL_write_ex(ssl_, buf, len, &n);
  if (r == 1) {
    *io = Io::kOk;
    return n;
  }
  *io = classify(r, "TLS write");
  return 0;
}

bool TlsChannel::pending() const {
  return ssl_ && SSL_pending(ssl_) > 0;
}

std::string TlsChannel::cipher() const {
  const SSL_CIPHER* c = ssl_ ? SSL_get_current_cipher(ssl_) : nullptr;
  return c ? SSL_CIPHER_get_name(c) : "";
}

}  // namespace sens::transport
