// `sens model` without the command line: validation, evaluation and the two output formats.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/model.h"

namespace sens::model {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// JSON has no inf or NaN: an unbounded time or an undefined ratio is null.
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

std::string us_text(double us) {
  return std::isinf(us) ? "inf" : format("%g us", us);
}

}  // namespace

std::string validate(const Inputs& in) {
  if (!(in.lambda > 0) || !std::isfinite(in.lambda)) {
    return format("--lambda must be a finite rate > 0 (PDUs per second), got %g", in.lambda);
  }
  if (in.B < 2 || in.B > kMaxB) {
    return format("--B must be an integer in [2, %lld], got %lld", (long long)kMaxB,
                  (long long)in.B);
  }
  if (!(in.T_us >= 0)) {
    return format("--T-us must be >= 0 (microseconds, inf allowed), got %g", in.T_us);
  }
  if (!(in.p > 0 && in.p <= 1)) return format("--p must be in (0, 1], got %g", in.p);
  if (in.c2 < 1 || in.c2 > int64_t(UINT32_MAX)) {
    return format("--c2 must be an integer in [1, %u], got %lld", UINT32_MAX, (long long)in.c2);
  }
  if (!(in.Tc_us >= 0)) {
    return format("--Tc-us must be >= 0 (microseconds, inf allowed), got %g", in.Tc_us);
  }
  if (in.sim_groups < 0 || in.sim_groups > kMaxSimGroups) {
    return format("--sim-groups must be in [0, %lld] (0 skips the simulation), got %lld",
                  (long long)kMaxSimGroups, (long long)in.sim_groups);
  }
  return {};
}

Report evaluate(const Inputs& in) {
  Report r;
  r.in = in;
  const uint32_t B = uint32_t(in.B), c2 = uint32_t(in.c2);
  const double T = in.T_us * 1e-6;
  r.eb_eff = expected_batch(in.lambda, B, T);
  r.p_capacity = capacity_share(in.lambda, B, T);
  r.ew_us = mean_wait_capacity(in.lambda, B) * 1e6;
  r.ew_exact_us = mean_wait(in.lambda, B, T) * 1e6;
  r.R = r2t_ratio(B, c2, in.p);
  r.R_exact = r2t_ratio_exact(B, c2, in.p);
  r.r2t_cut_pct = (1.0 - r.R) * 100.0;
  r.delta_twrite_us = delta_write_latency(in.lambda, B, c2, in.p) * 1e6;
  if (in.sim_groups > 0) {
    SimConfig sc;
    sc.lambda = in.lambda;
    sc.B = B;
    sc.T = T;
    sc.p = in.p;
    sc.c2 = c2;
    sc.Tc = in.Tc_us * 1e-6;
    sc.groups = uint64_t(in.sim_groups);
    sc.seed = in.seed;
    r.sim = simulate(sc);
    r.simulated = true;
  }
  return r;
}

nlohmann::json to_json(const Report& r) {
  nlohmann::json sim;  // null when skipped
  if (r.simulated) {
    const SimResult& s = r.sim;
    sim = {{"eb_eff", num(s.eb_eff)},
           {"eb_eff_se", num(s.eb_eff_se)},
           {"eb_eff_semantic", num(s.eb_eff_semantic)},
           {"ew_us", num(s.mean_wait * 1e6)},
           {"r2t_ratio", num(s.r2t_ratio)},
           {"r2t_ratio_se", num(s.r2t_ratio_se)},
           {"r2t_wait_uniform_us", num(s.r2t_wait_uniform * 1e6)},
           {"r2t_wait_semantic_us", num(s.r2t_wait_semantic * 1e6)},
           {"groups", s.groups},
           {"seed", r.in.seed}};
  }
  return {{"lambda", r.in.lambda},
          {"B", r.in.B},
          {"T_us", num(r.in.T_us)},
          {"p", r.in.p},
          {"c2", r.in.c2},
          {"Tc_us", num(r.in.Tc_us)},
          {"eb_eff", num(r.eb_eff)},
          {"p_capacity", num(r.p_capacity)},
          {"ew_us", num(r.ew_us)},
          {"ew_exact_us", num(r.ew_exact_us)},
          {"R", num(r.R)},
          {"R_exact", num(r.R_exact)},
          {"r2t_cut_pct", num(r.r2t_cut_pct)},
          {"delta_twrite_us", num(r.delta_twrite_us)},
          {"sim", std::move(sim)}};
}

