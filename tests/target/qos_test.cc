// The QoS limiter (target/qos.h) over a manual clock: rates, bursts, read/write/total, IOPS
// and bytes together, refill timing, the reactor's share, arrival order, and the config's
// parsing with its errors.
#include "target/qos.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace sens::target::qos {
namespace {

using nlohmann::json;
constexpr uint32_t k4k = 4096;

struct QosLimiter : ::testing::Test {
  ManualClock clock{1000 * kSecond};
  Limiter lim{clock};
  Waiter w[64];
  void set(Limits l, uint32_t share = 1) { lim.configure(l, share); }
};

TEST(QosBucket, StartsFullHoldsTenMillisecondsAndRefillsAtTheRate) {
  TokenBucket b;
  b.configure(1000, 1, 0);  // 1000 units/s: holds 10
  EXPECT_EQ(b.burst(), 10);
  EXPECT_EQ(b.tokens(), 10);
  b.take(10);
  EXPECT_FALSE(b.has(1));
  EXPECT_EQ(b.ready_at(1, 0), kMilli);  // one unit a millisecond
  b.refill(kMilli - 1);
  EXPECT_FALSE(b.has(1));
  b.refill(kMilli);
  EXPECT_TRUE(b.has(1));
  b.refill(kSecond);  // capped at the burst
  EXPECT_EQ(b.tokens(), 10);
}

TEST(QosBucket, ASlowRateStillHoldsOneUnitAndZeroIsUnlimited) {
  TokenBucket b;
  b.configure(5, 1, 0);
  EXPECT_EQ(b.burst(), 1);
  b.take(1);
  EXPECT_EQ(b.ready_at(1, 0), 200 * kMilli);
  TokenBucket none;
  none.configure(0, 1, 0);
  EXPECT_FALSE(none.limited());
  none.take(1'000'000);
  EXPECT_TRUE(none.has(UINT32_MAX));
}

TEST(QosBucket, ACommandLargerThanTheBucketWaitsForAFullOneAndLeavesDebt) {
  TokenBucket b;
  b.configure(1 << 20, 1, 0);  // 1 MiB/s: holds 10485 bytes
  EXPECT_EQ(b.burst(), 10485);
  EXPECT_TRUE(b.has(128 * 1024));  // full: it goes
  b.take(128 * 1024);
  EXPECT_LT(b.tokens(), 0);
  // The next one waits until the bucket is full again: 128 KiB at 1 MiB/s = 125 ms.
  EXPECT_EQ(b.ready_at(128 * 1024, 0), 125 * kMilli);
}

TEST_F(QosLimiter, ZeroLimitsAdmitEverything) {
  set(Limits{});
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(lim.admit(w[0], Dir::kWrite, 1 << 20));
  EXPECT_EQ(lim.counters().throttled, 0u);
  EXPECT_EQ(lim.next_ready(), Limiter::kNever);
}

TEST_F(QosLimiter, IopsBurstThenOneCommandPerPeriod) {
  set({.read_iops = 2000});  // burst 20, one every 500 us
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(lim.admit(w[i], Dir::kRead, k4k)) << i;
  EXPECT_FALSE(lim.admit(w[20], Dir::kRead, k4k));
  EXPECT_FALSE(lim.admit(w[21], Dir::kRead, k4k));
  EXPECT_EQ(lim.next_ready(), clock.now() + 500 * kMicro);
  EXPECT_EQ(lim.release(), nullptr);
  clock.advance(499 * kMicro);
  EXPECT_EQ(lim.release(), nullptr);
  clock.advance(kMicro);
  EXPECT_EQ(lim.release(), &w[20]);
  EXPECT_EQ(lim.release(), nullptr);
  EXPECT_EQ(lim.next_ready(), clock.now() + 500 * kMicro);
  clock.advance(500 * kMicro);
  EXPECT_EQ(lim.release(), &w[21]);
  EXPECT_FALSE(lim.waiting());
  EXPECT_EQ(lim.counters().throttled, 2u);
  EXPECT_EQ(lim.counters().delay_ns, uint64_t(500 * kMicro + 1000 * kMicro));
  EXPECT_EQ(lim.counters().admitted, 22u);
}

TEST_F(QosLimiter, OverASecondTheRateIsExactPlusTheBurst) {
  set({.total_iops = 1000});
  uint64_t went = 0;
  Waiter* waiting = nullptr;
  for (Nanos t = 0; t <= kSecond; t += 40 * kMicro, clock.advance(40 * kMicro)) {
    while (Waiter* r = lim.release()) {
      ++went;
      waiting = r == waiting ? nullptr : waiting;
    }
    for (int i = 0; i < 4 && !waiting; ++i) {  // a host that always has commands
      if (lim.admit(w[0], i % 2 ? Dir::kWrite : Dir::kRead, k4k))
        ++went;
      else
        waiting = &w[0];
    }
  }
  EXPECT_EQ(went, 1000u + 10u);  // 1000 a second, plus the 10 the bucket held at the start
}

TEST_F(QosLimiter, ReadAndWriteLimitsAreSeparateAndTotalCoversBoth) {
  set({.read_iops = 100, .write_iops = 0, .total_iops = 300});  // bursts 1 read, 3 total
  EXPECT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  EXPECT_TRUE(lim.admit(w[1], Dir::kWrite, k4k));  // writes are not read-limited
  EXPECT_TRUE(lim.admit(w[2], Dir::kWrite, k4k));
  EXPECT_FALSE(lim.admit(w[3], Dir::kWrite, k4k));  // the total (3) is spent
  clock.advance(10 * kMilli);                       // 3.3 ms a total token
  EXPECT_EQ(lim.release(), &w[3]);
  Limiter reads{clock};
  reads.configure({.read_iops = 100}, 1);
  EXPECT_TRUE(reads.admit(w[10], Dir::kRead, k4k));
  EXPECT_FALSE(reads.admit(w[11], Dir::kRead, k4k));
  Limiter writes{clock};
  writes.configure({.read_iops = 100}, 1);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(writes.admit(w[12], Dir::kWrite, k4k));
}

TEST_F(QosLimiter, BytesCountTheTransferAndWaitTheExactTime) {
  set({.write_mibps = 1});  // 1 MiB/s: holds 10485 bytes
  EXPECT_TRUE(lim.admit(w[0], Dir::kWrite, k4k));
  EXPECT_TRUE(lim.admit(w[1], Dir::kWrite, k4k));
  EXPECT_FALSE(lim.admit(w[2], Dir::kWrite, k4k));  // 2293.76 bytes left
  // (4096 - 2293.76) bytes at 1048576 bytes/s = 1.71875 ms
  EXPECT_EQ(lim.next_ready(), clock.now() + 1'718'750);
  EXPECT_FALSE(lim.admit(w[3], Dir::kRead, 1 << 20));  // behind the waiting write
  clock.advance(1'718'750);
  EXPECT_EQ(lim.release(), &w[2]);
  EXPECT_EQ(lim.release(), &w[3]);  // reads are not byte-limited here
}

TEST_F(QosLimiter, IopsAndBytesTogetherTheTighterWins) {
  set({.total_iops = 1000, .total_mibps = 2});  // holds 10 commands and 20971 bytes
  auto burst = [&](uint32_t bytes) {
    int went = 0;
    while (lim.admit(w[0], Dir::kRead, bytes)) ++went;
    lim.cancel(w[0]);
    return went;
  };
  EXPECT_EQ(burst(64 * 1024), 1);  // larger than the bucket: goes once it is full
  clock.advance(kSecond);
  EXPECT_EQ(burst(k4k), 5);  // the bytes are tighter: 20971 / 4096
  clock.advance(kSecond);
  EXPECT_EQ(burst(512), 10);  // the IOPS are tighter: 10 of 512 bytes
  EXPECT_EQ(lim.counters().admitted, 16u);
}

TEST_F(QosLimiter, ARequestBehindAWaiterWaitsEvenWithTokens) {
  set({.write_iops = 100});
  EXPECT_TRUE(lim.admit(w[0], Dir::kWrite, k4k));
  EXPECT_FALSE(lim.admit(w[1], Dir::kWrite, k4k));
  EXPECT_FALSE(lim.admit(w[2], Dir::kRead, k4k));  // reads are unlimited, but arrive later
  clock.advance(10 * kMilli);
  EXPECT_EQ(lim.release(), &w[1]);
  EXPECT_EQ(lim.release(), &w[2]);
}

TEST_F(QosLimiter, TheReactorShareDividesTheRate) {
  set({.read_iops = 1000}, 4);  // 250/s on this reactor: burst 2.5 -> whole tokens 2
  EXPECT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  EXPECT_TRUE(lim.admit(w[1], Dir::kRead, k4k));
  EXPECT_FALSE(lim.admit(w[2], Dir::kRead, k4k));         // 0.5 left
  EXPECT_EQ(lim.next_ready(), clock.now() + 2 * kMilli);  // half a token at 250/s
}

TEST_F(QosLimiter, CancelAndDropLeaveTheQueueInOrder) {
  set({.total_iops = 100});
  EXPECT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  for (int i = 1; i <= 3; ++i) EXPECT_FALSE(lim.admit(w[i], Dir::kRead, k4k));
  lim.cancel(w[2]);
  EXPECT_EQ(w[2].on, nullptr);
  EXPECT_EQ(lim.drop_first(), &w[1]);
  EXPECT_EQ(lim.drop_first(), &w[3]);
  EXPECT_EQ(lim.drop_first(), nullptr);
  EXPECT_FALSE(lim.waiting());
}

TEST_F(QosLimiter, ReconfigureKeepsTokensUpToTheNewBurst) {
  set({.read_iops = 1000});  // holds 10
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  set({.read_iops = 200});  // holds 2: the 5 left are cut to 2
  EXPECT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  EXPECT_TRUE(lim.admit(w[0], Dir::kRead, k4k));
  EXPECT_FALSE(lim.admit(w[1], Dir::kRead, k4k));
  set({});  // lifted: the waiter still needs drop_first(); new commands still queue behind it
  EXPECT_FALSE(lim.admit(w[2], Dir::kRead, k4k));
  EXPECT_EQ(lim.release(), &w[1]);
  EXPECT_EQ(lim.release(), &w[2]);
}

TEST(QosConfig, ParsesAndPrintsBack) {
  Config c;
  std::string error;
  json j = json::parse(R"({"namespaces": {"1": {"read_iops": 2000, "total_mibps": 100},
                                          "7": {"write_iops": 0}},
                           "hosts": {"nqn.2014-08.org.nvmexpress:uuid:1": {"write_mibps": 5}}})");
  ASSERT_TRUE(parse_config(j, "qos", &c, &error)) << error;
  EXPECT_EQ(c.namespaces.size(), 1u);  // nsid 7 has no limit left: dropped
  EXPECT_EQ(c.namespaces[1].read_iops, 2000u);
  EXPECT_EQ(c.namespaces[1].total_mibps, 100u);
  EXPECT_EQ(c.hosts["nqn.2014-08.org.nvmexpress:uuid:1"].write_mibps, 5u);
  EXPECT_EQ(check_config(c), "");
  Config back;
  ASSERT_TRUE(parse_config(config_json(c), "qos", &back, &error));
  EXPECT_EQ(back, c);
}

