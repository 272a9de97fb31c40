#include "model/model.h"

#include <algorithm>
#include <cmath>

namespace sens::model {

namespace {

// log P(N = k): lgamma keeps it finite where e^-mu or mu^k alone would under/overflow.
double log_pmf(uint64_t k, double mu) {
  if (k == 0) return -mu;
  return -mu + double(k) * std::log(mu) - std::lgamma(double(k) + 1.0);
}

// Terms below this fraction of the running sum cannot change a double.
constexpr double kNegligible = 1e-18;

// log C(n, k)
double log_choose(uint64_t n, uint64_t k) {
  return std::lgamma(double(n) + 1) - std::lgamma(double(k) + 1) - std::lgamma(double(n - k) + 1);
}

// Both sums of the renewal argument behind Eq. 1 and the mean wait:
//   s1 = sum_{k=0}^{B-2} P(N > k),  s2 = sum_{k=0}^{B-2} (k + 1) P(N > k).
// P(N > k) is built downwards from P(N > B - 2) by adding pmf terms: all additions of
// positive numbers, so no cancellation whatever mu is.
void tail_sums(uint32_t B, double mu, double* s1, double* s2) {
  *s1 = *s2 = 0;
  if (B < 2) return;
  double sf = poisson_sf(B - 2, mu);
  for (int64_t k = int64_t(B) - 2; k >= 0; --k) {
    *s1 += sf;
    *s2 += double(k + 1) * sf;
    sf += poisson_pmf(uint64_t(k), mu);  // P(N > k - 1)
  }
}

}  // namespace

double poisson_pmf(uint64_t k, double mu) {
  if (mu <= 0) return k == 0 ? 1.0 : 0.0;
  if (std::isinf(mu)) return 0.0;
  return std::exp(log_pmf(k, mu));
}

double poisson_sf(uint64_t k, double mu) {
  if (mu <= 0) return 0.0;
  if (std::isinf(mu)) return 1.0;
  if (mu < double(k) + 1) {
    // Upper tail sum_{j>k} pmf(j): terms shrink by mu / j < 1, so it converges fast and
    // stays accurate however small it is.
    double term = poisson_pmf(k + 1, mu), sum = term;
    for (uint64_t j = k + 2; term > sum * kNegligible; ++j) {
      term *= mu / double(j);
      sum += term;
    }
    return std::min(sum, 1.0);
  }
  // mu >= k + 1: P(N <= k) is at most about one half, so 1 - cdf loses nothing. Sum the cdf
  // downwards from k, where its terms are largest (pmf(j - 1) = pmf(j) j / mu).
  double term = poisson_pmf(k, mu), cdf = term;
  for (uint64_t j = k; j > 0 && term > cdf * kNegligible; --j) {
    term *= double(j) / mu;
    cdf += term;
  }
  return std::max(0.0, 1.0 - cdf);
}

double capacity_share(double lambda, uint32_t B, double T) {
  if (B < 2) return 1.0;
  return poisson_sf(B - 2, lambda * T);  // T_B <= T iff N(T) >= B - 1
}

double expected_batch(double lambda, uint32_t B, double T) {
  if (B < 2) return 1.0;
  const double mu = lambda * T;
  // Eq. 1 literally: capacity groups hold B, timer groups 1 + N(T_d) with N(T_d) <= B - 2.
  double timer_part = 0;
  for (uint32_t k = 0; k + 2 <= B; ++k) timer_part += double(1 + k) * poisson_pmf(k, mu);
  return double(B) * capacity_share(lambda, B, T) + timer_part;
}

double mean_wait_capacity(double lambda, uint32_t B) {
  return double(B - 1) / (2.0 * lambda);
}

double mean_wait(double lambda, uint32_t B, double T) {
  if (std::isinf(T)) return mean_wait_capacity(lambda, B);
  double s1, s2;
  tail_sums(B, lambda * T, &s1, &s2);
  // Total wait of a group = integral over its life of the PDUs queued, 1 + N(t): its mean is
  // s2 / lambda; the group holds 1 + s1 PDUs on average (the same value as Eq. 1).
  return s2 / (lambda * (1.0 + s1));
}

double r2t_ratio(uint32_t B, uint32_t c2, double p) {
  return (std::min(double(B), double(c2) / p) - 1.0) / double(B - 1);
}

double r2t_ratio_exact(uint32_t B, uint32_t c2, double p) {
  // Marks (R2T or not) are i.i.d. and independent of the arrival times, so a PDU at position
  // i of a group of g PDUs waits (g - 1 - i) mean inter-arrival times. Two ways to close:
  //  * the c2-th R2T is PDU g <= B: the other c2 - 1 R2Ts sit uniformly among the first g - 1
  //    positions (mean wait g / 2 each), the c2-th waits 0;
  //  * fewer than c2 R2Ts among B PDUs: k R2Ts placed uniformly, mean wait (B - 1) / 2 each.
  // The per-R2T mean is E[total R2T wait] / E[R2Ts] (renewal reward over groups).
  const double lp = std::log(p), lq = std::log1p(-p);
  double wait = 0, count = 0;
  if (c2 <= B) {
    for (uint32_t g = c2; g <= B; ++g) {
      double lw = log_choose(g - 1, c2 - 1) + double(c2) * lp;
      if (g > c2) lw += double(g - c2) * lq;  // p = 1 gives 0 * -inf otherwise
      const double w = std::exp(lw);
      wait += w * double(c2 - 1) * double(g) / 2.0;
      count += w * double(c2);
    }
  }
  for (uint32_t k = 1; k < std::min(c2, B + 1); ++k) {
    double lw = log_choose(B, k) + double(k) * lp;
    if (B > k) lw += double(B - k) * lq;
    const double w = std::exp(lw);
    wait += w * double(k) * double(B - 1) / 2.0;
    count += w * double(k);
  }
  return (wait / count) / (double(B - 1) / 2.0);
}

double delta_write_latency(double lambda_total, uint32_t B, uint32_t c2, double p) {
  return (1.0 - r2t_ratio(B, c2, p)) * double(B - 1) / (2.0 * lambda_total);
}

}  // namespace sens::model
