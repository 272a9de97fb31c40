// sens model: the SENS analytical model (Eq. 1-5) next to a Monte-Carlo run of the same group.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "tools/cli.h"
#include "tools/command.h"

namespace {

int run(int argc, char** argv) {
  sens::model::Inputs in;
  bool json = false;
  CLI::App app(
      "The SENS analytical model (paper, Section 3.4): expected batch size, batch wait and the "
      "R2T delay cut of semantic coalescing, checked by a Monte-Carlo simulation of one group.",
      "sens model");
  app.add_option("--lambda", in.lambda, "PDU arrival rate, PDUs per second")->required();
  app.add_option("--B", in.B, "capacity B, PDUs per group")->capture_default_str();
  app.add_option("--T-us", in.T_us, "timer T, microseconds (inf: no timer)")->capture_default_str();
  app.add_option("--p", in.p, "fraction of control PDUs (R2T), in (0, 1]")->capture_default_str();
  app.add_option("--c2", in.c2, "control capacity c2, R2Ts per group")->capture_default_str();
  app.add_option("--Tc-us", in.Tc_us,
                 "control timer Tc of the simulated semantic groups, microseconds "
                 "(default inf: capacity dominates)");
  app.add_option("--sim-groups", in.sim_groups, "groups to simulate (0: no simulation)")
      ->capture_default_str();
  app.add_option("--seed", in.seed, "simulation seed")->capture_default_str();
  app.add_flag("--json", json, "print one JSON object instead of the table");
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  if (std::string err = sens::model::validate(in); !err.empty()) {
    std::fprintf(stderr, "sens model: %s\n", err.c_str());
    return 2;
  }
  const sens::model::Report report = sens::model::evaluate(in);
  if (json) {
    std::printf("%s\n", sens::model::to_json(report).dump(2).c_str());
  } else {
    std::fputs(sens::model::to_text(report).c_str(), stdout);
  }
  return 0;
}

}  // namespace

static sens::tools::RegisterCommand register_model(
    "model", "the SENS analytical model and its Monte-Carlo check", run);
