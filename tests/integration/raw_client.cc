#include "raw_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>

#include "common/crc32c.h"

namespace sens::testing {

namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : int(left.count());
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

// Types whose header may carry a digest (IC PDUs and TermReqs never do).
bool takes_hdgst(uint8_t t) {
  return t == 0x04 || t == 0x05 || t == 0x06 || t == 0x07 || t == 0x09;
}

}  // namespace

const uint8_t* Pdu::data() const {
  const auto& h = ch();
  if (h.type == uint8_t(pdu::Type::kC2HTermReq) || h.type == uint8_t(pdu::Type::kH2CTermReq))
    return bytes.data() + h.hlen;
  return bytes.data() + (h.pdo ? h.pdo : bytes.size());
}

uint32_t Pdu::data_len() const {
  const auto& h = ch();
  if (h.type == uint8_t(pdu::Type::kC2HTermReq) || h.type == uint8_t(pdu::Type::kH2CTermReq))
    return bytes.size() > h.hlen ? uint32_t(bytes.size() - h.hlen) : 0;
  if (!h.pdo) return 0;
  uint32_t trailer = (h.flags & pdu::flag::kDdgst) ? 4 : 0;
  return h.plen > h.pdo + trailer ? h.plen - h.pdo - trailer : 0;
}

const char* recv_status_name(RecvStatus s) {
  switch (s) {
    case RecvStatus::kOk:
      return "ok";
    case RecvStatus::kTimeout:
      return "timeout";
    case RecvStatus::kClosed:
      return "closed";
    case RecvStatus::kReset:
      return "reset";
    case RecvStatus::kError:
      return "error";
    case RecvStatus::kBadPdu:
      return "bad PDU";
  }
  return "?";
}

std::string Result::describe() const {
  std::string s;
  if (!error.empty()) s += "transport error: " + error + "; ";
  if (data_success) s += "C2HData DATA_SUCCESS; ";
  if (have_cqe)
    s += fmt("status 0x%03x (%s) dnr %d dw0 0x%x", cqe.status_code(),
             nvme::status_name(cqe.status_code()), cqe.dnr() ? 1 : 0, cqe.dw0);
  else if (!data_success)
    s += "no completion";
  return s;
}

RawClient::~RawClient() {
  close();
}

bool RawClient::connect(uint16_t port, int timeout_ms) {
  close();
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) return fail(fmt("socket: %s", std::strerror(errno)));
  if (rcvbuf_ > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_, sizeof(rcvbuf_));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  if (rc != 0 && errno != EINPROGRESS) {
    int e = errno;
    close();
    return fail(fmt("connect to port %u: %s", port, std::strerror(e)));
  }
  if (rc != 0) {
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) != 1) {
      close();
      return fail(fmt("connect to port %u: timeout", port));
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      close();
      return fail(fmt("connect to port %u: %s", port, std::strerror(err)));
    }
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  digests_ = {};
  maxh2cdata_ = 0;
  cid_ = 1;
  return true;
}

void RawClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawClient::send_bytes(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  auto deadline = Clock::now() + std::chrono::milliseconds(kDefaultTimeoutMs);
  while (len > 0) {
    ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd_, POLLOUT, 0};
      if (::poll(&pf, 1, remaining_ms(deadline)) != 1) return fail("send: timeout");
      continue;
    }
    return fail(fmt("send: %s", std::strerror(errno)));
  }
  return true;
}

bool RawClient::send_chunked(const std::vector<uint8_t>& b, size_t chunk) {
  for (size_t off = 0; off < b.size(); off += chunk)
    if (!send_bytes(b.data() + off, std::min(chunk, b.size() - off))) return false;
  return true;
}

RecvStatus RawClient::recv_exact(void* dst, size_t len, int timeout_ms) {
  auto* p = static_cast<uint8_t*>(dst);
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (len > 0) {
    ssize_t n = ::recv(fd_, p, len, 0);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n == 0) {
      error_ = "peer closed the connection";
      return RecvStatus::kClosed;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd_, POLLIN, 0};
      int left = remaining_ms(deadline);
      if (left == 0 || ::poll(&pf, 1, left) == 0) {
        error_ = fmt("no data within %d ms", timeout_ms);
        return RecvStatus::kTimeout;
      }
      continue;
    }
    error_ = fmt("recv: %s", std::strerror(errno));
    return errno == ECONNRESET ? RecvStatus::kReset : RecvStatus::kError;
  }
  return RecvStatus::kOk;
}

