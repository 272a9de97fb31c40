// NVMe/TCP over TLS 1.3 with PSKs (TP 8011), sens host <-> sens target: the PSK interchange
// format and the identity/derivation (against nvme-cli and by hand), both cipher suites with
// digests on and off (reads, in-capsule and R2T writes, verified), coalesced PDUs sharing TLS
// writes, the discovery log's TSAS/TREQ, and the refusals: a wrong PSK, a plain-TCP host on
// the TLS port, with the target's log line for each.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "auth/tls_psk.h"
#include "child_process.h"
#include "common/log.h"
#include "host/controller.h"
#include "perf/verify.h"
#include "raw_client.h"
#include "target/target.h"
#include "transport/tls_records.h"

namespace sens::testing {
namespace {

constexpr const char* kSub = "nqn.2026-11.dev.sens:tls";

std::string psk_text(size_t len, uint8_t transform, uint8_t seed) {
  auth::ConfiguredPsk p;
  p.transform = transform;
  for (size_t i = 0; i < len; ++i) p.key.push_back(uint8_t(seed + 13 * i));
  return auth::format_tls_psk(p);
}

TEST(TlsPsk, InterchangeFormatAsNvmeCliWritesIt) {
  std::string err;
  // nvme gen-tls-key --hmac=1 and --hmac=2 (nvme-cli 2.4)
  auto a = auth::parse_tls_psk("NVMeTLSkey-1:01:orruM9V6mfZLg34sO+FFAmF4c25BCWnhIQAcpFsnf6QZx2+O:",
                               &err);
  ASSERT_TRUE(a) << err;
  EXPECT_EQ(a->transform, 1);
  EXPECT_EQ(a->key.size(), 32u);
  EXPECT_EQ(a->cipher_hash(), 1);
  auto b = auth::parse_tls_psk(
      "NVMeTLSkey-1:02:D+wqMMGt3SY4TDhymDBvpO6ZXdNBUESggNeP12NZLYRe/EJ+vua1cT5NmbLZXV8YJLhmQw==:",
      &err);
  ASSERT_TRUE(b) << err;
  EXPECT_EQ(b->key.size(), 48u);
  EXPECT_EQ(b->cipher_hash(), 2);
  EXPECT_EQ(auth::format_tls_psk(*a),
            "NVMeTLSkey-1:01:orruM9V6mfZLg34sO+FFAmF4c25BCWnhIQAcpFsnf6QZx2+O:");
  std::string bad = "NVMeTLSkey-1:01:orruM9V6mfZLg34sO+FFAmF4c25BCWnhIQAcpFsnf6QZx2+P:";
  EXPECT_FALSE(auth::parse_tls_psk(bad, &err));
  EXPECT_NE(err.find("CRC"), std::string::npos);
  EXPECT_FALSE(auth::parse_tls_psk("NVMeTLSkey-1:03:" + bad.substr(16), &err));
  EXPECT_FALSE(
      auth::parse_tls_psk("DHHC-1:01:orruM9V6mfZLg34sO+FFAmF4c25BCWnhIQAcpFsnf6QZx2+O:", &err));
}

// The derivation of TP 8011 step by step, each HKDF / HMAC value computed with Python's hmac.
TEST(TlsPsk, RetainedPskDigestIdentityAndTlsPsk) {
  auth::ConfiguredPsk p{1, {}};
  for (int i = 0; i < 32; ++i) p.key.push_back(uint8_t(i));
  const char* host = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
  const char* sub = "nqn.2026-11.dev.sens:tls";
  auth::Bytes retained = auth::retained_psk(p, host);
  auto hex = [](const auth::Bytes& b) {
    std::string s;
    char t[3];
    for (uint8_t c : b) std::snprintf(t, 3, "%02x", c), s += t;
    return s;
  };
  EXPECT_EQ(hex(retained), "528bdd057636a22352e20f7203eb3450998ca16c98efc27315eea7d0c52ac634");
  const std::string digest = auth::psk_digest(1, retained, host, sub);
  EXPECT_EQ(digest, "8ga2PcBN8JFXugOtr7+zHXbPlzb4uoFp9n+Bg13sPUE=");
  EXPECT_EQ(auth::psk_identity(1, host, sub, digest),
            std::string("NVMe1R01 ") + host + " " + sub + " " + digest);
  EXPECT_EQ(hex(auth::tls_psk(1, retained, digest)),
            "51002f739bd3c6982c42303f81485a3368ec2f41688c0f00bf041ff2873dc552");
  auto id = auth::parse_psk_identity(auth::psk_identity(1, host, sub, digest));
  ASSERT_TRUE(id);
  EXPECT_EQ(id->hostnqn, host);
  EXPECT_EQ(id->subnqn, sub);
  EXPECT_EQ(id->digest, digest);
  EXPECT_FALSE(auth::parse_psk_identity("NVMe0R01 a b"));
  EXPECT_FALSE(auth::parse_psk_identity("NVMe1R01 a b c d"));
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_log_level = LogLevel::kError;
    ASSERT_TRUE(write_file(dir_.file("psk"),
                           psk_text(32, 1, 1) + "\n# a comment\n" + psk_text(48, 2, 2) + "\n"));
    ASSERT_TRUE(write_file(dir_.file("psk256"), psk_text(32, 1, 1) + "\n"));
    ASSERT_TRUE(write_file(dir_.file("psk384"), psk_text(48, 2, 2) + "\n"));
    ASSERT_TRUE(write_file(dir_.file("wrong"), psk_text(32, 1, 9) + "\n"));
    target::TargetConfig c;
    c.listen = {{"127.0.0.1", 0}};
    c.tls_listen = {{"127.0.0.1", 0}};
    c.tls_psk_file = dir_.file("psk");
    c.discovery_port = 0;
    c.subsystems = {{kSub, {"ram:8M"}, {}}};
    c.queue_size = 64;
    c.inline_data = 8192;
    target::apply_defaults(c);
    ASSERT_EQ(target::validate(c), "");
    target_ = std::make_unique<target::Target>(c);
    ASSERT_EQ(target_->start(), "");
    for (auto& b : target_->bound()) (b.tls ? tls_port_ : plain_port_) = b.port;
  }
  void TearDown() override {
    ctrl_.reset();
    if (target_) target_->stop();
  }
  std::string connect(const std::string& psk_file, bool digests, uint16_t port = 0) {
    host::TransportId t;
    t.traddr = "127.0.0.1";
    t.trsvcid = port ? port : tls_port_;
    t.subnqn = kSub;
    host::ControllerOptions o;
    o.kato_ms = 0;
    o.io_queues = 2;
    o.io_depth = 32;
    o.hdr_digest = o.data_digest = digests;
    o.tls_psk_file = psk_file;
    o.connect_timeout = o.admin_timeout = 3 * kSecond;
    ctrl_ = std::make_unique<host::Controller>(reactor_);
    if (std::string e = ctrl_->connect(t, o); !e.empty()) return e;
    return ctrl_->create_io_queues();
  }
  // `n` I/Os of `len` bytes at once on queue q, waited for.
  bool burst(size_t q, uint8_t op, uint32_t len, int n, uint32_t seed, std::vector<uint8_t>* mem) {
    struct W {
      int left;
      bool ok = true;
    } w{n};
    auto cb = [](void* ctx, uint64_t, const host::Completion& c) {
      auto* w = static_cast<W*>(ctx);
      --w->left;
      w->ok = w->ok && c.ok();
    };
    mem->resize(size_t(n) * len);
    if (op == nvme::io_op::kWrite)
      for (int i = 0; i < n; ++i)
        host::fill_pattern(mem->data() + size_t(i) * len, uint64_t(i) * len, len, seed);
    for (int i = 0; i < n; ++i) {
      nvme::Sqe sqe =
          nvme::make_io(op, 1, uint64_t(i) * len / 512, len / 512, nvme::Xfer::kTransport, len);
      if (!ctrl_->io_queue(q).submit(sqe, mem->data() + size_t(i) * len, len,
                                     op == nvme::io_op::kRead ? host::DataDir::kControllerToHost
                                                              : host::DataDir::kHostToController,
                                     cb, &w, 0))
        return false;
    }
    const Nanos deadline = reactor_.now() + 20 * kSecond;
    while (w.left > 0 && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
    return w.left == 0 && w.ok;
  }
  void verified_io() {
    for (uint32_t len : {4096u, 65536u}) {  // in-capsule (8 KiB inline), then R2T writes
      std::vector<uint8_t> out, in;
      ASSERT_TRUE(burst(0, nvme::io_op::kWrite, len, 16, len, &out)) << len;
      ASSERT_TRUE(burst(1, nvme::io_op::kRead, len, 16, 0, &in)) << len;
      for (int i = 0; i < 16; ++i)
        EXPECT_TRUE(
            host::check_pattern(in.data() + size_t(i) * len, uint64_t(i) * len, len, len, nullptr))
            << "len " << len << " i " << i;
    }
  }

  TempDir dir_;
  Reactor reactor_;
  std::unique_ptr<target::Target> target_;
  std::unique_ptr<host::Controller> ctrl_;
  uint16_t tls_port_ = 0, plain_port_ = 0;
};

TEST_F(TlsTest, BothSuitesWithAndWithoutDigests) {
  for (const char* file : {"psk256", "psk384"})
    for (bool digests : {false, true}) {
      ASSERT_EQ(connect(dir_.file(file), digests), "") << file << " digests " << digests;
      verified_io();
      ctrl_->shutdown();
    }
}

// Sessions are counted by whose AES-GCM protects their records (sens_tls_sessions_total's
// aes_gcm label); the process's choice applies to the connections made after it.
TEST_F(TlsTest, SessionsAreCountedByTheirAesGcm) {
  auto sessions = [&](int k) {
    uint64_t n = 0;
    for (auto& r : target_->metrics_snapshot().reactors) n += r.tls_sessions[k];
    return n;
  };
  std::string why;
  const bool imb = transport::aes_gcm() == transport::AesGcm::kIpsecMb;
  ASSERT_TRUE(transport::set_tls_records("sens", &why));  // (sens's AES-GCM, not the kernel's)
  ASSERT_EQ(connect(dir_.file("psk256"), false), "");
  verified_io();
  ctrl_->shutdown();
  EXPECT_EQ(sessions(0), imb ? 3u : 0u);  // the admin queue and two I/O queues
  EXPECT_EQ(sessions(1), imb ? 0u : 3u);
  ASSERT_TRUE(transport::set_aes_gcm(transport::AesGcm::kOpenSsl, &why));
  const std::string e = connect(dir_.file("psk384"), true);
  if (e.empty()) verified_io();
  ctrl_->shutdown();
  ASSERT_TRUE(transport::set_aes_gcm(transport::AesGcm::kAuto, &why));
  ASSERT_TRUE(transport::set_tls_records("auto", &why));
  ASSERT_EQ(e, "");
  EXPECT_EQ(sessions(1), imb ? 3u : 6u);
  EXPECT_EQ(sessions(2), 0u);
  EXPECT_EQ(sessions(3), 0u);
}

// auto (the default): every session gets the kernel's records where the kernel takes the keys,
// else sens's, and is counted so (sens_tls_sessions_total's records label); kernel: the
// kernel's records, or the connection fails saying why.
TEST_F(TlsTest, RecordsByTheKernelWhereItTakesTheKeysElseBySens) {
  auto sessions = [&](int k) {
    uint64_t n = 0;
    for (auto& r : target_->metrics_snapshot().reactors) n += r.tls_sessions[k];
    return n;
  };
  ASSERT_EQ(transport::tls_records(), transport::TlsRecords::kAuto);
  ASSERT_EQ(connect(dir_.file("psk256"), false), "");
  verified_io();
  ctrl_->shutdown();
  const std::string status = transport::kernel_tls_status();
  const bool kernel = status == "in use";
  EXPECT_EQ(sessions(3), kernel ? 3u : 0u);  // the admin queue and two I/O queues
  EXPECT_EQ(sessions(0) + sessions(1), kernel ? 0u : 3u);
  if (!kernel) {
    EXPECT_NE(status.find("setsockopt(TCP_ULP, tls): "), std::string::npos) << status;
  }
  std::string why;
  ASSERT_TRUE(transport::set_tls_records("kernel", &why));
  const std::string e = connect(dir_.file("psk384"), true);
  if (e.empty()) verified_io();
  ctrl_->shutdown();
  ASSERT_TRUE(transport::set_tls_records("auto", &why));
  if (kernel) {
    EXPECT_EQ(e, "");
    EXPECT_EQ(sessions(3), 6u);
  } else {
    EXPECT_NE(e.find("kernel TLS: setsockopt(TCP_ULP, tls): "), std::string::npos) << e;
    EXPECT_EQ(sessions(3), 0u);
  }
  EXPECT_FALSE(transport::set_tls_records("ktls", &why));
  EXPECT_EQ(why, "'ktls': expected auto, kernel or sens");
}

TEST_F(TlsTest, CoalescedPdusShareTlsWrites) {
  ASSERT_EQ(connect(dir_.file("psk256"), false), "");
  std::vector<uint8_t> mem;
  for (int round = 0; round < 20; ++round)
    ASSERT_TRUE(burst(0, nvme::io_op::kRead, 4096, 32, 0, &mem));
  auto stats = target_->stats_json();
  uint64_t pdus = stats["pdus_sent"], sends = stats["send_calls"];
  // Each read's C2HData and response leave in one SSL write at the least.
  EXPECT_GE(double(pdus), 1.8 * double(sends)) << pdus << " PDUs in " << sends << " writes";
}

TEST_F(TlsTest, WrongPskAndPlainHostsAreRefused) {
  std::string e = connect(dir_.file("wrong"), false);
  EXPECT_NE(e.find("TLS handshake"), std::string::npos) << e;
  e = connect("", false);  // plain NVMe/TCP to the TLS port
  EXPECT_FALSE(e.empty());
  e = connect(dir_.file("psk256"), false, plain_port_);  // TLS to the plain port
  EXPECT_FALSE(e.empty());
  // The TLS port still serves the right key afterwards.
  ASSERT_EQ(connect(dir_.file("psk256"), false), "");
}

// The same through the command line: sens perf --verify over TLS, and the target's log lines
// for a wrong key and a plain-TCP host.
TEST(TlsCli, PerfVerifiesAndTheTargetLogsRefusals) {
  TempDir dir;
  ASSERT_TRUE(write_file(dir.file("psk"), psk_text(48, 2, 5) + "\n"));
  ASSERT_TRUE(write_file(dir.file("wrong"), psk_text(48, 2, 6) + "\n"));
  Child t;
  const uint16_t port = free_port(), plain = free_port();
  const uint16_t disc = free_port();
  ASSERT_TRUE(
      t.start({SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(plain),
               "--tls-listen", "127.0.0.1:" + std::to_string(port), "--tls", dir.file("psk"),
               "--discovery-port", std::to_string(disc), "--ns", "ram:16M"},
              dir.file("out"), dir.file("err")));
  ASSERT_TRUE(t.wait_for_text(dir.file("out"), "I/O, TLS 1.3", 10000))
      << read_file(dir.file("err"));
  const std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) +
                           " subnqn:" + target::kDefaultNqn;
  RunResult r = run_command(
      {SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("psk"), "--rw", "randrw", "--bs", "16k",
       "--qd", "16", "--time", "1", "--verify", "-q", "--hdr-digest", "--data-digest"},
      60000);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
  // The target seals with its default AES-GCM (ipsec-mb where it runs), this host with
  // OpenSSL's: the same records either way, verified.
  EXPECT_NE(read_file(dir.file("out"))
                .find("I/O, TLS 1.3, records by the kernel (kTLS) where it "
                      "has the tls module, else by sens with AES-GCM by "),
            std::string::npos)
      << read_file(dir.file("out"));
  r = run_command({SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("psk"), "--tls-aes-gcm",
                   "openssl", "--tls-records", "sens", "--rw", "randrw", "--bs", "16k", "--qd",
                   "16", "--time", "1", "--verify"},
                  60000);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TLS 1.3, records by sens with AES-GCM by OpenSSL"), std::string::npos)
      << r.out;
  // The kernel's records, or a connection that fails and says why: where the kernel has no tls
  // module (this development machine's), the handshake's end names the refused TCP_ULP. The
  // kernel's records themselves are checked in a VM whose kernel has them
  // (tests/interop/sens_in_guest_ktls.sh).
  r = run_command(
      {SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("psk"), "--tls-records", "kernel", "--rw",
       "randrw", "--bs", "16k", "--qd", "16", "--time", "1", "--verify"},
      60000);
  if (r.code == 0) {
    EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("TLS 1.3, records by the kernel (kTLS) on 1 of 1 connection(s)"),
              std::string::npos)
        << r.out;
  } else {
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("kernel TLS: setsockopt(TCP_ULP, tls): "), std::string::npos) << r.err;
  }
  r = run_command({SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("psk"), "--tls-records",
                   "ktls", "--time", "1"},
                  30000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tls-records: 'ktls': expected auto, kernel or sens"), std::string::npos)
      << r.err;
  r = run_command({SENS_BINARY, "target", "--tls-records", "openssl", "--ns", "ram:1M"}, 30000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tls-records: 'openssl': expected auto, kernel or sens"),
            std::string::npos)
      << r.err;
  r = run_command({SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("psk"), "--tls-aes-gcm",
                   "aes-ni", "--time", "1"},
                  30000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tls-aes-gcm: 'aes-ni': expected auto, ipsec-mb or openssl"),
            std::string::npos)
      << r.err;
  r = run_command({SENS_BINARY, "target", "--tls-aes-gcm", "fast", "--ns", "ram:1M"}, 30000);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--tls-aes-gcm: 'fast': expected auto, ipsec-mb or openssl"),
            std::string::npos)
      << r.err;
  // Shared connections over TLS: submitters' commands go through one TLS channel each.
  for (const char* share : {"lock", "sendlist"}) {
    r = run_command({SENS_BINARY, "perf",   "-r",       trid,  "--tls",         dir.file("psk"),
                     "--rw",      "randrw", "--bs",     "16k", "--qd",          "8",
                     "--threads", "4",      "--share",  share, "--connections", "2",
                     "--time",    "1",      "--verify", "-q"},
                    60000);
    EXPECT_EQ(r.code, 0) << share << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << share << "\n" << r.out;
  }
  r = run_command(
      {SENS_BINARY, "perf", "-r", trid, "--tls", dir.file("wrong"), "--time", "1", "-q"}, 30000);
  EXPECT_EQ(r.code, 1);
  r = run_command(
      {SENS_BINARY, "perf", "-r", trid, "--time", "1", "-q", "--connect-timeout", "500"}, 30000);
  EXPECT_EQ(r.code, 1);
  // The discovery log lists the TLS port with SECTYPE TLS 1.3 and a secure channel required.
  r = run_command({SENS_BINARY, "discover", "-a", "127.0.0.1", "-s", std::to_string(disc)}, 30000);
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string want = "trsvcid: " + std::to_string(port);
  size_t at = r.out.find(want);
  ASSERT_NE(at, std::string::npos) << r.out;
  size_t entry = r.out.rfind("=====", at);
  std::string e = r.out.substr(entry == std::string::npos ? 0 : entry, 700);
  EXPECT_NE(e.find("sectype: tls13"), std::string::npos) << e;
  EXPECT_NE(e.find("treq:    required"), std::string::npos) << e;
  t.signal(SIGTERM);
  t.wait(10000);
  const std::string log = read_file(dir.file("err")) + read_file(dir.file("out"));
  EXPECT_NE(log.find("TLS handshake failed"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong key?"), std::string::npos) << log;
  EXPECT_NE(log.find("a plain NVMe/TCP host on the TLS port?"), std::string::npos) << log;
}

}  // namespace
}  // namespace sens::testing
