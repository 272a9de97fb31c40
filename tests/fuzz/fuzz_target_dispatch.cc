// libFuzzer target: the real target (target::Target, one reactor, a 16 MiB RAM namespace)
// fed one connection per input.
//
// Input: byte 0 selects the target and the preamble written before the rest of the input:
//   bit 0, 1  header / data digests asked for in the ICReq
//   bit 2, 3  0: ICReq only; 1: ICReq + admin Connect; 2: an I/O queue: a first connection
//             does ICReq + admin Connect (its cntlid is read from the answer), then this one
//             ICReq + I/O Connect; 3: nothing (the input starts with the ICReq itself)
//   bit 4, 5  the target's coalescing policy: 0 off, 1 uniform, 2 semantic, 3 adaptive. With off,
//             a response leaves (and frees its command slot) before the next command is read,
//             so the seeds' H2CData can name the R2T's ttag (the slot) in advance.
//   bit 6     a target whose subsystem has DH-HMAC-CHAP keys for the fuzz host (policy off):
//             its queues take AUTH_Send / AUTH_Receive and refuse everything else until the
//             host authenticates (which an input cannot: the challenge is random).
// Each connection is one end of a socketpair handed to Target::dispatch_accepted(), as the
// listener does with an accepted socket. After the input the host half-closes and reads
// until the target closes; a target that has not closed 5 s after the host's EOF is a hang
// and aborts the run, as a crash or a sanitizer report does.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "auth/dhchap.h"
#include "common/log.h"
#include "pdu_stream.h"
#include "target/target.h"

namespace {

using namespace sens;
using Clock = std::chrono::steady_clock;

constexpr auto kHang = std::chrono::seconds(5);

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_target_dispatch: %s\n", what);
  std::abort();
}

std::string fixed_secret(uint8_t transform, uint8_t seed) {
  auth::Secret s;
  s.transform = transform;
  for (int i = 0; i < 32; ++i) s.key.push_back(uint8_t(seed + i));
  return auth::format_secret(s);
}

target::Target* start_target(coalesce::Policy policy, bool auth = false) {
  target::TargetConfig c;
  c.coalesce.policy = policy;
  c.listen.push_back({"127.0.0.1", 0});
  c.discovery_port = 0;
  c.subsystems.push_back({std::string(fuzz::kSubNqn), {"ram:16M"}, {}});
  if (auth) {
    const std::string host(fuzz::kHostNqn);
    c.subsystems[0].host_keys = {{host, fixed_secret(1, 1)}};
    c.subsystems[0].ctrl_keys = {{host, fixed_secret(0, 2)}};
  }
  c.queue_size = 16;
  c.max_io = 64 * 1024;
  c.max_h2c_data = 16 * 1024;
  c.inline_data = 8192;
  target::apply_defaults(c);
  if (std::string e = target::validate(c); !e.empty()) broken(e.c_str());
  auto* t = new target::Target(c);
  if (std::string e = t->start(); !e.empty()) broken(e.c_str());
  return t;
}

// One target per policy, and one with keys; never destroyed: their reactor threads run until
// the process exits.
target::Target* the_target(uint8_t policy, bool auth) {
  static target::Target* targets[5] = {
      (g_log_level = LogLevel::kError,  // every refused input logs at info level
       start_target(coalesce::Policy::kOff)),
      start_target(coalesce::Policy::kUniform), start_target(coalesce::Policy::kSemantic),
      start_target(coalesce::Policy::kAdaptive), start_target(coalesce::Policy::kOff, true)};
  return targets[auth ? 4 : policy & 3];
}

