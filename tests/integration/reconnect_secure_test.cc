// Reconnect re-runs the whole secure bring-up: a target that insists on TLS 1.3 (PSK) and on
// bidirectional DH-HMAC-CHAP is stopped and a new one started on the same TLS port; the host
// library's controller reconnects through TLS and authenticates every connection again
// (admin queue and, in the shared modes, each I/O connection), and the writes held meanwhile
// complete and read back.
#include <sens/host.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "auth/dhchap.h"
#include "auth/tls_psk.h"
#include "child_process.h"
#include "common/log.h"
#include "raw_client.h"
#include "target/target.h"

namespace sens::testing {
namespace {

constexpr const char* kSub = "nqn.2026-11.dev.sens:secure-reconnect";

std::string secret(uint8_t transform, size_t len, uint8_t seed) {
  auth::Secret s;
  s.transform = transform;
  for (size_t i = 0; i < len; ++i) s.key.push_back(uint8_t(seed * 29 + i * 5));
  return auth::format_secret(s);
}

std::string psk(uint8_t seed) {
  auth::ConfiguredPsk p;
  p.transform = 1;
  for (size_t i = 0; i < 32; ++i) p.key.push_back(uint8_t(seed + 11 * i));
  return auth::format_tls_psk(p);
}

class SecureReconnect : public ::testing::TestWithParam<ShareMode> {
 protected:
  void SetUp() override {
    g_log_level = LogLevel::kError;
    ASSERT_TRUE(write_file(dir_.file("psk"), psk(4) + "\n"));
    ASSERT_EQ(start(0), "");
  }
  void TearDown() override {
    if (target_) target_->stop();
  }
  std::string start(uint16_t tls_port) {
    target::TargetConfig c;
    c.listen = {{"127.0.0.1", 0}};  // a plain listener too (unused): none means 4420
    c.tls_listen = {{"127.0.0.1", tls_port}};
    c.tls_psk_file = dir_.file("psk");
    c.discovery_port = 0;
    target::SubsystemConfig s;
    s.nqn = kSub;
    s.namespaces = {"ram:8M"};
    s.host_keys = {{kHostNqn, host_secret_}};
    s.ctrl_keys = {{kHostNqn, ctrl_secret_}};
    c.subsystems = {s};
    target::apply_defaults(c);
    if (std::string e = target::validate(c); !e.empty()) return e;
    target_ = std::make_unique<target::Target>(c);
    if (std::string e = target_->start(); !e.empty()) return e;
    for (auto& b : target_->bound())
      if (b.tls) port_ = b.port;
    return "";
  }

  TempDir dir_;
  std::unique_ptr<target::Target> target_;
  uint16_t port_ = 0;
  const std::string host_secret_ = secret(1, 32, 3), ctrl_secret_ = secret(0, 48, 4);
};

struct Io {
  std::vector<uint8_t> buf;
  iovec iov{};
  bool done = false;
  Completion c;
  static void on(void* ctx, const Completion& c) {
    auto* io = static_cast<Io*>(ctx);
    io->done = true;
    io->c = c;
  }
};

bool poll_all(Poller& p, std::vector<Io>& ios, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto left = [&] {
    int n = 0;
    for (auto& io : ios) n += !io.done;
    return n;
  };
  while (left() > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds)
    p.process_completions(0, 10'000'000);
  return left() == 0;
}

TEST_P(SecureReconnect, TlsAndDhchapAgainAfterATargetRestart) {
  ControllerOptions o;
  o.hostnqn = kHostNqn;
  o.share = GetParam();
  o.connections = 2;
  o.dhchap_secret = host_secret_;
  o.dhchap_ctrl_secret = ctrl_secret_;
  o.tls_psk_file = dir_.file("psk");
  o.reconnect_delay_s = 1;
  o.ctrl_loss_tmo_s = 30;
  o.connect_timeout_ms = o.admin_timeout_ms = 3000;
  const std::string trid =
      "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port_) + " subnqn:" + kSub;
  ConnectResult r = Controller::connect(trid, o).get();
  ASSERT_TRUE(r.controller) << r.error;
  Controller& ctrl = *r.controller;
  const uint32_t bs = ctrl.namespaces().at(0).block_size;
  Poller poller;
  std::string err;
  auto q0 = ctrl.create_io_queue(&poller, 16, &err);
  ASSERT_TRUE(q0) << err;
  auto q1 = ctrl.create_io_queue(&poller, 16, &err);
  ASSERT_TRUE(q1) << err;

  const uint16_t port = port_;
  target_->stop();
  target_.reset();
  const auto t0 = std::chrono::steady_clock::now();
  while (ctrl.state() == ControllerState::kLive &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    poller.process_completions(0, 10'000'000);
  ASSERT_EQ(ctrl.state(), ControllerState::kReconnecting);
  std::vector<Io> held(8);
  for (uint32_t i = 0; i < held.size(); ++i) {
    held[i].buf.assign(bs, uint8_t(0x40 + i));
    held[i].iov = {held[i].buf.data(), bs};
    ASSERT_EQ((i % 2 ? q1 : q0)->write(1, i, 1, &held[i].iov, 1, &Io::on, &held[i]), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(start(port), "");
  ASSERT_TRUE(poll_all(poller, held, 20)) << ctrl.last_error();
  for (auto& io : held) EXPECT_TRUE(io.c.status.ok()) << io.c.status.to_string();
  EXPECT_EQ(ctrl.state(), ControllerState::kLive);
  EXPECT_EQ(ctrl.counters().reconnects, 1u);

  std::vector<Io> back(8);
  for (uint32_t i = 0; i < back.size(); ++i) {
    back[i].buf.assign(bs, 0);
    back[i].iov = {back[i].buf.data(), bs};
    ASSERT_EQ((i % 2 ? q0 : q1)->read(1, i, 1, &back[i].iov, 1, &Io::on, &back[i]), 0);
  }
  ASSERT_TRUE(poll_all(poller, back, 10));
  for (uint32_t i = 0; i < back.size(); ++i) {
    EXPECT_TRUE(back[i].c.status.ok()) << back[i].c.status.to_string();
    EXPECT_EQ(back[i].buf, std::vector<uint8_t>(bs, uint8_t(0x40 + i))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(ShareModes, SecureReconnect,
                         ::testing::Values(ShareMode::kNone, ShareMode::kLock,
                                           ShareMode::kSendList),
                         [](const auto& info) { return std::string(share_mode_name(info.param)); });

}  // namespace
}  // namespace sens::testing
