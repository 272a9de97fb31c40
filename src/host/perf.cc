#include "host/perf.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "coalesce/stats_json.h"
#include "common/histogram.h"
#include "common/units.h"
#include "host/controller.h"
#include "host/verify.h"
#include "wire/nvme_build.h"

namespace sens::host {

namespace {

struct RwEntry {
  RwMode mode;
  const char* name;
};
constexpr RwEntry kRwNames[] = {
    {RwMode::kRead, "read"},           {RwMode::kWrite, "write"}, {RwMode::kRandRead, "randread"},
    {RwMode::kRandWrite, "randwrite"}, {RwMode::kRw, "rw"},       {RwMode::kRandRw, "randrw"}};

}  // namespace

bool parse_rw(std::string_view text, RwMode* out) {
  for (auto& e : kRwNames) {
    if (text == e.name) {
      *out = e.mode;
      return true;
    }
  }
  return false;
}

const char* rw_name(RwMode mode) {
  for (auto& e : kRwNames)
    if (e.mode == mode) return e.name;
  return "?";
}

bool rw_reads(RwMode m) {
  return m != RwMode::kWrite && m != RwMode::kRandWrite;
}
bool rw_writes(RwMode m) {
  return m != RwMode::kRead && m != RwMode::kRandRead;
}
bool rw_random(RwMode m) {
  return m == RwMode::kRandRead || m == RwMode::kRandWrite || m == RwMode::kRandRw;
}

std::string validate_perf_options(PerfOptions& o) {
  std::string err;
  if (o.trid_text.empty())
    return "-r TRID is required, e.g. -r 'trtype:tcp traddr:127.0.0.1 "
           "trsvcid:4420 subnqn:NQN'";
  auto trid = parse_trid(o.trid_text, &err);
  if (!trid) return "-r: " + err;
  if (trid->subnqn == nvme::kDiscoveryNqn)
    return "-r: subnqn missing (perf needs an NVM subsystem, not the discovery controller)";
  o.trid = *trid;
  if (o.bs < 512 || o.bs % 512 != 0)
    return "--bs " + std::to_string(o.bs) + ": must be a non-zero multiple of 512";
  if (o.bs > (16u << 20)) return "--bs " + format_size(o.bs) + ": at most 16 MiB";
  if (o.qd < 1 || o.qd > 4095) return "--qd " + std::to_string(o.qd) + ": must be 1..4095";
  if (o.queues < 1 || o.queues > 128)
    return "--queues " + std::to_string(o.queues) + ": must be 1..128";
  if (!(o.time_s > 0) || o.time_s > 86400)
    return "--time " + std::to_string(o.time_s) + ": must be > 0 and at most 86400 seconds";
  if (!(o.warmup_s >= 0) || o.warmup_s > 3600)
    return "--warmup " + std::to_string(o.warmup_s) + ": must be 0..3600 seconds";
  if (o.rwmixread < 0 || o.rwmixread > 100)
    return "--rwmixread " + std::to_string(o.rwmixread) + ": must be 0..100";
  if (o.rwmixread_given && o.rw != RwMode::kRw && o.rw != RwMode::kRandRw)
    return std::string("--rwmixread applies to rw and randrw, not ") + rw_name(o.rw);
  if (o.size < o.bs || o.size % o.bs != 0)
    return "--size " + format_size(o.size) + ": must be a non-zero multiple of --bs (" +
           format_size(o.bs) + ")";
  if (uint64_t(o.bs) * o.qd * o.queues > (4ull << 30))
    return "--bs x --qd x --queues = " + format_size(uint64_t(o.bs) * o.qd * o.queues) +
           " of buffers: at most 4 GiB";
  const auto& c = o.coalesce;
  if (c.pdus < 1) return "--pg-pdus must be >= 1";
  if (c.ctrl_pdus < 1) return "--ctrl-pdus must be >= 1";
  if (c.timeout < 0 || c.timeout > kSecond) return "--pg-timeout-us must be 0..1000000";
  if (c.ctrl_timeout < 0 || c.ctrl_timeout > kSecond) return "--ctrl-timeout-us must be 0..1000000";
  if (o.io_timeout_ms < 100) return "--io-timeout must be >= 100 ms";
  if (o.kato_ms != 0 && o.kato_ms < 100) return "--kato must be 0 (off) or >= 100 ms";
  return "";
}

namespace {

enum class Phase : uint8_t { kPrefill, kMain, kReadback, kDone };

struct DirStats {
  uint64_t ios = 0, bytes = 0;
  Histogram lat_ns;
};

struct Usage {
  double user_s = 0, sys_s = 0;
  long nvcsw = 0, nivcsw = 0;
  static Usage now() {
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    Usage u;
    u.user_s = double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) / 1e6;
    u.sys_s = double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) / 1e6;
    u.nvcsw = ru.ru_nvcsw;
    u.nivcsw = ru.ru_nivcsw;
    return u;
  }
};

