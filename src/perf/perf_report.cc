// sens perf: the report, as text and as JSON (fio's shape where fio has one; the benches and
// tests parse both, so neither changes lightly).
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "perf/perf_engine.h"

namespace sens::host::perf {

namespace {

// A distribution as Histogram::summary writes it.
nlohmann::json summary_json(const sens::Summary& s) {
  return {{"count", s.count}, {"mean", s.mean},   {"p50", s.p50}, {"p90", s.p90},
          {"p99", s.p99},     {"p99.9", s.p99_9}, {"min", s.min}, {"max", s.max}};
}

// Some of its keys.
nlohmann::json brief_json(const sens::Summary& s, std::initializer_list<const char*> keys) {
  const nlohmann::json all = summary_json(s);
  nlohmann::json out = nlohmann::json::object();
  for (const char* key : keys) out[key] = all.at(key);
  return out;
}

// The coalescing statistics in the schema of the benches (src/coalesce/stats_json.h).
nlohmann::json coalesce_json(const sens::ConnectionStats& co) {
  nlohmann::json flushes = nlohmann::json::object();
  for (const auto& [reason, count] : co.flushes()) flushes[reason] = count;
  const auto brief = {"count", "mean", "p50", "p99", "max"};
  return {{"pdus_sent", co.pdus_sent()},
          {"send_calls", co.send_calls()},
          {"holds", co.holds()},
          {"flushes", std::move(flushes)},
          {"pdus_per_flush", brief_json(co.pdus_per_flush(), brief)},
          {"r2t_delay_us", brief_json(co.r2t_delay_us(), brief)},
          {"timer_flush_late_us", brief_json(co.timer_flush_late_us(), brief)}};
}

}  // namespace

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
  sens::ConnectionStats co = shared_coalesce_;
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
    for (const sens::ConnectionStats& d : drain_per_conn_)
      per.push_back({{"passes", d.drain_passes()},
                     {"entries", d.drain_entries()},
                     {"per_pass", summary_json(d.drain_per_pass())}});
    drain = {{"passes", drain_.drain_passes()},
             {"entries", drain_.drain_entries()},
             {"per_pass", summary_json(drain_.drain_per_pass())},
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
                   (unsigned long long)drain_.drain_entries(),
                   (unsigned long long)drain_.drain_passes(), drain_.drain_per_pass().mean,
                   (unsigned long long)drain_.drain_per_pass().p99,
                   (unsigned long long)drain_.drain_per_pass().max, owners_.size(),
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
                 coalesce::policy_name(o_.coalesce.policy), (unsigned long long)co.pdus_sent(),
                 (unsigned long long)co.send_calls(), co.pdus_per_flush().mean,
                 co.r2t_delay_us().mean);
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
        {"timer_late_us", brief_json(workers_[0]->timer_late(), {"count", "p50", "p99", "max"})}}},
      {"coalesce", coalesce_json(co)},
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

}  // namespace sens::host::perf
