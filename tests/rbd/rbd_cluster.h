#pragma once
// What the rbd tests share (rbd_test.cc, rbd_reservation_test.cc): the one-node Ceph cluster
// this binary starts (registered once, in rbd_test.cc), `sens target` children on an image, and
// block reads and writes through a raw client.
//
// No cluster means a failure, not a skip: only SENS_SKIP_RBD=1 skips these tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../integration/child_process.h"
#include "../integration/raw_client.h"

namespace sens::testing {
using Clock = std::chrono::steady_clock;
using nvme::Xfer;
inline constexpr const char* kNqn = "nqn.2026-11.io.sens-target:rbd";
inline constexpr uint32_t kBlock = 512;

inline std::string g_base;  // the cluster's directory (conf, keyrings, OSD files)
inline std::string g_script;
inline std::string g_conf;
inline std::string g_setup_error;  // why the cluster is not there ("" when it is)

inline bool skip_requested() {
  const char* s = std::getenv("SENS_SKIP_RBD");
  return s != nullptr && std::string(s) == "1";
}

// The project's cluster launcher; SENS_CEPH_CLUSTER names another script with the same
// commands and environment.
inline std::string cluster_script() {
  if (const char* s = std::getenv("SENS_CEPH_CLUSTER")) return s;
  return std::string(SENS_SOURCE_DIR) + "/tests/rbd/cluster.sh";
}

inline RunResult cluster_command(const std::string& what, int timeout_ms = 240000) {
  return run_command({g_script, what}, timeout_ms);
}

inline RunResult rbd_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/rbd", "--conf", g_conf};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, 60000);
}

class CephCluster : public ::testing::Environment {
 public:
  void SetUp() override {
    if (skip_requested()) return;
#if !SENS_HAVE_RBD
    g_setup_error = "this build has no RBD backend (librbd-dev, librados-dev: make deps)";
    return;
#endif
    g_script = cluster_script();
    if (access(g_script.c_str(), X_OK) != 0) {
      g_setup_error = "no executable cluster script at " + g_script + " (set SENS_CEPH_CLUSTER)";
      return;
    }
    char tmpl[] = "/tmp/sens-rbd-XXXXXX";
    if (!mkdtemp(tmpl)) {
      g_setup_error = "mkdtemp failed";
      return;
    }
    g_base = tmpl;
    g_conf = g_base + "/ceph.conf";
    uint16_t v2 = free_port(), v1 = free_port();
    while (v1 == v2) v1 = free_port();
    setenv("CLUSTER_DIR", g_base.c_str(), 1);
    setenv("CLUSTER_MON_PORT", std::to_string(v2).c_str(), 1);
    setenv("CLUSTER_MON_V1_PORT", std::to_string(v1).c_str(), 1);
    setenv("CLUSTER_OSD_GB", "4", 1);
    setenv("CLUSTER_IMAGE", "disk0", 1);
    setenv("CLUSTER_IMAGE_SIZE", "1G", 1);
    setenv("CEPH_CONF", g_conf.c_str(), 1);  // for the targets started without conf=
    auto t0 = Clock::now();
    RunResult r = cluster_command("start");
    if (r.code == 3) {  // the script names the missing packages and how to install them
      g_setup_error = "Ceph is not installed:\n" + r.err;
      return;
    }
    if (r.code != 0) {
      g_setup_error =
          g_script + " start failed (exit " + std::to_string(r.code) + "):\n" + r.out + r.err;
      return;
    }
    std::printf("[ cluster  ] started in %.1f s at %s (mon ports %u, %u)\n",
                std::chrono::duration<double>(Clock::now() - t0).count(), g_base.c_str(), v2, v1);
    for (const char* image : {"disk1", "small"}) {
      RunResult c = rbd_cli({"create", "--size", image == std::string("small") ? "64M" : "1G",
                             std::string("rbd/") + image});
      if (c.code != 0) {
        g_setup_error = std::string("rbd create ") + image + " failed: " + c.err;
        return;
      }
    }
  }
  void TearDown() override {
    if (g_base.empty()) return;
    cluster_command("clean");
    std::error_code ec;
    std::filesystem::remove_all(g_base, ec);
  }
};

