// sens perf: one submitting thread (Worker): its poller, queues and buffers, the submission
// loop of each phase, completions (latency, verify), pacing and its measurement window.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/units.h"
#include "perf/perf_engine.h"
#include "perf/verify.h"

namespace sens::host::perf {

std::string Worker::setup() {
  const PerfOptions& o = e_.o_;
  PollerOptions po;
  po.poll = poll_mode_name(o.poll);
  po.poll_max_us = uint32_t(std::lround(o.poll_max_us));
  poller_ = std::make_unique<Poller>(po);
  pace_timer_ = std::make_unique<PollerTimer>(
      *poller_, [](void* self) { static_cast<Worker*>(self)->on_pace(); }, this);
  for (uint32_t i = 0; i < o.queues; ++i) {
    std::string err;
    auto q = e_.ctrl_->create_io_queue(poller_.get(), o.qd, &err);
    if (!q) return "I/O queue " + std::to_string(queues_.size() + 1) + ": " + err;
    queues_.push_back(std::move(q));
  }
  maxh2cdata_ = queues_[0]->maxh2cdata();
  for (auto& q : queues_) tls_records_.push_back(q->tls_records());
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
      if (q->connection() >= 0) continue;  // shared: its owner thread's staging
      uint8_t* mem = staging_pool_->get(64 * 1024);
      if (mem && !q->use_receive_buffer(mem, 64 * 1024)) staging_pool_->put(mem, 64 * 1024);
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
  // qid 0 (the admin queue's) is no I/O queue: its own connection is down (reconnecting).
  const uint16_t qid = q.connection() < 0 ? q.qid() : 0;
  if (qid != 0) {
    where = "I/O queue " + std::to_string(qid);
    qerr = q.last_error();
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
  if (!pace_timer_->armed()) pace_timer_->arm(next_issue_);
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
  if (paced_count_ > 0 && !stopping_) pace_timer_->arm(next_issue_);
}

void Worker::stop_pacing() {
  paced_count_ = 0;
  pace_timer_->cancel();
}

Syscalls Worker::own_syscalls() const {
  Syscalls s = loop_syscalls(poller_->stats());
  for (auto& q : queues_)
    if (q->connection() < 0) s.add(connection_syscalls(q->stats()));
  return s;
}

void Worker::begin_measure(Nanos t) {
  measuring_ = true;
  measure_start_ = t;
  sys_start_ = own_syscalls();
  // The scheduler counters cover the measured window only, like everything else.
  for (auto& q : queues_)
    if (q->connection() < 0) q->reset_stats();
}

void Worker::end_measure(Nanos t) {
  if (!measuring_) return;
  measuring_ = false;
  measured_ = true;
  measure_end_ = t;
  // Both directions' latencies: merged once here rather than recorded twice per I/O.
  all_ = read_.lat_ns;
  all_.merge(write_.lat_ns);
  window_ = own_syscalls().minus(sys_start_);
  for (auto& q : queues_)
    if (q->connection() < 0) coalesce_.merge(q->stats());
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
  timer_late_ = poller_->stats().timer_late_us;
  e_.steps_.arrive();
  e_.steps_.wait_open(3);
  queues_.clear();      // on this thread, which drives them
  pace_timer_.reset();  // before its poller
  poller_.reset();
}

}  // namespace sens::host::perf