struct Syscalls {
  uint64_t send = 0, recv = 0, polls = 0;
  uint64_t sleeps = 0, spins = 0, wakeups = 0;  // the reactor's polls, by outcome
};

class Engine {
 public:
  Engine(const PerfOptions& o, FILE* out) : o_(o), out_(out), ctrl_(reactor_) {}
  ~Engine() { std::free(buffers_); }
  int run();

 private:
  struct Io {
    Engine* engine;
    uint8_t* buf;
    uint64_t offset = 0;
    uint32_t len = 0;
    uint16_t queue = 0;
    bool read = false;
    bool check = false;
    Nanos start = 0;
  };

  std::string setup();
  void start_phase(Phase p);
  bool submit_next(Io& io);
  static void on_done(void* ctx, uint64_t tag, const Completion& c);
  void complete(Io& io, const Completion& c);
  uint64_t pick_block();
  bool next_is_read();
  void mark_written(uint64_t offset, uint32_t len);
  bool written(uint64_t block) const { return written_[block / 64] >> (block % 64) & 1; }
  bool busy(uint64_t block) const { return busy_[block / 64] >> (block % 64) & 1; }
  void set_busy(uint64_t block, bool on) {
    if (on)
      busy_[block / 64] |= uint64_t(1) << (block % 64);
    else
      busy_[block / 64] &= ~(uint64_t(1) << (block % 64));
  }
  void begin_measure(Nanos now);
  void end_measure(Nanos now);
  void progress(Nanos now);
  Syscalls syscalls() const;
  void report();
  nlohmann::json dir_json(const DirStats& d) const;
  uint64_t rand64() {  // xorshift64*: no allocation, no lock, plenty for offsets
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1Dull;
  }

  const PerfOptions& o_;
  FILE* out_;
  Reactor reactor_;
  Controller ctrl_;
  NamespaceInfo ns_;
  uint64_t region_ = 0, blocks_ = 0;
  uint32_t buf_size_ = 0, prefill_chunk_ = 0;
  uint8_t* buffers_ = nullptr;
  std::vector<Io> ios_;
  std::vector<uint64_t> written_;
  std::vector<uint64_t> busy_;  // --verify: blocks with an I/O in flight (main phase)
  uint64_t seed_ = 0, rng_ = 0;

  Phase phase_ = Phase::kPrefill;
  bool stopping_ = false;  // no new I/O in this phase
  uint64_t inflight_ = 0;
  uint64_t cursor_ = 0;  // sequential block / prefill offset / readback block

  // Measurement window [measure_start_, measure_end_].
  bool measuring_ = false, measured_ = false;
  Nanos measure_start_ = 0, measure_end_ = 0;
  DirStats read_, write_;
  Histogram all_;
  Usage usage_start_, usage_end_;
  Syscalls sys_start_, sys_end_;
  coalesce::Stats coalesce_;

  // Progress (every second, warm-up included).
  uint64_t tick_ios_ = 0, tick_bytes_ = 0, tick_reads_ = 0, tick_writes_ = 0;
  Histogram tick_lat_;
  Nanos run_start_ = 0;

  uint64_t errors_ = 0;
  std::string first_error_;
  uint64_t verified_blocks_ = 0, verify_failures_ = 0, unverified_reads_ = 0;
  std::string first_verify_failure_;
};