// One connection to the target; `fd` is the host's end.
struct Conn {
  int fd = -1;
  explicit Conn(target::Target* t) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
      broken("socketpair");
    fd = sv[0];
    t->dispatch_accepted(sv[1], "fuzz", 4420);
  }
  ~Conn() { ::close(fd); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  // Writes everything, reading (and dropping) what the target sends meanwhile so that
  // neither end blocks on a full socket. False if the target closed first.
  bool send_all(const uint8_t* p, size_t n) {
    while (n) {
      pollfd pfd{fd, POLLIN | POLLOUT, 0};
      if (poll(&pfd, 1, 5000) <= 0) broken("the target neither reads nor writes for 5 s");
      if (pfd.revents & POLLIN) drain_some();
      if (pfd.revents & (POLLERR | POLLHUP)) return false;
      if (pfd.revents & POLLOUT) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) return false;
        if (w > 0) p += w, n -= size_t(w);
      }
    }
    return true;
  }
  // Reads available bytes; false at EOF or error.
  bool drain_some() {
    uint8_t buf[16384];
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    return r > 0 || (r < 0 && errno == EAGAIN);
  }
  // Reads exactly n bytes, waiting at most 5 s.
  bool read_exact(uint8_t* p, size_t n) {
    auto deadline = Clock::now() + kHang;
    while (n) {
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, 100);
      ssize_t r = ::recv(fd, p, n, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN)) return false;
      if (r > 0) p += r, n -= size_t(r);
      if (n && Clock::now() > deadline) broken("no answer to ICReq/Connect within 5 s");
    }
    return true;
  }
  // Half-closes and reads until the target closes.
  void finish() {
    ::shutdown(fd, SHUT_WR);
    auto deadline = Clock::now() + kHang;
    for (;;) {
      pollfd pfd{fd, POLLIN, 0};
      poll(&pfd, 1, 100);
      uint8_t buf[16384];
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r == 0 || (r < 0 && errno != EAGAIN)) return;
      if (Clock::now() > deadline)
        broken("the target kept the connection 5 s after the host's EOF");
    }
  }
};

// Opens an admin queue; returns its cntlid, or -1 if the target refused.
int open_admin(Conn& admin, uint8_t digest) {
  const pdu::Digests dg = fuzz::digests_of(digest);
  fuzz::Bytes pre;
  fuzz::append_icreq(pre, digest);
  fuzz::append_connect(pre, 0, 0xFFFF, 1, dg);
  if (!admin.send_all(pre.data(), pre.size())) return -1;
  uint8_t icresp[pdu::kICLen];
  pdu::HeaderSlot resp{};
  const uint32_t resp_len = pdu::kCapsuleRespHlen + (dg.header ? pdu::kDigestLen : 0);
  if (!admin.read_exact(icresp, sizeof icresp) || !admin.read_exact(resp.bytes, resp_len))
    return -1;
  if (resp.ch.type != uint8_t(pdu::Type::kCapsuleResp) || resp.resp.cqe.status_code() != 0)
    return -1;
  return int(resp.resp.cqe.dw0 & 0xFFFF);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  the_target(0, false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t digest = data[0] & 3;
  const int preamble = (data[0] >> 2) & 3;
  const pdu::Digests dg = fuzz::digests_of(digest);
  target::Target* t = the_target((data[0] >> 4) & 3, data[0] & 0x40);
  ++data, --size;

  std::optional<Conn> admin;  // preamble 2: the controller the I/O queue belongs to
  fuzz::Bytes pre;
  if (preamble == 2) {
    admin.emplace(t);
    int cntlid = open_admin(*admin, digest);
    if (cntlid < 0) broken("the target refused a valid admin Connect");
    // (On the target with keys, the I/O Connect is refused: the admin queue never authenticated.)
    fuzz::append_icreq(pre, digest);
    fuzz::append_connect(pre, 1, uint16_t(cntlid), 1, dg);
  } else {
    if (preamble != 3) fuzz::append_icreq(pre, digest);
    if (preamble == 1) fuzz::append_connect(pre, 0, 0xFFFF, 1, dg);
  }
  Conn c(t);
  if (c.send_all(pre.data(), pre.size()) && c.send_all(data, size)) c.finish();
  if (admin) admin->finish();
  return 0;
}