TEST(QosConfig, RefusesWithTheKeyNamed) {
  auto refuse = [](const char* text) {
    Config c;
    std::string error;
    EXPECT_FALSE(parse_config(json::parse(text), "subsystem 'x' qos", &c, &error)) << text;
    return error;
  };
  EXPECT_EQ(refuse(R"({"namespace": {}})"),
            "subsystem 'x' qos: unknown key 'namespace' (namespaces, hosts)");
  EXPECT_EQ(refuse(R"({"namespaces": {"0": {"read_iops": 1}}})"),
            "subsystem 'x' qos namespace '0': an nsid is 1..1024");
  EXPECT_EQ(refuse(R"({"namespaces": {"1025": {}}})"),
            "subsystem 'x' qos namespace '1025': an nsid is 1..1024");
  EXPECT_EQ(refuse(R"({"hosts": {"host1": {}}})"),
            "subsystem 'x' qos host 'host1': not a host NQN (nqn.…)");
  EXPECT_EQ(refuse(R"({"namespaces": {"1": {"read_iop": 1}}})"),
            "subsystem 'x' qos namespace '1': unknown key 'read_iop' (read_iops, write_iops, "
            "total_iops, read_mibps, write_mibps, total_mibps)");
  EXPECT_EQ(refuse(R"({"namespaces": {"1": {"read_iops": -1}}})"),
            "subsystem 'x' qos namespace '1': 'read_iops' must be an integer 0..100000000 "
            "(commands a second; 0: no limit)");
  EXPECT_EQ(refuse(R"({"namespaces": {"1": {"write_mibps": 1.5}}})"),
            "subsystem 'x' qos namespace '1': 'write_mibps' must be an integer 0..1000000 "
            "(MiB/s; 0: no limit)");
  EXPECT_EQ(refuse(R"({"namespaces": {"1": {"total_mibps": 1000001}}})"),
            "subsystem 'x' qos namespace '1': 'total_mibps' must be an integer 0..1000000 "
            "(MiB/s; 0: no limit)");
  EXPECT_EQ(refuse(R"({"namespaces": [1]})"),
            "subsystem 'x' qos 'namespaces': expected an object keyed by nsid (\"1\")");
  Config c;
  c.namespaces[2000].read_iops = 1;
  EXPECT_EQ(check_config(c), "qos namespace 2000: 1..1024");
}