RecvStatus RawClient::recv_pdu(Pdu* out, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  out->bytes.assign(8, 0);
  RecvStatus s = recv_exact(out->bytes.data(), 8, timeout_ms);
  if (s != RecvStatus::kOk) return s;
  const uint32_t plen = out->ch().plen;
  const uint8_t type = out->type();
  if (plen < 8 || plen > 64 * 1024 * 1024) {
    error_ = fmt("received %s with plen %u", pdu::type_name(type), plen);
    return RecvStatus::kBadPdu;
  }
  out->bytes.resize(plen);
  s = recv_exact(out->bytes.data() + 8, plen - 8, remaining_ms(deadline));
  if (s != RecvStatus::kOk) return s;

  // Every header the target sends must pass the host-side validation, under the digests that
  // were negotiated (before IC only ICResp and C2HTermReq may come).
  pdu::Check check = pdu::check_common(out->ch(), pdu::Receiver::kHost, digests_, 64 * 1024 * 1024,
                                       maxh2cdata_ == 0);
  if (!check) {
    error_ = fmt("received %s fails validation: fes 0x%x fei %u: %s", pdu::type_name(type),
                 check.fes, check.fei, check.why ? check.why : "");
    return RecvStatus::kBadPdu;
  }
  const auto& ch = out->ch();
  if (takes_hdgst(type) && digests_.header) {
    if (!(ch.flags & pdu::flag::kHdgst) || uint32_t(ch.hlen) + 4 > plen ||
        !pdu::header_digest_ok(out->bytes.data(), ch.hlen)) {
      error_ = fmt("received %s: header digest missing or wrong", pdu::type_name(type));
      return RecvStatus::kBadPdu;
    }
  }
  if (ch.flags & pdu::flag::kDdgst) {
    uint32_t len = out->data_len();
    uint32_t stored;
    std::memcpy(&stored, out->bytes.data() + plen - 4, 4);
    if (stored != crc32c(out->data(), len)) {
      error_ = fmt("received %s: data digest 0x%08x, computed 0x%08x", pdu::type_name(type), stored,
                   crc32c(out->data(), len));
      return RecvStatus::kBadPdu;
    }
  } else if (digests_.data && type == uint8_t(pdu::Type::kC2HData)) {
    error_ = "received C2HData without a data digest, data digests negotiated";
    return RecvStatus::kBadPdu;
  }
  return RecvStatus::kOk;
}

bool RawClient::wait_closed(int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  uint8_t scratch[4096];
  for (;;) {
    ssize_t n = ::recv(fd_, scratch, sizeof(scratch), 0);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return fail(fmt("recv: %s", std::strerror(errno)));
    int left = remaining_ms(deadline);
    pollfd pf{fd_, POLLIN, 0};
    if (left == 0 || ::poll(&pf, 1, left) == 0)
      return fail(fmt("connection still open after %d ms", timeout_ms));
  }
}

bool RawClient::quiet(int ms) {
  pollfd pf{fd_, POLLIN, 0};
  return ::poll(&pf, 1, ms) == 0;
}

bool RawClient::still_open(int ms) {
  pollfd pf{fd_, POLLIN, 0};
  int rc = ::poll(&pf, 1, ms);
  if (rc == 0) return true;
  uint8_t b;
  ssize_t n = ::recv(fd_, &b, 1, MSG_PEEK);
  if (n > 0) return true;  // data pending: open
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  return false;
}

std::vector<uint8_t> RawClient::icreq_bytes(uint8_t digest, uint32_t maxr2t, uint8_t hpda) {
  pdu::ICReq req;
  pdu::build_icreq(req, digest, maxr2t);
  req.hpda = hpda;
  const auto* p = reinterpret_cast<const uint8_t*>(&req);
  return {p, p + sizeof(req)};
}

std::vector<uint8_t> RawClient::capsule_bytes(const nvme::Sqe& sqe, const void* data,
                                              uint32_t len) const {
  pdu::HeaderSlot slot;
  pdu::build_capsule_cmd(slot.cmd, sqe, len, digests_);
  uint32_t hl = pdu::finish_header(slot, digests_);
  std::vector<uint8_t> out(slot.bytes, slot.bytes + hl);
  if (len) {
    const auto* d = static_cast<const uint8_t*>(data);
    out.insert(out.end(), d, d + len);
    if (digests_.data) {
      uint32_t dd = crc32c(data, len);
      const auto* q = reinterpret_cast<const uint8_t*>(&dd);
      out.insert(out.end(), q, q + 4);
    }
  }
  return out;
}

