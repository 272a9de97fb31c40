// DH-HMAC-CHAP under load, against a `sens target` child: the DH steps run off the reactors
// and a per-target cap bounds the negotiations in progress. A verified `sens perf` keeps
// completing while many hosts negotiate ffdhe8192 at once; malformed AUTH_Send payloads are
// refused with the reason NVMe Base 2.0 8.13.5 names and the target keeps serving; a client
// that holds many half-finished negotiations delays other hosts by the timeout at most, and
// loses its slots.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "auth/dhchap.h"
#include "auth_messages.h"
#include "child_process.h"
#include "host/controller.h"
#include "raw_client.h"
#include "rpc_target.h"
#include "target/config.h"
#include "wire/nvme_auth.h"

namespace sens::testing {
namespace {

namespace wa = nvme::auth;
namespace st = nvme::status;
using Clock = std::chrono::steady_clock;
constexpr const char* kSub = target::kDefaultNqn;
constexpr uint8_t kFfdhe8192 = 5, kSha256 = 1;

const std::string kSecret = make_secret(1, 32, 11);

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// One admin queue speaking DH-HMAC-CHAP by hand.
class RawAuth {
 public:
  std::string open(uint16_t port) {
    if (!c.connect(port) || !c.ic(0)) return "connect: " + c.last_error();
    Result r = c.connect_queue(0, kSub);
    if (!r.ok()) return "Connect: " + r.describe();
    if (!(r.cqe.dw0 & wa::kAuthreqAtr)) return "AUTHREQ.ATR not set";
    return "";
  }
  Result send(const std::vector<uint8_t>& msg) {
    // (a REPLY's answer waits for the target's DH step, on a loaded machine too)
    return c.exec(wa::make_auth_send(uint32_t(msg.size()), nvme::Xfer::kInCapsule), msg.data(),
                  uint32_t(msg.size()), nullptr, 0, false, 20000);
  }
  // AUTH_Receive of 4096 bytes: the message (empty if the command failed).
  std::vector<uint8_t> receive(int timeout_ms = kDefaultTimeoutMs) {
    std::vector<uint8_t> buf(4096);
    Result r = c.exec(wa::make_auth_receive(4096), nullptr, 0, buf.data(), 4096, false, timeout_ms);
    if (!r.ok()) return {};
    return buf;
  }
  // An AUTH_Receive sent and not waited for (it may wait at the target for a slot).
  uint16_t receive_later() {
    nvme::Sqe sqe = wa::make_auth_receive(4096);
    sqe.cid = c.next_cid();
    c.send_bytes(c.capsule_bytes(sqe));
    return sqe.cid;
  }
  std::vector<uint8_t> collect(uint16_t cid, int timeout_ms) {
    std::vector<uint8_t> buf(4096);
    Result r = c.await(cid, nullptr, 0, buf.data(), 4096, timeout_ms);
    if (!r.ok()) return {};
    return buf;
  }
  static std::vector<uint8_t> negotiate(uint16_t t_id, uint8_t group = kFfdhe8192) {
    return negotiate_message(t_id, {kSha256}, {group});
  }
  // NEGOTIATE then the CHALLENGE (the target's DH key made): "" or why not.
  std::string challenge(uint16_t t_id, std::vector<uint8_t>* ch, uint8_t group = kFfdhe8192) {
    if (Result r = send(negotiate(t_id, group)); !r.ok()) return "NEGOTIATE: " + r.describe();
    *ch = receive(60000);  // (it may wait its turn for a slot)
    if (ch->empty()) return "AUTH_Receive failed";
    if ((*ch)[1] != wa::kIdChallenge) return "no CHALLENGE: " + describe(*ch);
    return "";
  }
  // The REPLY to `ch` made with `secret` (right or wrong) and a fresh DH key of the group;
  // `value` (if given) sent as the DH value instead of that key's.
  std::vector<uint8_t> reply(const std::vector<uint8_t>& ch, const std::string& secret,
                             const auth::Bytes* value = nullptr) {
    wa::Challenge h;
    std::memcpy(&h, ch.data(), sizeof h);
    const uint8_t* c1 = ch.data() + sizeof h;
    auth::DhExchange dh;
    auth::Bytes pub, session_key;
    std::string why;
    EXPECT_TRUE(dh.generate(h.dhgid, &pub, &why)) << why;
    EXPECT_TRUE(dh.derive({c1 + h.hl, h.dhvlen}, &session_key, &why)) << why;
    if (value) pub = *value;
    if (value) prime_ = dh.prime();
    auto parsed = auth::parse_secret(secret, &why);
    auth::Bytes key = auth::transform_key(*parsed, kHostNqn);
    auth::Bytes challenge = auth::augmented_challenge(h.hashid, session_key, auth::View(c1, h.hl));
    auth::Bytes r1 =
        auth::host_response(h.hashid, key, challenge, h.seqnum, h.t_id, kHostNqn, kSub);
    std::vector<uint8_t> m(sizeof(wa::Reply) + 2 * h.hl + pub.size(), 0);
    wa::Reply r{};
    r.auth_type = wa::kTypeDhchap;
    r.auth_id = wa::kIdReply;
    r.t_id = h.t_id;
    r.hl = h.hl;
    r.dhvlen = uint16_t(pub.size());
    std::memcpy(m.data(), &r, sizeof r);
    std::memcpy(m.data() + sizeof r, r1.data(), h.hl);
    std::memcpy(m.data() + sizeof r + 2 * h.hl, pub.data(), pub.size());
    return m;
  }
  // The whole exchange in ffdhe8192: "" when SUCCESS1 came.
  std::string authenticate(uint16_t t_id, const std::string& secret = kSecret) {
    std::vector<uint8_t> ch;
    if (std::string e = challenge(t_id, &ch); !e.empty()) return e;
    if (Result r = send(reply(ch, secret)); !r.ok()) return "REPLY: " + r.describe();
    auto s1 = receive(20000);
    if (s1.empty() || s1[1] != wa::kIdSuccess1) return "no SUCCESS1: " + describe(s1);
    return "";
  }
  static std::string describe(const std::vector<uint8_t>& m) {
    if (m.size() < 8) return "nothing";
    if (m[0] == wa::kTypeCommon && m[1] == wa::kIdFailure1)
      return std::string("FAILURE1 ") + wa::failure_name(m[7]);
    return "message " + std::to_string(m[0]) + "/" + std::to_string(m[1]);
  }
  // The reason of the FAILURE1 in `m` (-1: not one).
  static int failure1(const std::vector<uint8_t>& m) {
    if (m.size() < 8 || m[0] != wa::kTypeCommon || m[1] != wa::kIdFailure1) return -1;
    return m[7];
  }
  int next_failure1() { return failure1(receive(20000)); }
  // The group's prime, kept by the last reply() that sent a value of its own.
  auth::Bytes prime_;

