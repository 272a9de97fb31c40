// TlsChannel with sens's record layer (TlsRecords::kSens, tls_records.h): after OpenSSL's
// handshake, records are sealed from the caller's pieces straight into the send batch and
// opened from the receive buffer straight into the caller's buffer when the plaintext fits
// (else in place, then taken from there).
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/tls.h"

namespace sens::transport {

namespace {

constexpr uint8_t kKeyUpdate = 24, kNewSessionTicket = 4;
constexpr uint8_t kCloseNotify = 0;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "LABEL <client random> <secret>" -> the secret's bytes, if the label is `label`.
size_t secret_of(const char* line, const char* label, uint8_t* out, size_t cap) {
  const size_t ll = std::strlen(label);
  if (std::strncmp(line, label, ll) != 0 || line[ll] != ' ') return 0;
  const char* p = std::strchr(line + ll + 1, ' ');
  if (!p) return 0;
  ++p;
  size_t n = 0;
  for (; p[0] && p[1] && n < cap; p += 2) {
    int hi = hex_value(p[0]), lo = hex_value(p[1]);
    if (hi < 0 || lo < 0) return 0;
    out[n++] = uint8_t(hi << 4 | lo);
  }
  return n;
}

}  // namespace

void TlsChannel::key_log(const char* line) {
  if (!own_records_) return;
  if (size_t n = secret_of(line, "CLIENT_TRAFFIC_SECRET_0", client_secret_, sizeof client_secret_))
    client_secret_len_ = n;
  if (size_t n = secret_of(line, "SERVER_TRAFFIC_SECRET_0", server_secret_, sizeof server_secret_))
    server_secret_len_ = n;
}

TlsChannel::Io TlsChannel::take_over_records() {
  records_owed_ = false;
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  const uint16_t suite = c ? uint16_t(SSL_CIPHER_get_id(c) & 0xFFFF) : 0;
  if (!client_secret_len_ || !server_secret_len_)
    return fail(Io::kError, "TLS records: OpenSSL handed over no traffic secrets");
  const bool server = SSL_is_server(ssl_) == 1;
  const uint8_t* tx = server ? server_secret_ : client_secret_;
  const uint8_t* rx = server ? client_secret_ : server_secret_;
  Io result = Io::kOk;
  if (want_ == TlsRecords::kKernel || want_ == TlsRecords::kAuto) {
    std::string why = "OpenSSL read past the handshake";
    const KernelKeys k = SSL_has_pending(ssl_) == 1
                             ? KernelKeys::kRefused
                             : start_kernel_records(suite, tx, rx, client_secret_len_, &why);
    kernel_ = k == KernelKeys::kIn;
    // Half in: the kernel encrypts what is sent now, there is no way back to sens's records.
    if (k == KernelKeys::kHalfIn || (k == KernelKeys::kRefused && want_ == TlsRecords::kKernel))
      result = fail(Io::kError, "kernel TLS: " + why);
    else if (k == KernelKeys::kRefused)
      kernel_refusal_ = why;
  }
  if (result == Io::kOk && !kernel_ &&
      !start_records_with(suite, server, client_secret_, server_secret_, client_secret_len_))
    result = Io::kError;
  OPENSSL_cleanse(client_secret_, sizeof client_secret_);
  OPENSSL_cleanse(server_secret_, sizeof server_secret_);
  return result;
}

bool TlsChannel::start_records_with(uint16_t suite, bool server, const uint8_t* client_secret,
                                    const uint8_t* server_secret, size_t len) {
  own_records_ = established_ = true;
  if (!send_keys_.init(suite, server ? server_secret : client_secret, len, true, &error_) ||
      !recv_keys_.init(suite, server ? client_secret : server_secret, len, false, &error_))
    return false;
  in_.reset(new uint8_t[kInCap]);
  records_on_ = true;
  return true;
}

TlsChannel::Io TlsChannel::fail(Io io, std::string why) {
  error_ = std::move(why);
  return io;
}

size_t TlsChannel::send_records(const iovec* iov, size_t iovcnt, size_t skip, Io* io) {
  *io = flush_out();
  const size_t taken_before = taken_;  // the caller's list starts with these bytes
  size_t delivered = take_delivered();
  if (*io != Io::kOk) return delivered;  // the socket still holds us up (or failed)
  out_head_ = out_len_ = 0;              // everything sealed has left: start at the front
  if (!out_) out_.reset(new uint8_t[kOutCap]);
  if (key_update_owed_) {
    // Our KeyUpdate, under the old keys; every record after it under the new ones.
    uint8_t msg[5] = {kKeyUpdate, 0, 0, 1, uint8_t(key_update_ask_ ? 1 : 0)};
    iovec v{msg, sizeof msg};
    size_t i = 0, off = 0;
    out_len_ += send_keys_.seal(&v, 1, &i, &off, sizeof msg, tls_content::kHandshake, out_.get());
    records_[(first_record_ + nrecords_) % kMaxRecords] = {out_len_, 0};
    ++nrecords_;
    key_update_owed_ = key_update_ask_ = false;
    if (!send_keys_.update(&error_)) {
      *io = Io::kError;
      return delivered;
    }
  }
  // The first byte not sealed yet: `taken_before` bytes into the list (after `skip`).
  size_t i = 0, off = skip + taken_before;
  while (i < iovcnt && off >= iov[i].iov_len) off -= iov[i++].iov_len;
  // The first full record leaves on its own, the rest of the batch after it: the peer opens
  // it while this side seals the others, instead of waiting for the whole batch (16 KiB
  // writes at QD8, where the two sides otherwise take turns: 1.26x, 8 of 8 alternated pairs).
  bool first = true;
  while (nrecords_ < kMaxRecords) {
    if (first && out_len_ >= kRecordPlain) {
      first = false;
      *io = flush_out();
      delivered += take_delivered();
      if (*io != Io::kOk) return delivered;
      out_head_ = out_len_ = 0;
    }
    if (out_len_ >= kOutBatch) break;
    size_t plain = 0;
    for (size_t j = i, o = off; j < iovcnt && plain < kRecordPlain; ++j, o = 0) {
      // A payload (a large piece) starts a record: the reader, which reads a PDU's header
      // into its staging and then the payload into its buffer, opens such a record straight
      // into the buffer; one that began with the header would go to staging and be copied.
      if (plain > 0 && o == 0 && iov[j].iov_len >= kRecordAlignPiece) break;
      plain += std::min(iov[j].iov_len - o, kRecordPlain - plain);
    }
    if (plain == 0) break;  // all sealed
    out_len_ += send_keys_.seal(iov, iovcnt, &i, &off, plain, tls_content::kApplicationData,
                                out_.get() + out_len_);
    taken_ += plain;
    records_[(first_record_ + nrecords_) % kMaxRecords] = {out_len_, plain};
    ++nrecords_;
  }
  *io = flush_out();
  delivered += take_delivered();
  return delivered;
}

bool TlsChannel::buffered_record() const {
  const size_t avail = in_tail_ - in_head_;
  if (avail < kTlsHeaderBytes) return false;
  const uint8_t* h = in_.get() + in_head_;
  return avail >= kTlsHeaderBytes + (size_t(h[3]) << 8 | h[4]);
}

size_t TlsChannel::read_records(void* buf, size_t len, Io* io) {
  auto* dst = static_cast<uint8_t*>(buf);
  for (;;) {
    if (plain_head_ < plain_end_) {  // a record opened in place, partly taken
      const size_t n = std::min(len, plain_end_ - plain_head_);
      std::memcpy(dst, in_.get() + plain_head_, n);
      plain_head_ += n;
      *io = Io::kOk;
      return n;
    }
    const size_t avail = in_tail_ - in_head_;
    if (avail >= kTlsHeaderBytes) {
      uint8_t* rec = in_.get() + in_head_;
      const size_t clen = size_t(rec[3]) << 8 | rec[4];
      if (rec[0] != tls_content::kApplicationData || rec[1] != 0x03 || rec[2] != 0x03 ||
          clen > kTlsMaxCipher || clen < 1 + kTlsTagBytes) {
        *io =
            fail(Io::kError, "TLS read: not a TLS 1.3 protected record (type " +
                                 std::to_string(rec[0]) + ", length " + std::to_string(clen) + ")");
        return 0;
      }
      if (avail >= kTlsHeaderBytes + clen) {
        // Straight into the caller's buffer when the record's plaintext fits; else in place.
        const bool direct = clen - kTlsTagBytes <= len;
        uint8_t* out = direct ? dst : rec + kTlsHeaderBytes;
        uint8_t type = 0;
        const long n = recv_keys_.open(rec, kTlsHeaderBytes + clen, out, &type);
        const size_t body = in_head_ + kTlsHeaderBytes;
        in_head_ += kTlsHeaderBytes + clen;
        if (n < 0) {
          *io = fail(Io::kError, "TLS read: a record failed authentication (bad_record_mac)");
          return 0;
        }
        if (type == tls_content::kApplicationData) {
          if (n == 0) continue;  // an empty record (allowed)
          if (direct) {
            *io = Io::kOk;
            return size_t(n);
          }
          plain_head_ = body;
          plain_end_ = body + size_t(n);
          continue;
        }
        Io c = control_record(out, size_t(n), type);
        if (c != Io::kOk) {
          *io = c;
          return 0;
        }
        continue;
      }
    }
    // More bytes needed: room for at least one whole record after what is buffered.
    plain_head_ = plain_end_ = 0;
    if (in_head_ == in_tail_) {
      in_head_ = in_tail_ = 0;
    } else if (kInCap - in_tail_ < kTlsHeaderBytes + kTlsMaxCipher) {
      std::memmove(in_.get(), in_.get() + in_head_, avail);
      in_head_ = 0;
      in_tail_ = avail;
    }
    ssize_t r = ::recv(fd_, in_.get() + in_tail_, kInCap - in_tail_, 0);
    ++recv_syscalls_;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *io = Io::kWantRead;
        return 0;
      }
      const bool gone = errno == ECONNRESET || errno == EPIPE;
      *io = fail(gone ? Io::kClosed : Io::kError, std::string("TLS read: ") + std::strerror(errno));
      return 0;
    }
    if (r == 0) {
      *io = fail(Io::kClosed, "TLS read: connection closed");
      return 0;
    }
    in_tail_ += size_t(r);
  }
}

