// sens perf: the option checks (and the --rw names), before anything connects.
#include <cstdio>
#include <string>

#include "auth/dhchap.h"
#include "common/units.h"
#include "perf/perf.h"
#include "wire/nvme.h"

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
  sens::TransportId trid;
  if (!sens::parse_trid(o.trid_text, &trid, &err)) return "-r: " + err;
  if (trid.subnqn == nvme::kDiscoveryNqn)
    return "-r: subnqn missing (perf needs an NVM subsystem, not the discovery controller)";
  o.trid = trid;
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

}  // namespace sens::host
