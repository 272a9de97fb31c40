// DH-HMAC-CHAP and host binding end to end: the host library against an in-process target on
// loopback (every hash, the null group and FFDHE, one and both directions, wrong and missing
// keys, re-authentication), and raw AUTH_Send / AUTH_Receive messages that the target must
// refuse with the failure reason NVMe Base 2.0 8.13.5 names.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "auth/dhchap.h"
#include "auth_messages.h"
#include "child_process.h"
#include "common/log.h"
#include "host/controller.h"
#include "perf/verify.h"
#include "raw_client.h"
#include "target/dhchap.h"
#include "target/target.h"
#include "wire/nvme_auth.h"

namespace sens::testing {
namespace {

namespace wa = nvme::auth;
namespace st = nvme::status;
constexpr const char* kSub = "nqn.2026-11.dev.sens:auth";
constexpr const char* kOpenSub = "nqn.2026-11.dev.sens:open";
constexpr const char* kOther =
    "nqn.2014-08.org.nvmexpress:uuid:0e0e0e0e-0000-4000-8000-00000000000e";

std::string make_secret(uint8_t transform, size_t len, uint8_t seed) {
  auth::Secret s;
  s.transform = transform;
  for (size_t i = 0; i < len; ++i) s.key.push_back(uint8_t(seed * 31 + i * 7));
  return auth::format_secret(s);
}

const std::string kHostSecret = make_secret(1, 32, 1);
const std::string kCtrlSecret = make_secret(0, 48, 2);
const std::string kOtherSecret = make_secret(2, 48, 3);

class AuthTest : public ::testing::Test {
 protected:
  virtual void adjust(target::TargetConfig&) {}
  void SetUp() override {
    g_log_level = LogLevel::kError;
    target::TargetConfig c;
    c.listen = {{"127.0.0.1", 0}};
    c.discovery_port = 0;
    target::SubsystemConfig s;
    s.nqn = kSub;
    s.namespaces = {"ram:4M"};
    s.host_keys = {{kHostNqn, kHostSecret}, {kOther, kOtherSecret}};
    s.ctrl_keys = {{kHostNqn, kCtrlSecret}};
    c.subsystems = {s, {kOpenSub, {"ram:1M"}, {}}};
    c.queue_size = 64;
    adjust(c);
    target::apply_defaults(c);
    ASSERT_EQ(target::validate(c), "");
    target_ = std::make_unique<target::Target>(c);
    ASSERT_EQ(target_->start(), "");
    port_ = target_->bound()[0].port;
  }
  void TearDown() override {
    ctrl_.reset();
    if (target_) target_->stop();
  }

  host::TransportId trid(const char* sub = kSub) {
    host::TransportId t;
    t.traddr = "127.0.0.1";
    t.trsvcid = port_;
    t.subnqn = sub;
    return t;
  }
  host::ControllerOptions options() {
    host::ControllerOptions o;
    o.hostnqn = kHostNqn;
    o.kato_ms = 0;
    o.io_queues = 2;
    o.io_depth = 8;
    o.admin_timeout = o.connect_timeout = 5 * kSecond;
    o.dhchap_secret = kHostSecret;
    return o;
  }
  std::string connect(const host::ControllerOptions& o, const char* sub = kSub) {
    ctrl_ = std::make_unique<host::Controller>(reactor_);
    if (std::string e = ctrl_->connect(trid(sub), o); !e.empty()) return e;
    return ctrl_->create_io_queues();
  }
  // A 4 KiB write and read back on every I/O queue.
  void io_works() {
    for (size_t q = 0; q < ctrl_->io_queue_count(); ++q) {
      std::vector<uint8_t> out(4096), in(4096);
      host::fill_pattern(out.data(), q * 4096, 4096, 7);
      ASSERT_TRUE(run(q, nvme::io_op::kWrite, q, out.data()).ok());
      ASSERT_TRUE(run(q, nvme::io_op::kRead, q, in.data()).ok());
      EXPECT_EQ(in, out) << "queue " << q;
    }
  }
  host::Completion run(size_t q, uint8_t op, uint64_t block, void* buf) {
    struct W {
      bool done = false;
      host::Completion c;
    } w;
    auto cb = [](void* ctx, uint64_t, const host::Completion& c) {
      static_cast<W*>(ctx)->c = c;
      static_cast<W*>(ctx)->done = true;
    };
    nvme::Sqe sqe = nvme::make_io(op, 1, block * 8, 8, nvme::Xfer::kTransport, 4096);
    if (!ctrl_->io_queue(q).submit(sqe, buf, 4096,
                                   op == nvme::io_op::kRead ? host::DataDir::kControllerToHost
                                                            : host::DataDir::kHostToController,
                                   cb, &w, 0))
      return {0xFFFF};
    const Nanos deadline = reactor_.now() + 10 * kSecond;
    while (!w.done && reactor_.now() < deadline) reactor_.run_once(10 * kMilli);
    return w.c;
  }
  uint64_t auth_count(const char* which) { return target_->stats_json()["auth"][which]; }

