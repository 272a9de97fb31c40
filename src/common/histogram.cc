#include "common/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>

namespace sens {

int Histogram::bucket_of(uint64_t v) {
  if (v < uint64_t(kSubBuckets)) return int(v);
  int msb = 63 - std::countl_zero(v);  // >= kSubBits
  int shift = msb - kSubBits;
  int sub = int((v >> shift) & (kSubBuckets - 1));
  return (shift + 1) * kSubBuckets + sub;
}

uint64_t Histogram::upper_of(int bucket) {
  if (bucket < kSubBuckets) return uint64_t(bucket);
  int shift = bucket / kSubBuckets - 1;
  uint64_t sub = uint64_t(bucket % kSubBuckets) | uint64_t(kSubBuckets);
  return ((sub + 1) << shift) - 1;
}

void Histogram::record(uint64_t v, uint64_t count) {
  buckets_[bucket_of(v)] += count;
  count_ += count;
  sum_ += v * count;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
}

void Histogram::merge(const Histogram& o) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

void Histogram::reset() {
  *this = Histogram();
}

uint64_t Histogram::percentile(double pct) const {
  if (count_ == 0) return 0;
  uint64_t rank = uint64_t(std::ceil(pct / 100.0 * double(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += buckets_[i];
    if (seen >= rank) return std::clamp(upper_of(i), min(), max_);
  }
  return max_;
}

uint64_t Histogram::count_at_most(uint64_t v) const {
  int last = bucket_of(v);
  if (upper_of(last) > v) --last;
  uint64_t n = 0;
  for (int i = 0; i <= last; ++i) n += buckets_[i];
  return n;
}

nlohmann::json Histogram::summary(double divisor) const {
  auto s = [&](double v) { return v / divisor; };
  return {{"count", count_},
          {"mean", s(mean())},
          {"p50", s(double(percentile(50)))},
          {"p90", s(double(percentile(90)))},
          {"p99", s(double(percentile(99)))},
          {"p99.9", s(double(percentile(99.9)))},
          {"min", s(double(min()))},
          {"max", s(double(max_))}};
}

}  // namespace sens
