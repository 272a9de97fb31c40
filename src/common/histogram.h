#pragma once
// A log-linear latency histogram (HdrHistogram-like): fixed buckets, no allocation per
// sample, relative error under 1/kSubBuckets. Values are unsigned integers (ns, PDUs, ...).
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

namespace sens {

class Histogram {
 public:
  static constexpr int kSubBits = 5;  // 32 sub-buckets per power of two: ~3 % resolution
  static constexpr int kSubBuckets = 1 << kSubBits;
  static constexpr int kBuckets = (64 - kSubBits + 1) * kSubBuckets;

  void record(uint64_t v, uint64_t count = 1);
  void merge(const Histogram& other);
  void reset();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
  uint64_t sum() const { return sum_; }
  // The value at or below which `pct` percent of samples lie (upper edge of its bucket,
  // clamped to the observed max).
  uint64_t percentile(double pct) const;
  // Samples in the buckets whose upper edge is at most `v` (a cumulative count, as Prometheus'
  // `le` buckets have it; a sample within one bucket width under `v` may be left out).
  uint64_t count_at_most(uint64_t v) const;

  // {"count","mean","p50","p90","p99","p99.9","min","max"} scaled by 1/divisor.
  nlohmann::json summary(double divisor = 1.0) const;

 private:
  static int bucket_of(uint64_t v);
  static uint64_t upper_of(int bucket);

  std::array<uint64_t, kBuckets> buckets_{};
  uint64_t count_ = 0, sum_ = 0, min_ = UINT64_MAX, max_ = 0;
};

}  // namespace sens