  RawClient c;
};

class AuthStorm : public ::testing::Test {
 protected:
  void start(uint32_t negotiations, uint32_t timeout_ms, std::vector<std::string> more = {},
             RpcTarget* t = nullptr) {
    std::vector<std::string> args = {"--host-key",
                                     std::string(kHostNqn) + "=" + kSecret,
                                     "--dhchap-negotiations",
                                     std::to_string(negotiations),
                                     "--dhchap-timeout-ms",
                                     std::to_string(timeout_ms),
                                     "--queue-size",
                                     "64"};
    args.insert(args.end(), more.begin(), more.end());
    ASSERT_EQ((t ? t : &t_)->start(args), "");
  }
  nlohmann::json negotiations() { return t_.ok({"stats_get"})["auth"]["negotiations"]; }
  // The library host authenticating in ffdhe8192 (admin and one I/O queue), then a 4 KiB
  // write read back: "" or what failed.
  std::string library_host_works(uint16_t port = 0) {
    Reactor reactor;
    host::Controller ctrl(reactor);
    host::TransportId trid;
    trid.traddr = "127.0.0.1";
    trid.trsvcid = port ? port : t_.port;
    trid.subnqn = kSub;
    host::ControllerOptions o;
    o.hostnqn = kHostNqn;
    o.kato_ms = 0;
    o.io_queues = 1;
    o.io_depth = 4;
    o.admin_timeout = o.connect_timeout = 30 * kSecond;
    o.dhchap_secret = kSecret;
    o.dhchap_dhgroups = {kFfdhe8192};
    if (std::string e = ctrl.connect(trid, o); !e.empty()) return e;
    if (std::string e = ctrl.create_io_queues(); !e.empty()) return e;
    if (ctrl.auth_dhgroup() != kFfdhe8192) return "not ffdhe8192";
    ctrl.shutdown();
    return "";
  }

