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
#include <sys/mman.h>
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

#include "core_link.h"
#include "side.h"

namespace {

using namespace sens::limit;  // the loop's types (side.h), this program's own

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

struct Options {
  unsigned qd = 1;
  unsigned queues = 1;
  double time_s = 5;
  double warmup_s = 0.1;
  bool write = false;
  uint32_t bs = 4096;
  uint64_t span = 0;  // --span (reads): bytes of the region answers are read from; 0: one block
  PollMode poll = PollMode::kBusy;
  Security security = Security::kNone;
  int target_core = 0;
  int client_core = 1;
  std::string json_path;
  bool quiet = false;
};

struct Payload {
  std::vector<char> headers;  // zeros, long enough for any header
  std::vector<char> data;     // one block
  Shape request, answer;

  explicit Payload(const Options& o) : headers(kCapsuleCmdBytes, 0), data(o.bs, 0x5a) {
    // With digests each header and each data block is followed by its 4-byte CRC32C.
    const size_t dg = o.security == Security::kDigest ? kDigestBytes : 0;
    auto add = [&](Shape& s, const char* bytes, size_t size) {
      s.add(bytes, size);
      if (dg) s.add(headers.data(), dg);
    };
    add(request, headers.data(), kCapsuleCmdBytes);
    if (o.write) {
      add(request, data.data(), data.size());
      add(answer, headers.data(), kCapsuleRespBytes);
    } else {
      add(answer, headers.data(), kC2HDataHeaderBytes);
      answer.spread = answer.segments.size();
      add(answer, data.data(), data.size());
      add(answer, headers.data(), kCapsuleRespBytes);
    }
  }
};

// The --span region: anonymous memory on transparent huge pages where the kernel gives them
// (as sens's RAM namespaces ask), written once so that every page is there before the run.
class SpanRegion {
 public:
  explicit SpanRegion(uint64_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    madvise(p, bytes, MADV_HUGEPAGE);
    std::memset(p, 0x5a, bytes);
    data_ = static_cast<char*>(p);
  }
  ~SpanRegion() {
    if (data_) munmap(data_, bytes_);
  }
  SpanRegion(const SpanRegion&) = delete;
  SpanRegion& operator=(const SpanRegion&) = delete;
  const char* data() const { return data_; }

