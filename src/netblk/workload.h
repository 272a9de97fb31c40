#pragma once
// What the netblk CLI runs against a server: a data-checking verify and a timed benchmark.
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/histogram.h"
#include "netblk/client.h"

namespace sens::netblk {

struct VerifyResult {
  int status = kOk;    // the first failed request's status, or kOk
  uint64_t bytes = 0;  // written, then read back
  uint64_t mismatched_bytes = 0;
  uint64_t first_mismatch = 0;  // device offset of the first bad byte
  Nanos write_ns = 0, flush_ns = 0, read_ns = 0;
  bool ok() const { return status == kOk && mismatched_bytes == 0; }
};

// Writes a pattern unique to (seed, position) over [offset, offset + size), flushes, reads it
// back and compares. Works in chunks, so memory stays small whatever the size.
VerifyResult verify(Client& client, uint64_t offset, uint64_t size, uint64_t seed);

// The byte verify() writes at `position`.
uint8_t verify_pattern_byte(uint64_t seed, uint64_t position);

enum class BenchMode { kRandRead, kRandWrite, kRead, kWrite };
bool parse_bench_mode(const std::string& text, BenchMode* mode);
const char* bench_mode_name(BenchMode mode);

struct BenchOptions {
  BenchMode mode = BenchMode::kRandRead;
  uint32_t block_size = 1024;
  Nanos duration = 5 * kSecond;
  uint64_t offset = 0;  // the region exercised: [offset, offset + span)
  uint64_t span = 0;    // 0: to the end of the device
  uint64_t seed = 1;
};

struct BenchResult {
  uint64_t ios = 0;
  uint64_t errors = 0;
  Nanos elapsed = 0;
  Histogram latency_ns;
  ClientStats client;  // the client's counters over the run
  double iops() const { return elapsed ? double(ios) * 1e9 / double(elapsed) : 0; }
  double mib_per_s(uint32_t block_size) const { return iops() * block_size / (1 << 20); }
};

// Returns false and sets *error when the options do not fit the server.
bool bench(Client& client, const BenchOptions& options, BenchResult* result, std::string* error);

}  // namespace sens::netblk
