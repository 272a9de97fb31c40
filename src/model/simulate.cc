#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"

namespace sens::model {

namespace {

// Sums for one policy over a set of groups.
struct Tally {
  double r2t_wait = 0, r2t_count = 0;
  void add(const Tally& o) {
    r2t_wait += o.r2t_wait;
    r2t_count += o.r2t_count;
  }
  double mean() const { return r2t_wait / r2t_count; }
};

constexpr int kBatches = 32;  // batch means for the ratio's standard error

}  // namespace

SimResult simulate(const SimConfig& c) {
  std::mt19937_64 rng(c.seed);
  auto uniform01 = [&] { return double(rng() >> 11) * 0x1.0p-53; };  // [0, 1)
  auto exponential = [&] { return -std::log1p(-uniform01()) / c.lambda; };

  const uint32_t B = std::max<uint32_t>(c.B, 1);
  std::vector<double> at(B);
  std::vector<char> r2t(B);

  SimResult res;
  res.groups = c.groups;
  double size_sum = 0, size_sq = 0, sem_size_sum = 0, wait_sum = 0;
  Tally uni_all, sem_all;
  std::vector<Tally> uni_batch(kBatches), sem_batch(kBatches);

  for (uint64_t g = 0; g < c.groups; ++g) {
    // Arrivals up to the uniform flush: the B-th PDU or the first one at or after T (which
    // is not part of the group). Semantic never flushes later, so these suffice for both.
    // The PDU at t = 0 opens the group even when T = 0.
    uint32_t n = 0;
    double t = 0;
    do {
      at[n] = t;
      r2t[n] = uniform01() < c.p;
      ++n;
      t += exponential();
    } while (n < B && t < c.T);
    const double uni_flush = n == B ? at[B - 1] : c.T;

    // Semantic: the c2-th R2T closes the group at its arrival; the control timer first+Tc
    // closes it if it expires before the next arrival (and before the uniform flush).
    double sem_flush = uni_flush, ctrl_deadline = kInf;
    uint32_t m = n, ctrl = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (at[i] >= ctrl_deadline) {  // Tc expired before PDU i arrived
        sem_flush = ctrl_deadline;
        m = i;
        break;
      }
      if (r2t[i]) {
        if (ctrl++ == 0) ctrl_deadline = at[i] + c.Tc;
        if (ctrl >= c.c2) {
          sem_flush = at[i];
          m = i + 1;
          break;
        }
      }
    }
    if (m == n && ctrl_deadline < sem_flush) sem_flush = ctrl_deadline;

    Tally uni, sem;
    for (uint32_t i = 0; i < n; ++i) {
      wait_sum += uni_flush - at[i];
      if (!r2t[i]) continue;
      uni.r2t_wait += uni_flush - at[i];
      uni.r2t_count += 1;
      if (i < m) {
        sem.r2t_wait += sem_flush - at[i];
        sem.r2t_count += 1;
      }
    }
    size_sum += n;
    size_sq += double(n) * n;
    sem_size_sum += m;
    uni_all.add(uni);
    sem_all.add(sem);
    // Contiguous batches of groups, so each batch is an independent replica of the run.
    const size_t b = size_t(g * kBatches / c.groups);
    uni_batch[b].add(uni);
    sem_batch[b].add(sem);
  }

  const double N = double(c.groups);
  if (c.groups == 0) return res;
  res.eb_eff = size_sum / N;
  res.eb_eff_se =
      c.groups > 1 ? std::sqrt(std::max(0.0, (size_sq - N * res.eb_eff * res.eb_eff) / (N - 1)) / N)
                   : NAN;
  res.eb_eff_semantic = sem_size_sum / N;
  res.mean_wait = wait_sum / size_sum;
  res.r2t_wait_uniform = uni_all.mean();
  res.r2t_wait_semantic = sem_all.mean();
  res.r2t_ratio = uni_all.r2t_wait > 0 ? res.r2t_wait_semantic / res.r2t_wait_uniform : NAN;

  // Standard error of the ratio from the spread of the per-batch ratios (a ratio of means
  // has no simple closed-form variance; batch means need no model of it).
  double sum = 0, sq = 0;
  int used = 0;
  for (int b = 0; b < kBatches; ++b) {
    if (!(uni_batch[b].r2t_wait > 0) || sem_batch[b].r2t_count == 0) continue;
    const double r = sem_batch[b].mean() / uni_batch[b].mean();
    sum += r;
    sq += r * r;
    ++used;
  }
  res.r2t_ratio_se = used == kBatches
                         ? std::sqrt(std::max(0.0, (sq - sum * sum / used) / (used - 1)) / used)
                         : NAN;
  return res;
}

}  // namespace sens::model