  Reactor reactor_;
  std::unique_ptr<target::Target> target_;
  std::unique_ptr<host::Controller> ctrl_;
  uint16_t port_ = 0;
};

TEST_F(AuthTest, EveryHashWithTheNullGroupAndFfdhe) {
  for (uint8_t hash : {1, 2, 3})
    for (uint8_t group : {0, 1, 3}) {
      auto o = options();
      o.dhchap_hashes = {hash};
      o.dhchap_dhgroups = {group};
      ASSERT_EQ(connect(o), "") << auth::hash_name(hash) << " " << auth::dh_group_name(group);
      EXPECT_EQ(ctrl_->auth_hash(), hash);
      EXPECT_EQ(ctrl_->auth_dhgroup(), group);
      EXPECT_EQ(ctrl_->authentications(), 3u);  // the admin queue and both I/O queues
      io_works();
      ctrl_->shutdown();
    }
  EXPECT_EQ(auth_count("succeeded"), 27u);
  EXPECT_EQ(auth_count("failed"), 0u);
}

TEST_F(AuthTest, BidirectionalChecksTheControllersKey) {
  auto o = options();
  o.dhchap_ctrl_secret = kCtrlSecret;
  o.dhchap_dhgroups = {2};  // ffdhe3072
  ASSERT_EQ(connect(o), "");
  io_works();
  ctrl_->shutdown();
  // A host that holds another controller secret refuses this controller (FAILURE2).
  o.dhchap_ctrl_secret = kOtherSecret;
  std::string e = connect(o);
  EXPECT_NE(e.find("controller's response does not match"), std::string::npos) << e;
  EXPECT_GE(auth_count("failed"), 1u);
}

TEST_F(AuthTest, WrongOrMissingKeyIsRefused) {
  auto o = options();
  o.dhchap_secret = kOtherSecret;  // a valid secret, not this host's
  std::string e = connect(o);
  EXPECT_NE(e.find("FAILURE1"), std::string::npos) << e;
  EXPECT_NE(e.find("authentication failed"), std::string::npos) << e;
  EXPECT_EQ(auth_count("failed"), 1u);
  o.dhchap_secret.clear();
  e = connect(o);
  EXPECT_NE(e.find("requires authentication"), std::string::npos) << e;
  // A controller secret for a subsystem that asks for no authentication: cannot be checked.
  o.dhchap_secret = kHostSecret;
  o.dhchap_ctrl_secret = kCtrlSecret;
  e = connect(o, kOpenSub);
  EXPECT_NE(e.find("does not ask to authenticate"), std::string::npos) << e;
  // The subsystem without keys still admits any host without one.
  ASSERT_EQ(connect(options(), kOpenSub), "");
}

TEST_F(AuthTest, ReauthenticationKeepsTheQueuesWorking) {
  auto o = options();
  o.dhchap_ctrl_secret = kCtrlSecret;
  ASSERT_EQ(connect(o), "");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ctrl_->reauthenticate(), "");
    io_works();
  }
  EXPECT_EQ(ctrl_->authentications(), 3u * 4);
}

