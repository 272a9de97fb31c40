// sens discover: reads a discovery controller's log page, printed as `nvme discover` does.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "host/controller.h"
#include "host/print.h"
#include "tools/cli.h"
#include "tools/command.h"
#include "wire/nvme.h"

namespace {

int discover_main(int argc, char** argv) {
  std::string addr, hostnqn;
  uint16_t port = 8009;
  bool hdr_digest = false;
  uint32_t timeout_ms = 10000;
  CLI::App app{"Connects to an NVMe/TCP discovery controller and prints its log page (0x70)."};
  app.name(argv[0]);
  app.add_option("-a,--traddr", addr, "discovery controller address")->required();
  app.add_option("-s,--trsvcid", port, "port")->capture_default_str();
  app.add_option("-q,--hostnqn", hostnqn, "host NQN (default: a generated uuid NQN)");
  app.add_flag("--hdr-digest", hdr_digest, "header digests");
  app.add_option("--timeout", timeout_ms, "connect and command timeout, ms")->capture_default_str();
  std::string secret, ctrl_secret, tls_file;
  sens::tools::add_host_security_options(app, secret, ctrl_secret, tls_file);
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  std::string err;
  std::string text = "traddr:" + addr + " trsvcid:" + std::to_string(port);
  if (!hostnqn.empty()) text += " hostnqn:" + hostnqn;
  auto trid = sens::host::parse_trid(text, &err);
  if (!trid) {
    std::fprintf(stderr, "sens discover: %s\n", err.c_str());
    return 2;
  }
  sens::Reactor reactor;
  sens::host::Controller ctrl(reactor);
  sens::host::ControllerOptions co;
  co.kato_ms = 0;  // a one-shot query, like `nvme discover`: no keep alive
  co.hdr_digest = hdr_digest;
  co.connect_timeout = co.admin_timeout = sens::Nanos(timeout_ms) * sens::kMilli;
  co.dhchap_secret = secret;
  co.dhchap_ctrl_secret = ctrl_secret;
  co.tls_psk_file = tls_file;
  std::vector<uint8_t> log;
  if (err = ctrl.connect(*trid, co); err.empty()) err = ctrl.discovery_log(&log);
  if (!err.empty()) {
    std::fprintf(stderr, "sens discover: %s:%u: %s\n", addr.c_str(), port, err.c_str());
    return 1;
  }
  ctrl.shutdown();
  std::fputs(sens::host::format_discovery_log(log).c_str(), stdout);
  return 0;
}

sens::tools::RegisterCommand register_discover("discover",
                                               "print an NVMe/TCP discovery log (nvme discover)",
                                               discover_main);

}  // namespace
