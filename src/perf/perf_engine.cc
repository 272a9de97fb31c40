// sens perf: the Engine's orchestration: connecting, the worker threads' phases (prefill,
// main, read-back) and the main phase's measurement window, the controller's health.
#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/units.h"
#include "perf/perf_engine.h"

namespace sens::host::perf {

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
  // Reconnecting is not an error: held I/O goes on once reconnected; a failed controller is.
  // Without reconnect (--ctrl-loss-tmo 0) a lost admin queue or keep alive fails it at once.
  if (ctrl_->state() != ControllerState::kFailed) return;
  const std::string err =
      o_.ctrl_loss_tmo_s > 0 ? "controller failed: " + ctrl_->last_error() : ctrl_->last_error();
  std::lock_guard<std::mutex> g(error_mu_);
  if (ctrl_error_.empty()) ctrl_error_ = err;
  abort_.store(true);
}

Syscalls Engine::shared_syscalls(std::vector<sens::ConnectionStats>* connections) {
  Syscalls s;
  uint64_t wake = 0;
  owners_.clear();  // an owner may drive several connections: its loop counts once
  const int n = ctrl_->shared_connection_count();
  for (int i = 0; i < n; ++i) {
    const sens::SharedConnectionStats sc = ctrl_->shared_connection_stats(i);
    const bool first = std::find(owners_.begin(), owners_.end(), sc.owner) == owners_.end();
    if (first) owners_.push_back(sc.owner);
    s.add(connection_syscalls(sc.connection));
    if (first) {
      s.add(loop_syscalls(sc.owner_loop));
      wake += sc.owner_wakeups;
    }
    if (connections) connections->push_back(sc.connection);
  }
  owner_wakeups_ = wake;
  return s;
}

void Engine::begin_measure() {
  usage_start_ = Usage::now();
  shared_start_ = shared_syscalls(nullptr);
  owner_wakeups_start_ = owner_wakeups_;
  ctrl_->reset_shared_connection_stats();
}

void Engine::end_measure() {
  usage_end_ = Usage::now();
  drain_per_conn_.clear();
  shared_window_ = shared_syscalls(&drain_per_conn_).minus(shared_start_);
  owner_wakeups_ -= owner_wakeups_start_;
  for (const sens::ConnectionStats& c : drain_per_conn_) {
    drain_.merge(c);
    shared_coalesce_.merge(c);
  }
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
  const uint32_t incapsule = ctrl_->io_incapsule_bytes();
  std::fprintf(out_,
               "sens perf: %s, cntlid %u, namespace %u: %s in %u-byte blocks; %u I/O queue(s) "
               "x qd %u, in-capsule %s, maxh2cdata %s, digests %s/%s, coalesce %s, poll %s\n",
               o_.trid.subnqn.c_str(), ctrl_->cntlid(), ns.nsid, format_size(ns.bytes()).c_str(),
               ns.block_size, o_.queues * o_.threads, o_.qd, format_size(incapsule).c_str(),
               format_size(workers_[0]->maxh2cdata()).c_str(), o_.hdr_digest ? "hdr" : "-",
               o_.data_digest ? "data" : "-", coalesce::policy_name(o_.coalesce.policy),
               poll_mode_name(o_.poll));
  if (!o_.tls_psk_file.empty()) {
    // Which records each connection got: the kernel's (kTLS) or sens's, with its AES-GCM.
    size_t kernel = 0, all = 0;
    for (auto& w : workers_)
      for (auto& r : w->tls_records()) {
        ++all;
        kernel += r == "kernel";
      }
    std::string how;
    if (kernel > 0)
      how = "by the kernel (kTLS) on " + std::to_string(kernel) + " of " + std::to_string(all) +
            " connection(s)";
    if (kernel < all) {
      if (!how.empty()) how += ", ";
      how += "by sens with AES-GCM by " + sens::tls_aes_gcm();
      if (kernel == 0) {
        const std::string k = sens::kernel_tls_status();
        if (k != "not tried yet") how += " (kernel TLS: " + k + ")";
      }
    }
    std::fprintf(out_, "TLS 1.3, records %s\n", how.c_str());
  }
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

}  // namespace sens::host::perf

namespace sens::host {

int run_perf(const PerfOptions& options, FILE* out) {
  auto engine = std::make_unique<perf::Engine>(options, out);
  return engine->run();
}

}  // namespace sens::host