std::string Engine::setup() {
  ControllerOptions co;
  co.io_queues = uint16_t(o_.queues);
  co.io_depth = uint16_t(o_.qd);
  co.hdr_digest = o_.hdr_digest;
  co.data_digest = o_.data_digest;
  co.disable_sqflow = o_.disable_sqflow;
  co.coalesce = o_.coalesce;
  co.kato_ms = o_.kato_ms;
  co.io_timeout = Nanos(o_.io_timeout_ms) * kMilli;
  co.admin_timeout = std::min<Nanos>(co.io_timeout, 10 * kSecond);
  co.connect_timeout = Nanos(o_.connect_timeout_ms) * kMilli;

  if (std::string e = ctrl_.connect(o_.trid, co); !e.empty()) return e;
  if (std::string e = ctrl_.namespace_info(o_.nsid, &ns_); !e.empty()) return e;
  if (o_.bs % ns_.block_size != 0)
    return "--bs " + format_size(o_.bs) + " is not a multiple of the namespace's " +
           format_size(ns_.block_size) + " blocks";
  const uint32_t mdts = ctrl_.max_transfer_bytes();
  if (mdts && o_.bs > mdts)
    return "--bs " + format_size(o_.bs) + " exceeds the controller's largest transfer (MDTS) " +
           format_size(mdts);
  region_ = std::min(o_.size, ns_.bytes());
  region_ -= region_ % o_.bs;
  if (region_ == 0)
    return "namespace " + std::to_string(ns_.nsid) + " (" + format_size(ns_.bytes()) +
           ") is smaller than --bs";
  blocks_ = region_ / o_.bs;

  // Prefilling before a verified read run goes in large writes: the pattern does not care.
  const bool prefill = o_.verify && !rw_writes(o_.rw);
  prefill_chunk_ = o_.bs;
  if (prefill) {
    uint64_t chunk = std::max<uint64_t>(o_.bs, 128 * 1024);
    if (mdts) chunk = std::min<uint64_t>(chunk, mdts);
    chunk = std::min<uint64_t>(chunk, region_);
    prefill_chunk_ = uint32_t(chunk - chunk % o_.bs);
  }
  buf_size_ = std::max(o_.bs, prefill_chunk_);
  ctrl_.set_max_transfer(buf_size_);
  if (std::string e = ctrl_.create_io_queues(); !e.empty()) return e;

  // Buffers for every (queue, slot), page aligned, allocated once.
  const size_t n = size_t(o_.queues) * o_.qd;
  const size_t stride = (size_t(buf_size_) + 4095) / 4096 * 4096;
  buffers_ = static_cast<uint8_t*>(std::aligned_alloc(4096, n * stride));
  if (!buffers_) return "cannot allocate " + format_size(n * stride) + " of I/O buffers";
  ios_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ios_[i].engine = this;
    ios_[i].buf = buffers_ + i * stride;
    ios_[i].queue = uint16_t(i / o_.qd);
    // Without --verify writes carry whatever pattern this is: filled once, never per I/O.
    fill_pattern(ios_[i].buf, i * stride, buf_size_, 0x5e45);
  }
  written_.assign((blocks_ + 63) / 64, 0);
  busy_.assign((blocks_ + 63) / 64, 0);
  // --verify never has two I/Os on one block at once (fio's serialize_overlap): a read
  // racing a write may legally return either content, torn. That needs free blocks to pick.
  if (o_.verify && blocks_ < 2ull * o_.qd * o_.queues)
    return "--verify needs a region of at least 2 x qd x queues blocks (" +
           std::to_string(2ull * o_.qd * o_.queues) + " x " + format_size(o_.bs) + "), have " +
           std::to_string(blocks_);
  seed_ = o_.seed;
  if (seed_ == 0) {
    std::random_device rd;
    seed_ = (uint64_t(rd()) << 32 | rd()) | 1;
  }
  rng_ = seed_ * 0x9E3779B97F4A7C15ull | 1;
  return "";
}

void Engine::mark_written(uint64_t offset, uint32_t len) {
  for (uint64_t b = offset / o_.bs; b < (offset + len) / o_.bs; ++b)
    written_[b / 64] |= uint64_t(1) << (b % 64);
}

