#pragma once
// sens_limit's event loop (see limit.cc): the connections' byte streams and one side's pass
// over them (receive all available, answer with one sendmsg per connection), shared by the
// "target" and the "client" threads.
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/units.h"
#include "transport/tls.h"

namespace sens::limit {

using sens::Nanos;

// Wire sizes of the NVMe/TCP PDUs the traffic imitates.
constexpr size_t kCapsuleCmdBytes = 8 + 64;
constexpr size_t kC2HDataHeaderBytes = 24;
constexpr size_t kCapsuleRespBytes = 24;
constexpr size_t kDigestBytes = 4;  // a header or data digest (CRC32C)
// recv() size: a loopback segment (64 KiB) per call, and small enough to stay in cache
// (the copy into it is most of a reader's cost; a larger buffer measured no faster).
constexpr size_t kRecvBufferBytes = 64 << 10;
// A client with requests in flight that hears nothing for this long reports a failure.
constexpr Nanos kStallTimeout = 5 * sens::kSecond;
// How long a sleeping epoll_wait may block before it looks at the stop flag again.
constexpr int kEpollSleepMs = 50;

enum class PollMode { kBusy, kEpoll };

// The secure modes' ceilings: the same work sens does for them, and no NVMe work.
// kDigest: CRC32C over every byte received (header and data digests are checked) and over
// each outgoing unit's headers and data (their digests computed), with the 4-byte digests on
// the wire; kTls: every byte through TLS 1.3 records (AES-128-GCM) of sens's record layer.
enum class Security { kNone, kDigest, kTls };

// The repeating unit of one direction of a connection's byte stream, as segments (each a
// header or a data block), so a partially sent unit can be resumed at any byte.
struct Shape {
  struct Segment {
    const char* bytes;
    size_t size;
  };
  std::vector<Segment> segments;
  size_t unit_bytes = 0;
  // --span: segment `spread` is read, for each unit, from a pseudo-random block of `region`
  // (region_blocks blocks of its size) instead of from its bytes, as the reads of a RAM
  // namespace larger than the cache come from pages the cache has lost.
  size_t spread = SIZE_MAX;
  const char* region = nullptr;
  uint64_t region_blocks = 0;

  void add(const char* bytes, size_t size) {
    segments.push_back({bytes, size});
    unit_bytes += size;
  }
  // Where segment `seg` of the stream's unit number `unit` comes from.
  const char* bytes_of(size_t seg, uint64_t unit) const {
    if (seg != spread || region == nullptr) return segments[seg].bytes;
    uint64_t x = unit + 0x9E3779B97F4A7C15ull;  // splitmix64: a fixed, spread-out sequence
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return region + (x % region_blocks) * segments[seg].size;
  }
};

// Byte-stream bookkeeping of one direction of one connection. The content never matters
// (nothing parses it), only how many bytes are owed and where in the unit the stream is.
struct Stream {
  uint64_t queued = 0;  // bytes ever queued for sending
  uint64_t sent = 0;    // bytes the kernel accepted
  uint64_t owed() const { return queued - sent; }
};

struct Connection {
  int fd = -1;
  // --tls: the connection's TLS 1.3 channel (sens's record layer, as `sens target` uses it).
  std::unique_ptr<sens::transport::TlsChannel> tls;
  Stream out;
  uint64_t received_partial = 0;  // bytes of an incomplete incoming unit
  bool want_write = false;        // EPOLLOUT registered (epoll mode, send blocked)
  // Client only: submission times of the requests in flight, oldest first (TCP keeps the
  // answers in order, so the oldest is the next to complete).
  std::vector<Nanos> submitted;
  size_t oldest = 0;
};

struct SideCounters {
  uint64_t passes = 0, send_calls = 0, recv_calls = 0;
  double cpu_user_s = 0, cpu_sys_s = 0;

  SideCounters since(const SideCounters& start) const {
    return {passes - start.passes, send_calls - start.send_calls, recv_calls - start.recv_calls,
            cpu_user_s - start.cpu_user_s, cpu_sys_s - start.cpu_sys_s};
  }
};

// State shared by the two threads: start and stop, and the first error either side met.
struct Shared {
  std::atomic<bool> target_ready{false};  // pinned and polling: the client may start
  std::atomic<bool> measuring{false};     // the warm-up is over: counters start here
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string error;

  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.empty()) error = what;
    stop.store(true, std::memory_order_relaxed);
  }
};