// A spoofed NQN without the key gets nothing but AUTH commands answered.
TEST_F(AuthTest, UnauthenticatedQueueRunsNothing) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0));
  Result r = c.connect_queue(0, kSub);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(r.cqe.dw0 & wa::kAuthreqAtr) << "AUTHREQ.ATR not set";
  const uint16_t cntlid = uint16_t(r.cqe.dw0);
  EXPECT_EQ(c.exec(nvme::make_property_get(nvme::reg::kCap, true)).status(), st::kAuthRequired);
  nvme::IdentifyController id{};
  EXPECT_EQ(c.exec(nvme::make_identify(1, 0), nullptr, 0, &id, sizeof id).status(),
            st::kAuthRequired);
  EXPECT_EQ(c.exec(nvme::make_keep_alive()).status(), st::kAuthRequired);
  // Nor may an I/O queue join the controller before its admin queue has authenticated.
  RawClient io;
  ASSERT_TRUE(io.connect(port_));
  ASSERT_TRUE(io.ic(0));
  EXPECT_EQ(io.connect_queue(1, kSub, cntlid).status(), st::kAuthRequired);
  // A subsystem without keys answers no AUTH command at all.
  RawClient open;
  ASSERT_TRUE(open.connect(port_));
  ASSERT_TRUE(open.ic(0));
  ASSERT_TRUE(open.connect_queue(0, kOpenSub).ok());
  uint8_t buf[64];
  EXPECT_EQ(open.exec(wa::make_auth_receive(64), nullptr, 0, buf, 64).status(), st::kCmdSeqError);
}

// Host-ID binding: an I/O Connect must carry the NQN and host ID of the controller's host.
TEST_F(AuthTest, IoConnectWithAnotherHostIdIsRefused) {
  ASSERT_EQ(connect(options(), kOpenSub), "");
  RawClient io;  // RawClient's host ID is fixed; the Controller's is random
  ASSERT_TRUE(io.connect(port_));
  ASSERT_TRUE(io.ic(0));
  Result r = io.connect_queue(1, kOpenSub, ctrl_->cntlid());
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
  EXPECT_EQ(r.cqe.dw0, (1u << 16) | offsetof(nvme::ConnectData, hostid));
}

// Controller IDs are drawn at random: consecutive controllers do not number 1, 2, 3.
TEST_F(AuthTest, ControllerIdsAreNotSequential) {
  std::vector<uint16_t> ids;
  std::vector<std::unique_ptr<RawClient>> keep;
  for (int i = 0; i < 8; ++i) {
    keep.push_back(std::make_unique<RawClient>());
    ASSERT_TRUE(keep.back()->connect(port_));
    ASSERT_TRUE(keep.back()->ic(0));
    Result r = keep.back()->connect_queue(0, kOpenSub);
    ASSERT_TRUE(r.ok());
    ids.push_back(uint16_t(r.cqe.dw0));
  }
  int steps_of_one = 0;
  for (size_t i = 1; i < ids.size(); ++i) steps_of_one += ids[i] == ids[i - 1] + 1;
  EXPECT_LT(steps_of_one, 3) << "cntlids look sequential";
  for (uint16_t id : ids) EXPECT_TRUE(id >= 1 && id <= 0xFFEF);
}

// ---------------------------------------------------------------- raw messages

class AuthMessages : public AuthTest {
 protected:
  void SetUp() override {
    AuthTest::SetUp();
    ASSERT_TRUE(c_.connect(port_));
    ASSERT_TRUE(c_.ic(0));
    Result r = c_.connect_queue(0, kSub);
    ASSERT_TRUE(r.ok()) << r.describe();
  }
  Result send(const std::vector<uint8_t>& msg, uint32_t tl = 0) {
    return c_.exec(wa::make_auth_send(tl ? tl : uint32_t(msg.size()), nvme::Xfer::kInCapsule),
                   msg.data(), uint32_t(msg.size()));
  }
  // AUTH_Receive; returns the message (4096 bytes).
  std::vector<uint8_t> receive(Result* out = nullptr) {
    std::vector<uint8_t> buf(4096);
    Result r = c_.exec(wa::make_auth_receive(4096), nullptr, 0, buf.data(), 4096);
    EXPECT_TRUE(r.ok()) << r.describe();
    if (out) *out = r;
    return buf;
  }
  static std::vector<uint8_t> negotiate(uint16_t t_id, std::vector<uint8_t> hashes = {1},
                                        std::vector<uint8_t> groups = {0}) {
    return negotiate_message(t_id, hashes, groups);
  }
  // The reason code of the FAILURE1 the next AUTH_Receive returns (-1: not a FAILURE1).
  int failure1() {
    auto m = receive();
    if (m[0] != wa::kTypeCommon || m[1] != wa::kIdFailure1 || m[6] != wa::kReasonFailed) return -1;
    return m[7];
  }
  std::vector<uint8_t> reply(uint16_t t_id, uint8_t hl) {
    std::vector<uint8_t> m(16 + 2 * hl, 0);
    m[0] = wa::kTypeDhchap;
    m[1] = wa::kIdReply;
    m[4] = uint8_t(t_id);
    m[6] = hl;
    return m;
  }