uint64_t Engine::pick_block() {
  // Without --verify nothing is busy. With it at most half the blocks are: a few random
  // tries nearly always succeed, and the scan after them is bounded by the region.
  if (rw_random(o_.rw)) {
    uint64_t b = rand64() % blocks_;
    for (int tries = 0; tries < 16 && busy(b); ++tries) b = rand64() % blocks_;
    for (uint64_t n = 0; n < blocks_ && busy(b); ++n) b = b + 1 == blocks_ ? 0 : b + 1;
    return b;
  }
  for (uint64_t n = 0; n < blocks_ && busy(cursor_); ++n)
    cursor_ = cursor_ + 1 == blocks_ ? 0 : cursor_ + 1;
  uint64_t b = cursor_;
  cursor_ = cursor_ + 1 == blocks_ ? 0 : cursor_ + 1;
  return b;
}

bool Engine::next_is_read() {
  switch (o_.rw) {
    case RwMode::kRead:
    case RwMode::kRandRead:
      return true;
    case RwMode::kWrite:
    case RwMode::kRandWrite:
      return false;
    default:
      return int(rand64() % 100) < o_.rwmixread;
  }
}

bool Engine::submit_next(Io& io) {
  if (stopping_ || !ctrl_.io_queue(io.queue).is_open()) return false;
  switch (phase_) {
    case Phase::kPrefill:
      if (cursor_ >= region_) return false;
      io.offset = cursor_;
      io.len = uint32_t(std::min<uint64_t>(prefill_chunk_, region_ - cursor_));
      io.read = false;
      cursor_ += io.len;
      break;
    case Phase::kMain: {
      io.offset = pick_block() * o_.bs;
      io.len = o_.bs;
      io.read = next_is_read();
      break;
    }
    case Phase::kReadback: {
      while (cursor_ < blocks_ && !written(cursor_)) ++cursor_;
      if (cursor_ >= blocks_) return false;
      io.offset = cursor_++ * o_.bs;
      io.len = o_.bs;
      io.read = true;
      break;
    }
    case Phase::kDone:
      return false;
  }
  // A read is checked when every write to its block so far has completed: a racing rewrite
  // writes the same bytes, so the check cannot flag a race.
  io.check = o_.verify && io.read && written(io.offset / o_.bs);
  if (o_.verify && phase_ == Phase::kMain) set_busy(io.offset / o_.bs, true);
  if (o_.verify && !io.read) fill_pattern(io.buf, io.offset, io.len, seed_);
  const uint32_t lbas = io.len / ns_.block_size;
  nvme::Sqe sqe = nvme::make_io(io.read ? nvme::io_op::kRead : nvme::io_op::kWrite, ns_.nsid,
                                io.offset / ns_.block_size, lbas, nvme::Xfer::kTransport, io.len);
  io.start = reactor_.now();
  ++inflight_;  // before submit: a queue failing inside submit completes at once
  if (!ctrl_.io_queue(io.queue).submit(
          sqe, io.buf, io.len, io.read ? DataDir::kControllerToHost : DataDir::kHostToController,
          &Engine::on_done, this, uint64_t(&io - ios_.data()))) {
    --inflight_;
    if (o_.verify && phase_ == Phase::kMain) set_busy(io.offset / o_.bs, false);
    return false;
  }
  return true;
}

void Engine::on_done(void* ctx, uint64_t tag, const Completion& c) {
  auto* e = static_cast<Engine*>(ctx);
  e->complete(e->ios_[tag], c);
}

void Engine::complete(Io& io, const Completion& c) {
  --inflight_;
  const Nanos now = reactor_.now();
  if (o_.verify && phase_ == Phase::kMain) set_busy(io.offset / o_.bs, false);
  if (!c.ok()) {
    if (errors_++ == 0) {
      Queue& q = ctrl_.io_queue(io.queue);
      first_error_ = std::string(io.read ? "read" : "write") + " of " + format_size(io.len) +
                     " at offset " + std::to_string(io.offset) + " on I/O queue " +
                     std::to_string(q.qid()) + ": " + describe(c);
      if (!q.error().empty()) first_error_ += ": " + q.error();
    }
    stopping_ = true;  // as fio: the first error ends the run
    return;
  }
  if (!io.read && o_.verify) mark_written(io.offset, io.len);
  if (io.check) {
    Mismatch m;
    if (check_pattern(io.buf, io.offset, io.len, seed_, &m)) {
      ++verified_blocks_;
    } else if (verify_failures_++ == 0) {
      first_verify_failure_ =
          "block at offset " + std::to_string(io.offset) + ": " + m.describe(seed_);
    }
  } else if (io.read && o_.verify && phase_ == Phase::kMain) {
    ++unverified_reads_;  // a block this run has not written yet
  }
  if (phase_ == Phase::kMain) {
    const uint64_t lat = uint64_t(now - io.start);
    ++tick_ios_;
    tick_bytes_ += io.len;
    ++(io.read ? tick_reads_ : tick_writes_);
    tick_lat_.record(lat);
    if (measuring_ && io.start >= measure_start_) {
      DirStats& d = io.read ? read_ : write_;
      ++d.ios;
      d.bytes += io.len;
      d.lat_ns.record(lat);
      all_.record(lat);
    }
  }
  submit_next(io);
}