std::vector<uint8_t> RawClient::h2c_bytes(uint16_t cccid, uint16_t ttag, uint32_t datao,
                                          const void* data, uint32_t len, bool last) const {
  pdu::HeaderSlot slot;
  pdu::build_data(slot.data, pdu::Type::kH2CData, cccid, ttag, datao, len,
                  last ? pdu::flag::kDataLast : 0, digests_);
  uint32_t hl = pdu::finish_header(slot, digests_);
  std::vector<uint8_t> out(slot.bytes, slot.bytes + hl);
  const auto* d = static_cast<const uint8_t*>(data);
  out.insert(out.end(), d, d + len);
  if (digests_.data && len) {
    uint32_t dd = crc32c(data, len);
    const auto* q = reinterpret_cast<const uint8_t*>(&dd);
    out.insert(out.end(), q, q + 4);
  }
  return out;
}

std::vector<uint8_t> RawClient::connect_data(std::string_view subnqn, std::string_view hostnqn,
                                             uint16_t cntlid, const uint8_t* id) {
  nvme::ConnectData cd;
  uint8_t hostid[16] = {0x5e, 0x11, 0x5e, 0x11, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1};
  if (id) std::memcpy(hostid, id, 16);
  nvme::fill_connect_data(cd, hostid, cntlid, subnqn, hostnqn);
  const auto* p = reinterpret_cast<const uint8_t*>(&cd);
  return {p, p + sizeof(cd)};
}

bool RawClient::ic(uint8_t digest, pdu::ICResp* resp_out, int timeout_ms) {
  if (!send_bytes(icreq_bytes(digest))) return false;
  Pdu p;
  RecvStatus s = recv_pdu(&p, timeout_ms);
  if (s != RecvStatus::kOk) return fail("ICResp: " + error_);
  if (p.type() != uint8_t(pdu::Type::kICResp) || p.plen() != pdu::kICLen)
    return fail(fmt("expected ICResp, got %s plen %u", pdu::type_name(p.type()), p.plen()));
  auto resp = p.as<pdu::ICResp>();
  pdu::Check c = pdu::check_icresp(resp);
  if (!c) return fail(fmt("ICResp invalid: %s", c.why));
  if (resp_out) *resp_out = resp;
  digests_.header = resp.digest & pdu::kDigestHeader;
  digests_.data = resp.digest & pdu::kDigestData;
  maxh2cdata_ = resp.maxh2cdata;
  return true;
}

Result RawClient::exec(nvme::Sqe sqe, const void* write_data, uint32_t write_len, void* read_buf,
                       uint32_t read_len, bool keep_cid, int timeout_ms) {
  if (!keep_cid) sqe.cid = next_cid();
  bool in_capsule = sqe.sgl.type == nvme::kSglDataBlockOffset && write_len > 0;
  auto bytes = capsule_bytes(sqe, in_capsule ? write_data : nullptr, in_capsule ? write_len : 0);
  if (!send_bytes(bytes)) {
    Result r;
    r.cid = sqe.cid;
    r.error = error_;
    return r;
  }
  return await(sqe.cid, in_capsule ? nullptr : write_data, in_capsule ? 0 : write_len, read_buf,
               read_len, timeout_ms);
}

Result RawClient::await(uint16_t cid, const void* write_data, uint32_t write_len, void* read_buf,
                        uint32_t read_len, int timeout_ms) {
  Result r;
  r.cid = cid;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    Pdu p;
    RecvStatus s = recv_pdu(&p, remaining_ms(deadline));
    if (s != RecvStatus::kOk) {
      r.error = fmt("waiting for cid %u: %s: %s", cid, recv_status_name(s), error_.c_str());
      return r;
    }
    switch (pdu::Type(p.type())) {
      case pdu::Type::kC2HTermReq: {
        auto t = p.as<pdu::TermReq>();
        r.error = fmt("C2HTermReq fes 0x%x fei %u", t.fes, t.fei);
        return r;
      }
      case pdu::Type::kC2HData: {
        auto d = p.as<pdu::DataHeader>();
        r.c2h.push_back(d);
        if (d.cccid != cid) {
          r.error = fmt("C2HData for cid %u while waiting for %u", d.cccid, cid);
          return r;
        }
        if (d.datal != p.data_len() || uint64_t(d.datao) + d.datal > read_len) {
          r.error = fmt("C2HData datao %u datal %u (payload %u) outside the %u-byte buffer",
                        d.datao, d.datal, p.data_len(), read_len);
          return r;
        }
        std::memcpy(static_cast<uint8_t*>(read_buf) + d.datao, p.data(), d.datal);
        r.c2h_bytes += d.datal;
        if (d.ch.flags & pdu::flag::kDataSuccess) {
          r.data_success = true;
          return r;
        }
        break;
      }
      case pdu::Type::kR2T: {
        auto t = p.as<pdu::R2T>();
        r.r2ts.push_back(t);
        if (t.cccid != cid) {
          r.error = fmt("R2T for cid %u while waiting for %u", t.cccid, cid);
          return r;
        }
        if (uint64_t(t.r2to) + t.r2tl > write_len || t.r2tl == 0) {
          r.error =
              fmt("R2T r2to %u r2tl %u outside the %u bytes to write", t.r2to, t.r2tl, write_len);
          return r;
        }
        uint32_t chunk = h2c_chunk_ ? h2c_chunk_ : maxh2cdata_;
        if (!chunk) chunk = t.r2tl;
        const auto* src = static_cast<const uint8_t*>(write_data);
        for (uint32_t off = 0; off < t.r2tl; off += chunk) {
          uint32_t n = std::min(chunk, t.r2tl - off);
          bool last = off + n == t.r2tl;
          auto b = h2c_bytes(cid, t.ttag, t.r2to + off, src + t.r2to + off, n, last);
          r.h2c_sizes.push_back(n);
          r.h2c_flags.push_back(b[1]);
          if (!send_bytes(b)) {
            r.error = "sending H2CData: " + error_;
            return r;
          }
        }
        break;
      }
      case pdu::Type::kCapsuleResp: {
        auto resp = p.as<pdu::CapsuleResp>();
        if (resp.cqe.cid != cid) {
          r.error = fmt("CapsuleResp for cid %u while waiting for %u", resp.cqe.cid, cid);
          return r;
        }
        r.cqe = resp.cqe;
        r.have_cqe = true;
        return r;
      }
      default:
        r.error = fmt("unexpected %s", pdu::type_name(p.type()));
        return r;
    }
  }
}