std::string to_text(const Report& r) {
  const Inputs& in = r.in;
  const SimResult& s = r.sim;
  auto sim_val = [&](double v, double se, const char* fmt) -> std::string {
    if (!r.simulated) return "";
    if (!std::isfinite(v)) return "n/a";
    std::string out = format(fmt, v);
    if (std::isfinite(se) && se > 0) out += format(" ±%.2g", se);
    return out;
  };
  std::string out;
  out += "SENS analytical model (paper, Section 3.4)\n";
  out += format("  lambda = %g PDUs/s, B = %lld, T = %s, p = %g, c2 = %lld, Tc = %s%s\n\n",
                in.lambda, (long long)in.B, us_text(in.T_us).c_str(), in.p, (long long)in.c2,
                us_text(in.Tc_us).c_str(),
                std::isinf(in.Tc_us) ? " (simulation: capacity dominates)" : "");
  auto row = [&](const char* what, const char* eq, const std::string& model, const std::string& sim,
                 const char* unit) {
    out += format("  %-28s %-9s %12s  %-18s %s\n", what, eq, model.c_str(), sim.c_str(), unit);
  };
  row("quantity", "", "model", r.simulated ? "Monte-Carlo" : "", "unit");
  row("batch size E[B_eff]", "Eq. 1", format("%.4f", r.eb_eff),
      sim_val(s.eb_eff, s.eb_eff_se, "%.4f"), "PDUs");
  row("capacity-flushed groups", "P(T_B<=T)", format("%.2f", r.p_capacity * 100), "", "%");
  row("batch wait E[W], capacity", "Eq. 2", format("%.4f", r.ew_us), "", "us");
  row("batch wait E[W] at T", "exact", format("%.4f", r.ew_exact_us),
      sim_val(s.mean_wait * 1e6, NAN, "%.4f"), "us");
  row("R2T delay ratio R", "Eq. 4", format("%.4f", r.R),
      sim_val(s.r2t_ratio, s.r2t_ratio_se, "%.4f"), "semantic/uniform");
  row("R, capacity regime", "exact", format("%.4f", r.R_exact), "", "semantic/uniform");
  row("R2T queueing delay cut", "1 - R", format("%.2f", r.r2t_cut_pct),
      r.simulated && std::isfinite(s.r2t_ratio) ? format("%.2f", (1 - s.r2t_ratio) * 100) : "",
      "%");
  row("write latency saved", "Eq. 5", format("%.4f", r.delta_twrite_us),
      sim_val((s.r2t_wait_uniform - s.r2t_wait_semantic) * 1e6, NAN, "%.4f"), "us");
  if (r.simulated) {
    row("R2T wait, uniform", "", "", sim_val(s.r2t_wait_uniform * 1e6, NAN, "%.4f"), "us");
    row("R2T wait, semantic", "", "", sim_val(s.r2t_wait_semantic * 1e6, NAN, "%.4f"), "us");
    out += format("\n  Monte-Carlo: %llu groups, seed %llu; ± is one standard error.\n",
                  (unsigned long long)s.groups, (unsigned long long)in.seed);
  }
  if (r.p_capacity < 0.99) {
    out += format(
        "  note: the timer T closes %.1f%% of groups at this rate; Eq. 2, 4 and 5 assume the\n"
        "        capacity-triggered regime (T >> (B - 1) / lambda).\n",
        (1 - r.p_capacity) * 100);
  }
  return out;
}

}  // namespace sens::model
