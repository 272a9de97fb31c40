#pragma once
// Subcommands of the single `sens` binary register themselves here (like git's builtins), so
// each tool lives in its own file and main() knows none of them.
#include <functional>
#include <string>
#include <vector>

namespace sens::tools {

struct Command {
  std::string name;
  std::string summary;
  std::function<int(int argc, char** argv)> run;  // argv[0] is "sens NAME"
};

std::vector<Command>& registry();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string summary, std::function<int(int, char**)> run) {
    registry().push_back({std::move(name), std::move(summary), std::move(run)});
  }
};

}  // namespace sens::tools
