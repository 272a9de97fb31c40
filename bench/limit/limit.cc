// sens_limit: the physical ceiling of this machine for NVMe/TCP-shaped traffic.
//
// Two threads talk over real TCP connections on 127.0.0.1, the "target" pinned to one core
// and the "client" to another, exchanging byte streams shaped like NVMe/TCP but doing no
// protocol work at all: a 4 KiB read is a 72-byte request (CapsuleCmd: 8-byte header +
// 64-byte SQE) answered by 24 + 4096 + 24 bytes (C2HData header, data, CapsuleResp); a write
// is 72 + 4096 bytes answered by 24. Each side reads everything available and answers all
// it can with one sendmsg per connection per pass, so whatever sens reaches at the same
// shape is a fraction of what the kernel and the two cores allow (bench/run.py prints it).
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/histogram.h"
#include "common/units.h"
#include "tools/cli.h"

namespace {

using sens::Nanos;

// Wire sizes of the NVMe/TCP PDUs the traffic imitates.
constexpr size_t kCapsuleCmdBytes = 8 + 64;
constexpr size_t kC2HDataHeaderBytes = 24;
constexpr size_t kCapsuleRespBytes = 24;
// recv() size: a loopback segment (64 KiB) per call, and small enough to stay in cache
// (the copy into it is most of a reader's cost; a larger buffer measured no faster).
constexpr size_t kRecvBufferBytes = 64 << 10;
// A client with requests in flight that hears nothing for this long reports a failure.
constexpr Nanos kStallTimeout = 5 * sens::kSecond;
// How long a sleeping epoll_wait may block before it looks at the stop flag again.
constexpr int kEpollSleepMs = 50;

enum class PollMode { kBusy, kEpoll };

struct Options {
  unsigned qd = 1;
  unsigned queues = 1;
  double time_s = 5;
  double warmup_s = 0.1;
  bool write = false;
  uint32_t bs = 4096;
  PollMode poll = PollMode::kBusy;
  int target_core = 0;
  int client_core = 1;
  std::string json_path;
  bool quiet = false;
};

// The repeating unit of one direction of a connection's byte stream, as segments (each a
// header or a data block), so a partially sent unit can be resumed at any byte.
struct Shape {
  struct Segment {
    const char* bytes;
    size_t size;
  };
  std::vector<Segment> segments;
  size_t unit_bytes = 0;

