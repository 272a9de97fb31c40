#pragma once
// `sens perf`: a closed-loop NVMe/TCP load generator on the host library. --threads
// submitting threads each drive --queues queues with a poller of their own (the benchmark
// pins the process with taskset); every queue keeps `qd` commands in flight; each completion
// records its latency in a log-bucketed histogram and submits the next I/O from the same
// buffer. --share lock|sendlist puts the queues over --connections shared connections.
//
// An application of the host library: it uses include/sens/host.h only, never the library's
// internals (the check_host_api target fails the build otherwise; docs/host-abi.md). Its files:
// perf_options.cc (option checks), perf_worker.cc (a submitting thread: its queues and its
// submission loop), perf_engine.cc (connecting, the threads' phases, measurement windows),
// perf_report.cc (the text and JSON report); perf_engine.h is what they share.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <sens/host.h>

#include "buffers/buffer_pool.h"
#include "coalesce/scheduler.h"
#include "reactor/reactor.h"  // PollMode, the --poll names

namespace sens::host {

enum class RwMode : uint8_t { kRead, kWrite, kRandRead, kRandWrite, kRw, kRandRw };
bool parse_rw(std::string_view text, RwMode* out);
const char* rw_name(RwMode mode);
bool rw_reads(RwMode mode);   // the mode issues reads
bool rw_writes(RwMode mode);  // the mode issues writes
bool rw_random(RwMode mode);

struct PerfOptions {
  std::string trid_text;   // -r
  sens::TransportId trid;  // filled by validate_perf_options
  RwMode rw = RwMode::kRandRead;
  int rwmixread = 50;  // percent of reads in rw/randrw
  bool rwmixread_given = false;
  uint32_t bs = 4096;
  uint32_t qd = 32;          // per queue
  uint32_t queues = 1;       // per thread
  uint32_t threads = 1;      // submitting threads (--threads), each with `queues` queues
  uint32_t connections = 0;  // --connections: shared modes (0: 1); none: threads x queues
  ShareMode share = ShareMode::kNone;
  double time_s = 10;
  double warmup_s = 0;
  buffers::Layout buffers = buffers::Layout::kNaive;  // --buffers
  double rate_iops = 0;  // total I/Os per second across queues, as fio's rate_iops; 0: no cap
  bool verify = false;
  // --prefill: write the whole region once, in large writes, before the run (first-touch
  // costs of a fresh RAM or thin namespace then stay out of the numbers).
  bool prefill = false;
  uint64_t size = 64ull << 20;  // the region of the namespace exercised (capped to its size)
  uint64_t seed = 0;            // verify pattern seed; 0 picks one
  uint32_t nsid = 0;            // 0: the first active namespace
  std::string json_path;        // "-" is stdout
  // The host's groups: the byte cap is the host library's default (ControllerOptions::pg_bytes).
  coalesce::Config coalesce = [] {
    coalesce::Config c;
    c.bytes = sens::ControllerOptions{}.pg_bytes;
    return c;
  }();
  PollMode poll = PollMode::kAdaptive;
  double poll_max_us = 50;
  bool hdr_digest = false;
  bool data_digest = false;
  bool disable_sqflow = false;
  uint32_t kato_ms = 5000;
  uint32_t io_timeout_ms = 30000;
  uint32_t connect_timeout_ms = 10000;
  // Reconnect as the Linux host (ControllerOptions): 0 (the default) reports a lost
  // connection as an error at once; otherwise I/O waits up to ctrl_loss_tmo_s for it.
  uint32_t reconnect_delay_s = 1;
  uint32_t ctrl_loss_tmo_s = 0;
  std::string dhchap_secret, dhchap_ctrl_secret;  // DH-HMAC-CHAP (see ControllerOptions)
  ~PerfOptions();                                 // wipes the secrets' text
  std::string tls_psk_file;                       // TLS 1.3 (see ControllerOptions)
  bool progress = true;                           // the line every second
};
// The run starts with a prefill pass: --prefill, or --verify of a mode that reads.
bool prefills(const PerfOptions& o);

// Checks and completes the options (parses the TRID). Returns "" or an error naming the
// option, precise enough to fix the command line.
std::string validate_perf_options(PerfOptions& options);

// Runs the workload and prints the report to `out` (errors to stderr). Returns the exit
// status: 0 all I/O succeeded and verified; 1 an I/O, connection or verify error.
int run_perf(const PerfOptions& options, FILE* out);

}  // namespace sens::host
