// sens identify: Identify Controller (and namespaces), printed as `nvme id-ctrl` does.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "host/controller.h"
#include "host/print.h"
#include "tools/cli.h"
#include "tools/command.h"

namespace {

int identify_main(int argc, char** argv) {
  std::string trid_text;
  bool namespaces = false, hdr_digest = false, data_digest = false;
  uint32_t timeout_ms = 10000;
  CLI::App app{"Connects to an NVMe/TCP controller and prints Identify Controller."};
  app.name(argv[0]);
  app.add_option("-r,--trid", trid_text, "'trtype:tcp traddr:ADDR trsvcid:PORT subnqn:NQN'")
      ->required();
  app.add_flag("--ns,--namespaces", namespaces, "also Identify Namespace for each active one");
  app.add_flag("--hdr-digest", hdr_digest, "header digests");
  app.add_flag("--data-digest", data_digest, "data digests");
  app.add_option("--timeout", timeout_ms, "connect and command timeout, ms")->capture_default_str();
  std::string secret, ctrl_secret, tls_file;
  sens::tools::add_host_security_options(app, secret, ctrl_secret, tls_file);
  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  std::string err;
  auto trid = sens::host::parse_trid(trid_text, &err);
  if (!trid) {
    std::fprintf(stderr, "sens identify: -r: %s\n", err.c_str());
    return 2;
  }
  sens::Reactor reactor;
  sens::host::Controller ctrl(reactor);
  sens::host::ControllerOptions co;
  co.hdr_digest = hdr_digest;
  co.data_digest = data_digest;
  co.connect_timeout = co.admin_timeout = sens::Nanos(timeout_ms) * sens::kMilli;
  co.dhchap_secret = secret;
  co.dhchap_ctrl_secret = ctrl_secret;
  co.tls_psk_file = tls_file;
  if (err = ctrl.connect(*trid, co); !err.empty()) {
    std::fprintf(stderr, "sens identify: %s\n", err.c_str());
    return 1;
  }
  std::string out = sens::host::format_id_ctrl(ctrl.identify());
  if (namespaces && trid->subnqn != sens::nvme::kDiscoveryNqn) {
    std::vector<uint32_t> list;
    err = ctrl.active_namespaces(&list);
    auto ns = std::make_unique<sens::nvme::IdentifyNamespace>();
    for (size_t i = 0; err.empty() && i < list.size(); ++i) {
      err = ctrl.identify_namespace(list[i], ns.get());
      if (err.empty()) out += "\n" + sens::host::format_id_ns(list[i], *ns);
    }
    if (!err.empty()) {
      std::fprintf(stderr, "sens identify: %s\n", err.c_str());
      return 1;
    }
  }
  ctrl.shutdown();
  std::fputs(out.c_str(), stdout);
  return 0;
}

sens::tools::RegisterCommand register_identify("identify",
                                               "print Identify Controller (nvme id-ctrl)",
                                               identify_main);

}  // namespace
