// The closed forms of Section 3.4, and the Monte-Carlo that checks them.
//
// Statistical tolerances: with a fixed seed every simulated number is deterministic, so a
// test cannot flake; the tolerance only has to hold for the seed used. It is nevertheless set
// as if the seed were random, so that a change of seed or of the random stream does not break
// it: 5 standard errors, estimated from the same run (the i.i.d. sample variance of group
// sizes; batch means or independent replicas for ratios of means). By the CLT a correct
// model then fails with probability ~6e-7 per check, while each check also asserts that its
// standard error is small enough for the comparison to mean something.
#include "model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

namespace sens::model {
namespace {

constexpr double kLambda = 1e6;  // PDUs per second: one inter-arrival time is 1 us
constexpr double kUs = 1e-6;

// ---- Poisson helpers

TEST(Poisson, PmfSumsToOneAndSfIsItsTail) {
  for (double mu : {1e-3, 0.5, 3.0, 15.0, 200.0}) {
    double cdf = 0;
    for (uint64_t k = 0; k < 2000; ++k) {
      cdf += poisson_pmf(k, mu);
      if (k < 400) {
        EXPECT_NEAR(poisson_sf(k, mu), 1.0 - cdf, 1e-12) << mu << " " << k;
      }
    }
    EXPECT_NEAR(cdf, 1.0, 1e-12) << mu;
  }
}

TEST(Poisson, TailsStayAccurateWhereOneMinusCdfWouldNot) {
  // P(N > 5) at mu = 1e-3 is ~1.39e-21, far below 1 - cdf's resolution. Relative to its
  // first term pmf(6), the tail is 1 + mu / 7 + mu^2 / (7 * 8) + O(mu^3).
  const double mu = 1e-3;
  EXPECT_NEAR(poisson_sf(5, mu) / poisson_pmf(6, mu), 1.0 + mu / 7 + mu * mu / 56, 1e-11);
  // Huge means neither underflow to NaN nor lose the tail.
  EXPECT_EQ(poisson_sf(10, 1e12), 1.0);
  EXPECT_EQ(poisson_pmf(10, 1e12), 0.0);
  EXPECT_GT(poisson_sf(1000, 1000), 0.48);  // just below a half: the Poisson is right-skewed
  EXPECT_LT(poisson_sf(1000, 1000), 0.5);
  // Limits.
  EXPECT_EQ(poisson_sf(0, 0.0), 0.0);
  EXPECT_EQ(poisson_pmf(0, 0.0), 1.0);
  EXPECT_EQ(poisson_sf(3, kInf), 1.0);
}

// ---- Eq. 1

// Eq. 1 against E[min(1 + N(T), B)] summed by brute force, and against the renewal form
// 1 + sum_{k<=B-2} P(N > k) that the mean wait uses.
TEST(Eq1, MatchesDirectExpectation) {
  for (uint32_t B : {2u, 3u, 16u, 64u}) {
    for (double T_us : {0.0, 0.3, 2.0, 10.0, 15.0, 40.0, 120.0}) {
      const double mu = kLambda * T_us * kUs;
      double direct = 0, renewal = 1;
      for (uint64_t n = 0; n < 1000; ++n) {
        direct += std::min<double>(1.0 + double(n), B) * poisson_pmf(n, mu);
      }
      for (uint32_t k = 0; k + 2 <= B; ++k) renewal += poisson_sf(k, mu);
      const double eq1 = expected_batch(kLambda, B, T_us * kUs);
      EXPECT_NEAR(eq1, direct, 1e-10) << "B " << B << " T " << T_us;
      EXPECT_NEAR(eq1, renewal, 1e-10) << "B " << B << " T " << T_us;
      EXPECT_GE(eq1, 1.0);
      EXPECT_LE(eq1, double(B));
    }
  }
}

TEST(Eq1, CapacityTriggeredTendsToB) {
  EXPECT_EQ(expected_batch(kLambda, 16, kInf), 16.0);
  EXPECT_NEAR(expected_batch(kLambda, 16, 1.0), 16.0, 1e-12);  // T = 1 s: 1e6 arrivals
  EXPECT_NEAR(expected_batch(kLambda, 16, 100 * kUs), 16.0, 1e-12);
  EXPECT_NEAR(capacity_share(kLambda, 16, 100 * kUs), 1.0, 1e-12);
  // Numerically stable far out: mu = 1e12 gives no NaN.
  EXPECT_EQ(expected_batch(1e12, 16, 1.0), 16.0);
}

TEST(Eq1, TinyTimerTendsToOne) {
  EXPECT_EQ(expected_batch(kLambda, 16, 0.0), 1.0);
  // To first order a group of T << 1/lambda catches one more PDU with probability lambda T.
  const double T = 1e-9;  // mu = 1e-3
  EXPECT_NEAR(expected_batch(kLambda, 16, T), 1.0 + kLambda * T, 1e-6);
  EXPECT_NEAR(capacity_share(kLambda, 16, T), 0.0, 1e-30);
}

// ---- Eq. 2 and the mean wait at finite T

TEST(Eq2, MeanWaitCapacityRegime) {
  EXPECT_DOUBLE_EQ(mean_wait_capacity(kLambda, 16), 7.5 * kUs);
  EXPECT_DOUBLE_EQ(mean_wait_capacity(2e5, 8), 7.0 / 4e5);
  EXPECT_DOUBLE_EQ(mean_wait(kLambda, 16, kInf), 7.5 * kUs);
  EXPECT_NEAR(mean_wait(kLambda, 16, 1.0), 7.5 * kUs, 1e-12 * kUs);
  EXPECT_NEAR(mean_wait(2e5, 8, 1.0), 7.0 / 4e5, 1e-15);
}

TEST(Eq2, MeanWaitSmallT) {
  EXPECT_EQ(mean_wait(kLambda, 16, 0.0), 0.0);
  // A group of T << 1/lambda is almost always the lone first PDU, which waits T.
  EXPECT_NEAR(mean_wait(kLambda, 16, 1e-9), 1e-9, 1e-11);
  // The wait grows with T (until it is Eq. 2 to double precision) and never exceeds Eq. 2.
  double prev = 0;
  for (double T_us = 1; T_us < 100; T_us += 3) {
    const double w = mean_wait(kLambda, 16, T_us * kUs);
    if (T_us < 30) {
      EXPECT_GT(w, prev);
    }
    EXPECT_GE(w, prev);
    EXPECT_LE(w, 7.5 * kUs * (1 + 1e-12));
    prev = w;
  }
}

// ---- Eq. 3, 4, 5

TEST(Eq3, WriteLatencyIsTheSumOfItsParts) {
  WriteLatency w{10 * kUs, 5 * kUs, 7.5 * kUs, 2 * kUs, 20 * kUs};
  EXPECT_DOUBLE_EQ(w.total(), 44.5 * kUs);
}

TEST(Eq4, PaperWorkedExample) {
  // B = 16, c2 = 4, p = 0.5: a semantic group closes after c2 / p = 8 PDUs on average.
  EXPECT_DOUBLE_EQ(r2t_ratio(16, 4, 0.5), 7.0 / 15.0);
  const Report r =
      evaluate({.lambda = kLambda, .B = 16, .T_us = 50, .p = 0.5, .c2 = 4, .sim_groups = 0});
  EXPECT_DOUBLE_EQ(r.R, 7.0 / 15.0);
  EXPECT_NEAR(r.r2t_cut_pct, 53.33, 0.01);
  // Eq. 5: (1 - 7/15) * 15 / (2 lambda) = 4 inter-arrival times.
  EXPECT_DOUBLE_EQ(delta_write_latency(kLambda, 16, 4, 0.5), 4 * kUs);
  EXPECT_NEAR(r.delta_twrite_us, 4.0, 1e-12);
}

TEST(Eq4, Limits) {
  EXPECT_DOUBLE_EQ(r2t_ratio(16, 12, 0.5), 1.0);  // c2 / p >= B: the B cap closes first
  EXPECT_DOUBLE_EQ(r2t_ratio(16, 1, 1.0), 0.0);   // every R2T flushes at once
  EXPECT_DOUBLE_EQ(r2t_ratio(16, 4, 1.0), 3.0 / 15.0);
  EXPECT_DOUBLE_EQ(delta_write_latency(kLambda, 16, 32, 0.5), 0.0);
}

TEST(Eq4, ExactRatioClosedForms) {
  // Without the B cap (c2 / p << B) the exact ratio is (c2 - 1) / (p (B - 1)), i.e. Eq. 4
  // minus (1 - p) / (p (B - 1)); the cap (P(fewer than c2 R2Ts in B PDUs)) shifts it a little.
  EXPECT_NEAR(r2t_ratio_exact(64, 4, 0.5), 3.0 / (0.5 * 63), 1e-9);
  EXPECT_NEAR(r2t_ratio_exact(64, 4, 0.5), r2t_ratio(64, 4, 0.5) - 0.5 / (0.5 * 63), 1e-9);
  EXPECT_NEAR(r2t_ratio_exact(16, 4, 0.5), 0.4, 0.005);
  for (uint32_t c2 : {1u, 2u, 4u, 16u}) {  // p = 1: both agree exactly
    EXPECT_NEAR(r2t_ratio_exact(16, c2, 1.0), r2t_ratio(16, c2, 1.0), 1e-12) << c2;
  }
  EXPECT_NEAR(r2t_ratio_exact(16, 40, 0.5), 1.0, 1e-12);  // c2 > B: never control-triggered
}

// ---- Monte-Carlo

TEST(Simulation, DeterministicForASeed) {
  SimConfig c;
  c.T = 10 * kUs;
  c.groups = 5000;
  const SimResult a = simulate(c), b = simulate(c);
  EXPECT_EQ(a.eb_eff, b.eb_eff);
  EXPECT_EQ(a.r2t_ratio, b.r2t_ratio);
  c.seed = 2;
  EXPECT_NE(simulate(c).eb_eff, a.eb_eff);
}

// Eq. 1 against the simulated mean group size, across the timer- and capacity-triggered mix.
TEST(Simulation, MatchesEq1) {
  for (double T_us : {0.0, 2.0, 5.0, 10.0, 15.0, 30.0}) {
    SimConfig c;
    c.lambda = kLambda;
    c.B = 16;
    c.T = T_us * kUs;
    c.groups = 100000;
    c.seed = 7;
    const SimResult s = simulate(c);
    const double eq1 = expected_batch(c.lambda, c.B, c.T);
    // Group sizes lie in [1, 16], sd <= 7.5, so the standard error is at most 0.024 here.
    EXPECT_LE(s.eb_eff_se, 0.025);
    EXPECT_NEAR(s.eb_eff, eq1, 5 * s.eb_eff_se + 1e-12) << "T = " << T_us << " us";
  }
}

// The exact mean wait at finite T against the simulation. A ratio of means: its standard
// error comes from 10 independent replicas (different seeds).
TEST(Simulation, MatchesMeanWait) {
  for (double T_us : {3.0, 10.0, 20.0}) {
    std::vector<double> w;
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      SimConfig c;
      c.T = T_us * kUs;
      c.groups = 10000;
      c.seed = seed;
      w.push_back(simulate(c).mean_wait);
    }
    const double mean = std::accumulate(w.begin(), w.end(), 0.0) / double(w.size());
    double var = 0;
    for (double x : w) var += (x - mean) * (x - mean);
    const double se = std::sqrt(var / double(w.size() - 1) / double(w.size()));
    const double exact = mean_wait(kLambda, 16, T_us * kUs);
    EXPECT_LE(se, 0.01 * exact);
    EXPECT_NEAR(mean, exact, 5 * se) << "T = " << T_us << " us";
  }
}

// What the simulation measures: for each R2T, the time from its arrival to the flush of its
// group, averaged over all R2Ts (the scheduler's r2t_delay_ns), under semantic and under
// uniform flushing of the *same* arrivals, and the ratio of the two means. With T = Tc = inf
// every group is capacity-triggered (B PDUs, or c2 R2Ts under semantic), the regime Eq. 4
// describes. Why it should match: Eq. 4 prices an R2T's wait like that of an average PDU of
// its group, (g - 1) / (2 lambda) with g = min(B, c2 / p) under semantic and g = B under
// uniform. That holds exactly under uniform (marks are independent of arrival times), and
// under semantic up to one effect: the c2-th R2T closes its group and waits nothing, so the
// R2Ts sit earlier on average than a random PDU would. The exact ratio (r2t_ratio_exact) is
// then below Eq. 4 by (1 - p) / (p (B - 1)) = 1/15 for the paper's example; the simulation
// must match the exact ratio to within its noise and Eq. 4 to within that known bias, and
// Eq. 4 exactly when p = 1 (every PDU an R2T, so the bias is 0).
TEST(Simulation, R2tDelayRatioMatchesEq4InCapacityRegime) {
  struct Case {
    uint32_t B, c2;
    double p;
  };
  for (Case k : {Case{16, 4, 0.5}, Case{16, 4, 1.0}, Case{16, 6, 0.4}, Case{32, 2, 0.25}}) {
    SimConfig c;
    c.B = k.B;
    c.c2 = k.c2;
    c.p = k.p;
    c.T = kInf;
    c.Tc = kInf;
    c.groups = 100000;
    c.seed = 11;
    const SimResult s = simulate(c);
    const double eq4 = r2t_ratio(k.B, k.c2, k.p), exact = r2t_ratio_exact(k.B, k.c2, k.p);
    const double bias = (1 - k.p) / (k.p * (k.B - 1));
    // P(fewer than c2 R2Ts among B PDUs): how often the B cap closes a semantic group.
    double cap_binds = 0;
    for (uint32_t i = 0; i < k.c2 && i <= k.B; ++i) {
      cap_binds +=
          std::exp(std::lgamma(k.B + 1.0) - std::lgamma(i + 1.0) - std::lgamma(k.B - i + 1.0) +
                   i * std::log(k.p) + (k.B - i) * std::log1p(-k.p));
    }
    SCOPED_TRACE(::testing::Message() << "B " << k.B << " c2 " << k.c2 << " p " << k.p);
    EXPECT_EQ(s.eb_eff, double(k.B));  // capacity only
    EXPECT_LE(s.r2t_ratio_se, 0.005);
    EXPECT_NEAR(s.r2t_ratio, exact, 5 * s.r2t_ratio_se);
    // The known bias of Eq. 4 holds where the B cap rarely binds (c2 / p well below B). Near
    // c2 / p ~ B, Eq. 4's min() is a poor stand-in for the random group size: B = 16, c2 = 6,
    // p = 0.4 gives Eq. 4 = 0.93 against an exact 0.77; only the exact form is checked there.
    if (cap_binds < 0.02) {
      EXPECT_LE(s.r2t_ratio, eq4 + 5 * s.r2t_ratio_se);
      EXPECT_LE(std::abs(s.r2t_ratio - eq4), bias + 5 * s.r2t_ratio_se);
    }
    // Uniform R2Ts wait like any PDU: Eq. 2.
    EXPECT_NEAR(s.r2t_wait_uniform, mean_wait_capacity(c.lambda, k.B),
                0.01 * mean_wait_capacity(c.lambda, k.B));
  }
}

TEST(Simulation, ControlTimerZeroFlushesEachFirstR2t) {
  SimConfig c;
  c.T = kInf;
  c.Tc = 0;
  c.groups = 20000;
  const SimResult s = simulate(c);
  EXPECT_EQ(s.r2t_ratio, 0.0);  // the first R2T of a group closes it on arrival
  EXPECT_EQ(s.r2t_wait_semantic, 0.0);
  EXPECT_LT(s.eb_eff_semantic, 3.0);  // about 1 / p = 2 PDUs per group
  EXPECT_GT(s.eb_eff_semantic, 1.0);
}

TEST(Simulation, TimerZeroSendsEachPduAlone) {
  SimConfig c;
  c.T = 0;
  c.groups = 1000;
  const SimResult s = simulate(c);
  EXPECT_EQ(s.eb_eff, 1.0);
  EXPECT_EQ(s.mean_wait, 0.0);
  EXPECT_TRUE(std::isnan(s.r2t_ratio));  // nothing waits under either policy
}

// ---- `sens model` without the command line

TEST(Report, ValidationNamesTheOptionAndTheRule) {
  const Inputs ok{.lambda = kLambda};
  EXPECT_EQ(validate(ok), "");
  auto err = [&](auto mutate) {
    Inputs in = ok;
    mutate(in);
    return validate(in);
  };
  EXPECT_EQ(err([](Inputs& i) { i.lambda = 0; }),
            "--lambda must be a finite rate > 0 (PDUs per second), got 0");
  EXPECT_NE(err([](Inputs& i) { i.lambda = NAN; }).find("--lambda"), std::string::npos);
  EXPECT_NE(err([](Inputs& i) { i.lambda = kInf; }).find("--lambda"), std::string::npos);
  EXPECT_EQ(err([](Inputs& i) { i.B = 1; }), "--B must be an integer in [2, 65536], got 1");
  EXPECT_NE(err([](Inputs& i) { i.B = kMaxB + 1; }).find("--B"), std::string::npos);
  EXPECT_EQ(err([](Inputs& i) { i.T_us = -1; }),
            "--T-us must be >= 0 (microseconds, inf allowed), got -1");
  EXPECT_NE(err([](Inputs& i) { i.T_us = NAN; }).find("--T-us"), std::string::npos);
  EXPECT_EQ(err([](Inputs& i) { i.p = 0; }), "--p must be in (0, 1], got 0");
  EXPECT_EQ(err([](Inputs& i) { i.p = 1.5; }), "--p must be in (0, 1], got 1.5");
  EXPECT_EQ(err([](Inputs& i) { i.c2 = 0; }), "--c2 must be an integer in [1, 4294967295], got 0");
  EXPECT_NE(err([](Inputs& i) { i.Tc_us = -3; }).find("--Tc-us"), std::string::npos);
  EXPECT_NE(err([](Inputs& i) { i.sim_groups = -1; }).find("--sim-groups"), std::string::npos);
  // Edge values that are valid.
  EXPECT_EQ(err([](Inputs& i) { i.p = 1, i.B = 2, i.c2 = 1, i.T_us = 0, i.Tc_us = 0; }), "");
  EXPECT_EQ(err([](Inputs& i) { i.T_us = kInf, i.sim_groups = 0; }), "");
}

TEST(Report, JsonKeysAndValues) {
  const Report r = evaluate(
      {.lambda = kLambda, .B = 16, .T_us = 50, .p = 0.5, .c2 = 4, .sim_groups = 20000, .seed = 3});
  const nlohmann::json j = to_json(r);
  for (const char* key : {"lambda", "B", "T_us", "p", "c2", "eb_eff", "ew_us", "R", "r2t_cut_pct",
                          "delta_twrite_us", "sim"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"eb_eff", "r2t_ratio", "groups"}) {
    EXPECT_TRUE(j["sim"].contains(key)) << key;
  }
  EXPECT_EQ(j["lambda"], kLambda);
  EXPECT_EQ(j["B"], 16);
  EXPECT_EQ(j["c2"], 4);
  EXPECT_DOUBLE_EQ(j["T_us"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(j["eb_eff"].get<double>(), expected_batch(kLambda, 16, 50 * kUs));
  EXPECT_DOUBLE_EQ(j["ew_us"].get<double>(), 7.5);
  EXPECT_DOUBLE_EQ(j["R"].get<double>(), 7.0 / 15.0);
  EXPECT_NEAR(j["r2t_cut_pct"].get<double>(), 800.0 / 15.0, 1e-9);
  EXPECT_NEAR(j["delta_twrite_us"].get<double>(), 4.0, 1e-12);
  EXPECT_EQ(j["sim"]["groups"], 20000);
  EXPECT_NEAR(j["sim"]["eb_eff"].get<double>(), r.eb_eff, 0.05);
  EXPECT_TRUE(j["Tc_us"].is_null());  // inf: capacity dominates

  const nlohmann::json none = to_json(evaluate({.lambda = kLambda, .sim_groups = 0}));
  EXPECT_TRUE(none["sim"].is_null());
}

TEST(Report, TextTableHasUnitsAndEquations) {
  const std::string t = to_text(evaluate({.lambda = kLambda, .sim_groups = 2000}));
  for (const char* s :
       {"Eq. 1", "Eq. 2", "Eq. 4", "Eq. 5", "PDUs", " us", "%", "Monte-Carlo", "0.4667", "53.33"}) {
    EXPECT_NE(t.find(s), std::string::npos) << s << " in\n" << t;
  }
  // A timer-dominated load says so.
  const std::string slow = to_text(evaluate({.lambda = 1e5, .sim_groups = 0}));
  EXPECT_NE(slow.find("note:"), std::string::npos) << slow;
}

}  // namespace
}  // namespace sens::model