  RawClient c_;
};

TEST_F(AuthMessages, CommandFieldsAreChecked) {
  auto m = negotiate(1);
  nvme::Sqe bad = wa::make_auth_send(uint32_t(m.size()), nvme::Xfer::kInCapsule);
  bad.cdw10 &= ~0xFF000000u;  // SECP 0
  EXPECT_EQ(c_.exec(bad, m.data(), uint32_t(m.size())).status(), st::kInvalidField);
  bad = wa::make_auth_send(uint32_t(m.size()), nvme::Xfer::kInCapsule);
  bad.cdw10 ^= 0x100;  // SPSP0 0
  EXPECT_EQ(c_.exec(bad, m.data(), uint32_t(m.size())).status(), st::kInvalidField);
  // TL 0, TL that is not the data's length, TL beyond what a message can be.
  EXPECT_EQ(send(m, 8).status(), st::kSglInvalidDataLength);
  bad = wa::make_auth_send(0, nvme::Xfer::kInCapsule);
  bad.sgl.length = uint32_t(m.size());
  EXPECT_EQ(c_.exec(bad, m.data(), uint32_t(m.size())).status(), st::kInvalidField);
  uint8_t buf[16];
  EXPECT_EQ(c_.exec(wa::make_auth_receive(0), nullptr, 0, buf, 0).status(), st::kInvalidField);
  EXPECT_EQ(c_.exec(wa::make_auth_receive(1u << 20), nullptr, 0, buf, 16).status(),
            st::kInvalidField);
}