  void add(const char* bytes, size_t size) {
    segments.push_back({bytes, size});
    unit_bytes += size;
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

std::string errno_text(const char* call) {
  return std::string(call) + ": " + std::strerror(errno);
}

bool pin_to_core(int core, std::string* error) {
  if (core < 0) return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {  // 0: the calling thread only
    *error = "cannot pin to core " + std::to_string(core) + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

// One side's event loop: the part both the target and the client share.
class Side {
 public:
  Side(std::vector<Connection>& conns, const Shape& in, const Shape& out, PollMode poll,
       Shared& shared)
      : conns_(conns),
        in_(in),
        out_(out),
        poll_(poll),
        shared_(shared),
        buffer_(kRecvBufferBytes) {}

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

  template <typename OnUnits>
  bool drain(size_t index, OnUnits& on_units) {
    Connection& c = conns_[index];
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
    uint64_t offset = s.sent % out_.unit_bytes;
    size_t seg = 0;
    while (offset >= out_.segments[seg].size) offset -= out_.segments[seg++].size;
    while (left > 0 && iov_.size() < size_t(IOV_MAX)) {
      const auto& g = out_.segments[seg];
      size_t len = size_t(std::min<uint64_t>(g.size - offset, left));
      iov_.push_back({const_cast<char*>(g.bytes + offset), len});
      iov_bytes_ += len;
      left -= len;
      offset = 0;
      seg = (seg + 1) % out_.segments.size();
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
  std::vector<char> buffer_;
  int epoll_fd_ = -1;
  std::vector<epoll_event> events_;
  std::vector<iovec> iov_;
  size_t iov_bytes_ = 0;
};

struct Payload {
  std::vector<char> headers;  // zeros, long enough for any header
  std::vector<char> data;     // one block
  Shape request, answer;

  explicit Payload(const Options& o) : headers(kCapsuleCmdBytes, 0), data(o.bs, 0x5a) {
    request.add(headers.data(), kCapsuleCmdBytes);
    if (o.write) {
      request.add(data.data(), data.size());
      answer.add(headers.data(), kCapsuleRespBytes);
    } else {
      answer.add(headers.data(), kC2HDataHeaderBytes);
      answer.add(data.data(), data.size());
      answer.add(headers.data(), kCapsuleRespBytes);
    }
  }
};

void run_target(const Options& o, std::vector<Connection>& conns, Shared& shared,
                SideCounters* out) {
  std::string error;
  if (!pin_to_core(o.target_core, &error)) return shared.fail("target: " + error);
  Payload payload(o);
  Side side(conns, payload.request, payload.answer, o.poll, shared);
  if (!side.setup_epoll()) return;
  auto answer = [&](Connection& c, uint64_t units) {
    c.out.queued += units * payload.answer.unit_bytes;
  };
  shared.target_ready.store(true);
  SideCounters at_start;
  bool measuring = false;
  while (!shared.stop.load(std::memory_order_relaxed)) {
    if (!measuring && shared.measuring.load(std::memory_order_relaxed)) {
      at_start = side.snapshot();
      measuring = true;
    }
    if (!side.receive(kEpollSleepMs * sens::kMilli, answer) || !side.send_all()) break;
  }
  *out = side.snapshot().since(at_start);
}

struct ClientResult {
  SideCounters counters;
  sens::Histogram latency_ns;
  uint64_t completed = 0;
  Nanos elapsed = 0;
};

void run_client(const Options& o, std::vector<Connection>& conns, Shared& shared,
                ClientResult* result) {
  std::string error;
  if (!pin_to_core(o.client_core, &error)) return shared.fail("client: " + error);
  Payload payload(o);
  Side side(conns, payload.answer, payload.request, o.poll, shared);
  if (!side.setup_epoll()) return;
  const uint64_t request_bytes = payload.request.unit_bytes;
  for (auto& c : conns) c.submitted.assign(o.qd, 0);

  // Requests sent before the target thread polls would be timed from before it existed.
  Nanos ready_deadline = sens::monotonic_now() + kStallTimeout;
  while (!shared.target_ready.load()) {
    if (shared.stop.load() || sens::monotonic_now() > ready_deadline)
      return shared.fail("the target thread did not start in 5 s");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }

  Nanos start = sens::monotonic_now();
  // A short warm-up (first page faults, the sockets' buffers growing) is not measured.
  Nanos measure_from = start + Nanos(o.warmup_s * double(sens::kSecond));
  Nanos deadline = measure_from + Nanos(o.time_s * double(sens::kSecond));
  Nanos measure_start = start, last_progress = start, now = start;
  bool measuring = false;
  SideCounters at_start;
  uint64_t answered = 0, measured = 0;
  for (auto& c : conns) {
    for (unsigned i = 0; i < o.qd; ++i) c.submitted[i] = start;
    c.out.queued += o.qd * request_bytes;
  }
  // Completions are stamped when the recv() that finished them returns; the requests they
  // free are queued at once with that stamp and leave with this pass's sendmsg.
  auto complete = [&](Connection& c, uint64_t units) {
    now = sens::monotonic_now();
    for (uint64_t i = 0; i < units; ++i) {
      if (measuring)
        result->latency_ns.record(uint64_t(std::max<Nanos>(now - c.submitted[c.oldest], 0)));
      c.submitted[c.oldest] = now;  // the same slot carries the replacement request
      c.oldest = (c.oldest + 1) % c.submitted.size();
    }
    answered += units;
    if (measuring) measured += units;
    c.out.queued += units * request_bytes;
  };
  while (!shared.stop.load(std::memory_order_relaxed)) {
    now = sens::monotonic_now();
    if (!measuring && now >= measure_from) {
      measuring = true;
      measure_start = now;
      // The window runs from when measuring really began: a client thread starved past
      // measure_from + time (a loaded machine) would otherwise measure nothing at all.
      deadline = now + Nanos(o.time_s * double(sens::kSecond));
      at_start = side.snapshot();
      shared.measuring.store(true, std::memory_order_relaxed);
    }
    if (now >= deadline) break;
    uint64_t before = answered;
    if (!side.send_all() || !side.receive(deadline - now, complete)) break;
    if (answered != before) {
      last_progress = now;
    } else if (now - last_progress > kStallTimeout) {
      shared.fail("no answer for 5 s with " + std::to_string(o.qd * conns.size()) +
                  " requests in flight");
      break;
    }
  }
  result->elapsed = sens::monotonic_now() - measure_start;
  result->completed = measured;
  result->counters = side.snapshot().since(at_start);
}

int set_socket_options(int fd) {
  int one = 1;
  // NVMe/TCP stacks disable Nagle: a 72-byte request must leave at once.
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return -1;
  int flags = fcntl(fd, F_GETFL);
  return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Opens `count` connected pairs over 127.0.0.1: [client fds], [target fds].
bool connect_pairs(unsigned count, std::vector<Connection>* client, std::vector<Connection>* target,
                   std::string* error) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return *error = errno_text("socket"), false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // any free port
  socklen_t len = sizeof addr;
  bool ok = bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            listen(listener, int(std::min(count, 4096u))) == 0 &&
            getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (!ok) *error = errno_text("bind/listen on 127.0.0.1");
  for (unsigned i = 0; ok && i < count; ++i) {
    int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (cfd < 0) {
      *error = errno_text("socket");
      ok = false;
      break;
    }
    client->push_back({.fd = cfd});
    // A loopback connect to a listening socket completes in the kernel at once; the
    // timeout only guards against a machine where it does not.
    timeval two_seconds{2, 0};
    setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &two_seconds, sizeof two_seconds);
    if (connect(cfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      *error = errno_text("connect to 127.0.0.1");
      ok = false;
      break;
    }
    pollfd p{listener, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) {
      *error = "accept: no connection arrived in 2 s";
      ok = false;
      break;
    }
    int tfd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (tfd < 0) {
      *error = errno_text("accept");
      ok = false;
      break;
    }
    target->push_back({.fd = tfd});
    if (set_socket_options(cfd) != 0 || set_socket_options(tfd) != 0) {
      *error = errno_text("setsockopt/fcntl");
      ok = false;
    }
  }
  close(listener);
  return ok;
}

void close_all(std::vector<Connection>& conns) {
  for (auto& c : conns)
    if (c.fd >= 0) close(c.fd);
  conns.clear();
}

nlohmann::json side_json(const SideCounters& c, uint64_t ios) {
  double per_io = 1.0 / double(std::max<uint64_t>(ios, 1));
  return {{"cpu_user_s", c.cpu_user_s},
          {"cpu_sys_s", c.cpu_sys_s},
          {"cpu_s_per_mio", (c.cpu_user_s + c.cpu_sys_s) * per_io * 1e6},
          {"passes", c.passes},
          {"send_calls_per_io", double(c.send_calls) * per_io},
          {"recv_calls_per_io", double(c.recv_calls) * per_io}};
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "sens_limit: %s\n", msg.c_str());
  return 2;
}

int limit_main(int argc, char** argv) {
  Options o;
  std::string rw = "read", bs = "4096", poll = "busy";
  CLI::App app{
      "sens_limit: the physical ceiling of this machine for NVMe/TCP-shaped traffic. A target "
      "thread and a client thread exchange requests and answers of NVMe/TCP's sizes over "
      "127.0.0.1 with no protocol work (read: 72 B -> 24 + bs + 24 B; write: 72 + bs B -> "
      "24 B), each answering everything available with one sendmsg per connection per pass.",
      "sens_limit"};
  app.add_option("--qd", o.qd, "requests in flight per connection")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--queues", o.queues,
                 "TCP connections (both sides poll them all, one thread each)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--time", o.time_s, "measured seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0));
  app.add_option("--warmup", o.warmup_s, "seconds run before measuring")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 60.0));
  app.add_option("--rw", rw, "read or write")->capture_default_str();
  app.add_option("--bs", bs, "data bytes per I/O (4096, 4k, 16k, ...)")->capture_default_str();
  app.add_option("--poll", poll,
                 "busy: spin on non-blocking recv/epoll_wait(0); epoll: sleep in epoll_wait")
      ->capture_default_str();
  app.add_option("--target-core", o.target_core, "core of the target thread (-1: not pinned)")
      ->capture_default_str();
  app.add_option("--client-core", o.client_core, "core of the client thread (-1: not pinned)")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "write the result as JSON to FILE ('-' for stdout)");
  app.add_flag("-q,--quiet", o.quiet, "no summary line on stdout");
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;

  if (rw == "read" || rw == "randread") {
    o.write = false;
  } else if (rw == "write" || rw == "randwrite") {
    o.write = true;
  } else {
    return usage_error("--rw '" + rw + "': expected read or write");
  }
  auto block = sens::parse_size(bs);
  if (!block || *block == 0 || *block > (16u << 20))
    return usage_error("--bs '" + bs + "': expected a size from 1 byte to 16 MiB");
  o.bs = uint32_t(*block);
  if (poll == "busy") {
    o.poll = PollMode::kBusy;
  } else if (poll == "epoll") {
    o.poll = PollMode::kEpoll;
  } else {
    return usage_error("--poll '" + poll + "': expected busy or epoll");
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  for (auto [name, core] :
       {std::pair{"--target-core", o.target_core}, std::pair{"--client-core", o.client_core}})
    if (core < -1 || core >= cores)
      return usage_error(std::string(name) + " " + std::to_string(core) +
                         ": no such core (this machine has " + std::to_string(cores) +
                         "; -1 leaves the thread unpinned)");
  if (o.poll == PollMode::kBusy && o.target_core >= 0 && o.target_core == o.client_core)
    std::fprintf(stderr, "sens_limit: warning: both busy-polling threads share core %d\n",
                 o.target_core);

  // Whatever goes wrong, the process ends: a stuck syscall cannot outlive this alarm.
  alarm(unsigned(std::ceil(o.warmup_s + o.time_s)) + 30);

  std::vector<Connection> client_conns, target_conns;
  std::string error;
  if (!connect_pairs(o.queues, &client_conns, &target_conns, &error)) {
    close_all(client_conns);
    close_all(target_conns);
    std::fprintf(stderr, "sens_limit: %s\n", error.c_str());
    return 1;
  }
  Shared shared;
  SideCounters target_counters;
  ClientResult client;
  std::thread target([&] { run_target(o, target_conns, shared, &target_counters); });
  run_client(o, client_conns, shared, &client);
  shared.stop.store(true);
  target.join();
  close_all(client_conns);
  close_all(target_conns);
  if (!shared.error.empty()) {
    std::fprintf(stderr, "sens_limit: %s\n", shared.error.c_str());
    return 1;
  }

  double seconds = double(client.elapsed) / double(sens::kSecond);
  double iops = seconds > 0 ? double(client.completed) / seconds : 0;
  const auto& lat = client.latency_ns;
  double avg_us = lat.mean() / 1e3, p50_us = double(lat.percentile(50)) / 1e3,
         p99_us = double(lat.percentile(99)) / 1e3;
  nlohmann::json j = {
      {"rw", o.write ? "write" : "read"},
      {"bs", o.bs},
      {"qd", o.qd},
      {"queues", o.queues},
      {"poll", poll},
      {"time_s", o.time_s},
      {"warmup_s", o.warmup_s},
      {"runtime_s", seconds},
      {"total_ios", client.completed},
      {"iops", iops},
      {"mib_s", iops * double(o.bs) / double(1 << 20)},
      {"lat_avg_us", avg_us},
      {"lat_p50_us", p50_us},
      {"lat_p99_us", p99_us},
      {"lat_us", lat.summary(1e3)},
      {"request_bytes", o.write ? kCapsuleCmdBytes + o.bs : kCapsuleCmdBytes},
      {"answer_bytes",
       o.write ? kCapsuleRespBytes : kC2HDataHeaderBytes + o.bs + kCapsuleRespBytes},
      {"target_core", o.target_core},
      {"client_core", o.client_core},
      {"target", side_json(target_counters, client.completed)},
      {"client", side_json(client.counters, client.completed)},
  };
  if (!o.quiet)
    std::printf(
        "%s %u B, %u x QD%u, poll=%s: %.0f IOPS, %.1f MiB/s, avg %.2f us, p50 %.2f us, "
        "p99 %.2f us\n",
        o.write ? "write" : "read", o.bs, o.queues, o.qd, poll.c_str(), iops,
        iops * double(o.bs) / double(1 << 20), avg_us, p50_us, p99_us);
  if (!o.json_path.empty()) {
    if (o.json_path == "-") {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      std::ofstream f(o.json_path);
      f << j.dump(1) << "\n";
      if (!f) {
        std::fprintf(stderr, "sens_limit: cannot write %s\n", o.json_path.c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return limit_main(argc, argv);
}
