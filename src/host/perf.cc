#include "host/perf.h"

#include <sens/host.h>

#include "auth/dhchap.h"
#include "buffers/buffer_pool.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "coalesce/stats_json.h"
#include "common/histogram.h"
#include "common/units.h"
#include "host/controller.h"
#include "host/library.h"
#include "host/verify.h"
#include "wire/nvme_build.h"

namespace sens::host {

PerfOptions::~PerfOptions() {
  auth::wipe_text(dhchap_secret);
  auth::wipe_text(dhchap_ctrl_secret);
}

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
bool prefills(const PerfOptions& o) {
  return o.prefill || (o.verify && !rw_writes(o.rw));
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
  if (!(o.rate_iops >= 0) || o.rate_iops > 1e9) {
    char text[64];
    std::snprintf(text, sizeof(text), "%g", o.rate_iops);
    return std::string("--rate-iops ") + text + ": must be 0 (no limit) to 1e9";
  }
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
  if (o.ctrl_loss_tmo_s > 0 && o.reconnect_delay_s < 1)
    return "--reconnect-delay must be >= 1 s when --ctrl-loss-tmo is set";
  if (o.threads < 1 || o.threads > 256)
    return "--threads " + std::to_string(o.threads) + ": must be 1..256";
  const uint32_t submitters = o.threads * o.queues;
  if (o.share == ShareMode::kNone) {
    if (o.connections != 0 && o.connections != submitters)
      return "--connections " + std::to_string(o.connections) + " with --share none: each of the " +
             std::to_string(submitters) + " queues (threads x queues) has its own connection";
  } else {
    if (o.connections == 0) o.connections = 1;
    if (o.connections > submitters)
      return "--connections " + std::to_string(o.connections) + ": at most threads x queues (" +
             std::to_string(submitters) + ")";
    const uint64_t per = (uint64_t(submitters) + o.connections - 1) / o.connections * o.qd;
    if (per > 4095)
      return "--share " + std::string(share_mode_name(o.share)) + ": " + std::to_string(per) +
             " commands per connection (queues per connection x qd): at most 4095";
  }
  if (uint64_t(o.bs) * o.qd * submitters > (4ull << 30))
    return "--bs x --qd x --queues x --threads = " +
           format_size(uint64_t(o.bs) * o.qd * submitters) + " of buffers: at most 4 GiB";
  return "";
}

namespace {

enum class Phase : uint8_t { kPrefill, kMain, kReadback, kDone };

struct DirStats {
  uint64_t ios = 0, bytes = 0;
  Histogram lat_ns;
  void merge(const DirStats& o) {
    ios += o.ios;
    bytes += o.bytes;
    lat_ns.merge(o.lat_ns);
  }
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
  uint64_t sleeps = 0, spins = 0, wakeups = 0;  // the reactors' polls, by outcome
  uint64_t yields = 0;                          // spins that yielded a crowded CPU first
  void add(const Syscalls& o) {
    send += o.send;
    recv += o.recv;
    polls += o.polls;
    sleeps += o.sleeps;
    spins += o.spins;
    wakeups += o.wakeups;
    yields += o.yields;
  }
  Syscalls minus(const Syscalls& o) const {
    return {send - o.send,   recv - o.recv,       polls - o.polls,  sleeps - o.sleeps,
            spins - o.spins, wakeups - o.wakeups, yields - o.yields};
  }
};

Syscalls queue_syscalls(const Queue& q) {
  Syscalls s;
  s.send = q.send_queue().counters().sendmsg_calls;
  s.recv = q.recv_counters().recv_calls;
  return s;
}

Syscalls reactor_syscalls(const Reactor& r) {
  Syscalls s;
  s.polls = r.stats().polls;
  s.sleeps = r.stats().sleeps;
  s.spins = r.stats().spins;
  s.wakeups = r.stats().wakeups;
  s.yields = r.stats().yields;
  return s;
}

// What every worker reads: set before the workers start a phase, constant during it.
struct RunPlan {
  Namespace ns;
  uint32_t prefill_chunk = 0, buf_size = 0;
  uint64_t seed = 0;
  Nanos run_start = 0, warm_end = 0, end = 0;  // the main phase
};

// A step barrier: the main thread opens step k; workers wait for it, do it, and arrive.
class Steps {
 public:
  void open(int step) {
    std::lock_guard<std::mutex> g(mu_);
    step_ = step;
    arrived_ = 0;
    cv_.notify_all();
  }
  void wait_open(int step) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return step_ >= step; });
  }
  void arrive() {
    std::lock_guard<std::mutex> g(mu_);
    ++arrived_;
    cv_.notify_all();
  }
  // True once `n` have arrived; waits at most `timeout`.
  bool wait_arrived(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> g(mu_);
    return cv_.wait_for(g, timeout, [&] { return arrived_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int step_ = -1, arrived_ = 0;
};

// The progress line's numbers, which workers add in once a second.
struct Tick {
  std::mutex mu;
  uint64_t ios = 0, bytes = 0, reads = 0, writes = 0;
  Histogram lat;
};

class Engine;

// One submitting thread: its poller, its queues, its share of the region (blocks
// [first_block_, first_block_ + blocks_)), its histograms. Nothing here is shared while the
// workers run, so the I/O path has no lock and no atomic beyond the library's.
class Worker {
 public:
  Worker(Engine& e, int index) : e_(e), index_(index) {}
  ~Worker() {
    if (!io_region_) std::free(buffers_);
  }
  void run();  // the thread's body

  int index() const { return index_; }
  const std::string& setup_error() const { return setup_error_; }
  const DirStats& read_stats() const { return read_; }
  const DirStats& write_stats() const { return write_; }
  const Histogram& all() const { return all_; }
  uint64_t errors() const { return errors_; }
  const std::string& first_error() const { return first_error_; }
  uint64_t verified() const { return verified_blocks_; }
  uint64_t verify_failures() const { return verify_failures_; }
  uint64_t unverified() const { return unverified_reads_; }
  const std::string& first_verify_failure() const { return first_verify_failure_; }
  const Syscalls& window_syscalls() const { return window_; }
  const coalesce::Stats& coalesce_stats() const { return coalesce_; }
  double measured_seconds() const {
    return measured_ ? double(measure_end_ - measure_start_) / kSecond : 0;
  }
  uint32_t maxh2cdata() const { return maxh2cdata_; }
  nlohmann::json timer_late() const { return timer_late_; }

 private:
  struct Io {
    uint8_t* buf;
    iovec iov;
    uint64_t offset = 0;
    uint32_t len = 0;
    uint16_t queue = 0;
    bool read = false;
    bool check = false;
    Nanos start = 0;
    Worker* worker = nullptr;
  };

  std::string setup();
  void start_phase(Phase p);
  bool submit_next(Io& io, Nanos now);
  bool issue(Io& io, Nanos now);
  void on_pace();
  void stop_pacing();
  static void on_done(void* ctx, const sens::Completion& c);
  void complete(Io& io, const sens::Completion& c);
  uint64_t pick_block();
  bool next_is_read();
  void mark_written(uint64_t offset, uint32_t len);
  bool written(uint64_t b) const { return written_[b / 64] >> (b % 64) & 1; }
  bool busy(uint64_t b) const { return busy_[b / 64] >> (b % 64) & 1; }
  void set_busy(uint64_t b, bool on) {
    if (on)
      busy_[b / 64] |= uint64_t(1) << (b % 64);
    else
      busy_[b / 64] &= ~(uint64_t(1) << (b % 64));
  }
  Nanos now() { return poller_->impl().reactor().now(); }
  void poll(Nanos wait) { poller_->process_completions(0, wait); }
  void drain();
  void main_loop();
  Syscalls own_syscalls() const;
  void begin_measure(Nanos now);
  void end_measure(Nanos now);
  void publish_tick();
  void record_error(const Io& io, const sens::Completion& c);
  uint64_t rand64() {  // xorshift64*: no allocation, no lock, plenty for offsets
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1Dull;
  }

  Engine& e_;
  int index_;
  std::string setup_error_;
  std::unique_ptr<Poller> poller_;
  // --buffers tyche: declared before the queues so that they outlive them.
  std::unique_ptr<buffers::Region> io_region_;
  std::unique_ptr<buffers::BufferPool> staging_pool_;
  std::vector<std::unique_ptr<IoQueue>> queues_;
  uint8_t* buffers_ = nullptr;
  std::vector<Io> ios_;
  uint64_t first_block_ = 0, blocks_ = 0;
  std::vector<uint64_t> written_, busy_;  // by block, relative to first_block_
  uint64_t rng_ = 0;
  uint32_t maxh2cdata_ = 0;

  Nanos rate_interval_ = 0, next_issue_ = 0;
  std::vector<uint32_t> paced_;
  size_t paced_head_ = 0, paced_count_ = 0;
  std::unique_ptr<Timer> pace_timer_;

  Phase phase_ = Phase::kPrefill;
  bool stopping_ = false;
  uint64_t inflight_ = 0;
  uint64_t cursor_ = 0;  // block / prefill offset / readback block (relative)

  bool measuring_ = false, measured_ = false;
  Nanos measure_start_ = 0, measure_end_ = 0;
  DirStats read_, write_;
  Histogram all_;
  Syscalls sys_start_, window_;
  coalesce::Stats coalesce_;
  nlohmann::json timer_late_;

  uint64_t tick_ios_ = 0, tick_bytes_ = 0, tick_reads_ = 0, tick_writes_ = 0;
  Histogram tick_lat_;
  Nanos next_tick_ = 0;

  uint64_t errors_ = 0;
  std::string first_error_;
  uint64_t verified_blocks_ = 0, verify_failures_ = 0, unverified_reads_ = 0;
  std::string first_verify_failure_;
};

class Engine {
 public:
  Engine(const PerfOptions& o, FILE* out) : o_(o), out_(out) {}
  int run();

 private:
  friend class Worker;
  std::string connect();
  void run_workers_step(int step);
  void begin_measure();
  void end_measure();
  Syscalls shared_syscalls();
  void check_controller();
  void progress(Nanos now);
  void report();
  nlohmann::json dir_json(const DirStats& d, double secs) const;

  const PerfOptions& o_;
  FILE* out_;
  std::unique_ptr<sens::Controller> ctrl_;
  RunPlan plan_;
  uint64_t region_ = 0, blocks_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  Steps steps_;
  Tick tick_;
  std::atomic<bool> abort_{false};  // the first error ends the run, every thread's
  std::mutex error_mu_;
  std::string ctrl_error_;

  Usage usage_start_, usage_end_;
  Syscalls shared_start_, shared_window_;
  coalesce::Stats shared_coalesce_;
  DrainStats drain_;
  std::vector<DrainStats> drain_per_conn_;
  uint64_t owner_wakeups_start_ = 0, owner_wakeups_ = 0;
  std::vector<const OwnerThread*> owners_;  // the shared connections' owner threads
  bool measured_ = false;
};

// ---- Worker ----

std::string Worker::setup() {
  const PerfOptions& o = e_.o_;
  PollerOptions po;
  po.poll = poll_mode_name(o.poll);
  po.poll_max_us = uint32_t(std::lround(o.poll_max_us));
  poller_ = std::make_unique<Poller>(po);
  pace_timer_ = std::make_unique<Timer>([this] { on_pace(); });
  for (uint32_t i = 0; i < o.queues; ++i) {
    std::string err;
    auto q = e_.ctrl_->create_io_queue(poller_.get(), o.qd, &err);
    if (!q) return "I/O queue " + std::to_string(queues_.size() + 1) + ": " + err;
    queues_.push_back(std::move(q));
  }
  if (Queue* q = queues_[0]->impl().inline_queue()) {
    maxh2cdata_ = q->maxh2cdata();
  } else if (SharedConnection* c = queues_[0]->impl().shared()) {
    c->owner().thread().call([&] { maxh2cdata_ = c->queue() ? c->queue()->maxh2cdata() : 0; });
  }
  // This worker's share of the region's blocks.
  const uint64_t t = o.threads;
  first_block_ = e_.blocks_ * uint64_t(index_) / t;
  blocks_ = e_.blocks_ * uint64_t(index_ + 1) / t - first_block_;

  const size_t n = size_t(o.queues) * o.qd;
  const uint32_t buf_size = e_.plan_.buf_size;
  size_t stride = (size_t(buf_size) + 4095) / 4096 * 4096;
  if (o.buffers == buffers::Layout::kTyche) {
    // 2 MiB pages, consecutive buffers on successive cache colours; the inline queues'
    // receive staging buffers likewise (see src/buffers).
    std::string why;
    const auto geometry = buffers::CacheGeometry::detect(&why);
    std::string error;
    io_region_ = buffers::Region::reserve(n * (stride + 4096) + (2 << 20), true, &error);
    if (!io_region_) return "--buffers tyche: " + error;
    const uint64_t page =
        io_region_->kind() == buffers::PageKind::kSmall ? 4096 : buffers::kHugePage;
    stride = buffers::conflict_free_stride(geometry, stride, 4096, page);
    buffers_ = io_region_->base();
    buffers::PoolOptions so;
    so.layout = buffers::Layout::kTyche;
    so.geometry = geometry;
    so.limit_bytes = uint64_t(o.queues) * 64 * 1024;
    so.max_buffer = 64 * 1024;
    so.spread_heads = true;
    staging_pool_ = std::make_unique<buffers::BufferPool>(so);
    for (auto& q : queues_) {
      Queue* iq = q->impl().inline_queue();
      if (!iq) continue;
      uint8_t* mem = staging_pool_->get(64 * 1024);
      if (mem && !iq->use_staging(mem, 64 * 1024)) staging_pool_->put(mem, 64 * 1024);
    }
  } else {
    buffers_ = static_cast<uint8_t*>(std::aligned_alloc(4096, n * stride));
  }
  if (!buffers_) return "cannot allocate " + format_size(n * stride) + " of I/O buffers";
  ios_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    ios_[i].worker = this;
    ios_[i].buf = buffers_ + i * stride;
    ios_[i].queue = uint16_t(i / o.qd);
    // Without --verify writes carry whatever pattern this is: filled once, never per I/O.
    fill_pattern(ios_[i].buf, i * stride, buf_size, 0x5e45);
  }
  if (o.rate_iops > 0) {
    rate_interval_ = std::max<Nanos>(Nanos(double(kSecond) * double(o.threads) / o.rate_iops), 1);
    paced_.resize(n);
  }
  written_.assign((blocks_ + 63) / 64, 0);
  busy_.assign((blocks_ + 63) / 64, 0);
  rng_ = (e_.plan_.seed + 0x9E3779B97F4A7C15ull * uint64_t(index_ + 1)) * 0x9E3779B97F4A7C15ull | 1;
  return "";
}

void Worker::mark_written(uint64_t offset, uint32_t len) {
  const uint32_t bs = e_.o_.bs;
  for (uint64_t b = offset / bs; b < (offset + len) / bs; ++b) {
    const uint64_t r = b - first_block_;
    written_[r / 64] |= uint64_t(1) << (r % 64);
  }
}

uint64_t Worker::pick_block() {
  // Without --verify nothing is busy. With it at most half the blocks are: a few random
  // tries nearly always succeed, and the scan after them is bounded by the slice.
  if (rw_random(e_.o_.rw)) {
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

bool Worker::next_is_read() {
  switch (e_.o_.rw) {
    case RwMode::kRead:
    case RwMode::kRandRead:
      return true;
    case RwMode::kWrite:
    case RwMode::kRandWrite:
      return false;
    default:
      return int(rand64() % 100) < e_.o_.rwmixread;
  }
}

bool Worker::submit_next(Io& io, Nanos now) {
  const PerfOptions& o = e_.o_;
  if (stopping_) return false;
  const uint64_t base = first_block_ * o.bs;
  uint64_t rel = 0;  // block relative to this worker's slice
  switch (phase_) {
    case Phase::kPrefill: {
      const uint64_t slice = blocks_ * o.bs;
      if (cursor_ >= slice) return false;
      io.offset = base + cursor_;
      io.len = uint32_t(std::min<uint64_t>(e_.plan_.prefill_chunk, slice - cursor_));
      io.read = false;
      cursor_ += io.len;
      break;
    }
    case Phase::kMain:
      rel = pick_block();
      io.offset = base + rel * o.bs;
      io.len = o.bs;
      io.read = next_is_read();
      break;
    case Phase::kReadback:
      while (cursor_ < blocks_ && !written(cursor_)) ++cursor_;
      if (cursor_ >= blocks_) return false;
      rel = cursor_++;
      io.offset = base + rel * o.bs;
      io.len = o.bs;
      io.read = true;
      break;
    case Phase::kDone:
      return false;
  }
  const uint64_t seed = e_.plan_.seed;
  // A read is checked when every write to its block so far has completed: a racing rewrite
  // writes the same bytes, so the check cannot flag a race.
  io.check = o.verify && io.read && written(io.offset / o.bs - first_block_);
  if (o.verify && phase_ == Phase::kMain) set_busy(rel, true);
  if (o.verify && !io.read) fill_pattern(io.buf, io.offset, io.len, seed);
  const uint32_t bsz = e_.plan_.ns.block_size;
  io.iov = {io.buf, io.len};
  io.start = now;
  ++inflight_;
  IoQueue& q = *queues_[io.queue];
  const int rc = io.read ? q.read(e_.plan_.ns.nsid, io.offset / bsz, io.len / bsz, &io.iov, 1,
                                  &Worker::on_done, &io)
                         : q.write(e_.plan_.ns.nsid, io.offset / bsz, io.len / bsz, &io.iov, 1,
                                   &Worker::on_done, &io);
  if (rc != 0) {
    --inflight_;
    if (o.verify && phase_ == Phase::kMain) set_busy(rel, false);
    if (rc != -EAGAIN && errors_++ == 0)
      first_error_ = std::string(io.read ? "read" : "write") + " of " + format_size(io.len) +
                     " at offset " + std::to_string(io.offset) + ": submit: " + std::strerror(-rc);
    if (rc != -EAGAIN) {
      stopping_ = true;
      e_.abort_.store(true, std::memory_order_relaxed);
    }
    return false;
  }
  return true;
}

void Worker::on_done(void* ctx, const sens::Completion& c) {
  auto* io = static_cast<Io*>(ctx);
  io->worker->complete(*io, c);
}

void Worker::record_error(const Io& io, const sens::Completion& c) {
  if (errors_++ != 0) return;
  IoQueue& q = *queues_[io.queue];
  std::string where;
  std::string qerr;
  if (Queue* iq = q.impl().inline_queue()) {
    where = "I/O queue " + std::to_string(iq->qid());
    qerr = iq->error();
  } else {
    where = "connection " + std::to_string(q.connection());
  }
  first_error_ = std::string(io.read ? "read" : "write") + " of " + format_size(io.len) +
                 " at offset " + std::to_string(io.offset) + " on " + where + ": " +
                 c.status.to_string();
  if (!qerr.empty()) first_error_ += ": " + qerr;
}

void Worker::complete(Io& io, const sens::Completion& c) {
  const PerfOptions& o = e_.o_;
  --inflight_;
  const Nanos t = now();
  if (o.verify && phase_ == Phase::kMain) set_busy(io.offset / o.bs - first_block_, false);
  if (!c.status.ok()) {
    record_error(io, c);
    stopping_ = true;  // as fio: the first error ends the run
    e_.abort_.store(true, std::memory_order_relaxed);
    return;
  }
  if (!io.read && o.verify) mark_written(io.offset, io.len);
  if (io.check) {
    Mismatch m;
    if (check_pattern(io.buf, io.offset, io.len, e_.plan_.seed, &m)) {
      ++verified_blocks_;
    } else if (verify_failures_++ == 0) {
      first_verify_failure_ =
          "block at offset " + std::to_string(io.offset) + ": " + m.describe(e_.plan_.seed);
    }
  } else if (io.read && o.verify && phase_ == Phase::kMain) {
    ++unverified_reads_;  // a block this run has not written yet
  }
  if (phase_ == Phase::kMain) {
    const uint64_t lat = uint64_t(t - io.start);
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
  issue(io, t);  // its start is this completion's time: one clock read per I/O
}

bool Worker::issue(Io& io, Nanos t) {
  if (rate_interval_ == 0 || phase_ != Phase::kMain) return submit_next(io, t);
  if (stopping_) return false;
  if (paced_count_ == 0 && t >= next_issue_) {
    // At most one interval of credit: a stall is not followed by a burst.
    next_issue_ = std::max(next_issue_, t - rate_interval_) + rate_interval_;
    return submit_next(io, t);
  }
  paced_[(paced_head_ + paced_count_++) % paced_.size()] = uint32_t(&io - ios_.data());
  if (!pace_timer_->armed()) poller_->impl().reactor().arm(*pace_timer_, next_issue_);
  return true;
}

void Worker::on_pace() {
  const Nanos t = now();
  while (paced_count_ > 0 && t >= next_issue_ && !stopping_) {
    Io& io = ios_[paced_[paced_head_]];
    paced_head_ = (paced_head_ + 1) % paced_.size();
    --paced_count_;
    next_issue_ = std::max(next_issue_, t - rate_interval_) + rate_interval_;
    submit_next(io, t);
  }
  if (paced_count_ > 0 && !stopping_) poller_->impl().reactor().arm(*pace_timer_, next_issue_);
}

void Worker::stop_pacing() {
  paced_count_ = 0;
  poller_->impl().reactor().cancel(*pace_timer_);
}

Syscalls Worker::own_syscalls() const {
  Syscalls s = reactor_syscalls(poller_->impl().reactor());
  for (auto& q : queues_)
    if (const Queue* iq = q->impl().inline_queue()) s.add(queue_syscalls(*iq));
  return s;
}

void Worker::begin_measure(Nanos t) {
  measuring_ = true;
  measure_start_ = t;
  sys_start_ = own_syscalls();
  // The scheduler counters cover the measured window only, like everything else.
  for (auto& q : queues_)
    if (Queue* iq = q->impl().inline_queue()) iq->send_queue().scheduler().stats() = {};
}

void Worker::end_measure(Nanos t) {
  if (!measuring_) return;
  measuring_ = false;
  measured_ = true;
  measure_end_ = t;
  window_ = own_syscalls().minus(sys_start_);
  for (auto& q : queues_)
    if (Queue* iq = q->impl().inline_queue()) coalesce_.merge(iq->send_queue().scheduler().stats());
}

void Worker::publish_tick() {
  std::lock_guard<std::mutex> g(e_.tick_.mu);
  e_.tick_.ios += tick_ios_;
  e_.tick_.bytes += tick_bytes_;
  e_.tick_.reads += tick_reads_;
  e_.tick_.writes += tick_writes_;
  e_.tick_.lat.merge(tick_lat_);
  tick_ios_ = tick_bytes_ = tick_reads_ = tick_writes_ = 0;
  tick_lat_.reset();
}

void Worker::start_phase(Phase p) {
  phase_ = p;
  stopping_ = e_.abort_.load(std::memory_order_relaxed);
  cursor_ = 0;
  next_issue_ = now();
  for (auto& io : ios_)
    if (!issue(io, now()) && (stopping_ || phase_ != p)) break;
}

void Worker::drain() {
  // Every command ends: completion, error, or the queue watchdog's timeout.
  while (inflight_ > 0) {
    if (e_.abort_.load(std::memory_order_relaxed)) stopping_ = true;
    poll(50 * kMilli);
  }
}

void Worker::main_loop() {
  const RunPlan& plan = e_.plan_;
  const Nanos cap = 50 * kMilli;
  next_tick_ = plan.run_start + kSecond;
  if (plan.warm_end == plan.run_start) begin_measure(plan.run_start);
  start_phase(Phase::kMain);
  while (inflight_ > 0 || paced_count_ > 0) {
    const Nanos t = now();
    if (!measuring_ && !measured_ && t >= plan.warm_end && !stopping_) begin_measure(t);
    if (t >= plan.end && !stopping_) {
      end_measure(t);
      stopping_ = true;
    }
    if (!stopping_ && e_.abort_.load(std::memory_order_relaxed)) stopping_ = true;
    if (stopping_ && paced_count_ > 0) stop_pacing();  // paced I/Os were never submitted
    if (t >= next_tick_) {
      publish_tick();
      next_tick_ += kSecond;
    }
    const Nanos wait = std::min({next_tick_ - t, stopping_ ? cap : plan.end - t, cap});
    poll(std::max<Nanos>(wait, 0));
  }
  end_measure(now());
  publish_tick();
}

void Worker::run() {
  setup_error_ = setup();
  e_.steps_.arrive();
  if (!setup_error_.empty()) return;
  // Step 0: prefill (prefills()); 1: main; 2: read-back; 3: done.
  e_.steps_.wait_open(0);
  if (prefills(e_.o_)) {
    start_phase(Phase::kPrefill);
    drain();
  }
  e_.steps_.arrive();
  e_.steps_.wait_open(1);
  if (!e_.abort_.load()) main_loop();
  drain();
  e_.steps_.arrive();
  e_.steps_.wait_open(2);
  if (e_.o_.verify && rw_writes(e_.o_.rw) && !e_.abort_.load()) {
    start_phase(Phase::kReadback);
    drain();
  }
  phase_ = Phase::kDone;
  drain();
  timer_late_ = poller_->impl().reactor().stats_json()["timer_late_us"];
  e_.steps_.arrive();
  e_.steps_.wait_open(3);
  queues_.clear();  // on this thread, which drives them
  poller_.reset();
}

// ---- Engine ----

std::string Engine::connect() {
  sens::ControllerOptions co;
  co.kato_ms = o_.kato_ms;
  co.hdr_digest = o_.hdr_digest;
  co.data_digest = o_.data_digest;
  co.disable_sqflow = o_.disable_sqflow;
  co.coalesce = coalesce::policy_name(o_.coalesce.policy);
  co.pg_pdus = o_.coalesce.pdus;
  co.pg_timeout_us = uint32_t(o_.coalesce.timeout / kMicro);
  co.ctrl_pdus = o_.coalesce.ctrl_pdus;
  co.ctrl_timeout_us = uint32_t(o_.coalesce.ctrl_timeout / kMicro);
  co.pg_bytes = o_.coalesce.bytes;
  co.poll = poll_mode_name(o_.poll);
  co.poll_max_us = uint32_t(std::lround(o_.poll_max_us));
  co.io_timeout_ms = o_.io_timeout_ms;
  co.admin_timeout_ms = std::min<uint32_t>(o_.io_timeout_ms, 10000);
  co.connect_timeout_ms = o_.connect_timeout_ms;
  co.max_transfer = std::max<uint32_t>(o_.bs, 128 * 1024);
  co.share = o_.share;
  const uint32_t submitters = o_.threads * o_.queues;
  co.max_io_queues = o_.share == ShareMode::kNone ? submitters : o_.connections;
  if (o_.share != ShareMode::kNone) {
    co.connections = o_.connections;
    co.connection_depth = (submitters + o_.connections - 1) / o_.connections * o_.qd;
  }
  co.dhchap_secret = o_.dhchap_secret;
  co.dhchap_ctrl_secret = o_.dhchap_ctrl_secret;
  co.tls_psk_file = o_.tls_psk_file;
  co.reconnect_delay_s = o_.reconnect_delay_s;
  co.ctrl_loss_tmo_s = o_.ctrl_loss_tmo_s;  // 0: a lost connection is an error at once
  // The original's sub-second slices of the TRID are its own; the library parses it again.
  ConnectResult r = sens::Controller::connect(o_.trid.to_string(), co).get();
  if (!r.controller) return r.error;
  ctrl_ = std::move(r.controller);

  const Namespace* ns = nullptr;
  if (o_.nsid == 0) {
    if (ctrl_->namespaces().empty()) return "the subsystem has no active namespace";
    ns = &ctrl_->namespaces()[0];
  } else {
    ns = ctrl_->find_namespace(o_.nsid);
    if (!ns) return "namespace " + std::to_string(o_.nsid) + " is not active";
  }
  plan_.ns = *ns;
  if (o_.bs % ns->block_size != 0)
    return "--bs " + format_size(o_.bs) + " is not a multiple of the namespace's " +
           format_size(ns->block_size) + " blocks";
  const uint32_t mdts = ctrl_->max_transfer();
  if (mdts && o_.bs > mdts)
    return "--bs " + format_size(o_.bs) + " exceeds the controller's largest transfer (MDTS) " +
           format_size(mdts);
  region_ = std::min(o_.size, ns->bytes());
  region_ -= region_ % o_.bs;
  if (region_ == 0)
    return "namespace " + std::to_string(ns->nsid) + " (" + format_size(ns->bytes()) +
           ") is smaller than --bs";
  blocks_ = region_ / o_.bs;
  // Prefilling (before a verified read run, or --prefill) goes in large writes: the pattern
  // does not care.
  plan_.prefill_chunk = o_.bs;
  if (prefills(o_)) {
    uint64_t chunk = std::max<uint64_t>(o_.bs, 128 * 1024);
    if (mdts) chunk = std::min<uint64_t>(chunk, mdts);
    chunk = std::min<uint64_t>(chunk, region_ / o_.threads);
    chunk = std::max<uint64_t>(chunk - chunk % o_.bs, o_.bs);
    plan_.prefill_chunk = uint32_t(chunk);
  }
  plan_.buf_size = std::max(o_.bs, plan_.prefill_chunk);
  // --verify never has two I/Os on one block at once (fio's serialize_overlap): a read
  // racing a write may legally return either content, torn. That needs free blocks to pick.
  const uint64_t per_thread_min = 2ull * o_.qd * o_.queues;
  if (o_.verify && blocks_ / o_.threads < per_thread_min)
    return "--verify needs a region of at least 2 x qd x queues blocks" +
           std::string(o_.threads > 1 ? " per thread" : "") + " (" +
           std::to_string(per_thread_min * o_.threads) + " x " + format_size(o_.bs) + "), have " +
           std::to_string(blocks_);
  plan_.seed = o_.seed;
  if (plan_.seed == 0) {
    std::random_device rd;
    plan_.seed = (uint64_t(rd()) << 32 | rd()) | 1;
  }
  return "";
}

void Engine::check_controller() {
  std::string err;
  if (o_.ctrl_loss_tmo_s > 0) {
    // Reconnecting is not an error: held I/O goes on once reconnected; a failed controller is.
    if (ctrl_->state() != ControllerState::kFailed) return;
    err = "controller failed: " + ctrl_->last_error();
    std::lock_guard<std::mutex> g(error_mu_);
    if (ctrl_error_.empty()) ctrl_error_ = err;
    abort_.store(true);
    return;
  }
  host::Controller& c = ctrl_->impl().admin_controller();
  ctrl_->impl().control().call([&] { err = c.error(); });
  if (err.empty()) return;
  std::lock_guard<std::mutex> g(error_mu_);
  if (ctrl_error_.empty()) ctrl_error_ = err;
  abort_.store(true);
}

Syscalls Engine::shared_syscalls() {
  Syscalls s;
  uint64_t wake = 0;
  std::vector<const OwnerThread*>& counted = owners_;  // an owner may drive several connections
  counted.clear();
  for (auto& sc : ctrl_->impl().shared()) {
    const bool first = std::find(counted.begin(), counted.end(), &sc->owner()) == counted.end();
    if (first) counted.push_back(&sc->owner());
    sc->owner().thread().call([&] {
      if (sc->queue()) s.add(queue_syscalls(*sc->queue()));
      if (first) s.add(reactor_syscalls(sc->owner().reactor()));
    });
    if (first) wake += sc->owner().doorbell_wakeups();
  }
  owner_wakeups_ = wake;
  return s;
}

void Engine::begin_measure() {
  usage_start_ = Usage::now();
  shared_start_ = shared_syscalls();
  owner_wakeups_start_ = owner_wakeups_;
  for (auto& sc : ctrl_->impl().shared())
    sc->owner().thread().call([&] {
      sc->reset_drain_stats();
      if (sc->queue()) sc->queue()->send_queue().scheduler().stats() = {};
    });
}

void Engine::end_measure() {
  usage_end_ = Usage::now();
  shared_window_ = shared_syscalls().minus(shared_start_);
  owner_wakeups_ -= owner_wakeups_start_;
  drain_per_conn_.clear();
  for (auto& sc : ctrl_->impl().shared())
    sc->owner().thread().call([&] {
      const DrainStats& d = sc->drain_stats();
      drain_per_conn_.push_back(d);
      drain_.passes += d.passes;
      drain_.entries += d.entries;
      drain_.per_pass.merge(d.per_pass);
      if (sc->queue()) shared_coalesce_.merge(sc->queue()->send_queue().scheduler().stats());
    });
  measured_ = true;
}

void Engine::progress(Nanos now) {
  std::lock_guard<std::mutex> g(tick_.mu);
  if (o_.progress) {
    const bool warm = now < plan_.warm_end;
    uint64_t errors = 0;
    for (auto& w : workers_) errors += w->errors();  // a racy read: progress only
    std::fprintf(out_,
                 "[%5.1fs]%s %8llu IOPS %9.1f MiB/s (read %llu, write %llu) lat avg %.1f us "
                 "p99 %.1f us, errors %llu\n",
                 double(now - plan_.run_start) / kSecond, warm ? " warmup" : "",
                 (unsigned long long)tick_.ios, double(tick_.bytes) / (1 << 20),
                 (unsigned long long)tick_.reads, (unsigned long long)tick_.writes,
                 tick_.lat.mean() / 1e3, double(tick_.lat.percentile(99)) / 1e3,
                 (unsigned long long)errors);
    std::fflush(out_);
  }
  tick_.ios = tick_.bytes = tick_.reads = tick_.writes = 0;
  tick_.lat.reset();
}

void Engine::run_workers_step(int step) {
  steps_.open(step);
  const int n = int(workers_.size());
  while (!steps_.wait_arrived(n, std::chrono::milliseconds(100))) check_controller();
}

int Engine::run() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  if (std::string e = connect(); !e.empty()) {
    std::fprintf(stderr, "sens perf: %s\n", e.c_str());
    return 1;
  }
  for (uint32_t i = 0; i < o_.threads; ++i) workers_.push_back(std::make_unique<Worker>(*this, i));
  for (auto& w : workers_) threads_.emplace_back([w = w.get()] { w->run(); });
  steps_.wait_arrived(int(workers_.size()), std::chrono::hours(24));
  std::string setup_error;
  for (auto& w : workers_)
    if (setup_error.empty()) setup_error = w->setup_error();
  auto finish = [&] {
    steps_.open(3);
    for (auto& t : threads_) t.join();
  };
  if (!setup_error.empty()) {
    abort_.store(true);
    steps_.open(0);
    steps_.open(1);
    steps_.open(2);
    finish();
    std::fprintf(stderr, "sens perf: %s\n", setup_error.c_str());
    return 1;
  }
  const Namespace& ns = plan_.ns;
  const uint32_t incapsule = ctrl_->impl().admin_controller().io_incapsule_bytes();
  std::fprintf(out_,
               "sens perf: %s, cntlid %u, namespace %u: %s in %u-byte blocks; %u I/O queue(s) "
               "x qd %u, in-capsule %s, maxh2cdata %s, digests %s/%s, coalesce %s, poll %s\n",
               o_.trid.subnqn.c_str(), ctrl_->cntlid(), ns.nsid, format_size(ns.bytes()).c_str(),
               ns.block_size, o_.queues * o_.threads, o_.qd, format_size(incapsule).c_str(),
               format_size(workers_[0]->maxh2cdata()).c_str(), o_.hdr_digest ? "hdr" : "-",
               o_.data_digest ? "data" : "-", coalesce::policy_name(o_.coalesce.policy),
               poll_mode_name(o_.poll));
  if (o_.threads > 1 || o_.share != ShareMode::kNone)
    std::fprintf(out_, "%u thread(s) x %u queue(s), share %s over %u connection(s)\n", o_.threads,
                 o_.queues, share_mode_name(o_.share),
                 o_.share == ShareMode::kNone ? o_.threads * o_.queues : o_.connections);
  std::fprintf(out_, "%s %s, region %s, %.1f s", rw_name(o_.rw), format_size(o_.bs).c_str(),
               format_size(region_).c_str(), o_.time_s);
  if (o_.warmup_s > 0) std::fprintf(out_, " after %.1f s warm-up", o_.warmup_s);
  if (o_.rate_iops > 0) std::fprintf(out_, ", capped at %.0f IOPS", o_.rate_iops);
  if (o_.verify) std::fprintf(out_, ", verify seed %llu", (unsigned long long)plan_.seed);
  std::fputc('\n', out_);
  std::fflush(out_);

  {
    const Nanos t0 = monotonic_now();
    run_workers_step(0);
    if (prefills(o_) && !abort_.load())
      std::fprintf(out_, "prefill: %s written in %.1f s\n", format_size(region_).c_str(),
                   double(monotonic_now() - t0) / kSecond);
  }
  if (!abort_.load()) {
    plan_.run_start = monotonic_now();
    plan_.warm_end = plan_.run_start + Nanos(o_.warmup_s * double(kSecond));
    plan_.end = plan_.warm_end + Nanos(o_.time_s * double(kSecond));
    bool began = false, ended = false;
    steps_.open(1);
    const int n = int(workers_.size());
    Nanos next = plan_.run_start + kSecond + 20 * kMilli;  // after the workers' tick
    for (;;) {
      const Nanos now = monotonic_now();
      if (!began && now >= plan_.warm_end) {
        begin_measure();
        began = true;
      }
      if (began && !ended && now >= plan_.end) {
        end_measure();
        ended = true;
      }
      if (now >= next) {
        progress(now - 20 * kMilli);
        next += kSecond;
        check_controller();
      }
      Nanos until = next;
      if (!began) until = std::min(until, plan_.warm_end);
      if (!ended) until = std::min(until, plan_.end);
      const auto wait = std::chrono::nanoseconds(std::max<Nanos>(until - now, 0));
      if (steps_.wait_arrived(n, std::chrono::duration_cast<std::chrono::milliseconds>(wait) +
                                     std::chrono::milliseconds(1)))
        break;
    }
    if (!began) begin_measure();
    if (!ended) end_measure();
  } else {
    steps_.open(1);
    steps_.wait_arrived(int(workers_.size()), std::chrono::hours(24));
  }
  {
    const Nanos t0 = monotonic_now();
    uint64_t before = 0;
    for (auto& w : workers_) before += w->verified();
    run_workers_step(2);
    if (o_.verify && rw_writes(o_.rw) && !abort_.load()) {
      uint64_t after = 0;
      for (auto& w : workers_) after += w->verified();
      std::fprintf(out_, "read-back: %llu written blocks checked in %.1f s\n",
                   (unsigned long long)(after - before), double(monotonic_now() - t0) / kSecond);
    }
  }
  finish();
  check_controller();
  ctrl_->shutdown();
  report();
  uint64_t errors = 0, failures = 0;
  std::string first_error, first_failure;
  for (auto& w : workers_) {
    errors += w->errors();
    failures += w->verify_failures();
    if (first_error.empty()) first_error = w->first_error();
    if (first_failure.empty()) first_failure = w->first_verify_failure();
  }
  if (errors == 0 && !ctrl_error_.empty()) {
    errors = 1;
    first_error = ctrl_error_;
  }
  if (errors)
    std::fprintf(stderr, "sens perf: %llu I/O error(s); first: %s\n", (unsigned long long)errors,
                 first_error.c_str());
  if (failures)
    std::fprintf(stderr, "sens perf: verify failed on %llu block(s); first: %s\n",
                 (unsigned long long)failures, first_failure.c_str());
  return errors || failures ? 1 : 0;
}

nlohmann::json Engine::dir_json(const DirStats& d, double secs) const {
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
  double secs = 0;
  DirStats read, write, total;
  Histogram all;
  Syscalls sys = shared_window_;
  coalesce::Stats co = shared_coalesce_;
  uint64_t errors = 0, verified = 0, failures = 0, unverified = 0;
  std::string first_error, first_failure;
  for (auto& w : workers_) {
    secs = std::max(secs, w->measured_seconds());
    read.merge(w->read_stats());
    write.merge(w->write_stats());
    all.merge(w->all());
    sys.add(w->window_syscalls());
    co.merge(w->coalesce_stats());
    errors += w->errors();
    verified += w->verified();
    failures += w->verify_failures();
    unverified += w->unverified();
    if (first_error.empty()) first_error = w->first_error();
    if (first_failure.empty()) first_failure = w->first_verify_failure();
  }
  if (errors == 0 && !ctrl_error_.empty()) {
    errors = 1;
    first_error = ctrl_error_;
  }
  total.ios = read.ios + write.ios;
  total.bytes = read.bytes + write.bytes;
  total.lat_ns = all;
  const double usr = usage_end_.user_s - usage_start_.user_s;
  const double sysc = usage_end_.sys_s - usage_start_.sys_s;
  const long vcs = usage_end_.nvcsw - usage_start_.nvcsw;
  const long ivcs = usage_end_.nivcsw - usage_start_.nivcsw;
  const double ios = double(std::max<uint64_t>(total.ios, 1));

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
               format_size(o_.bs).c_str(), o_.qd, o_.queues * o_.threads, secs);
  nlohmann::json threads = nlohmann::json::array();
  for (auto& w : workers_) {
    const double s = w->measured_seconds();
    const Histogram& h = w->all();
    threads.push_back({{"thread", w->index()},
                       {"iops", s > 0 ? double(h.count()) / s : 0.0},
                       {"lat_avg_us", h.mean() / 1e3},
                       {"p99_us", double(h.percentile(99)) / 1e3},
                       {"errors", w->errors()}});
  }
  nlohmann::json drain = nlohmann::json::object();
  if (!drain_per_conn_.empty()) {
    nlohmann::json per = nlohmann::json::array();
    for (const DrainStats& d : drain_per_conn_)
      per.push_back(
          {{"passes", d.passes}, {"entries", d.entries}, {"per_pass", d.per_pass.summary(1.0)}});
    drain = {{"passes", drain_.passes},
             {"entries", drain_.entries},
             {"per_pass", drain_.per_pass.summary(1.0)},
             {"owner_wakeups", owner_wakeups_},
             {"owners", owners_.size()},
             {"connections", per}};
  }
  if (secs > 0) {
    line("read", read);
    line("write", write);
    line("total", total);
    if (workers_.size() > 1)
      for (auto& t : threads)
        std::fprintf(out_, "thread %-3d IOPS %10.0f  lat us: avg %.1f p99 %.1f\n",
                     t["thread"].get<int>(), t["iops"].get<double>(), t["lat_avg_us"].get<double>(),
                     t["p99_us"].get<double>());
    if (o_.share == ShareMode::kSendList)
      std::fprintf(out_,
                   "send-lists: %llu entries in %llu owner passes, %.2f per pass (p99 %llu, max "
                   "%llu); %zu owner thread(s), %llu owner wake-ups by submitters\n",
                   (unsigned long long)drain_.entries, (unsigned long long)drain_.passes,
                   drain_.per_pass.mean(), (unsigned long long)drain_.per_pass.percentile(99),
                   (unsigned long long)drain_.per_pass.max(), owners_.size(),
                   (unsigned long long)owner_wakeups_);
    std::fprintf(out_,
                 "cpu: usr %.2f s (%.1f%%) sys %.2f s (%.1f%%); ctx switches: voluntary %ld "
                 "involuntary %ld\n",
                 usr, 100 * usr / secs, sysc, 100 * sysc / secs, vcs, ivcs);
    std::fprintf(out_,
                 "syscalls per I/O: send %.3f recv %.3f epoll %.3f; poll %s: %.3f sleeps, "
                 "%.3f empty spins, %.3f yields of a crowded CPU, %.3f wake-ups per I/O\n",
                 double(sys.send) / ios, double(sys.recv) / ios, double(sys.polls) / ios,
                 poll_mode_name(o_.poll), double(sys.sleeps) / ios, double(sys.spins) / ios,
                 double(sys.yields) / ios, double(sys.wakeups) / ios);
    std::fprintf(out_,
                 "coalesce %s: %llu PDUs in %llu send calls, %.2f PDUs/flush, H2CData "
                 "queueing delay avg %.1f us\n",
                 coalesce::policy_name(o_.coalesce.policy), (unsigned long long)co.pdus_sent,
                 (unsigned long long)co.send_calls, co.pdus_per_flush.mean(),
                 co.r2t_delay_ns.mean() / 1e3);
  }
  if (o_.verify)
    std::fprintf(out_, "verify: %llu blocks checked, %llu failed, %llu reads of unwritten blocks\n",
                 (unsigned long long)verified, (unsigned long long)failures,
                 (unsigned long long)unverified);
  const ControllerCounters rc = ctrl_->counters();
  if (o_.ctrl_loss_tmo_s > 0 || rc.losses)
    std::fprintf(out_,
                 "reconnect: %llu connection loss(es), %llu reconnect(s) in %llu attempt(s), "
                 "%llu I/Os retried, %llu I/Os held while reconnecting\n",
                 (unsigned long long)rc.losses, (unsigned long long)rc.reconnects,
                 (unsigned long long)rc.reconnect_attempts, (unsigned long long)rc.retried,
                 (unsigned long long)rc.held);
  std::fprintf(out_, "errors: %llu\n", (unsigned long long)errors);
  std::fflush(out_);

  if (o_.json_path.empty()) return;
  nlohmann::json job = {{"jobname", "sens-perf"},
                        {"job options",
                         {{"rw", rw_name(o_.rw)},
                          {"bs", std::to_string(o_.bs)},
                          {"iodepth", std::to_string(o_.qd)},
                          {"queues", std::to_string(o_.queues)},
                          {"numjobs", std::to_string(o_.threads)},
                          {"rwmixread", std::to_string(o_.rwmixread)}}},
                        {"read", dir_json(read, secs)},
                        {"write", dir_json(write, secs)},
                        {"usr_cpu", secs > 0 ? 100 * usr / secs : 0.0},
                        {"sys_cpu", secs > 0 ? 100 * sysc / secs : 0.0},
                        {"ctx", vcs + ivcs},
                        {"error", errors ? 1 : 0}};
  nlohmann::json tj = dir_json(total, secs);
  nlohmann::json j = {
      {"jobs", nlohmann::json::array({job})},
      {"options",
       {{"trid", o_.trid.to_string()},
        {"rw", rw_name(o_.rw)},
        {"rwmixread", o_.rwmixread},
        {"bs", o_.bs},
        {"qd", o_.qd},
        {"queues", o_.queues},
        {"threads", o_.threads},
        {"connections", o_.share == ShareMode::kNone ? o_.threads * o_.queues : o_.connections},
        {"share", share_mode_name(o_.share)},
        {"time_s", o_.time_s},
        {"warmup_s", o_.warmup_s},
        {"prefill", prefills(o_)},
        {"rate_iops", o_.rate_iops},
        {"buffers", buffers::layout_name(o_.buffers)},
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
      {"cpu_sys_s", sysc},
      {"syscalls",
       {{"send_calls", sys.send},
        {"recv_calls", sys.recv},
        {"epoll_calls", sys.polls},
        {"send_per_io", double(sys.send) / ios},
        {"recv_per_io", double(sys.recv) / ios},
        {"epoll_per_io", double(sys.polls) / ios}}},
      {"poll",
       {{"mode", poll_mode_name(o_.poll)},
        {"max_spin_us", o_.poll_max_us},
        {"sleeps", sys.sleeps},
        {"spins", sys.spins},
        {"yields", sys.yields},
        {"wakeups", sys.wakeups},
        {"timer_late_us", workers_[0]->timer_late()}}},
      {"coalesce", coalesce::to_json(co)},
      {"threads", threads},
      {"drain", drain},
      {"verify",
       {{"enabled", o_.verify},
        {"seed", plan_.seed},
        {"blocks_checked", verified},
        {"failures", failures},
        {"first_failure", first_failure}}},
      {"reconnect",
       {{"reconnect_delay_s", o_.reconnect_delay_s},
        {"ctrl_loss_tmo_s", o_.ctrl_loss_tmo_s},
        {"losses", rc.losses},
        {"attempts", rc.reconnect_attempts},
        {"reconnects", rc.reconnects},
        {"retried", rc.retried},
        {"held", rc.held}}},
      {"errors", errors},
      {"first_error", first_error}};
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