TEST(QosConfig, TheCommandLineOption) {
  Config c;
  std::string error;
  ASSERT_TRUE(parse_option("ns=1,read_iops=2000,total_mibps=100", &c, &error)) << error;
  ASSERT_TRUE(parse_option("ns=1,read_iops=500", &c, &error)) << error;  // replaces that key
  ASSERT_TRUE(parse_option("host=nqn.2014-08.org.nvmexpress:uuid:1,write_iops=7", &c, &error));
  EXPECT_EQ(config_json(c), json::parse(R"({"namespaces": {"1": {"read_iops": 500,
      "total_mibps": 100}}, "hosts": {"nqn.2014-08.org.nvmexpress:uuid:1": {"write_iops": 7}}})"));
  auto refuse = [](const std::string& text) {
    Config c;
    std::string error;
    EXPECT_FALSE(parse_option(text, &c, &error)) << text;
    return error;
  };
  EXPECT_EQ(refuse("1,read_iops=5"),
            "'1,read_iops=5': expected ns=NSID,KEY=N,... or "
            "host=HOSTNQN,KEY=N,...");
  EXPECT_EQ(refuse("ns=0,read_iops=5"), "'ns=0,read_iops=5': an nsid is 1..1024");
  EXPECT_EQ(refuse("ns=1"),
            "'ns=1': no limit given (expected ns=NSID,KEY=N,... or "
            "host=HOSTNQN,KEY=N,...)");
  EXPECT_EQ(refuse("ns=1,read_iops=fast"),
            "'ns=1,read_iops=fast': 'read_iops=fast': expected "
            "KEY=N (N an integer)");
  EXPECT_EQ(refuse("ns=1,reads=5"),
            "'ns=1,reads=5': unknown key 'reads' (read_iops, "
            "write_iops, total_iops, read_mibps, write_mibps, "
            "total_mibps)");
  EXPECT_EQ(refuse("host=h1,read_iops=5"), "'host=h1,read_iops=5': 'h1' is not a host NQN (nqn.…)");
}

}  // namespace
}  // namespace sens::target::qos