 private:
  uint64_t bytes_;
  char* data_ = nullptr;
};

void run_target(const Options& o, std::vector<Connection>& conns, Shared& shared,
                SideCounters* out) {
  std::string error;
  if (!pin_to_core(o.target_core, &error)) return shared.fail("target: " + error);
  Payload payload(o);
  SpanRegion region(o.span);
  if (o.span) {
    if (!region.data()) return shared.fail("target: no memory for --span");
    payload.answer.region = region.data();
    payload.answer.region_blocks = o.span / o.bs;
  }
  Side side(conns, payload.request, payload.answer, o.poll, shared, o.security);
  if (!side.setup_epoll()) return;
  auto answer = [&](Connection& c, uint64_t units) {
    side.digest_outgoing(c.out.queued, units);
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
  Side side(conns, payload.answer, payload.request, o.poll, shared, o.security);
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
    side.digest_outgoing(c.out.queued, o.qd);
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
    side.digest_outgoing(c.out.queued, units);
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

// --security tls: a TLS 1.3 session (TLS_AES_128_GCM_SHA256, a random PSK) on every pair,
// handshaken here, before the threads start; records by sens's record layer.
bool start_tls(std::vector<Connection>& client, std::vector<Connection>& target,
               std::unique_ptr<sens::transport::TlsContext>* server_ctx,
               std::unique_ptr<sens::transport::TlsContext>* client_ctx, std::string* error) {
  using sens::transport::TlsChannel;
  using sens::transport::TlsContext;
  sens::transport::TlsPsk psk;
  psk.identity = "NVMe0R01 sens_limit client sens_limit target";
  psk.key.resize(32);
  std::FILE* r = std::fopen("/dev/urandom", "rb");
  bool got = r && std::fread(psk.key.data(), 1, psk.key.size(), r) == psk.key.size();
  if (r) std::fclose(r);
  if (!got) return *error = "no random bytes for the PSK (/dev/urandom)", false;
  *server_ctx = TlsContext::server(
      [psk](const std::string& id, sens::transport::TlsPsk* out, std::string*) {
        *out = psk;
        return id == psk.identity;
      },
      error);
  if (!*server_ctx) return false;
  *client_ctx = TlsContext::client(psk, error);
  if (!*client_ctx) return false;
  for (size_t i = 0; i < client.size(); ++i) {
    client[i].tls = std::make_unique<TlsChannel>(**client_ctx, client[i].fd);
    target[i].tls = std::make_unique<TlsChannel>(**server_ctx, target[i].fd);
    const Nanos deadline = sens::monotonic_now() + 5 * sens::kSecond;
    for (bool c_done = false, t_done = false; !(c_done && t_done);) {
      for (auto [ch, done] :
           {std::pair{client[i].tls.get(), &c_done}, std::pair{target[i].tls.get(), &t_done}}) {
        if (*done) continue;
        TlsChannel::Io io = ch->handshake();
        if (io == TlsChannel::Io::kOk) *done = true;
        if (io == TlsChannel::Io::kError || io == TlsChannel::Io::kClosed)
          return *error = "TLS handshake: " + ch->error(), false;
      }
      if (sens::monotonic_now() > deadline) return *error = "TLS handshake: no end in 5 s", false;
      pollfd p[2] = {{client[i].fd, POLLIN, 0}, {target[i].fd, POLLIN, 0}};
      if (!(c_done && t_done)) poll(p, 2, 10);
    }
  }
  return true;
}

void close_all(std::vector<Connection>& conns) {
  for (auto& c : conns) {
    c.tls.reset();
    if (c.fd >= 0) close(c.fd);
  }
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

// --json: `j` to `path` ("-": stdout; empty: nowhere). False (said on stderr) when it cannot.
bool write_json(const nlohmann::json& j, const std::string& path) {
  if (path.empty()) return true;
  if (path == "-") {
    std::printf("%s\n", j.dump(1).c_str());
    return true;
  }
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  f.close();  // a short file's write fails only here (a full disk)
  if (!f) std::fprintf(stderr, "sens_limit: cannot write %s\n", path.c_str());
  return bool(f);
}

std::string core_name(int core) {
  return core < 0 ? "an unpinned thread" : "core " + std::to_string(core);
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "sens_limit: %s\n", msg.c_str());
  return 2;
}

int limit_main(int argc, char** argv) {
  Options o;
  std::string rw = "read", bs = "4096", poll = "busy", security = "none";
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
  std::string span = "0";
  app.add_option("--span", span,
                 "reads: each answer's data comes from a random block of a region this large "
                 "(on huge pages), as a RAM namespace's reads do once it outgrows the cache; "
                 "0: one block, always in cache")
      ->capture_default_str();
  app.add_option("--poll", poll,
                 "busy: spin on non-blocking recv/epoll_wait(0); epoll: sleep in epoll_wait")
      ->capture_default_str();
  app.add_option("--security", security,
                 "none; digest: CRC32C over every header and data block sent and received, with "
                 "the digests on the wire (header and data digests); tls: every byte in TLS 1.3 "
                 "records (TLS_AES_128_GCM_SHA256, sens's record layer). No NVMe work either way")
      ->capture_default_str();
  std::string aes_gcm = "auto";
  sens::tools::add_tls_aes_gcm_option(app, aes_gcm);
  app.add_option("--target-core", o.target_core, "core of the target thread (-1: not pinned)")
      ->capture_default_str();
  app.add_option("--client-core", o.client_core, "core of the client thread (-1: not pinned)")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "write the result as JSON to FILE ('-' for stdout)");
  app.add_flag("-q,--quiet", o.quiet, "no summary line on stdout");
  bool round_trip_only = false;
  app.add_flag("--core-round-trip", round_trip_only,
               "only measure how far apart the two cores are (a cache line's round trip between "
               "--target-core and --client-core, in ns) and exit; every run's JSON has it too "
               "(core_round_trip_ns, measured just before the run): a VM's vCPUs may sit on one "
               "chiplet or two, and move, which changes loopback TCP's speed by about 2x");
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
  auto span_bytes = sens::parse_size(span);
  if (!span_bytes || (*span_bytes != 0 && (*span_bytes < o.bs || *span_bytes > (64ull << 30))))
    return usage_error("--span '" + span + "': expected 0 or a size from --bs to 64 GiB");
  if (*span_bytes != 0 && o.write)
    return usage_error("--span applies to reads (the target's answers carry the data)");
  o.span = *span_bytes;
  if (poll == "busy") {
    o.poll = PollMode::kBusy;
  } else if (poll == "epoll") {
    o.poll = PollMode::kEpoll;
  } else {
    return usage_error("--poll '" + poll + "': expected busy or epoll");
  }
  if (security == "none") {
    o.security = Security::kNone;
  } else if (security == "digest") {
    o.security = Security::kDigest;
  } else if (security == "tls") {
    o.security = Security::kTls;
    std::string why;
    if (!sens::transport::set_aes_gcm(aes_gcm, &why)) return usage_error("--tls-aes-gcm: " + why);
  } else {
    return usage_error("--security '" + security + "': expected none, digest or tls");
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

  // (Two threads on one core bounce the line only as often as the scheduler switches them.)
  const bool one_core = cores < 2 || (o.target_core >= 0 && o.target_core == o.client_core);
  if (round_trip_only && one_core)
    return usage_error("--core-round-trip needs two different cores");
  const sens::limit::CoreRoundTrip link =
      one_core ? sens::limit::CoreRoundTrip{}
               : sens::limit::measure_core_round_trip(o.target_core, o.client_core);
  if (!link.error.empty()) {
    std::fprintf(stderr, "sens_limit: core round trip: %s\n", link.error.c_str());
    return 1;
  }
  if (round_trip_only) {
    nlohmann::json j = {{"core_round_trip_ns", link.ns},
                        {"target_core", o.target_core},
                        {"client_core", o.client_core}};
    if (!o.quiet)
      std::printf("%s and %s: a cache line's round trip takes %.0f ns\n",
                  core_name(o.target_core).c_str(), core_name(o.client_core).c_str(), link.ns);
    return write_json(j, o.json_path) ? 0 : 1;
  }

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
  std::unique_ptr<sens::transport::TlsContext> server_ctx, client_ctx;
  if (o.security == Security::kTls &&
      !start_tls(client_conns, target_conns, &server_ctx, &client_ctx, &error)) {
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
      {"security", security},
      {"aes_gcm", o.security == Security::kTls ? sens::transport::aes_gcm_description() : ""},
      {"span", o.span},
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
      {"request_bytes", Payload(o).request.unit_bytes},
      {"answer_bytes", Payload(o).answer.unit_bytes},
      {"target_core", o.target_core},
      {"client_core", o.client_core},
      {"core_round_trip_ns", one_core ? nlohmann::json() : nlohmann::json(link.ns)},
      {"target", side_json(target_counters, client.completed)},
      {"client", side_json(client.counters, client.completed)},
  };
  if (!o.quiet)
    std::printf(
        "%s %u B, %u x QD%u, poll=%s, security=%s, span=%s: %.0f IOPS, %.1f MiB/s, avg %.2f "
        "us, p50 %.2f us, p99 %.2f us\n",
        o.write ? "write" : "read", o.bs, o.queues, o.qd, poll.c_str(), security.c_str(),
        o.span ? span.c_str() : "one block", iops, iops * double(o.bs) / double(1 << 20), avg_us,
        p50_us, p99_us);
  return write_json(j, o.json_path) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return limit_main(argc, argv);
}