Result RawClient::connect_queue(uint16_t qid, std::string_view subnqn, uint16_t cntlid,
                                uint32_t kato_ms, uint8_t cattr, uint16_t sqsize,
                                std::string_view hostnqn) {
  auto data = connect_data(subnqn, hostnqn, cntlid, hostid_);
  return exec(nvme::make_connect(qid, sqsize, kato_ms, cattr), data.data(), uint32_t(data.size()));
}

Result RawClient::enable() {
  return exec(nvme::make_property_set(nvme::reg::kCc, 0x00460001, false));
}

std::string Session::open(uint16_t port, std::string_view subnqn, uint8_t digest, uint8_t io_cattr,
                          uint16_t io_sqsize) {
  if (hostid) {
    admin.set_hostid(hostid);
    io.set_hostid(hostid);
  }
  if (!admin.connect(port)) return "admin connect: " + admin.last_error();
  if (!admin.ic(digest)) return "admin IC: " + admin.last_error();
  Result r = admin.connect_queue(0, subnqn, 0xFFFF, 0, 0, 31, hostnqn);
  if (!r.ok()) return "admin Connect: " + r.describe();
  cntlid = uint16_t(r.cqe.dw0);
  r = admin.enable();
  if (!r.ok()) return "CC.EN=1: " + r.describe();
  r = admin.exec(nvme::make_set_num_queues(4, 4));
  if (!r.ok()) return "Set Features queues: " + r.describe();
  if (!io.connect(port)) return "I/O connect: " + io.last_error();
  if (!io.ic(digest)) return "I/O IC: " + io.last_error();
  r = io.connect_queue(1, subnqn, cntlid, 0, io_cattr, io_sqsize, hostnqn);
  if (!r.ok()) return "I/O Connect: " + r.describe();
  return "";
}

std::string write_read(RawClient& io, uint64_t slba, uint32_t len, uint32_t seed, bool in_capsule) {
  auto data = pattern(len, seed);
  auto x = in_capsule ? nvme::Xfer::kInCapsule : nvme::Xfer::kTransport;
  Result w =
      io.exec(nvme::make_io(nvme::io_op::kWrite, 1, slba, len / 512, x, len), data.data(), len);
  if (!w.ok()) return "write: " + w.describe();
  std::vector<uint8_t> back(len, 0xEE);
  Result r =
      io.exec(nvme::make_io(nvme::io_op::kRead, 1, slba, len / 512, nvme::Xfer::kTransport, len),
              nullptr, 0, back.data(), len);
  if (!r.ok()) return "read: " + r.describe();
  if (r.c2h_bytes != len)
    return "read: " + std::to_string(r.c2h_bytes) + " bytes of " + std::to_string(len);
  long d = first_difference(data, back);
  if (d >= 0) return "read back differs at byte " + std::to_string(d);
  return "";
}

std::vector<uint8_t> pattern(size_t len, uint32_t seed) {
  std::vector<uint8_t> v(len);
  uint32_t x = seed * 2654435761u + 0x9E3779B9u;
  for (size_t i = 0; i < len; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = uint8_t(x);
  }
  return v;
}

long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return long(i);
  return a.size() == b.size() ? -1 : long(n);
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace sens::testing
