#pragma once
// A `sens target` child with a management socket, and `sens rpc` against it (the RPC tests).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "auth/dhchap.h"
#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {

struct RpcTarget {
  using json = nlohmann::json;
  TempDir dir;
  Child child;
  uint16_t port = 0;
  uint16_t dport = 0;  // a discovery port (0: none)
  std::string sock;

  std::string start(const std::vector<std::string>& extra = {}) {
    sock = dir.file("rpc.sock");
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      std::vector<std::string> argv = {SENS_BINARY,
                                       "target",
                                       "--listen",
                                       "127.0.0.1:" + std::to_string(port),
                                       "--discovery-port",
                                       std::to_string(dport),
                                       "--rpc",
                                       sock,
                                       "--ns",
                                       "ram:64M"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "management:", 5000)) return "";
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free port: " + why;
  }
  RunResult rpc(std::vector<std::string> args, int timeout_ms = 20000) {
    std::vector<std::string> argv = {SENS_BINARY, "rpc", "--socket", sock};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, timeout_ms);
  }
  // A call that must succeed: its result.
  json ok(std::vector<std::string> args) {
    RunResult r = rpc(args);
    EXPECT_EQ(r.code, 0) << "sens rpc " << args[0] << ": " << r.err;
    return json::parse(r.out, nullptr, false);
  }
  // A call that must be refused (exit 1): its message.
  std::string refused(std::vector<std::string> args) {
    RunResult r = rpc(args);
    EXPECT_EQ(r.code, 1) << "sens rpc " << args[0] << " was not refused: " << r.out;
    return r.err;
  }
};

// A DH-HMAC-CHAP secret made from `seed` (DHHC-1:0t:...:).
inline std::string make_secret(uint8_t transform, size_t len, uint8_t seed) {
  auth::Secret s;
  s.transform = transform;
  for (size_t i = 0; i < len; ++i) s.key.push_back(uint8_t(seed * 29 + i * 5));
  return auth::format_secret(s);
}

}  // namespace sens::testing
