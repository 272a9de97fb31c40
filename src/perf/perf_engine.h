#pragma once
// sens perf's engine, shared by its files (see perf.h): the run's plan, the per-thread Worker
// (perf_worker.cc) and the Engine that connects, orchestrates and reports (perf_engine.cc,
// perf_report.cc). Host library: include/sens/host.h only.
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <vector>

#include <sens/host.h>

#include "buffers/buffer_pool.h"
#include "common/clock.h"
#include "common/histogram.h"
#include "perf/perf.h"

namespace sens::host::perf {

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

inline Syscalls connection_syscalls(const sens::ConnectionStats& c) {
  Syscalls s;
  s.send = c.sendmsg_calls();
  s.recv = c.recv_calls();
  return s;
}

inline Syscalls loop_syscalls(const sens::LoopStats& l) {
  Syscalls s;
  s.polls = l.polls;
  s.sleeps = l.sleeps;
  s.spins = l.spins;
  s.wakeups = l.wakeups;
  s.yields = l.yields;
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
  const sens::ConnectionStats& coalesce_stats() const { return coalesce_; }
  double measured_seconds() const {
    return measured_ ? double(measure_end_ - measure_start_) / kSecond : 0;
  }
  uint32_t maxh2cdata() const { return maxh2cdata_; }
  // Who protects each queue's TLS records ("kernel", "sens"; "" on plain TCP).
  const std::vector<std::string>& tls_records() const { return tls_records_; }
  const sens::Summary& timer_late() const { return timer_late_; }

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
  // The library's clock too (PollerTimer deadlines): one read per I/O, inline.
  Nanos now() const { return monotonic_now(); }
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
  std::vector<std::string> tls_records_;

  Nanos rate_interval_ = 0, next_issue_ = 0;
  std::vector<uint32_t> paced_;
  size_t paced_head_ = 0, paced_count_ = 0;
  std::unique_ptr<PollerTimer> pace_timer_;

  Phase phase_ = Phase::kPrefill;
  bool stopping_ = false;
  uint64_t inflight_ = 0;
  uint64_t cursor_ = 0;  // block / prefill offset / readback block (relative)

  bool measuring_ = false, measured_ = false;
  Nanos measure_start_ = 0, measure_end_ = 0;
  DirStats read_, write_;
  Histogram all_;  // read_ and write_ latencies together, from end_measure()
  Syscalls sys_start_, window_;
  sens::ConnectionStats coalesce_;  // its own connections' coalescing in the window
  sens::Summary timer_late_;

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
  // The shared connections' system calls and owner loops (each owner once); with
  // `connections`, their statistics too.
  Syscalls shared_syscalls(std::vector<sens::ConnectionStats>* connections);
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
  sens::ConnectionStats shared_coalesce_;  // the shared connections' in the window
  sens::ConnectionStats drain_;            // their send-list drains, summed
  std::vector<sens::ConnectionStats> drain_per_conn_;
  uint64_t owner_wakeups_start_ = 0, owner_wakeups_ = 0;
  std::vector<int> owners_;  // the shared connections' owner threads
  bool measured_ = false;
};

}  // namespace sens::host::perf
