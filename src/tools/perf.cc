// sens perf: the NVMe/TCP load generator (see src/host/perf.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "common/units.h"
#include "perf/perf.h"
#include "tools/cli.h"
#include "tools/command.h"

namespace {

int perf_main(int argc, char** argv) {
  using sens::host::PerfOptions;
  PerfOptions o;
  std::string rw = "randread", bs = "4k", size = "64M", policy = "adaptive", poll = "adaptive",
              pg_bytes = std::to_string(o.coalesce.bytes);  // the host's default (perf.h)
  double pg_timeout_us = 50, ctrl_timeout_us = 10;
  bool quiet = false;
  CLI::App app{
      "NVMe over TCP load generator: closed-loop I/O on one or more threads, latency "
      "histogram, CPU and syscall cost, optional data verification."};
  app.name(argv[0]);
  app.add_option("-r,--trid", o.trid_text,
                 "target: 'trtype:tcp traddr:ADDR trsvcid:PORT subnqn:NQN'");
  app.add_option("--rw", rw, "read|write|randread|randwrite|rw|randrw")->capture_default_str();
  app.add_option("--rwmixread", o.rwmixread, "percent of reads in rw/randrw")
      ->capture_default_str();
  app.add_option("--bs", bs, "I/O size (512, 4k, 128k, ...)")->capture_default_str();
  app.add_option("--qd", o.qd, "commands in flight per queue")->capture_default_str();
  app.add_option("--queues", o.queues,
                 "I/O queues per thread (one TCP connection each with --share none)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "submitting threads, each with its own poller")
      ->capture_default_str();
  std::string share = "none";
  app.add_option("--share", share,
                 "none (a connection per queue), lock (queues share --connections connections "
                 "through a mutex), sendlist (per-queue lock-free send-lists the connection's "
                 "owner drains)")
      ->capture_default_str();
  app.add_option("--connections", o.connections,
                 "shared connections with --share lock|sendlist (default 1)");
  app.add_option("--time", o.time_s, "measured seconds")->capture_default_str();
  app.add_option("--warmup", o.warmup_s, "seconds run before measuring")->capture_default_str();
  std::string buffer_layout = "naive";
  app.add_option("--buffers", buffer_layout,
                 "I/O buffer layout: naive (aligned_alloc) or tyche (2 MiB pages, buffers on "
                 "successive cache colours; see sens target --help); the environment "
                 "variable SENS_BUFFERS sets it too")
      ->capture_default_str()
      ->envname("SENS_BUFFERS");
  app.add_option("--rate-iops", o.rate_iops,
                 "cap on I/Os per second over all queues (0: none): latency at a given load, "
                 "or an almost idle host")
      ->capture_default_str();
  app.add_flag("--verify", o.verify,
               "write a per-LBA pattern and check every read of a written block (read modes "
               "prefill the region first; write modes read back what they wrote)");
  app.add_flag("--prefill", o.prefill,
               "write the whole region once (128 KiB writes) before the run, so that a fresh "
               "RAM or thin-provisioned namespace is not measured at its first-touch cost");
  app.add_option("--size", size, "region of the namespace exercised (capped to its size)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "verify pattern seed (0: random)");
  app.add_option("--nsid", o.nsid, "namespace (0: the first active one)");
  app.add_option("--json", o.json_path, "write the report as JSON to FILE ('-' for stdout)");
  app.add_option("--coalesce", policy,
                 "off|eager|uniform|semantic|adaptive (see sens target --help)")
      ->capture_default_str();
  app.add_option("--poll", poll,
                 "off (sleep in epoll), adaptive (spin while completions are due, then sleep), "
                 "always (never sleep)")
      ->capture_default_str();
  app.add_option("--poll-max-us", o.poll_max_us, "the longest adaptive spin before sleeping")
      ->capture_default_str();
  app.add_option("--pg-pdus", o.coalesce.pdus, "coalescing capacity B (PDUs)")
      ->capture_default_str();
  app.add_option("--pg-timeout-us", pg_timeout_us, "coalescing timer T")->capture_default_str();
  app.add_option("--ctrl-pdus", o.coalesce.ctrl_pdus, "control PDUs c2 that flush (semantic)")
      ->capture_default_str();
  app.add_option("--ctrl-timeout-us", ctrl_timeout_us, "control timer Tc (semantic)")
      ->capture_default_str();
  app.add_option("--pg-bytes", pg_bytes, "coalescing byte cap (0: none)")->capture_default_str();
  app.add_flag("--hdr-digest", o.hdr_digest, "header digests (CRC32C)");
  app.add_flag("--data-digest", o.data_digest, "data digests (CRC32C)");
  app.add_flag("--disable-sqflow", o.disable_sqflow,
               "Connect with SQ flow control disabled (the target may answer reads with "
               "C2HData SUCCESS and no CapsuleResp)");
  app.add_option("--kato", o.kato_ms, "keep alive timeout, ms (0: off); sent every kato/2")
      ->capture_default_str();
  app.add_option("--io-timeout", o.io_timeout_ms, "per-command timeout, ms")->capture_default_str();
  app.add_option("--connect-timeout", o.connect_timeout_ms, "ms")->capture_default_str();
  app.add_option("--reconnect-delay", o.reconnect_delay_s,
                 "seconds between reconnect attempts after a lost connection (with "
                 "--ctrl-loss-tmo)")
      ->capture_default_str();
  app.add_option("--ctrl-loss-tmo", o.ctrl_loss_tmo_s,
                 "seconds I/O waits for a lost controller to reconnect before it fails with a "
                 "path error (0: a lost connection is an error at once)")
      ->capture_default_str();
  sens::tools::add_host_security_options(app, o.dhchap_secret, o.dhchap_ctrl_secret,
                                         o.tls_psk_file);
  std::string aes_gcm = "auto";
  sens::tools::add_tls_aes_gcm_option(app, aes_gcm);
  std::string tls_records = "auto";
  sens::tools::add_tls_records_option(app, tls_records);
  app.add_flag("-q,--quiet", quiet, "no progress line every second");
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  o.progress = !quiet;
  o.rwmixread_given = app.count("--rwmixread") > 0;
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "sens perf: %s\n", msg.c_str());
    return 2;
  };
  if (!sens::host::parse_rw(rw, &o.rw))
    return usage("--rw '" + rw + "': expected read, write, randread, randwrite, rw or randrw");
  auto b = sens::parse_size(bs);
  if (!b || *b > UINT32_MAX) return usage("--bs '" + bs + "' is not a size");
  o.bs = uint32_t(*b);
  auto sz = sens::parse_size(size);
  if (!sz) return usage("--size '" + size + "' is not a size");
  o.size = *sz;
  if (std::string why; !sens::set_tls_aes_gcm(aes_gcm, &why)) return usage("--tls-aes-gcm: " + why);
  if (std::string why; !sens::set_tls_records(tls_records, &why))
    return usage("--tls-records: " + why);
  if (!sens::coalesce::parse_policy(policy, &o.coalesce.policy))
    return usage("--coalesce '" + policy + "': expected off, eager, uniform, semantic or adaptive");
  if (!sens::parse_share_mode(share, &o.share))
    return usage("--share '" + share + "': expected none, lock or sendlist");
  if (!sens::parse_poll_mode(poll, &o.poll))
    return usage("--poll '" + poll + "': expected off, adaptive or always");
  if (!sens::buffers::parse_layout(buffer_layout, &o.buffers))
    return usage("--buffers '" + buffer_layout + "': expected naive or tyche");
  if (!(o.poll_max_us >= 0) || o.poll_max_us > 1e6)
    return usage("--poll-max-us must be between 0 and 1000000");
  auto pb = sens::parse_size(pg_bytes);
  if (!pb || *pb > UINT32_MAX) return usage("--pg-bytes '" + pg_bytes + "' is not a size");
  o.coalesce.bytes = uint32_t(*pb);
  if (!(pg_timeout_us >= 0) || !(ctrl_timeout_us >= 0))
    return usage("--pg-timeout-us and --ctrl-timeout-us must be >= 0");
  o.coalesce.timeout = sens::Nanos(std::llround(pg_timeout_us * 1000));
  o.coalesce.ctrl_timeout = sens::Nanos(std::llround(ctrl_timeout_us * 1000));
  if (std::string e = sens::host::validate_perf_options(o); !e.empty()) return usage(e);
  return sens::host::run_perf(o, stdout);
}

sens::tools::RegisterCommand register_perf("perf",
                                           "NVMe/TCP host load generator (IOPS, latency, CPU)",
                                           perf_main);

}  // namespace
