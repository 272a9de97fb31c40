#include "netblk/workload.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace sens::netblk {

namespace {

constexpr uint64_t kVerifyChunk = 16u << 20;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fill_verify_pattern(uint8_t* buf, uint64_t len, uint64_t seed, uint64_t position) {
  for (uint64_t i = 0; i < len; ++i) buf[i] = verify_pattern_byte(seed, position + i);
}

}  // namespace

uint8_t verify_pattern_byte(uint64_t seed, uint64_t position) {
  // One 64-bit word per 8 bytes of the device: cheap, and unique to the position.
  return uint8_t(mix(seed * 0x100000001B3ull ^ (position >> 3)) >> ((position & 7) * 8));
}

VerifyResult verify(Client& client, uint64_t offset, uint64_t size, uint64_t seed) {
  VerifyResult result;
  std::vector<uint8_t> buf(std::min(size, kVerifyChunk));
  Nanos start = monotonic_now();
  for (uint64_t done = 0; done < size && result.status == kOk; done += buf.size()) {
    uint64_t len = std::min<uint64_t>(buf.size(), size - done);
    fill_verify_pattern(buf.data(), len, seed, offset + done);
    result.status = client.write(offset + done, buf.data(), len);
  }
  result.write_ns = monotonic_now() - start;
  if (result.status != kOk) return result;
  start = monotonic_now();
  result.status = client.flush();
  result.flush_ns = monotonic_now() - start;
  if (result.status != kOk) return result;
  start = monotonic_now();
  for (uint64_t done = 0; done < size && result.status == kOk; done += buf.size()) {
    uint64_t len = std::min<uint64_t>(buf.size(), size - done);
    std::memset(buf.data(), 0, len);
    result.status = client.read(offset + done, buf.data(), len);
    if (result.status != kOk) break;
    for (uint64_t i = 0; i < len; ++i) {
      if (buf[i] != verify_pattern_byte(seed, offset + done + i)) {
        if (result.mismatched_bytes++ == 0) result.first_mismatch = offset + done + i;
      }
    }
    result.bytes += len;
  }
  result.read_ns = monotonic_now() - start;
  return result;
}

bool parse_bench_mode(const std::string& text, BenchMode* mode) {
  for (BenchMode m :
       {BenchMode::kRandRead, BenchMode::kRandWrite, BenchMode::kRead, BenchMode::kWrite}) {
    if (text == bench_mode_name(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

const char* bench_mode_name(BenchMode mode) {
  switch (mode) {
    case BenchMode::kRandRead:
      return "randread";
    case BenchMode::kRandWrite:
      return "randwrite";
    case BenchMode::kRead:
      return "read";
    case BenchMode::kWrite:
      return "write";
  }
  return "?";
}

bool bench(Client& client, const BenchOptions& options, BenchResult* result, std::string* error) {
  const Info& info = client.info();
  const bool writes = options.mode == BenchMode::kRandWrite || options.mode == BenchMode::kWrite;
  const bool random = options.mode == BenchMode::kRandRead || options.mode == BenchMode::kRandWrite;
  const uint32_t bs = options.block_size;
  const uint32_t limit = writes ? info.max_io : info.max_read;
  if (bs == 0 || bs % info.sector_size != 0 || bs > limit) {
    *error = "--bs " + std::to_string(bs) + " must be a multiple of the " +
             std::to_string(info.sector_size) + "-byte sector and at most " +
             std::to_string(limit) + (writes ? " (max_io)" : " (max_read)");
    return false;
  }
  if (writes && info.read_only()) {
    *error = "the server is read-only";
    return false;
  }
  if (options.offset % info.sector_size != 0 || options.offset >= info.size) {
    *error = "--offset must be a whole sector inside the device";
    return false;
  }
  uint64_t span = options.span ? options.span : info.size - options.offset;
  span = std::min(span, info.size - options.offset);
  const uint64_t blocks = span / bs;
  if (blocks == 0) {
    *error = "the region is smaller than one block of --bs";
    return false;
  }
  std::vector<uint8_t> data(writes ? bs : info.max_read);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(mix(options.seed + i));

  *result = BenchResult();
  const ClientStats before = client.stats();
  uint64_t rng = options.seed | 1, sequential = 0;
  const Nanos start = monotonic_now();
  const Nanos end = start + options.duration;
  uint64_t issued = 0;
  client.run(
      [&](Io& io) {
        // The clock is read once per 64 requests: cheap, and at most a few µs late.
        if ((issued++ & 63) == 0 && monotonic_now() >= end) return false;
        uint64_t block;
        if (random) {
          rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;  // xorshift64
          block = rng % blocks;
        } else {
          block = sequential++ % blocks;
        }
        io.op = writes ? kOpWrite : kOpRead;
        io.offset = options.offset + block * bs;
        io.length = bs;
        io.buf = data.data();
        return true;
      },
      [&](const Io& io) {
        if (io.status != kOk) {
          ++result->errors;
          return;
        }
        ++result->ios;
        result->latency_ns.record(uint64_t(io.latency));
      });
  result->elapsed = monotonic_now() - start;
  const ClientStats& after = client.stats();
  result->client.sent = after.sent - before.sent;
  result->client.timeouts = after.timeouts - before.timeouts;
  result->client.busy = after.busy - before.busy;
  result->client.stray = after.stray - before.stray;
  result->client.failed = after.failed - before.failed;
  return true;
}

}  // namespace sens::netblk