inline std::string errno_text(const char* call) {
  return std::string(call) + ": " + std::strerror(errno);
}

// One side's event loop: the part both the target and the client share.
class Side {
 public:
  Side(std::vector<Connection>& conns, const Shape& in, const Shape& out, PollMode poll,
       Shared& shared, Security security = Security::kNone)
      : conns_(conns),
        in_(in),
        out_(out),
        poll_(poll),
        shared_(shared),
        security_(security),
        buffer_(kRecvBufferBytes) {}

  // kDigest: the digests of `units` outgoing units (their headers and data), as a sender
  // computes them for each PDU it queues.
  // `units` answers queued on a stream that had `queued` bytes before them.
  void digest_outgoing(uint64_t queued, uint64_t units) {
    if (security_ != Security::kDigest) return;
    const uint64_t first = queued / out_.unit_bytes;
    for (uint64_t u = 0; u < units; ++u)
      for (size_t seg = 0; seg < out_.segments.size(); ++seg)
        if (out_.segments[seg].size > 4)  // (not the digests)
          digest_sink_ ^= sens::crc32c(out_.bytes_of(seg, first + u), out_.segments[seg].size);
  }
  uint32_t digest_sink() const { return digest_sink_; }

  bool setup_epoll() {
    // A single connection is spun on with recv() directly in busy mode: one syscall per
    // pass instead of two. Otherwise epoll tells which connections have data.
    if (poll_ == PollMode::kBusy && conns_.size() == 1) return true;
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return fail(errno_text("epoll_create1"));
    for (size_t i = 0; i < conns_.size(); ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, conns_[i].fd, &ev) != 0)
        return fail(errno_text("epoll_ctl"));
    }
    events_.resize(conns_.size());
    return true;
  }

  ~Side() {
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  // Receives everything available on every ready connection; `on_units(conn, n)` is told
  // how many whole incoming units each read completed. Returns false on a failure.
  template <typename OnUnits>
  bool receive(Nanos max_sleep_ns, OnUnits&& on_units) {
    ++counters.passes;
    if (epoll_fd_ < 0) return drain(0, on_units);
    int timeout_ms = 0;
    if (poll_ == PollMode::kEpoll)
      timeout_ms = int(std::clamp<Nanos>(max_sleep_ns / sens::kMilli, 1, kEpollSleepMs));
    int n = epoll_wait(epoll_fd_, events_.data(), int(events_.size()), timeout_ms);
    if (n < 0) return errno == EINTR || fail(errno_text("epoll_wait"));
    for (int i = 0; i < n; ++i)
      if (events_[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        if (!drain(size_t(events_[i].data.u64), on_units)) return false;
    return true;
  }

  // One sendmsg per connection with bytes owed (more only if IOV_MAX cut the first short).
  bool send_all() {
    for (auto& c : conns_) {
      if (c.tls) {
        if (!send_tls(c)) return false;
        continue;
      }
      while (c.out.owed() > 0) {
        size_t iov_count = fill_iov(c.out);
        msghdr msg{};
        msg.msg_iov = iov_.data();
        msg.msg_iovlen = iov_count;
        ++counters.send_calls;
        ssize_t n = sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) return fail(errno_text("sendmsg"));
          n = 0;
        }
        c.out.sent += uint64_t(n);
        if (size_t(n) < iov_bytes_) break;  // the socket is full: the rest waits
      }
      if (poll_ == PollMode::kEpoll && !set_want_write(c, c.out.owed() > 0)) return false;
    }
    return true;
  }

  // The counters so far, with the calling thread's CPU time.
  SideCounters snapshot() const {
    SideCounters c = counters;
    rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0) {
      c.cpu_user_s = double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) / 1e6;
      c.cpu_sys_s = double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) / 1e6;
    }
    return c;
  }

  SideCounters counters;

 private:
  bool fail(const std::string& what) {
    shared_.fail(what);
    return false;
  }

  // The owed bytes through the channel: records sealed from the iovecs, a batch per send();
  // what it reports as in the kernel is sent.
  bool send_tls(Connection& c) {
    using Io = sens::transport::TlsChannel::Io;
    while (c.out.owed() > 0) {
      size_t iov_count = fill_iov(c.out);
      const uint64_t calls = c.tls->send_syscalls();
      Io io;
      size_t n = c.tls->send(iov_.data(), iov_count, 0, &io);
      counters.send_calls += c.tls->send_syscalls() - calls;
      c.out.sent += n;
      if (io == Io::kWantWrite) break;
      if (io != Io::kOk) return fail("TLS send: " + c.tls->error());
      if (n == 0) break;
    }
    if (poll_ == PollMode::kEpoll && !set_want_write(c, c.out.owed() > 0)) return false;
    return true;
  }

  template <typename OnUnits>
  bool drain_tls(Connection& c, OnUnits& on_units) {
    using Io = sens::transport::TlsChannel::Io;
    for (;;) {
      const uint64_t calls = c.tls->recv_syscalls();
      Io io;
      size_t n = c.tls->read(buffer_.data(), buffer_.size(), &io);
      counters.recv_calls += c.tls->recv_syscalls() - calls;
      if (n == 0) {
        if (io == Io::kWantRead) return true;
        if (shared_.stop.load(std::memory_order_relaxed)) return true;
        return fail("TLS read: " + c.tls->error());
      }
      c.received_partial += n;
      uint64_t units = c.received_partial / in_.unit_bytes;
      c.received_partial %= in_.unit_bytes;
      if (units > 0) on_units(c, units);
    }
  }

  template <typename OnUnits>
  bool drain(size_t index, OnUnits& on_units) {
    Connection& c = conns_[index];
    if (c.tls) return drain_tls(c, on_units);
    for (;;) {
      ++counters.recv_calls;
      ssize_t n = recv(c.fd, buffer_.data(), buffer_.size(), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
        return fail(errno_text("recv"));
      }
      if (n == 0) {
        if (shared_.stop.load(std::memory_order_relaxed)) return true;
        return fail("the peer closed a connection");
      }
      if (security_ == Security::kDigest)  // every received byte's digest is checked
        digest_sink_ ^= sens::crc32c(buffer_.data(), size_t(n));
      c.received_partial += uint64_t(n);
      uint64_t units = c.received_partial / in_.unit_bytes;
      c.received_partial %= in_.unit_bytes;
      if (units > 0) on_units(c, units);
      // A short read emptied the socket: another recv would only say EAGAIN.
      if (size_t(n) < buffer_.size()) return true;
    }
  }

  // iovecs for the owed bytes of `s`, resuming mid-unit where the last send stopped.
  size_t fill_iov(const Stream& s) {
    iov_.clear();
    iov_bytes_ = 0;
    uint64_t left = s.owed();
    uint64_t unit = s.sent / out_.unit_bytes;
    uint64_t offset = s.sent % out_.unit_bytes;
    size_t seg = 0;
    while (offset >= out_.segments[seg].size) offset -= out_.segments[seg++].size;
    while (left > 0 && iov_.size() < size_t(IOV_MAX)) {
      const auto& g = out_.segments[seg];
      size_t len = size_t(std::min<uint64_t>(g.size - offset, left));
      iov_.push_back({const_cast<char*>(out_.bytes_of(seg, unit) + offset), len});
      iov_bytes_ += len;
      left -= len;
      offset = 0;
      if (++seg == out_.segments.size()) {
        seg = 0;
        ++unit;
      }
    }
    return iov_.size();
  }

  // Epoll mode sleeps, so a connection whose answer did not fit in the socket must wake
  // the loop when there is room again, or both sides would wait for each other.
  bool set_want_write(Connection& c, bool want) {
    if (c.want_write == want) return true;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
    ev.data.u64 = uint64_t(&c - conns_.data());
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev) != 0) return fail(errno_text("epoll_ctl"));
    c.want_write = want;
    return true;
  }

  std::vector<Connection>& conns_;
  const Shape& in_;
  const Shape& out_;
  PollMode poll_;
  Shared& shared_;
  Security security_;
  uint32_t digest_sink_ = 0;  // (so that no CRC is optimized away)
  std::vector<char> buffer_;
  int epoll_fd_ = -1;
  std::vector<epoll_event> events_;
  std::vector<iovec> iov_;
  size_t iov_bytes_ = 0;
};

}  // namespace sens::limit
