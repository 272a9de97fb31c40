// TlsChannel with the kernel's records (TlsRecords::kKernel, kTLS): after OpenSSL's handshake
// the socket gets the `tls` upper-layer protocol and each direction's key, IV and sequence
// number; from then on sens sends and receives plaintext on it and the kernel seals and opens
// the records. Application data comes back from recvmsg() as is; any other record (an alert,
// a handshake message) comes with its content type in a control message, alone.
#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "transport/tls.h"

#ifndef SOL_TLS
#define SOL_TLS 282
#endif
#ifndef TCP_ULP
#define TCP_ULP 31
#endif
#ifndef TLS_RX_EXPECT_NO_PAD
#define TLS_RX_EXPECT_NO_PAD 4
#endif

namespace sens::transport {

namespace {

constexpr uint8_t kKeyUpdate = 24, kNewSessionTicket = 4;
constexpr uint8_t kCloseNotify = 0;
constexpr size_t kMaxControl = 64 * 1024;  // a handshake message after the handshake: small

std::atomic<TlsRecords> g_records{TlsRecords::kAuto};
// ENOENT from TCP_ULP: the kernel has no tls module (and loading it failed). Each try would
// start modprobe again, so the process stops asking.
std::atomic<bool> g_no_tls_module{false};
std::atomic<bool> g_kernel_used{false};

// One direction's key, IV (salt and explicit part, as the kernel splits them) and sequence 0.
bool set_kernel_keys(int fd, int direction, uint16_t suite, const uint8_t* secret, size_t len,
                     std::string* why) {
  uint8_t key[32], iv[12];
  size_t key_len = 0;
  const char* name = direction == TLS_TX ? "TLS_TX" : "TLS_RX";
  if (!traffic_key_iv(suite, secret, len, key, &key_len, iv)) {
    *why = std::string(name) + ": no AES-GCM key for cipher suite " + std::to_string(suite);
    return false;
  }
  union {
    tls12_crypto_info_aes_gcm_128 a128;
    tls12_crypto_info_aes_gcm_256 a256;
  } info;
  std::memset(&info, 0, sizeof info);
  auto fill = [&](auto& c, uint16_t cipher) {  // (the two layouts differ in the key's size)
    c.info.version = TLS_1_3_VERSION;
    c.info.cipher_type = cipher;
    std::memcpy(c.salt, iv, 4);
    std::memcpy(c.iv, iv + 4, 8);
    std::memcpy(c.key, key, sizeof c.key);
    return socklen_t(sizeof c);
  };
  const socklen_t size = key_len == 16 ? fill(info.a128, TLS_CIPHER_AES_GCM_128)
                                       : fill(info.a256, TLS_CIPHER_AES_GCM_256);
  const int r = setsockopt(fd, SOL_TLS, direction, &info, size);
  const int err = errno;
  OPENSSL_cleanse(&info, sizeof info);
  OPENSSL_cleanse(key, sizeof key);
  OPENSSL_cleanse(iv, sizeof iv);
  if (r != 0) {
    *why = std::string("setsockopt(") + name + "): " + std::strerror(err);
    return false;
  }
  return true;
}

}  // namespace

const char* tls_records_name(TlsRecords r) {
  switch (r) {
    case TlsRecords::kSens:
      return "sens";
    case TlsRecords::kOpenSsl:
      return "openssl";
    case TlsRecords::kKernel:
      return "kernel";
    default:
      return "auto";
  }
}

bool set_tls_records(const std::string& name, std::string* error) {
  for (TlsRecords r : {TlsRecords::kAuto, TlsRecords::kKernel, TlsRecords::kSens}) {
    if (name == tls_records_name(r)) {
      g_records.store(r, std::memory_order_relaxed);
      return true;
    }
  }
  *error = "'" + name + "': expected auto, kernel or sens";
  return false;
}

TlsRecords tls_records() {
  return g_records.load(std::memory_order_relaxed);
}

std::string kernel_tls_status() {
  if (g_kernel_used.load(std::memory_order_relaxed)) return "in use";
  if (g_no_tls_module.load(std::memory_order_relaxed))
    return "setsockopt(TCP_ULP, tls): " + std::string(std::strerror(ENOENT)) +
           ": this kernel has no tls module (not asked again until restart)";
  return "not tried yet";
}

TlsChannel::KernelKeys TlsChannel::start_kernel_records(uint16_t suite, const uint8_t* tx_secret,
                                                        const uint8_t* rx_secret, size_t len,
                                                        std::string* why) {
  if (g_no_tls_module.load(std::memory_order_relaxed)) {
    *why = kernel_tls_status();
    return KernelKeys::kRefused;
  }
  if (setsockopt(fd_, SOL_TCP, TCP_ULP, "tls", sizeof "tls") != 0) {
    const int err = errno;
    if (err == ENOENT) g_no_tls_module.store(true, std::memory_order_relaxed);
    *why = std::string("setsockopt(TCP_ULP, tls): ") + std::strerror(err) +
           (err == ENOENT ? ": this kernel has no tls module" : "");
    return KernelKeys::kRefused;
  }
  // Without keys the `tls` layer passes everything through: a refused TX leaves the socket
  // as it was.
  if (!set_kernel_keys(fd_, TLS_TX, suite, tx_secret, len, why)) return KernelKeys::kRefused;
  if (!set_kernel_keys(fd_, TLS_RX, suite, rx_secret, len, why)) return KernelKeys::kHalfIn;
  // A hint (6.0+): TLS 1.3 records without padding decrypt straight into the reader's buffer
  // instead of through a kernel buffer; a padded one is still read right. Older kernels do
  // not know it, which costs only the copy.
  const int one = 1;
  setsockopt(fd_, SOL_TLS, TLS_RX_EXPECT_NO_PAD, &one, sizeof one);
  suite_ = suite;
  std::memcpy(kernel_rx_secret_, rx_secret, len);
  kernel_secret_len_ = len;
  g_kernel_used.store(true, std::memory_order_relaxed);
  return KernelKeys::kIn;
}

size_t TlsChannel::send_kernel(const iovec* iov, size_t iovcnt, size_t skip, Io* io) {
  size_t i = 0, off = skip;
  while (i < iovcnt && off >= iov[i].iov_len) off -= iov[i++].iov_len;
  size_t sent = 0;
  *io = Io::kOk;
  while (i < iovcnt) {
    constexpr size_t kBatch = 64;  // pieces per sendmsg (the first may start mid-piece)
    iovec v[kBatch];
    size_t n = 0, want = 0;
    for (size_t j = i, o = off; j < iovcnt && n < kBatch; ++j, o = 0) {
      v[n++] = {static_cast<char*>(iov[j].iov_base) + o, iov[j].iov_len - o};
      want += iov[j].iov_len - o;
    }
    msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = n;
    const ssize_t r = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    ++send_syscalls_;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        *io = Io::kWantWrite;
        return sent;
      }
      const bool gone = errno == EPIPE || errno == ECONNRESET;
      *io =
          fail(gone ? Io::kClosed : Io::kError, std::string("TLS write: ") + std::strerror(errno));
      return sent;
    }
    sent += size_t(r);
    if (size_t(r) < want) {  // the socket buffer is full
      *io = Io::kWantWrite;
      return sent;
    }
    i += n;
    off = 0;
  }
  return sent;
}

