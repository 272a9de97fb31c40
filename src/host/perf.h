#pragma once
// `sens perf`: a closed-loop NVMe/TCP load generator on one reactor thread (the benchmark
// pins it with taskset). Every queue keeps `qd` commands in flight; each completion records
// its latency in a log-bucketed histogram and submits the next I/O from the same buffer.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "coalesce/scheduler.h"
#include "host/trid.h"
#include "reactor/reactor.h"

namespace sens::host {

enum class RwMode : uint8_t { kRead, kWrite, kRandRead, kRandWrite, kRw, kRandRw };
bool parse_rw(std::string_view text, RwMode* out);
const char* rw_name(RwMode mode);
bool rw_reads(RwMode mode);   // the mode issues reads
bool rw_writes(RwMode mode);  // the mode issues writes
bool rw_random(RwMode mode);

struct PerfOptions {
  std::string trid_text;  // -r
  TransportId trid;       // filled by validate_perf_options
  RwMode rw = RwMode::kRandRead;
  int rwmixread = 50;  // percent of reads in rw/randrw
  bool rwmixread_given = false;
  uint32_t bs = 4096;
  uint32_t qd = 32;  // per queue
  uint32_t queues = 1;
  double time_s = 10;
  double warmup_s = 0;
  bool verify = false;
  uint64_t size = 64ull << 20;  // the region of the namespace exercised (capped to its size)
  uint64_t seed = 0;            // verify pattern seed; 0 picks one
  uint32_t nsid = 0;            // 0: the first active namespace
  std::string json_path;        // "-" is stdout
  coalesce::Config coalesce;
  PollMode poll = PollMode::kAdaptive;
  double poll_max_us = 50;
  bool hdr_digest = false;
  bool data_digest = false;
  bool disable_sqflow = false;
  uint32_t kato_ms = 5000;
  uint32_t io_timeout_ms = 30000;
  uint32_t connect_timeout_ms = 10000;
  bool progress = true;  // the line every second
};

// Checks and completes the options (parses the TRID). Returns "" or an error naming the
// option, precise enough to fix the command line.
std::string validate_perf_options(PerfOptions& options);

// Runs the workload and prints the report to `out` (errors to stderr). Returns the exit
// status: 0 all I/O succeeded and verified; 1 an I/O, connection or verify error.
int run_perf(const PerfOptions& options, FILE* out);

}  // namespace sens::host
