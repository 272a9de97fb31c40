#pragma once
// The SENS analytical model (paper, Section 3.4) and a Monte-Carlo check of it.
//
// PDUs arrive as a Poisson process of rate lambda. A group opens with a PDU and is flushed
// at tau = min(T_B, T_d) after it, T_B ~ Erlang(B - 1, lambda) the time of the (B - 1)-th
// later arrival and T_d the timer T. Units: seconds and PDUs per second throughout; only
// the report (Inputs/Report) speaks microseconds.
#include <cstdint>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace sens::model {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Poisson helpers (N ~ Poisson(mu)), stable for any mu >= 0 including +inf.
double poisson_pmf(uint64_t k, double mu);
double poisson_sf(uint64_t k, double mu);  // P(N > k), without 1 - cdf cancellation

// ---- Eq. 1: E[B_eff] = B P(T_B <= T_d) + E[1 + N(T_d) | T_B > T_d] P(T_B > T_d),
// summed exactly over the Poisson pmf (T_B > T_d iff N(T_d) <= B - 2).
double expected_batch(double lambda, uint32_t B, double T);
// P(T_B <= T_d): the share of groups flushed by capacity rather than by the timer.
double capacity_share(double lambda, uint32_t B, double T);

// ---- Eq. 2: mean wait of a PDU in its group when capacity triggers: (B - 1) / (2 lambda).
double mean_wait_capacity(double lambda, uint32_t B);
// The same mean wait for any T (PDU-weighted, i.e. total wait of a group over its size):
//   E[W] = sum_{k=0}^{B-2} (k + 1) P(N(T) > k) / (lambda E[B_eff]).
// Tends to Eq. 2 as T -> inf and to 0 as T -> 0.
double mean_wait(double lambda, uint32_t B, double T);

// ---- Eq. 3: T_write = T_cmd + T_proc + W_r2t + T_net + T_data.
struct WriteLatency {
  double t_cmd = 0, t_proc = 0, w_r2t = 0, t_net = 0, t_data = 0;
  double total() const { return t_cmd + t_proc + w_r2t + t_net + t_data; }
};

// ---- Eq. 4: R = (min(B, c2 / p) - 1) / (B - 1), the R2T queueing delay under SENS relative
// to uniform batching, for a fraction p of control PDUs.
double r2t_ratio(uint32_t B, uint32_t c2, double p);
// The exact value of that ratio in the capacity-triggered regime (T, Tc -> inf): the mean
// wait per R2T of a group closed by the c2-th R2T or the B-th PDU, over (B - 1) / 2. Eq. 4
// treats an R2T as an average PDU of a group of c2 / p PDUs; the c2-th R2T closes its group
// and waits nothing, so without the B cap the exact ratio is (c2 - 1) / (p (B - 1)), below
// Eq. 4 by (1 - p) / (p (B - 1)). Both agree at p = 1.
double r2t_ratio_exact(uint32_t B, uint32_t c2, double p);
// ---- Eq. 5: Delta T_write = (1 - R)(B - 1) / (2 lambda_total), the write latency saved.
double delta_write_latency(double lambda_total, uint32_t B, uint32_t c2, double p);

// ---- Monte-Carlo: independent groups, each opened by a PDU at t = 0, later arrivals
// Poisson(lambda), each PDU an R2T with probability p. The same arrivals are replayed under
// uniform (B, T) and semantic (B, T, c2, Tc) flushing (common random numbers, so the ratio of
// the two is far less noisy than two independent runs would be).
struct SimConfig {
  double lambda = 1e6;
  uint32_t B = 16;
  double T = kInf;  // seconds
  double p = 0.5;
  uint32_t c2 = 4;
  double Tc = kInf;  // seconds
  uint64_t groups = 100000;
  uint64_t seed = 1;
};

struct SimResult {
  uint64_t groups = 0;
  double eb_eff = 0, eb_eff_se = 0;  // uniform group size (Eq. 1) and its standard error
  double eb_eff_semantic = 0;        // semantic group size
  double mean_wait = 0;              // uniform, per PDU, seconds (mean_wait())
  double r2t_wait_uniform = 0, r2t_wait_semantic = 0;  // per R2T, seconds
  // r2t_wait_semantic / r2t_wait_uniform (Eq. 4) and its standard error (batch means);
  // NaN when the uniform groups held no R2T wait at all (T = 0, or no R2T drawn).
  double r2t_ratio = 0, r2t_ratio_se = 0;
};

// Deterministic for a given config on any platform: mt19937_64 with hand-rolled uniform and
// exponential draws (the std:: distributions differ between standard libraries).
SimResult simulate(const SimConfig& config);

// ---- `sens model`: raw inputs as typed on the command line (microseconds), validated.
struct Inputs {
  double lambda = 0;  // PDUs per second
  int64_t B = 16;
  double T_us = 50;
  double p = 0.5;
  int64_t c2 = 4;
  double Tc_us = kInf;          // control timer of the semantic simulation; inf: capacity dominates
  int64_t sim_groups = 100000;  // 0 skips the simulation
  uint64_t seed = 1;
};
inline constexpr int64_t kMaxB = 1 << 16;
inline constexpr int64_t kMaxSimGroups = 100'000'000;

// An empty string if the inputs are valid, else one line naming the option and the rule.
std::string validate(const Inputs& in);

struct Report {
  Inputs in;
  double eb_eff = 0;           // Eq. 1
  double p_capacity = 0;       // P(T_B <= T)
  double ew_us = 0;            // Eq. 2 (capacity regime)
  double ew_exact_us = 0;      // mean wait at the given T
  double R = 0;                // Eq. 4
  double R_exact = 0;          // exact ratio, capacity regime
  double r2t_cut_pct = 0;      // (1 - R) * 100
  double delta_twrite_us = 0;  // Eq. 5
  bool simulated = false;
  SimResult sim;
};

Report evaluate(const Inputs& in);  // `in` must pass validate()
// Keys: lambda, B, T_us, p, c2, Tc_us, eb_eff, p_capacity, ew_us, ew_exact_us, R, R_exact,
// r2t_cut_pct, delta_twrite_us, sim: {eb_eff, eb_eff_se, eb_eff_semantic, ew_us, r2t_ratio,
// r2t_ratio_se, r2t_wait_uniform_us, r2t_wait_semantic_us, groups, seed} (null when skipped).
// Infinite times and undefined ratios are null.
nlohmann::json to_json(const Report& r);
std::string to_text(const Report& r);  // a table with units, for people

}  // namespace sens::model