size_t TlsChannel::read_kernel(void* buf, size_t len, Io* io) {
  for (;;) {
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(uint8_t))];
    iovec v{buf, len};
    msghdr m{};
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    const ssize_t r = ::recvmsg(fd_, &m, MSG_DONTWAIT);
    ++recv_syscalls_;
    if (r < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {
        *io = Io::kWantRead;
        return 0;
      }
      std::string why = err == EBADMSG    ? "a record failed authentication (bad_record_mac)"
                        : err == EMSGSIZE ? "a record longer than TLS allows"
                                          : std::strerror(err);
      const bool gone = err == ECONNRESET || err == EPIPE;
      *io = fail(gone ? Io::kClosed : Io::kError, "TLS read (kernel): " + why);
      return 0;
    }
    if (r == 0) {
      *io = fail(Io::kClosed, "TLS read: connection closed");
      return 0;
    }
    uint8_t type = tls_content::kApplicationData;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_TLS && c->cmsg_type == TLS_GET_RECORD_TYPE)
        type = *reinterpret_cast<const uint8_t*>(CMSG_DATA(c));
    if (type == tls_content::kApplicationData && control_.empty()) {
      *io = Io::kOk;
      return size_t(r);
    }
    // A control record (or part of one: a small buffer takes it in pieces); the caller's
    // buffer only held it in passing.
    Io c = kernel_control(static_cast<const uint8_t*>(buf), size_t(r), type);
    if (c != Io::kOk) {
      *io = c;
      return 0;
    }
  }
}

TlsChannel::Io TlsChannel::kernel_control(const uint8_t* bytes, size_t len, uint8_t type) {
  if (type != tls_content::kAlert && type != tls_content::kHandshake)
    return fail(Io::kError, "TLS read: a record of content type " + std::to_string(type) +
                                (control_.empty() ? "" : " inside a handshake message"));
  if (!control_.empty() && type != control_type_)
    return fail(Io::kError, "TLS read: a control message split by another record type");
  if (control_.size() + len > kMaxControl)
    return fail(Io::kError, "TLS read: a handshake message over 64 KiB after the handshake");
  control_type_ = type;
  control_.append(reinterpret_cast<const char*>(bytes), len);
  const auto* p = reinterpret_cast<const uint8_t*>(control_.data());
  if (type == tls_content::kAlert) {
    if (control_.size() < 2) return Io::kOk;  // the rest follows
    if (p[1] == kCloseNotify) return fail(Io::kClosed, "peer closed the TLS session");
    return fail(Io::kError, "TLS read: the peer sent alert " + std::to_string(p[1]));
  }
  size_t pos = 0;
  while (control_.size() - pos >= 4) {
    const uint8_t msg = p[pos];
    const size_t ml = size_t(p[pos + 1]) << 16 | size_t(p[pos + 2]) << 8 | p[pos + 3];
    if (control_.size() - pos - 4 < ml) break;  // the rest follows
    if (msg == kKeyUpdate) {
      if (ml != 1 || p[pos + 4] > 1) return fail(Io::kError, "TLS read: a malformed KeyUpdate");
      // The kernel opens the records after it with the next keys once it has them (6.14+);
      // an older kernel refuses new keys, and the connection cannot go on.
      std::string why;
      if (!next_traffic_secret(suite_, kernel_rx_secret_, kernel_secret_len_) ||
          !set_kernel_keys(fd_, TLS_RX, suite_, kernel_rx_secret_, kernel_secret_len_, &why))
        return fail(Io::kError,
                    "TLS read: the peer updated its keys (KeyUpdate) and this kernel's TLS does "
                    "not take new receive keys (" +
                        why + ")");
      if (p[pos + 4] == 1)
        return fail(Io::kError,
                    "TLS read: the peer asked for a KeyUpdate, which kernel TLS records do not "
                    "send");
    } else if (msg != kNewSessionTicket) {  // a ticket: sens resumes nothing, it is dropped
      return fail(Io::kError,
                  "TLS read: handshake message " + std::to_string(msg) + " after the handshake");
    }
    pos += 4 + ml;
  }
  control_.erase(0, pos);
  return Io::kOk;
}

}  // namespace sens::transport