Syscalls Engine::syscalls() const {
  Syscalls s;
  for (size_t i = 0; i < ctrl_.io_queue_count(); ++i) {
    s.send += ctrl_.io_queue(i).send_queue().counters().sendmsg_calls;
    s.recv += ctrl_.io_queue(i).recv_counters().recv_calls;
  }
  s.polls = reactor_.stats().polls;
  s.sleeps = reactor_.stats().sleeps;
  s.spins = reactor_.stats().spins;
  s.wakeups = reactor_.stats().wakeups;
  return s;
}

void Engine::begin_measure(Nanos now) {
  measuring_ = true;
  measure_start_ = now;
  usage_start_ = Usage::now();
  sys_start_ = syscalls();
  // The scheduler counters cover the measured window only, like everything else.
  for (size_t i = 0; i < ctrl_.io_queue_count(); ++i)
    ctrl_.io_queue(i).send_queue().scheduler().stats() = coalesce::Stats{};
}

void Engine::end_measure(Nanos now) {
  if (!measuring_) return;
  measuring_ = false;
  measured_ = true;
  measure_end_ = now;
  usage_end_ = Usage::now();
  sys_end_ = syscalls();
  for (size_t i = 0; i < ctrl_.io_queue_count(); ++i)
    coalesce_.merge(ctrl_.io_queue(i).send_queue().scheduler().stats());
}

void Engine::progress(Nanos now) {
  if (o_.progress) {
    const bool warm = !measuring_ && !measured_;
    std::fprintf(out_,
                 "[%5.1fs]%s %8llu IOPS %9.1f MiB/s (read %llu, write %llu) lat avg %.1f us "
                 "p99 %.1f us, errors %llu\n",
                 double(now - run_start_) / kSecond, warm ? " warmup" : "",
                 (unsigned long long)tick_ios_, double(tick_bytes_) / (1 << 20),
                 (unsigned long long)tick_reads_, (unsigned long long)tick_writes_,
                 tick_lat_.mean() / 1e3, double(tick_lat_.percentile(99)) / 1e3,
                 (unsigned long long)errors_);
    std::fflush(out_);
  }
  tick_ios_ = tick_bytes_ = tick_reads_ = tick_writes_ = 0;
  tick_lat_.reset();
}

void Engine::start_phase(Phase p) {
  phase_ = p;
  stopping_ = false;
  cursor_ = 0;
  for (auto& io : ios_)
    if (!submit_next(io) && (stopping_ || phase_ != p)) break;
}