  RpcTarget t_;
};

// (1) A verified run keeps completing, with no error, while 12 hosts negotiate ffdhe8192 at
// once (through a cap of 4: most of them wait their turn, none is refused).
TEST_F(AuthStorm, VerifiedRunKeepsGoingWhileManyHostsNegotiateFfdhe8192) {
  start(4, 60000);
  const std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t_.port) +
                           " subnqn:" + kSub + " hostnqn:" + kHostNqn;
  RunResult perf;
  std::thread perf_thread([&] {
    perf =
        run_command({SENS_BINARY, "perf", "-r", trid, "--dhchap-secret", kSecret, "--rw", "randrw",
                     "--bs", "4k", "--qd", "4", "--size", "4M", "--time", "6", "--verify"},
                    90000);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  constexpr int kHosts = 12;
  std::atomic<int> succeeded{0};
  std::vector<std::string> errors(kHosts);
  std::vector<std::thread> hosts;
  for (int i = 0; i < kHosts; ++i)
    hosts.emplace_back([&, i] {
      RawAuth h;
      errors[i] = h.open(t_.port);
      if (errors[i].empty()) errors[i] = h.authenticate(uint16_t(100 + i));
      if (errors[i].empty()) ++succeeded;
    });
  for (auto& h : hosts) h.join();
  perf_thread.join();
  for (int i = 0; i < kHosts; ++i) EXPECT_EQ(errors[i], "") << "host " << i;
  EXPECT_EQ(succeeded.load(), kHosts);
  EXPECT_EQ(perf.code, 0) << perf.out << perf.err;
  EXPECT_NE(perf.out.find(" 0 failed"), std::string::npos) << perf.out;
  auto n = negotiations();
  EXPECT_EQ(n["limit"], 4);
  EXPECT_GE(n["queued"].get<uint64_t>(), 1u) << n.dump() << ": the cap was never reached";
  EXPECT_EQ(n["admitted"].get<uint64_t>(), uint64_t(kHosts)) << n.dump();
  EXPECT_EQ(n["active"], 0) << n.dump();
  EXPECT_EQ(n["refused"], 0) << n.dump();
}

// (2) Malformed AUTH_Send payloads in an ffdhe8192 exchange: each is refused with its reason,
// and the target serves the next exchange (and other hosts) as before.
TEST_F(AuthStorm, MalformedAuthSendPayloadsAreRefusedPrecisely) {
  start(4, 10000);
  RawAuth h;
  ASSERT_EQ(h.open(t_.port), "");
  uint16_t t_id = 1;
  std::vector<uint8_t> ch;
  // Each REPLY is broken in one length field, after a fresh NEGOTIATE and CHALLENGE.
  auto broken_reply = [&](const char* what, const std::function<void(std::vector<uint8_t>&)>& f,
                          int reason) {
    ASSERT_EQ(h.challenge(++t_id, &ch), "") << what;
    auto r = h.reply(ch, kSecret);
    f(r);
    Result sent = h.send(r);
    ASSERT_TRUE(sent.ok()) << what << ": " << sent.describe();
    EXPECT_EQ(h.next_failure1(), reason) << what;
  };
  broken_reply(
      "HL of SHA-384", [](auto& r) { r[6] = 48; }, wa::kFailIncorrectPayload);
  broken_reply(
      "HL 0", [](auto& r) { r[6] = 0; }, wa::kFailIncorrectPayload);
  broken_reply(
      "DHVLEN one byte short", [](auto& r) { r[10] = 0xFF, r[11] = 0x03; },
      wa::kFailIncorrectPayload);
  broken_reply(
      "DHVLEN past the message", [](auto& r) { r[10] = 0x00, r[11] = 0x08; },
      wa::kFailIncorrectPayload);
  broken_reply(
      "truncated by one byte", [](auto& r) { r.pop_back(); }, wa::kFailIncorrectPayload);
  broken_reply(
      "truncated to the header", [](auto& r) { r.resize(6); }, wa::kFailIncorrectPayload);
  broken_reply(
      "DH value 0", [](auto& r) { std::fill(r.begin() + 16 + 64, r.end(), 0); },
      wa::kFailDhgroupUnusable);
  broken_reply(
      "DH value p - 1 (order 2)",
      [](auto& r) {
        // ffdhe primes end ...FFFFFFFF: p - 1 ends ...FFFFFFFE
        std::fill(r.begin() + 16 + 64, r.end(), 0xFF);
        r.back() = 0xFE;
      },
      wa::kFailDhgroupUnusable);
  broken_reply(
      "unknown message id", [](auto& r) { r[1] = 0x7F; }, wa::kFailIncorrectMessage);
  broken_reply(
      "unknown message type", [](auto& r) { r[0] = 0x42; }, wa::kFailIncorrectMessage);
  broken_reply(
      "another transaction", [](auto& r) { r[4] ^= 1; }, wa::kFailIncorrectPayload);
  broken_reply(
      "a wrong response", [](auto& r) { r[16] ^= 1; }, wa::kFailFailed);
  // Out of order: SUCCESS2 where the REPLY belongs; a second REPLY after the exchange ended.
  ASSERT_EQ(h.challenge(++t_id, &ch), "");
  std::vector<uint8_t> s2(16, 0);
  s2[0] = wa::kTypeDhchap;
  s2[1] = wa::kIdSuccess2;
  s2[4] = uint8_t(t_id);
  ASSERT_TRUE(h.send(s2).ok());
  EXPECT_EQ(h.next_failure1(), wa::kFailIncorrectMessage);
  ASSERT_TRUE(h.send(h.reply(ch, kSecret)).ok());
  EXPECT_EQ(h.next_failure1(), wa::kFailIncorrectMessage);
  // NEGOTIATE with every length field wrong (on another queue: each queue may negotiate 16
  // times).
  RawAuth h2;
  ASSERT_EQ(h2.open(t_.port), "");
  auto broken_negotiate = [&](const char* what, const std::function<void(std::vector<uint8_t>&)>& f,
                              int reason) {
    auto m = RawAuth::negotiate(++t_id);
    f(m);
    ASSERT_TRUE(h2.send(m).ok()) << what;
    EXPECT_EQ(h2.next_failure1(), reason) << what;
  };
  broken_negotiate(
      "NAPD 0", [](auto& m) { m[7] = 0; }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "NAPD 2, one descriptor", [](auto& m) { m[7] = 2; }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "NAPD 255", [](auto& m) { m[7] = 255; }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "HALEN 31", [](auto& m) { m[10] = 31; }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "DHLEN 255", [](auto& m) { m[11] = 255; }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "HALEN 0", [](auto& m) { m[10] = 0; }, wa::kFailHashUnusable);
  broken_negotiate(
      "DHLEN 0", [](auto& m) { m[11] = 0; }, wa::kFailDhgroupUnusable);
  broken_negotiate(
      "an unknown DH group", [](auto& m) { m[42] = 6; }, wa::kFailDhgroupUnusable);
  broken_negotiate(
      "cut inside the descriptor", [](auto& m) { m.resize(8 + 10); }, wa::kFailIncorrectPayload);
  broken_negotiate(
      "a short FAILURE2", [](auto& m) { m[1] = wa::kIdFailure2, m.resize(7); },
      wa::kFailIncorrectPayload);
  // Oversize: an AUTH_Send longer than any message is refused as a command.
  std::vector<uint8_t> huge(8193, 0);
  EXPECT_EQ(h.c.exec(wa::make_auth_send(8193, nvme::Xfer::kTransport), huge.data(), 8193).status(),
            st::kInvalidField);
  // A TL that is not the data's length.
  auto m = RawAuth::negotiate(++t_id);
  EXPECT_EQ(h.c.exec(wa::make_auth_send(uint32_t(m.size()) + 1, nvme::Xfer::kInCapsule), m.data(),
                     uint32_t(m.size()))
                .status(),
            st::kSglInvalidDataLength);
  // After all that, a raw host and the library host authenticate as before.
  RawAuth h3;
  ASSERT_EQ(h3.open(t_.port), "");
  EXPECT_EQ(h3.authenticate(++t_id), "");
  EXPECT_EQ(library_host_works(), "");
  auto n = negotiations();
  EXPECT_EQ(n["active"], 0) << n.dump();
}

// (3) A client that holds more half-finished negotiations than the cap: other hosts wait at
// most about the timeout per slot ahead of them, the client's slots expire (its late REPLY is
// refused), and the waiting line beyond its bound is refused at once.
TEST_F(AuthStorm, HalfFinishedNegotiationsTimeOutAndDoNotBlockOthers) {
  constexpr uint32_t kCap = 2, kTimeoutMs = 2500;
  start(kCap, kTimeoutMs);
  // Two negotiations hold both slots (CHALLENGE received, never answered) ...
  std::vector<std::unique_ptr<RawAuth>> holders, waiters;
  std::vector<std::vector<uint8_t>> challenges(kCap);
  // No slot can free before a holder's timeout has run from its NEGOTIATE, which comes after
  // this: a bound that holds however slowly the machine runs the set-up below.
  const auto holders_from = Clock::now();
  for (uint32_t i = 0; i < kCap; ++i) {
    holders.push_back(std::make_unique<RawAuth>());
    ASSERT_EQ(holders.back()->open(t_.port), "");
    ASSERT_EQ(holders.back()->challenge(uint16_t(10 + i), &challenges[i]), "");
  }
  // ... and two more wait for a slot, which they will hold without answering either.
  std::vector<uint16_t> cids;
  for (int i = 0; i < 2; ++i) {
    waiters.push_back(std::make_unique<RawAuth>());
    ASSERT_EQ(waiters.back()->open(t_.port), "");
    ASSERT_TRUE(waiters.back()->send(RawAuth::negotiate(uint16_t(20 + i))).ok());
    cids.push_back(waiters.back()->receive_later());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto n = negotiations();
  EXPECT_EQ(n["active"], kCap) << n.dump();
  EXPECT_EQ(n["waiting"], 2) << n.dump();
  // Another host gets in line behind them: through within about (2 + 1) timeouts.
  auto begin = Clock::now();
  EXPECT_EQ(library_host_works(), "");
  const int64_t waited = ms_since(begin);
  EXPECT_GE(ms_since(holders_from), int64_t(kTimeoutMs)) << "the cap was not applied";
  EXPECT_LT(waited, int64_t(kTimeoutMs) * 6) << "blocked beyond the bound";
  // The waiters did get their CHALLENGE (their slot came once the first holders expired).
  for (size_t i = 0; i < waiters.size(); ++i) {
    auto ch = waiters[i]->collect(cids[i], 10000);
    EXPECT_EQ(ch.empty() ? -2 : ch[1], wa::kIdChallenge) << RawAuth::describe(ch);
  }
  // The first holders' late REPLY: refused, their negotiation timed out.
  for (uint32_t i = 0; i < kCap; ++i) {
    ASSERT_TRUE(holders[i]->send(holders[i]->reply(challenges[i], kSecret)).ok());
    EXPECT_EQ(holders[i]->next_failure1(), wa::kFailFailed);
  }
  // Everything is released once the last holders expire too.
  std::this_thread::sleep_for(std::chrono::milliseconds(kTimeoutMs + 300));
  n = negotiations();
  EXPECT_EQ(n["active"], 0) << n.dump();
  EXPECT_EQ(n["waiting"], 0) << n.dump();
  EXPECT_GE(n["timed_out"].get<uint64_t>(), 4u) << n.dump();
  // And the holders may negotiate again, and succeed.
  EXPECT_EQ(holders[0]->authenticate(30), "");
}

// Beyond the waiting line's bound (8 per slot) a negotiation is refused at once.
TEST_F(AuthStorm, WaitingLineIsBounded) {
  start(1, 5000);
  RawAuth holder;
  ASSERT_EQ(holder.open(t_.port), "");
  std::vector<uint8_t> ch;
  ASSERT_EQ(holder.challenge(1, &ch), "");
  std::vector<std::unique_ptr<RawAuth>> waiters;
  for (int i = 0; i < 8; ++i) {
    waiters.push_back(std::make_unique<RawAuth>());
    ASSERT_EQ(waiters.back()->open(t_.port), "");
    ASSERT_TRUE(waiters.back()->send(RawAuth::negotiate(uint16_t(i))).ok());
    waiters.back()->receive_later();
  }
  RawAuth late;
  ASSERT_EQ(late.open(t_.port), "");
  ASSERT_TRUE(late.send(RawAuth::negotiate(99)).ok());
  auto begin = Clock::now();
  EXPECT_EQ(late.next_failure1(), wa::kFailFailed);
  EXPECT_LT(ms_since(begin), 2000) << "a refusal must not wait";
  auto n = negotiations();
  EXPECT_EQ(n["waiting"], 8) << n.dump();
  EXPECT_EQ(n["refused"], 1) << n.dump();
  // The holder finishing hands its slot on: the first waiter gets its CHALLENGE.
  ASSERT_TRUE(holder.send(holder.reply(ch, kSecret)).ok());
  EXPECT_EQ(holder.receive()[1], wa::kIdSuccess1);
}

// A host's DH value is checked for its range by default, and fully with --dhchap-full-check:
// p - 2 (in range, outside the prime-order subgroup) passes the first (the exchange then
// fails on the response, which the host cannot make) and is refused as unusable by the second.
// p - 1 is refused by both.
TEST_F(AuthStorm, HostValueCheckedForRangeOrFully) {
  constexpr uint8_t kFfdhe2048 = 1;
  auto failure_for = [](uint16_t port, int minus) {
    RawAuth h;
    if (std::string e = h.open(port); !e.empty()) return -100;
    std::vector<uint8_t> ch;
    if (std::string e = h.challenge(1, &ch, kFfdhe2048); !e.empty()) return -101;
    auth::Bytes placeholder;
    h.reply(ch, kSecret, &placeholder);  // (learns p)
    auth::Bytes value = h.prime_;
    if (value.empty()) return -102;
    value.back() = uint8_t(value.back() - minus);
    if (!h.send(h.reply(ch, kSecret, &value)).ok()) return -103;
    return h.next_failure1();
  };
  start(8, 10000);
  EXPECT_EQ(failure_for(t_.port, 2), wa::kFailFailed) << "range check: the response fails";
  EXPECT_EQ(failure_for(t_.port, 1), wa::kFailDhgroupUnusable);
  RpcTarget full;
  start(8, 10000, {"--dhchap-full-check"}, &full);
  EXPECT_EQ(failure_for(full.port, 2), wa::kFailDhgroupUnusable);
  EXPECT_EQ(failure_for(full.port, 1), wa::kFailDhgroupUnusable);
  EXPECT_EQ(library_host_works(full.port), "") << "an honest host authenticates, fully checked";
}

// The new options are bounded.
TEST_F(AuthStorm, OptionsAreChecked) {
  for (auto [opt, value, want] :
       {std::tuple{"--dhchap-negotiations", "5000", "--dhchap-negotiations must be in 1..4096"},
        std::tuple{"--dhchap-timeout-ms", "99", "--dhchap-timeout-ms must be in 100..600000"},
        std::tuple{"--dhchap-timeout-ms", "600001",
                   "--dhchap-timeout-ms must be in 100..600000"}}) {
    RunResult r =
        run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(free_port()),
                     opt, value, "--discovery-port", "0", "--dump-config"});
    EXPECT_NE(r.code, 0) << opt << " " << value;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace sens::testing
