// sens: one binary, many subcommands (target, perf, discover, identify, model, netblk, bench).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/command.h"

namespace sens::tools {
std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace sens::tools

static void usage(FILE* out) {
  auto cmds = sens::tools::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::fprintf(out,
               "sens: a user-space NVMe over TCP target and host with semantic-aware PDU "
               "coalescing\n\nusage: sens COMMAND [options]   (sens COMMAND --help for "
               "details)\n\ncommands:\n");
  for (auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  for (auto& c : sens::tools::registry()) {
    if (c.name == name) {
      std::string prog = "sens " + name;
      argv[1] = prog.data();
      return c.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "sens: unknown command '%s'\n\n", name.c_str());
  usage(stderr);
  return 2;
}