int Engine::run() {
  // The default 50 us timer slack would swallow the 10 us coalescing timers.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  reactor_.set_poll(o_.poll, Nanos(o_.poll_max_us * double(kMicro)));
  if (std::string e = setup(); !e.empty()) {
    std::fprintf(stderr, "sens perf: %s\n", e.c_str());
    return 1;
  }
  const Queue& q1 = ctrl_.io_queue(0);
  std::fprintf(out_,
               "sens perf: %s, cntlid %u, namespace %u: %s in %u-byte blocks; %u I/O queue(s) "
               "x qd %u, in-capsule %s, maxh2cdata %s, digests %s/%s, coalesce %s, poll %s\n",
               o_.trid.subnqn.c_str(), ctrl_.cntlid(), ns_.nsid, format_size(ns_.bytes()).c_str(),
               ns_.block_size, o_.queues, o_.qd, format_size(ctrl_.io_incapsule_bytes()).c_str(),
               format_size(q1.maxh2cdata()).c_str(), o_.hdr_digest ? "hdr" : "-",
               o_.data_digest ? "data" : "-", coalesce::policy_name(o_.coalesce.policy),
               poll_mode_name(o_.poll));
  std::fprintf(out_, "%s %s, region %s, %.1f s", rw_name(o_.rw), format_size(o_.bs).c_str(),
               format_size(region_).c_str(), o_.time_s);
  if (o_.warmup_s > 0) std::fprintf(out_, " after %.1f s warm-up", o_.warmup_s);
  if (o_.verify) std::fprintf(out_, ", verify seed %llu", (unsigned long long)seed_);
  std::fputc('\n', out_);
  std::fflush(out_);

  const Nanos wait_cap = 50 * kMilli;
  auto drain = [&] {
    // Every command ends: completion, error, or the queue watchdog's timeout.
    while (inflight_ > 0) reactor_.run_once(wait_cap);
  };

  if (o_.verify && !rw_writes(o_.rw)) {
    const Nanos t0 = reactor_.now();
    start_phase(Phase::kPrefill);
    while (inflight_ > 0) {
      reactor_.run_once(wait_cap);
      if (ctrl_.failed()) stopping_ = true;
    }
    if (errors_ == 0 && !ctrl_.failed()) {
      std::fprintf(out_, "prefill: %s written in %.1f s\n", format_size(region_).c_str(),
                   double(reactor_.now() - t0) / kSecond);
    }
  }

  if (errors_ == 0 && !ctrl_.failed()) {
    run_start_ = reactor_.now();
    const Nanos warm_end = run_start_ + Nanos(o_.warmup_s * double(kSecond));
    const Nanos end = warm_end + Nanos(o_.time_s * double(kSecond));
    Nanos next_tick = run_start_ + kSecond;
    if (warm_end == run_start_) begin_measure(run_start_);
    start_phase(Phase::kMain);
    while (inflight_ > 0) {
      Nanos now = reactor_.now();
      if (!measuring_ && !measured_ && now >= warm_end && !stopping_) begin_measure(now);
      if (now >= end && !stopping_) {
        end_measure(now);
        stopping_ = true;
      }
      if (now >= next_tick) {
        progress(now);
        next_tick += kSecond;
      }
      if (ctrl_.failed() && !stopping_) {
        if (errors_++ == 0) first_error_ = ctrl_.error();
        stopping_ = true;
      }
      Nanos wait = std::min({next_tick - now, stopping_ ? wait_cap : end - now, wait_cap});
      reactor_.run_once(std::max<Nanos>(wait, 0));
    }
    end_measure(reactor_.now());
  }

  if (o_.verify && rw_writes(o_.rw) && errors_ == 0 && !ctrl_.failed()) {
    // Every block this run wrote is read back and checked.
    const Nanos t0 = reactor_.now();
    const uint64_t before = verified_blocks_;
    start_phase(Phase::kReadback);
    drain();
    std::fprintf(out_, "read-back: %llu written blocks checked in %.1f s\n",
                 (unsigned long long)(verified_blocks_ - before),
                 double(reactor_.now() - t0) / kSecond);
  }
  phase_ = Phase::kDone;
  drain();
  if (ctrl_.failed() && errors_ == 0) {
    errors_ = 1;
    first_error_ = ctrl_.error();
  }
  ctrl_.shutdown();
  report();
  if (errors_)
    std::fprintf(stderr, "sens perf: %llu I/O error(s); first: %s\n", (unsigned long long)errors_,
                 first_error_.c_str());
  if (verify_failures_)
    std::fprintf(stderr, "sens perf: verify failed on %llu block(s); first: %s\n",
                 (unsigned long long)verify_failures_, first_verify_failure_.c_str());
  return errors_ || verify_failures_ ? 1 : 0;
}