TEST_F(AuthMessages, NegotiateRefusalsNameTheirReason) {
  auto m = negotiate(1);
  m[6] = 1;  // SC_C: secure channel concatenation
  ASSERT_TRUE(send(m).ok());
  EXPECT_EQ(failure1(), wa::kFailConcatMismatch);
  ASSERT_TRUE(send(negotiate(2, {9})).ok());  // no hash in common
  EXPECT_EQ(failure1(), wa::kFailHashUnusable);
  ASSERT_TRUE(send(negotiate(3, {1}, {7})).ok());  // no DH group in common
  EXPECT_EQ(failure1(), wa::kFailDhgroupUnusable);
  m = negotiate(4);
  m[7] = 3;  // NAPD 3, one descriptor sent
  ASSERT_TRUE(send(m).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  m = negotiate(5);
  m[10] = 31;  // HALEN past 30
  ASSERT_TRUE(send(m).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  m = negotiate(6);
  m[8] = 2;  // not DH-HMAC-CHAP
  ASSERT_TRUE(send(m).ok());
  EXPECT_EQ(failure1(), wa::kFailNotUsable);
  m = negotiate(7);
  m.resize(40);  // shorter than a descriptor
  ASSERT_TRUE(send(m).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  ASSERT_TRUE(send({1, 2, 3}).ok());  // shorter than a header
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  std::vector<uint8_t> unknown = negotiate(8);
  unknown[0] = 7;  // unknown AUTH-Type
  ASSERT_TRUE(send(unknown).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectMessage);
}

TEST_F(AuthMessages, OutOfOrderAndReplayedMessagesAreRefused) {
  // AUTH_Receive before any NEGOTIATE, REPLY before any CHALLENGE, SUCCESS2 out of turn.
  EXPECT_EQ(failure1(), wa::kFailIncorrectMessage);
  ASSERT_TRUE(send(reply(1, 32)).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectMessage);
  std::vector<uint8_t> s2(16, 0);
  s2[0] = wa::kTypeDhchap;
  s2[1] = wa::kIdSuccess2;
  ASSERT_TRUE(send(s2).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectMessage);
  // A REPLY for another transaction (a replayed or forged T_ID).
  ASSERT_TRUE(send(negotiate(10)).ok());
  auto ch = receive();
  ASSERT_EQ(ch[1], wa::kIdChallenge);
  EXPECT_EQ(ch[4] | ch[5] << 8, 10);
  EXPECT_EQ(ch[6], 32);  // SHA-256
  ASSERT_TRUE(send(reply(9, 32)).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  // A REPLY whose hash length or DH value length is wrong, or that is cut short.
  ASSERT_TRUE(send(negotiate(11)).ok());
  receive();
  ASSERT_TRUE(send(reply(11, 48)).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  ASSERT_TRUE(send(negotiate(12)).ok());
  receive();
  auto r = reply(12, 32);
  r[10] = 0x00;
  r[11] = 0x01;  // dhvlen 256 with the null group, and no room for it
  ASSERT_TRUE(send(r).ok());
  EXPECT_EQ(failure1(), wa::kFailIncorrectPayload);
  // A REPLY of the right shape with a response made without the key.
  ASSERT_TRUE(send(negotiate(13)).ok());
  receive();
  ASSERT_TRUE(send(reply(13, 32)).ok());
  EXPECT_EQ(failure1(), wa::kFailFailed);
  EXPECT_EQ(c_.exec(nvme::make_property_get(nvme::reg::kCap, true)).status(), st::kAuthRequired);
  EXPECT_GE(auth_count("failed"), 7u);
  EXPECT_EQ(auth_count("succeeded"), 0u);
}

// FFDHE: a REPLY whose DH value is not an element of the group.
TEST_F(AuthMessages, DhValueOutsideTheGroupIsRefused) {
  ASSERT_TRUE(send(negotiate(20, {1}, {1})).ok());
  auto ch = receive();
  ASSERT_EQ(ch[1], wa::kIdChallenge);
  EXPECT_EQ(ch[9], 1);                   // ffdhe2048
  EXPECT_EQ(ch[10] | ch[11] << 8, 256);  // its DH value
  auto r = reply(20, 32);
  r[10] = 0x00;
  r[11] = 0x01;
  r.resize(r.size() + 256, 0xFF);  // larger than p
  ASSERT_TRUE(send(r).ok());
  EXPECT_EQ(failure1(), wa::kFailDhgroupUnusable);
}

// Each queue may negotiate a bounded number of times (each costs the target DH work).
TEST_F(AuthMessages, NegotiationsPerQueueAreBounded) {
  for (uint32_t i = 0; i < target::DhchapSession::kMaxNegotiations; ++i) {
    ASSERT_TRUE(send(negotiate(uint16_t(i))).ok());
    ASSERT_EQ(receive()[1], wa::kIdChallenge) << i;
  }
  ASSERT_TRUE(send(negotiate(99)).ok());
  EXPECT_EQ(failure1(), wa::kFailFailed);
}

// sens perf on the host library: every I/O queue authenticates (both ways), whether each
// has its own connection or submitters share two.
TEST_F(AuthTest, PerfAuthenticatesEveryConnectionInEveryShareMode) {
  const std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port_) +
                           " subnqn:" + kSub + " hostnqn:" + kHostNqn;
  for (const char* share : {"none", "lock", "sendlist"}) {
    std::vector<std::string> argv = {SENS_BINARY,
                                     "perf",
                                     "-r",
                                     trid,
                                     "--dhchap-secret",
                                     kHostSecret,
                                     "--dhchap-ctrl-secret",
                                     kCtrlSecret,
                                     "--rw",
                                     "randrw",
                                     "--bs",
                                     "16k",
                                     "--qd",
                                     "4",
                                     "--threads",
                                     "3",
                                     "--share",
                                     share,
                                     "--size",
                                     "4M",
                                     "--time",
                                     "0.5",
                                     "--verify",
                                     "-q"};
    if (std::string(share) != "none") argv.insert(argv.end(), {"--connections", "2"});
    RunResult r = run_command(argv, 60000);
    EXPECT_EQ(r.code, 0) << share << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(" 0 failed"), std::string::npos) << share << "\n" << r.out;
  }
  RunResult r = run_command({SENS_BINARY, "perf", "-r", trid, "--dhchap-secret", kOtherSecret,
                             "--share", "sendlist", "--threads", "2", "--time", "0.5", "-q"},
                            60000);
  EXPECT_EQ(r.code, 1) << "a wrong secret must fail the connect\n" << r.out << r.err;
}

class AuthTimeout : public AuthTest {};

// A host that connects and never authenticates is dropped at the deadline (30 s).
TEST_F(AuthTimeout, UnauthenticatedQueueIsClosedAtTheDeadline) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0));
  ASSERT_TRUE(c.connect_queue(0, kSub).ok());
  EXPECT_TRUE(c.wait_closed(45000)) << "the target kept an unauthenticated queue open";
}

}  // namespace
}  // namespace sens::testing