TlsChannel::Io TlsChannel::control_record(const uint8_t* plain, size_t len, uint8_t type) {
  if (type == tls_content::kAlert) {
    if (len != 2) return fail(Io::kError, "TLS read: a malformed alert");
    if (plain[1] == kCloseNotify) {
      peer_closed_ = true;
      return fail(Io::kClosed, "peer closed the TLS session");
    }
    return fail(Io::kError, "TLS read: the peer sent alert " + std::to_string(plain[1]));
  }
  if (type != tls_content::kHandshake)
    return fail(Io::kError, "TLS read: a record of content type " + std::to_string(type));
  for (size_t pos = 0; pos < len;) {
    if (len - pos < 4) return fail(Io::kError, "TLS read: a truncated handshake message");
    const uint8_t msg = plain[pos];
    const size_t ml = size_t(plain[pos + 1]) << 16 | size_t(plain[pos + 2]) << 8 | plain[pos + 3];
    if (ml > len - pos - 4)  // (a message split across records: not sent after a handshake)
      return fail(Io::kError, "TLS read: a handshake message longer than its record");
    if (msg == kKeyUpdate) {
      if (ml != 1 || plain[pos + 4] > 1) return fail(Io::kError, "TLS read: a malformed KeyUpdate");
      if (!recv_keys_.update(&error_)) return Io::kError;
      if (plain[pos + 4] == 1) key_update_owed_ = true;  // update_requested: ours follows
    } else if (msg != kNewSessionTicket) {  // a ticket: sens resumes nothing, it is dropped
      return fail(Io::kError,
                  "TLS read: handshake message " + std::to_string(msg) + " after the handshake");
    }
    pos += 4 + ml;
  }
  return Io::kOk;
}

}  // namespace sens::transport