nlohmann::json Engine::dir_json(const DirStats& d) const {
  const double secs = measured_ ? double(measure_end_ - measure_start_) / kSecond : 0;
  nlohmann::json pct = {{"50.000000", d.lat_ns.percentile(50)},
                        {"90.000000", d.lat_ns.percentile(90)},
                        {"99.000000", d.lat_ns.percentile(99)},
                        {"99.900000", d.lat_ns.percentile(99.9)}};
  nlohmann::json lat = {{"min", d.lat_ns.min()},
                        {"max", d.lat_ns.max()},
                        {"mean", d.lat_ns.mean()},
                        {"N", d.lat_ns.count()},
                        {"percentile", pct}};
  return {{"io_bytes", d.bytes},
          {"io_kbytes", d.bytes / 1024},
          {"total_ios", d.ios},
          {"runtime", uint64_t(secs * 1000)},
          {"iops", secs > 0 ? double(d.ios) / secs : 0.0},
          {"bw_bytes", secs > 0 ? uint64_t(double(d.bytes) / secs) : 0},
          {"bw", secs > 0 ? uint64_t(double(d.bytes) / secs / 1024) : 0},
          {"clat_ns", lat},
          {"lat_ns", lat}};
}

void Engine::report() {
  const double secs = measured_ ? double(measure_end_ - measure_start_) / kSecond : 0;
  DirStats total;
  total.ios = read_.ios + write_.ios;
  total.bytes = read_.bytes + write_.bytes;
  total.lat_ns = all_;
  const double usr = usage_end_.user_s - usage_start_.user_s;
  const double sys = usage_end_.sys_s - usage_start_.sys_s;
  const long vcs = usage_end_.nvcsw - usage_start_.nvcsw;
  const long ivcs = usage_end_.nivcsw - usage_start_.nivcsw;
  const double ios = double(std::max<uint64_t>(total.ios, 1));
  const uint64_t send = sys_end_.send - sys_start_.send, recv = sys_end_.recv - sys_start_.recv,
                 polls = sys_end_.polls - sys_start_.polls,
                 sleeps = sys_end_.sleeps - sys_start_.sleeps,
                 spins = sys_end_.spins - sys_start_.spins,
                 wakeups = sys_end_.wakeups - sys_start_.wakeups;

  auto line = [&](const char* name, const DirStats& d) {
    if (!d.ios) return;
    const Histogram& h = d.lat_ns;
    std::fprintf(out_,
                 "%-6s IOPS %10.0f  %9.1f MiB/s  lat us: avg %.1f p50 %.1f p90 %.1f p99 %.1f "
                 "p99.9 %.1f max %.1f\n",
                 name, double(d.ios) / secs, double(d.bytes) / secs / (1 << 20), h.mean() / 1e3,
                 double(h.percentile(50)) / 1e3, double(h.percentile(90)) / 1e3,
                 double(h.percentile(99)) / 1e3, double(h.percentile(99.9)) / 1e3,
                 double(h.max()) / 1e3);
  };
  std::fprintf(out_, "---- %s %s qd %u x %u queue(s), %.2f s measured ----\n", rw_name(o_.rw),
               format_size(o_.bs).c_str(), o_.qd, o_.queues, secs);
  if (secs > 0) {
    line("read", read_);
    line("write", write_);
    line("total", total);
    std::fprintf(out_,
                 "cpu: usr %.2f s (%.1f%%) sys %.2f s (%.1f%%); ctx switches: voluntary %ld "
                 "involuntary %ld\n",
                 usr, 100 * usr / secs, sys, 100 * sys / secs, vcs, ivcs);
    std::fprintf(out_,
                 "syscalls per I/O: send %.3f recv %.3f epoll %.3f; poll %s: %.3f sleeps, "
                 "%.3f empty spins, %.3f wake-ups per I/O\n",
                 double(send) / ios, double(recv) / ios, double(polls) / ios,
                 poll_mode_name(o_.poll), double(sleeps) / ios, double(spins) / ios,
                 double(wakeups) / ios);
    std::fprintf(out_,
                 "coalesce %s: %llu PDUs in %llu send calls, %.2f PDUs/flush, H2CData "
                 "queueing delay avg %.1f us\n",
                 coalesce::policy_name(o_.coalesce.policy), (unsigned long long)coalesce_.pdus_sent,
                 (unsigned long long)coalesce_.send_calls, coalesce_.pdus_per_flush.mean(),
                 coalesce_.r2t_delay_ns.mean() / 1e3);
  }
  if (o_.verify)
    std::fprintf(out_, "verify: %llu blocks checked, %llu failed, %llu reads of unwritten blocks\n",
                 (unsigned long long)verified_blocks_, (unsigned long long)verify_failures_,
                 (unsigned long long)unverified_reads_);
  std::fprintf(out_, "errors: %llu\n", (unsigned long long)errors_);
  std::fflush(out_);

  if (o_.json_path.empty()) return;
  nlohmann::json job = {{"jobname", "sens-perf"},
                        {"job options",
                         {{"rw", rw_name(o_.rw)},
                          {"bs", std::to_string(o_.bs)},
                          {"iodepth", std::to_string(o_.qd)},
                          {"queues", std::to_string(o_.queues)},
                          {"rwmixread", std::to_string(o_.rwmixread)}}},
                        {"read", dir_json(read_)},
                        {"write", dir_json(write_)},
                        {"usr_cpu", secs > 0 ? 100 * usr / secs : 0.0},
                        {"sys_cpu", secs > 0 ? 100 * sys / secs : 0.0},
                        {"ctx", vcs + ivcs},
                        {"error", errors_ ? 1 : 0}};
  nlohmann::json tj = dir_json(total);
  nlohmann::json j = {{"jobs", nlohmann::json::array({job})},
                      {"options",
                       {{"trid", o_.trid.to_string()},
                        {"rw", rw_name(o_.rw)},
                        {"rwmixread", o_.rwmixread},
                        {"bs", o_.bs},
                        {"qd", o_.qd},
                        {"queues", o_.queues},
                        {"time_s", o_.time_s},
                        {"warmup_s", o_.warmup_s},
                        {"verify", o_.verify},
                        {"size", region_},
                        {"hdr_digest", o_.hdr_digest},
                        {"data_digest", o_.data_digest},
                        {"disable_sqflow", o_.disable_sqflow},
                        {"coalesce",
                         {{"policy", coalesce::policy_name(o_.coalesce.policy)},
                          {"pg_pdus", o_.coalesce.pdus},
                          {"pg_timeout_us", o_.coalesce.timeout / kMicro},
                          {"ctrl_pdus", o_.coalesce.ctrl_pdus},
                          {"ctrl_timeout_us", o_.coalesce.ctrl_timeout / kMicro},
                          {"pg_bytes", o_.coalesce.bytes}}}}},
                      {"runtime_s", secs},
                      {"total_ios", total.ios},
                      {"iops", tj["iops"]},
                      {"bw_bytes", tj["bw_bytes"]},
                      {"clat_ns", tj["clat_ns"]},
                      {"usr_cpu", job["usr_cpu"]},
                      {"sys_cpu", job["sys_cpu"]},
                      {"ctx", vcs + ivcs},
                      {"voluntary_ctx", vcs},
                      {"involuntary_ctx", ivcs},
                      {"cpu_user_s", usr},
                      {"cpu_sys_s", sys},
                      {"syscalls",
                       {{"send_calls", send},
                        {"recv_calls", recv},
                        {"epoll_calls", polls},
                        {"send_per_io", double(send) / ios},
                        {"recv_per_io", double(recv) / ios},
                        {"epoll_per_io", double(polls) / ios}}},
                      {"poll",
                       {{"mode", poll_mode_name(o_.poll)},
                        {"max_spin_us", o_.poll_max_us},
                        {"sleeps", sleeps},
                        {"spins", spins},
                        {"wakeups", wakeups},
                        {"timer_late_us", reactor_.stats_json()["timer_late_us"]}}},
                      {"coalesce", coalesce::to_json(coalesce_)},
                      {"verify",
                       {{"enabled", o_.verify},
                        {"seed", seed_},
                        {"blocks_checked", verified_blocks_},
                        {"failures", verify_failures_},
                        {"first_failure", first_verify_failure_}}},
                      {"errors", errors_},
                      {"first_error", first_error_}};
  const std::string text = j.dump(2) + "\n";
  if (o_.json_path == "-") {
    std::fputs(text.c_str(), out_);
  } else {
    std::ofstream f(o_.json_path);
    f << text;
    if (!f) std::fprintf(stderr, "sens perf: cannot write %s\n", o_.json_path.c_str());
  }
}

}  // namespace

int run_perf(const PerfOptions& options, FILE* out) {
  auto engine = std::make_unique<Engine>(options, out);
  return engine->run();
}

}  // namespace sens::host