#define REQUIRE_CLUSTER()                                                                    \
  do {                                                                                       \
    if (skip_requested()) GTEST_SKIP() << "SENS_SKIP_RBD=1";                                 \
    ASSERT_TRUE(g_setup_error.empty()) << "no Ceph cluster for the test: " << g_setup_error; \
  } while (0)

// A `sens target` child on a free port, serving `namespaces`. It is stopped as an operator
// would (SIGTERM: the image is closed and its exclusive lock released). A SIGKILLed target
// keeps the lock until the cluster drops the dead client's watch (~30 s), and the next test's
// first write to the image waits that long: the host's 30 s command timeout then fails it.
struct RunningTarget {
  TempDir dir;
  Child child;
  uint16_t port = 0;

  RunningTarget() = default;
  RunningTarget(const RunningTarget&) = delete;
  RunningTarget& operator=(const RunningTarget&) = delete;
  ~RunningTarget() {
    if (child.running() && child.signal(SIGTERM) && child.wait(30000) < 0) {
      std::fprintf(stderr, "[ target   ] did not stop within 30 s of SIGTERM:\n%s\n",
                   log().c_str());
    }
  }

  std::string start(const std::vector<std::string>& namespaces,
                    const std::vector<std::string>& extra = {}, int timeout_ms = 30000) {
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      std::vector<std::string> argv = {
          SENS_BINARY,        "target", "--listen", "127.0.0.1:" + std::to_string(port),
          "--discovery-port", "0",      "--nqn",    kNqn};
      for (auto& ns : namespaces) {
        argv.push_back("--ns");
        argv.push_back(ns);
      }
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "listening on", timeout_ms)) return "";
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free port: " + why;
  }
  std::string trid() const {
    return "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) + " subnqn:" + kNqn;
  }
  std::string log() { return read_file(dir.file("out")) + read_file(dir.file("err")); }
};

inline std::string image_spec(const std::string& image) {
  return "rbd:rbd/" + image + ",conf=" + g_conf;
}

inline std::vector<uint8_t> read_blocks(RawClient& io, uint64_t slba, uint32_t nlb, Result* out) {
  std::vector<uint8_t> data(size_t(nlb) * kBlock);
  *out = io.exec(
      nvme::make_io(nvme::io_op::kRead, 1, slba, nlb, Xfer::kTransport, uint32_t(data.size())),
      nullptr, 0, data.data(), uint32_t(data.size()), false, 20000);
  return data;
}

inline Result write_blocks(RawClient& io, uint64_t slba, const std::vector<uint8_t>& data,
                           bool fua) {
  uint32_t nlb = uint32_t(data.size() / kBlock);
  bool in_capsule = data.size() <= 8192;
  auto sqe = nvme::make_io(nvme::io_op::kWrite, 1, slba, nlb,
                           in_capsule ? Xfer::kInCapsule : Xfer::kTransport, uint32_t(data.size()));
  if (fua) sqe.cdw12 |= 1u << 30;
  return io.exec(sqe, data.data(), uint32_t(data.size()), nullptr, 0, false, 20000);
}

// Reservation commands (rbd_reservation_test.cc; rbd_test.cc's lost cluster too): `op` with
// CDW10 and the two keys in the data.
inline constexpr uint8_t kRegister = 0x0D, kReport = 0x0E, kAcquire = 0x11, kRelease = 0x15;
inline constexpr uint16_t kConflict = 0x083;
inline Result resv(RawClient& io, uint8_t op, uint32_t cdw10, uint64_t k1, uint64_t k2 = 0) {
  uint8_t data[16];
  std::memcpy(data, &k1, 8);
  std::memcpy(data + 8, &k2, 8);
  uint32_t len = op == kRelease ? 8 : 16;
  auto sqe = nvme::make_io(op, 1, 0, 0, nvme::Xfer::kInCapsule, len);
  sqe.cdw10 = cdw10;
  return io.exec(sqe, data, len, nullptr, 0, false, 20000);
}

}  // namespace sens::testing
