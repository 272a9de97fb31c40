// `sens target`: serve namespaces over NVMe/TCP.
#include <signal.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/log.h"
#include "common/units.h"
#include "mgmt/metrics_server.h"
#include "mgmt/rpc_server.h"
#include "mgmt/target_methods.h"
#include "storage/memory_pages.h"
#include "target/target.h"
#include "tools/cli.h"
#include "tools/command.h"
#include "tools/service.h"
#include "transport/tls_records.h"

namespace sens::tools {
namespace {

// "30s", "500ms", "30" (seconds): milliseconds, or nullopt (not a duration, or over 2^32 ms).
std::optional<uint32_t> parse_millis(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9) return std::nullopt;
  const uint64_t n = std::stoull(text.substr(0, digits));
  const std::string unit = text.substr(digits);
  uint64_t ms;
  if (unit == "ms")
    ms = n;
  else if (unit == "s" || unit.empty())
    ms = n * 1000;
  else
    return std::nullopt;
  if (ms > UINT32_MAX) return std::nullopt;
  return uint32_t(ms);
}

bool write_stats(target::Target& t, const std::string& path) {
  if (path.empty()) return true;
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) return false;
    out << t.stats_json().dump(2) << "\n";
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int run_target(int argc, char** argv) {
  CLI::App app{
      "Serve namespaces over NVMe/TCP to any NVMe/TCP host (Linux nvme-tcp, SPDK, sens perf).\n"
      "With no options: a 1 GiB RAM namespace as " +
          std::string(target::kDefaultNqn) + " on 127.0.0.1:4420, discovery on port 8009.",
      "sens target"};
  target::TargetConfig cfg, cli;  // cli: what the command line says, laid over the file
  std::vector<std::string> listen, namespaces, hosts;
  std::string nqn, config_file, inline_data = "8192", max_h2c = "128k", max_io = "128k",
                                policy = "adaptive", poll = "adaptive", pg_bytes = "1M";
  uint64_t pg_timeout_us = 50, ctrl_timeout_us = 10;
  bool verbose = false, quiet = false, dump = false;
  app.add_option("--config", config_file, "JSON file with any of the settings below (README)");
  app.add_option("--listen", listen,
                 "ADDR:PORT to serve I/O subsystems on (repeatable); ,ana=STATE sets the ANA "
                 "state of every group there (optimized, non-optimized, inaccessible, "
                 "persistent-loss, change), ,ana.GROUP=STATE one group's; SIGHUP re-reads "
                 "them from --config")
      ->type_name("ADDR:PORT[,ana=STATE]");
  app.add_option("--discovery-port", cli.discovery_port,
                 "port of the discovery controller on each listen address; 0 turns it off")
      ->default_val(8009);
  app.add_option("--nqn", nqn, "subsystem NQN")->default_str(target::kDefaultNqn);
  std::vector<std::string> tls_listen;
  app.add_option("--tls-listen", tls_listen,
                 "ADDR:PORT of a TLS 1.3 listener (NVMe/TCP 1.1; repeatable); needs --tls")
      ->type_name("ADDR:PORT");
  app.add_option("--tls", cli.tls_psk_file,
                 "PSK file: NVMeTLSkey-1:xx:...: keys (nvme gen-tls-key), one per line")
      ->type_name("PSKFILE");
  std::string aes_gcm = "auto";
  tools::add_tls_aes_gcm_option(app, aes_gcm);
  std::string tls_records = "auto";
  tools::add_tls_records_option(app, tls_records);
  app.add_option("--ns", namespaces,
                 "namespace backend, repeatable: ram:SIZE (memory), file:PATH (file or block "
                 "device, O_DIRECT via io_uring), null:SIZE (discards writes, reads zeroes), "
                 "rbd:POOL/IMAGE[,conf=PATH][,id=NAME][,timeout=S][,op_timeout=S][,qd=N] (Ceph RBD "
                 "image via librbd); options ,uuid=UUID ,nguid=HEX32 (identity) ,anagrpid=N (ANA "
                 "group 1..32)")
      ->type_name("KIND:ARG");
  app.add_option("--allow-host", hosts, "host NQN allowed to connect (repeatable; default: any)");
  std::vector<std::string> qos_opts;
  app.add_option("--qos", qos_opts,
                 "QoS limits of a namespace or host of the subsystem (repeatable): "
                 "ns=NSID,KEY=N,... or host=HOSTNQN,KEY=N,...; KEY: read_iops, write_iops, "
                 "total_iops, read_mibps, write_mibps, total_mibps (README \"QoS\")");
  std::vector<std::string> host_keys, ctrl_keys;
  std::string dhchap_hash, dhchap_dhgroup;
  app.add_option("--host-key", host_keys,
                 "NQN=DHHC-1:xx:...: the host's DH-HMAC-CHAP secret (nvme gen-dhchap-key); "
                 "the host must authenticate and is allowed (repeatable)")
      ->type_name("NQN=SECRET");
  app.add_option("--ctrl-key", ctrl_keys,
                 "NQN=DHHC-1:xx:...: the controller's secret for that host, which lets the "
                 "host authenticate the target too (bidirectional; repeatable)")
      ->type_name("NQN=SECRET");
  app.add_option("--dhchap-hash", dhchap_hash,
                 "DH-HMAC-CHAP hash functions accepted, preferred first")
      ->default_str("sha256,sha384,sha512");
  app.add_option("--dhchap-dhgroup", dhchap_dhgroup,
                 "DH groups accepted, preferred first (null: no DH exchange)")
      ->default_str("null,ffdhe2048,ffdhe3072,ffdhe4096,ffdhe6144,ffdhe8192");
  app.add_option("--inline-data", inline_data, "in-capsule data bytes on I/O queues")
      ->default_str("8192");
  app.add_option("--max-h2c-data", max_h2c, "largest H2CData payload accepted (ICResp maxh2cdata)")
      ->default_str("128k");
  app.add_option("--max-io", max_io, "largest I/O (MDTS)")->default_str("128k");
  app.add_option("--queue-size", cli.queue_size, "entries per queue (CAP.MQES + 1)")
      ->default_val(1024);
  app.add_option("--max-io-queues", cli.max_io_queues, "I/O queues one controller may create")
      ->default_val(64);
  std::string cntlid_range = "1-65519";
  app.add_option("--cntlid-range", cntlid_range,
                 "controller IDs this target hands out, MIN-MAX: gateways of one subsystem "
                 "(multipath) need disjoint ranges, since a host needs cntlids unique "
                 "within a subsystem")
      ->default_str("1-65519");
  app.add_option("--cores", cli.cores, "reactor threads (one per core)")->default_val(1);
  app.add_option("--pin", cli.first_core, "pin reactor i to core PIN + i")->default_val(-1);
  app.add_option("--poll", poll,
                 "how reactors wait for events: off (sleep in epoll), adaptive (spin while "
                 "events are expected, then sleep), always (never sleep: a core per reactor)")
      ->default_str("adaptive")
      ->check(CLI::IsMember({"off", "adaptive", "always"}));
  app.add_option("--poll-max-us", cli.poll_max_us, "the longest adaptive spin before sleeping")
      ->default_val(50);
  app.add_option("--coalesce", policy,
                 "PDU coalescing policy: off (one send per PDU), eager (one send per "
                 "connection per event-loop pass), uniform (batch B / timer T), semantic "
                 "(uniform + early R2T flush), adaptive (eager; holds data PDUs only while "
                 "the reactor is saturated and more are due before T)")
      ->default_str("adaptive")
      ->check(CLI::IsMember({"off", "eager", "uniform", "semantic", "adaptive"}));
  app.add_option("--pg-pdus", cli.coalesce.pdus, "B: PDUs per group")->default_val(16);
  app.add_option("--pg-timeout-us", pg_timeout_us, "T: group timer, microseconds")->default_val(50);
  app.add_option("--ctrl-pdus", cli.coalesce.ctrl_pdus, "c2: R2Ts that flush a group (semantic)")
      ->default_val(4);
  app.add_option("--ctrl-timeout-us", ctrl_timeout_us, "Tc: R2T timer, microseconds")
      ->default_val(10);
  app.add_option("--pg-bytes", pg_bytes, "byte cap of a group")->default_str("1M");
  app.add_option("--sock-buf", cli.sock_buf,
                 "SO_SNDBUF of each connection in bytes (0: kernel default; small "
                 "values force partial sends, for tests)")
      ->default_val(0);
  app.add_option("--dhchap-negotiations", cli.dhchap_negotiations,
                 "DH-HMAC-CHAP negotiations with a DH group in progress at once on the target "
                 "(1..4096; 0: 2 x cores, at least 8); more wait in turn (8 per slot), then are "
                 "refused")
      ->default_val(0);
  app.add_option("--dhchap-timeout-ms", cli.dhchap_timeout_ms,
                 "longest a negotiation holds (or waits for) its slot, 100..600000")
      ->default_val(10000);
  app.add_option("--dhchap-nice", cli.dhchap_nice,
                 "how much lower (nice, 0..19) the threads that do the DH work run than the "
                 "reactors, where the reactors keep their cores busy: many hosts negotiating "
                 "at once then take the CPU the I/O leaves, and take longer")
      ->default_val(0);
  app.add_option("--max-connections", cli.max_connections,
                 "open connections at most (every queue of every host counts); more are "
                 "refused at accept")
      ->default_val(4096);
  std::string buffer_pool = "256M";
  app.add_option("--buffer-pool", buffer_pool,
                 "I/O buffer memory per reactor: bounds the data in flight; commands wait "
                 "for a buffer when it is all in use")
      ->default_str("256M");
  std::string buffer_layout = "naive", receive_budget = "0";
  app.add_option("--buffers", buffer_layout,
                 "I/O buffer layout: naive (aligned_alloc, 4 KiB pages) or tyche (2 MiB pages, "
                 "buffers placed on successive cache colours, R2T data throttled to a "
                 "cache-sized budget); the environment variable SENS_BUFFERS sets it too")
      ->default_str("naive")
      ->envname("SENS_BUFFERS")
      ->check(CLI::IsMember({"naive", "tyche"}));
  app.add_option("--receive-budget", receive_budget,
                 "tyche: bytes of R2T write data in flight per reactor; over it R2Ts wait "
                 "(0: half the L2 plus this core's share of the L3)")
      ->default_str("0");
  app.add_option("--pool-share", cli.pool_share,
                 "percent of a reactor's buffer pool one connection may hold (each also keeps "
                 "a reserve of one largest buffer), so a host that stops reading cannot pin it")
      ->default_val(25);
  std::string stall_timeout = "30s";
  app.add_option("--stall-timeout", stall_timeout,
                 "end a connection whose send makes no progress, whose H2CData does not come "
                 "after its R2T, or whose PDU stays unfinished this long (30s, 500ms; 0: never)")
      ->default_str("30s");
  app.add_option("--stats-json", cli.stats_json,
                 "write the coalescing counters here at exit and on SIGUSR1");
  std::string rpc_path = "/var/tmp/sens.sock";
  app.add_option("--rpc", rpc_path,
                 "the management socket (JSON-RPC 2.0, mode 0600; `sens rpc` is its client), or "
                 "'none'. When the default one cannot be made (another target holds it, no "
                 "/var/tmp) this one runs without; a path given here must work")
      ->default_str("/var/tmp/sens.sock");
  app.add_flag("--dhchap-full-check", cli.dhchap_full_check,
               "check a host's DH value fully (y^q = 1 mod p, SP 800-56A full validation, for "
               "FIPS deployments) instead of its range only; about 9x the CPU per ffdhe8192 "
               "negotiation");
  app.add_flag("--strict-nqn", cli.strict_nqn,
               "refuse subsystem names without the 'nqn.' prefix (the Linux target takes them, "
               "and so does sens, with a warning)");
  app.add_option("--metrics", cli.metrics,
                 "serve Prometheus metrics at http://ADDR:PORT/metrics (port 0: any free port; "
                 "docs/metrics.md)");
  app.add_flag("--dump-config", dump, "print the effective configuration as JSON and exit");
  app.add_flag("-v,--verbose", verbose, "log every connection");
  app.add_flag("-q,--quiet", quiet, "log errors only");
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  if (verbose) g_log_level = LogLevel::kDebug;
  if (quiet) g_log_level = LogLevel::kError;

  std::string error;
  std::vector<std::string> warnings;  // what the file could not carry, what validate() took
  bool loaded = config_file.empty() || target::load_json(config_file, &cfg, &error, &warnings);
  for (auto& w : warnings) LOG_WARN("%s: %s", config_file.c_str(), w.c_str());
  warnings.clear();
  if (!loaded) {
    std::fprintf(stderr, "sens target: %s\n", error.c_str());
    return 2;
  }
  // Command-line options override the file; without a file their defaults apply.
  auto given = [&](const char* name) { return config_file.empty() || app.count(name) > 0; };
  if (given("--discovery-port")) cfg.discovery_port = cli.discovery_port;
  if (given("--queue-size")) cfg.queue_size = cli.queue_size;
  if (given("--max-io-queues")) cfg.max_io_queues = cli.max_io_queues;
  if (given("--cntlid-range") &&
      !target::parse_cntlid_range(cntlid_range, &cfg.cntlid_min, &cfg.cntlid_max, &error)) {
    std::fprintf(stderr, "sens target: --cntlid-range: %s\n", error.c_str());
    return 2;
  }
  if (given("--cores")) cfg.cores = cli.cores;
  if (given("--pin")) cfg.first_core = cli.first_core;
  if (given("--poll")) parse_poll_mode(poll, &cfg.poll);
  if (given("--poll-max-us")) cfg.poll_max_us = cli.poll_max_us;
  if (given("--sock-buf")) cfg.sock_buf = cli.sock_buf;
  if (given("--max-connections")) cfg.max_connections = cli.max_connections;
  if (given("--dhchap-negotiations")) cfg.dhchap_negotiations = cli.dhchap_negotiations;
  if (given("--dhchap-timeout-ms")) cfg.dhchap_timeout_ms = cli.dhchap_timeout_ms;
  if (given("--dhchap-nice")) cfg.dhchap_nice = cli.dhchap_nice;
  if (given("--buffer-pool")) {
    auto v = parse_size(buffer_pool);
    if (!v) {
      std::fprintf(stderr, "sens target: --buffer-pool: '%s' is not a size (e.g. 256M)\n",
                   buffer_pool.c_str());
      return 2;
    }
    cfg.buffer_pool = *v;
  }
  if (given("--buffers")) buffers::parse_layout(buffer_layout, &cfg.buffers);
  if (given("--pool-share")) cfg.pool_share = cli.pool_share;
  if (given("--stall-timeout")) {
    auto ms = parse_millis(stall_timeout);
    if (!ms) {
      std::fprintf(stderr,
                   "sens target: --stall-timeout: '%s' is not a duration (e.g. 30s, 500ms)\n",
                   stall_timeout.c_str());
      return 2;
    }
    cfg.stall_timeout_ms = *ms;
  }
  if (given("--receive-budget")) {
    auto v = parse_size(receive_budget);
    if (!v) {
      std::fprintf(stderr, "sens target: --receive-budget: '%s' is not a size (e.g. 4M)\n",
                   receive_budget.c_str());
      return 2;
    }
    cfg.receive_budget = *v;
  }
  if (given("--pg-pdus")) cfg.coalesce.pdus = cli.coalesce.pdus;
  if (given("--ctrl-pdus")) cfg.coalesce.ctrl_pdus = cli.coalesce.ctrl_pdus;
  if (app.count("--stats-json")) cfg.stats_json = cli.stats_json;
  if (cli.strict_nqn) cfg.strict_nqn = true;
  if (cli.dhchap_full_check) cfg.dhchap_full_check = true;
  if (app.count("--metrics")) cfg.metrics = cli.metrics;
  if (!cfg.metrics.empty()) {
    std::string host;
    uint16_t port = 0;
    if (!mgmt::parse_metrics_address(cfg.metrics, &host, &port, &error)) {
      std::fprintf(stderr, "sens target: --metrics: %s\n", error.c_str());
      return 2;
    }
  }
  auto size_opt = [&](const char* name, const std::string& text, uint32_t* out) {
    if (!given(name)) return true;
    auto v = parse_size(text);
    if (!v || *v > UINT32_MAX) {
      std::fprintf(stderr, "sens target: %s: '%s' is not a size (e.g. 8192, 16k)\n", name,
                   text.c_str());
      return false;
    }
    *out = uint32_t(*v);
    return true;
  };
  if (!size_opt("--inline-data", inline_data, &cfg.inline_data) ||
      !size_opt("--max-h2c-data", max_h2c, &cfg.max_h2c_data) ||
      !size_opt("--max-io", max_io, &cfg.max_io) ||
      !size_opt("--pg-bytes", pg_bytes, &cfg.coalesce.bytes))
    return 2;
  if (given("--coalesce")) coalesce::parse_policy(policy, &cfg.coalesce.policy);
  if (given("--pg-timeout-us")) cfg.coalesce.timeout = Nanos(pg_timeout_us) * kMicro;
  if (given("--ctrl-timeout-us")) cfg.coalesce.ctrl_timeout = Nanos(ctrl_timeout_us) * kMicro;
  if (app.count("--tls")) cfg.tls_psk_file = cli.tls_psk_file;
  if (!transport::set_aes_gcm(aes_gcm, &error)) {
    std::fprintf(stderr, "sens target: --tls-aes-gcm: %s\n", error.c_str());
    return 2;
  }
  if (!transport::set_tls_records(tls_records, &error)) {
    std::fprintf(stderr, "sens target: --tls-records: %s\n", error.c_str());
    return 2;
  }
  if (!tls_listen.empty()) {
    cfg.tls_listen.clear();
    for (auto& l : tls_listen) {
      target::ListenAddress a;
      if (!target::parse_listen(l, &a, &error)) {
        std::fprintf(stderr, "sens target: --tls-listen: %s\n", error.c_str());
        return 2;
      }
      cfg.tls_listen.push_back(a);
    }
  }
  if (!listen.empty()) {
    cfg.listen.clear();
    for (auto& l : listen) {
      target::ListenAddress a;
      if (!target::parse_listen(l, &a, &error)) {
        std::fprintf(stderr, "sens target: %s\n", error.c_str());
        return 2;
      }
      cfg.listen.push_back(a);
    }
  }
  if (!dhchap_hash.empty() && !target::parse_hash_list(dhchap_hash, &cfg.dhchap_hashes, &error)) {
    std::fprintf(stderr, "sens target: --dhchap-hash: %s\n", error.c_str());
    return 2;
  }
  if (!dhchap_dhgroup.empty() &&
      !target::parse_dhgroup_list(dhchap_dhgroup, &cfg.dhchap_dhgroups, &error)) {
    std::fprintf(stderr, "sens target: --dhchap-dhgroup: %s\n", error.c_str());
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> parsed_host_keys, parsed_ctrl_keys;
  for (auto* list : {&host_keys, &ctrl_keys})
    for (auto& text : *list) {
      std::pair<std::string, std::string> kv;
      if (!target::parse_host_key(text, &kv, &error)) {
        std::fprintf(stderr, "sens target: %s: %s\n",
                     list == &host_keys ? "--host-key" : "--ctrl-key", error.c_str());
        return 2;
      }
      (list == &host_keys ? parsed_host_keys : parsed_ctrl_keys).push_back(kv);
    }
  if (!nqn.empty() || !namespaces.empty() || !hosts.empty() || !host_keys.empty() ||
      !ctrl_keys.empty() || !qos_opts.empty()) {
    if (cfg.subsystems.size() > 1) {
      std::fprintf(stderr,
                   "sens target: --nqn/--ns/--allow-host/--qos describe one subsystem; the "
                   "config file has several: edit it instead\n");
      return 2;
    }
    if (cfg.subsystems.empty()) cfg.subsystems.push_back({target::kDefaultNqn, {}, {}});
    auto& s = cfg.subsystems[0];
    if (!nqn.empty()) s.nqn = nqn;
    if (!namespaces.empty()) s.namespaces = namespaces;
    if (!hosts.empty()) s.allowed_hosts = hosts;
    if (!parsed_host_keys.empty()) s.host_keys = parsed_host_keys;
    if (!parsed_ctrl_keys.empty()) s.ctrl_keys = parsed_ctrl_keys;
    for (auto& text : qos_opts)
      if (!target::qos::parse_option(text, &s.qos, &error)) {
        std::fprintf(stderr, "sens target: --qos %s\n", error.c_str());
        return 2;
      }
  }
  target::apply_defaults(cfg);
  error = target::validate(cfg, &warnings);
  if (!error.empty()) {
    std::fprintf(stderr, "sens target: %s\n", error.c_str());
    return 2;
  }
  for (auto& w : warnings) LOG_WARN("%s", w.c_str());
  if (dump) {
    std::printf("%s\n", target::to_json_text(cfg).c_str());
    return 0;
  }

  // Signals go to this thread only: the reactors inherit the blocked mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Each connection is a descriptor: ask for enough of them (the soft limit is often 1024).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    rlim_t want = rlim_t(cfg.max_connections) + 256;  // listeners, io_uring, files, logs
    if (nofile.rlim_cur < want) {
      nofile.rlim_cur = std::min(want, nofile.rlim_max);
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (nofile.rlim_cur < want)
      LOG_WARN(
          "only %llu file descriptors for --max-connections %u: past that, accepting "
          "pauses until a connection closes",
          static_cast<unsigned long long>(nofile.rlim_cur), cfg.max_connections);
  }

  target::Target t(cfg);
  error = t.start();
  if (!error.empty()) {
    std::fprintf(stderr, "sens target: %s\n", error.c_str());
    return 1;
  }
  for (target::Subsystem* s : t.registry().subsystems()) {
    std::printf("subsystem %s\n", s->nqn.c_str());
    for (target::Namespace* ns : s->active_namespaces()) {
      std::printf("  namespace %u: %s, %llu blocks of %u bytes\n", ns->nsid,
                  ns->device->describe().c_str(),
                  static_cast<unsigned long long>(ns->blocks.load()), 1u << ns->block_shift);
      storage::MemoryPages pages;
      if (storage::ram_memory_pages(*ns->device, &pages))
        std::printf("    %s\n", storage::describe_memory_pages(pages).c_str());
    }
    for (auto& host : s->keyed_hosts())
      std::printf("  host %s authenticates (DH-HMAC-CHAP%s)\n", host.c_str(),
                  s->auth_for(host)->ctrl_key.empty() ? "" : ", bidirectional on request");
  }
  const auto bound = t.bound();
  const target::Target::Bound* first_io = nullptr;
  // Who protects TLS records: the kernel (kTLS) where it takes the keys, or sens.
  const transport::TlsRecords records = transport::tls_records();
  const std::string tls_how =
      records == transport::TlsRecords::kKernel ? "records by the kernel (kTLS)"
      : records == transport::TlsRecords::kAuto
          ? "records by the kernel (kTLS) where it has the tls module, else by sens with "
            "AES-GCM by " +
                transport::aes_gcm_description()
          : "records by sens with AES-GCM by " + transport::aes_gcm_description();
  for (auto& b : bound) {
    std::printf("listening on %s:%u (%s%s)\n", b.host.c_str(), b.port,
                b.discovery ? "discovery"
                : b.tls     ? "I/O, TLS 1.3, "
                            : "I/O",
                b.tls && !b.discovery ? tls_how.c_str() : "");
    if (!b.discovery && !first_io) first_io = &b;
  }
  std::printf(
      "coalescing: %s (B=%u T=%lldus c2=%u Tc=%lldus bytes=%u), polling: %s (spin <= %lluus), "
      "%d reactor(s)\n",
      coalesce::policy_name(cfg.coalesce.policy), cfg.coalesce.pdus,
      static_cast<long long>(cfg.coalesce.timeout / kMicro), cfg.coalesce.ctrl_pdus,
      static_cast<long long>(cfg.coalesce.ctrl_timeout / kMicro), cfg.coalesce.bytes,
      poll_mode_name(cfg.poll), static_cast<unsigned long long>(cfg.poll_max_us), cfg.cores);
  if (cfg.buffers == buffers::Layout::kTyche) {
    const auto& pool = t.context(0).pool;
    std::printf(
        "buffers: tyche, %s pages, caches %s, 64 KiB buffers %llu bytes apart, R2T data "
        "budget %s per reactor\n",
        pool.page_kind(), t.cache_geometry().describe().c_str(),
        static_cast<unsigned long long>(pool.stride_of_class(64 * 1024)),
        format_size(pool.receive_budget()).c_str());
  }
  if (first_io) {
    std::printf("connect with:\n  nvme connect -t tcp -a %s -s %u -n %s\n", first_io->host.c_str(),
                first_io->port, cfg.subsystems[0].nqn.c_str());
    std::printf("  sens perf -r 'trtype:tcp traddr:%s trsvcid:%u subnqn:%s' --rw randread\n",
                first_io->host.c_str(), first_io->port, cfg.subsystems[0].nqn.c_str());
  }
  // The management socket opens once the target serves: a client that connects may use it.
  std::unique_ptr<mgmt::RpcServer> rpc;
  if (rpc_path != "none") {
    rpc = std::make_unique<mgmt::RpcServer>(mgmt::target_handlers(t));
    if (auto why = rpc->start(rpc_path); !why.empty()) {
      // The default path (not asked for) in use, or its directory missing or not writable:
      // the target serves without management; a path given with --rpc must work.
      if (!app.count("--rpc")) {
        LOG_WARN("%s: this target has no management socket (give it --rpc PATH)", why.c_str());
        rpc.reset();
      } else {
        std::fprintf(stderr, "sens target: %s\n", why.c_str());
        t.stop();
        return 1;
      }
    } else {
      std::printf("management: sens rpc --socket %s (JSON-RPC 2.0)\n", rpc_path.c_str());
    }
  }
  mgmt::MetricsServer metrics(t);
  if (!cfg.metrics.empty()) {
    error = metrics.start(cfg.metrics);
    if (!error.empty()) {
      std::fprintf(stderr, "sens target: %s\n", error.c_str());
      t.stop();
      return 1;
    }
    std::printf("metrics on %s\n", metrics.url().c_str());
  }
  std::fflush(stdout);
  // systemd (Type=notify): ready once every listener is bound and every reactor turns.
  if (service::notifying()) {
    if (!service::reactors_running(t, 10000)) LOG_WARN("a reactor did not start within 10 s");
    service::ready(service::status_line(t));
  }

  int sig = 0;
  for (;;) {
    sigwait(&set, &sig);
    if (sig == SIGHUP) {
      // The config file, re-read and applied through the live changes the RPC makes.
      if (config_file.empty()) {
        LOG_WARN("SIGHUP: no --config file to re-read; nothing changed");
        continue;
      }
      service::reloading();
      target::TargetConfig fresh;
      std::string why;
      if (!target::load_json(config_file, &fresh, &why)) {
        LOG_WARN("SIGHUP: %s; nothing changed", why.c_str());
        service::ready("reload failed (" + why + "); " + service::status_line(t));
        continue;
      }
      target::apply_defaults(fresh);
      // What the command line set stays as it set it (it overrides the file).
      for (const char* o : {"--coalesce", "--pg-pdus", "--pg-timeout-us", "--ctrl-pdus",
                            "--ctrl-timeout-us", "--pg-bytes"})
        if (app.count(o)) fresh.coalesce = cfg.coalesce;
      if (!listen.empty()) fresh.listen = cfg.listen;
      if (!tls_listen.empty()) fresh.tls_listen = cfg.tls_listen;
      if (app.count("--discovery-port")) fresh.discovery_port = cfg.discovery_port;
      for (auto& line : t.apply_config(fresh)) LOG_INFO("SIGHUP: %s", line.c_str());
      service::ready(service::status_line(t));
      continue;
    }
    if (sig == SIGUSR1) {
      if (!write_stats(t, cfg.stats_json))
        LOG_WARN("cannot write %s", cfg.stats_json.c_str());
      else if (!cfg.stats_json.empty())
        LOG_INFO("stats written to %s", cfg.stats_json.c_str());
      continue;
    }
    break;
  }
  service::stopping(std::string("stopping on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
  std::printf("stopping\n");
  std::fflush(stdout);
  metrics.stop();  // no scrape waits on reactors that are stopping
  bool ok = write_stats(t, cfg.stats_json);
  if (rpc) rpc->stop();  // (no change may run while the target stops)
  t.stop();
  if (!ok) LOG_WARN("cannot write %s", cfg.stats_json.c_str());
  return 0;
}

RegisterCommand register_target("target", "serve namespaces over NVMe/TCP (the target)",
                                run_target);

}  // namespace
}  // namespace sens::tools
