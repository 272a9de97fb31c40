#pragma once
// Command-line parsing shared by every subcommand: --help exits 0, any usage error exits 2
// (CLI11's own codes would leak through otherwise).
#include <CLI/CLI.hpp>
#include <optional>

namespace sens::tools {

// Parses argv into `app`. Returns the exit status when the command must stop now (help was
// printed, or the usage error was reported), nullopt when it should run.
inline std::optional<int> parse_cli(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace sens::tools
