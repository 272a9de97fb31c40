// The public API that `sens perf` and the fio engine needed beyond I/O (issue 32), against a
// real `sens target`: TRID parsing, PollerTimer, the loop and connection statistics, the
// shared connections'. Only include/sens/host.h here, as an application has it.
#include <sens/host.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <ctime>
#include <vector>

#include "child.h"

namespace sens {
namespace {

using host::testing::TargetProcess;

struct Pending {
  int left = 0;
  int failed = 0;
};
void on_done(void* ctx, const Completion& c) {
  auto* p = static_cast<Pending*>(ctx);
  --p->left;
  if (!c.status.ok()) ++p->failed;
}

bool wait_all(Poller& poller, Pending& p) {
  for (int i = 0; i < 3000 && p.left > 0; ++i) poller.process_completions(0, 10'000'000);
  return p.left == 0;
}

// `n` 4 KiB reads, `depth` at a time, on `q`.
void read_n(Poller& poller, IoQueue& q, int n, int depth, Pending* p) {
  std::vector<uint8_t> buf(size_t(depth) * 4096);
  std::vector<iovec> iov(static_cast<size_t>(depth));
  for (int done = 0; done < n; done += depth) {
    for (int i = 0; i < depth; ++i) {
      iov[size_t(i)] = {buf.data() + size_t(i) * 4096, 4096};
      ++p->left;
      ASSERT_EQ(q.read(1, uint64_t(i) * 8, 8, &iov[size_t(i)], 1, on_done, p), 0);
    }
    ASSERT_TRUE(wait_all(poller, *p));
  }
}

TEST(HostApi, ParseTridAsConnectDoes) {
  TransportId t;
  std::string err;
  ASSERT_TRUE(parse_trid("traddr:127.0.0.1 TRSVCID:4421 subnqn:nqn.2024-01.io.x:d0", &t, &err))
      << err;
  EXPECT_EQ(t.trtype, "tcp");
  EXPECT_EQ(t.adrfam, "ipv4");
  EXPECT_EQ(t.traddr, "127.0.0.1");
  EXPECT_EQ(t.trsvcid, 4421);
  EXPECT_EQ(t.subnqn, "nqn.2024-01.io.x:d0");
  EXPECT_EQ(t.to_string(),
            "trtype:tcp adrfam:ipv4 traddr:127.0.0.1 trsvcid:4421 subnqn:nqn.2024-01.io.x:d0");
  TransportId again;
  ASSERT_TRUE(parse_trid(t.to_string(), &again, &err)) << err;
  EXPECT_EQ(again.to_string(), t.to_string());
  // No subnqn: the discovery NQN, as connect() reads it (and refuses).
  ASSERT_TRUE(parse_trid("traddr:::1 adrfam:ipv6", &t, &err)) << err;
  EXPECT_EQ(t.subnqn, "nqn.2014-08.org.nvmexpress.discovery");

  struct Bad {
    const char* text;
    const char* names;  // the error names the offending part
  } bad[] = {{"trsvcid:4420", "traddr"},
             {"traddr:127.0.0.1 trsvcid:0", "trsvcid"},
             {"traddr:127.0.0.1 trsvcid:65536", "trsvcid"},
             {"traddr:127.0.0.1 color:blue", "color"},
             {"traddr:127.0.0.1 traddr:127.0.0.2", "traddr"},
             {"traddr:not-an-address", "not-an-address"},
             {"traddr:127.0.0.1 trtype:rdma", "rdma"},
             {"traddr:127.0.0.1 hostnqn:host1", "hostnqn"}};
  for (const Bad& b : bad) {
    TransportId out;
    std::string why;
    EXPECT_FALSE(parse_trid(b.text, &out, &why)) << b.text;
    EXPECT_NE(why.find(b.names), std::string::npos) << b.text << " -> " << why;
  }
}

TEST(HostApi, PollerTimerFiresInsideProcessCompletionsAndCancels) {
  Poller poller;
  int fired = 0;
  PollerTimer timer(
      poller, [](void* ctx) { ++*static_cast<int*>(ctx); }, &fired);
  EXPECT_FALSE(timer.armed());
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  timer.arm(now + 20'000'000);  // 20 ms
  EXPECT_TRUE(timer.armed());
  poller.process_completions(0, 0);
  EXPECT_EQ(fired, 0);  // not before its deadline
  // One call with a long timeout returns once the timer has fired, well before the timeout.
  for (int i = 0; i < 100 && fired == 0; ++i) poller.process_completions(0, 1'000'000'000);
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(timer.armed());
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t after = int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  EXPECT_GE(after, now + 20'000'000);
  EXPECT_LT(after, now + 900'000'000);
  EXPECT_GE(poller.stats().timer_late_us.count, 1u);

  timer.arm(after + 10'000'000);
  timer.cancel();
  EXPECT_FALSE(timer.armed());
  poller.process_completions(0, 50'000'000);
  EXPECT_EQ(fired, 1);
}

TEST(HostApi, OwnConnectionStatsCountAndReset) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.coalesce = "eager";
  ConnectResult r = Controller::connect(t.trid(), o).get();
  ASSERT_TRUE(r.controller) << r.error;
  Controller& ctrl = *r.controller;
  EXPECT_GT(ctrl.io_incapsule_bytes(), 0u);
  EXPECT_EQ(ctrl.shared_connection_count(), 0);

  Poller poller;
  auto q = ctrl.create_io_queue(&poller, 8);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->connection(), -1);
  EXPECT_GE(q->qid(), 1);
  EXPECT_GT(q->maxh2cdata(), 0u);
  EXPECT_EQ(q->last_error(), "");

  Pending p;
  read_n(poller, *q, 64, 8, &p);
  EXPECT_EQ(p.failed, 0);
  ConnectionStats s = q->stats();
  EXPECT_GE(s.pdus_sent(), 64u);  // the Connect capsule and 64 reads
  EXPECT_GE(s.sendmsg_calls(), 8u);
  EXPECT_GE(s.recv_calls(), 8u);
  EXPECT_GE(s.total_flushes(), 8u);
  EXPECT_GE(s.pdus_per_flush().count, 8u);
  uint64_t by_reason = 0;
  for (const auto& [reason, n] : s.flushes()) by_reason += n;
  EXPECT_EQ(by_reason, s.total_flushes());
  EXPECT_EQ(s.drain_passes(), 0u);  // no send-list on a connection of its own
  const LoopStats loop = poller.stats();
  EXPECT_GT(loop.polls, 0u);

  // merge() adds exactly: the sum of two copies is twice each count.
  ConnectionStats twice = s;
  twice.merge(s);
  EXPECT_EQ(twice.pdus_sent(), 2 * s.pdus_sent());
  EXPECT_EQ(twice.sendmsg_calls(), 2 * s.sendmsg_calls());
  EXPECT_EQ(twice.pdus_per_flush().count, 2 * s.pdus_per_flush().count);
  EXPECT_DOUBLE_EQ(twice.pdus_per_flush().mean, s.pdus_per_flush().mean);

  // reset_stats restarts coalescing, not the system call counters.
  q->reset_stats();
  const ConnectionStats after = q->stats();
  EXPECT_EQ(after.pdus_sent(), 0u);
  EXPECT_EQ(after.pdus_per_flush().count, 0u);
  EXPECT_EQ(after.sendmsg_calls(), s.sendmsg_calls());
  read_n(poller, *q, 8, 8, &p);
  EXPECT_GE(q->stats().pdus_sent(), 8u);
  EXPECT_GT(q->stats().sendmsg_calls(), s.sendmsg_calls());

  // The caller's receive buffer: taken on a connection of its own, and I/O goes on through it.
  std::vector<uint8_t> staging(64 * 1024);
  EXPECT_TRUE(q->use_receive_buffer(staging.data(), staging.size()));
  read_n(poller, *q, 16, 8, &p);
  EXPECT_EQ(p.failed, 0);
  q.reset();
}

TEST(HostApi, SharedConnectionStatsSendList) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.share = ShareMode::kSendList;
  o.connections = 2;
  o.connection_depth = 32;
  ConnectResult r = Controller::connect(t.trid(), o).get();
  ASSERT_TRUE(r.controller) << r.error;
  Controller& ctrl = *r.controller;
  ASSERT_EQ(ctrl.shared_connection_count(), 2);

  Poller poller;
  auto q0 = ctrl.create_io_queue(&poller, 8);
  auto q1 = ctrl.create_io_queue(&poller, 8);
  ASSERT_TRUE(q0 && q1);
  EXPECT_NE(q0->connection(), q1->connection());  // round robin
  EXPECT_GE(q0->qid(), 1);
  EXPECT_GT(q0->maxh2cdata(), 0u);
  std::vector<uint8_t> staging(64 * 1024);
  EXPECT_FALSE(q0->use_receive_buffer(staging.data(), staging.size()));  // the owner's

  ctrl.reset_shared_connection_stats();
  Pending p;
  read_n(poller, *q0, 32, 8, &p);
  read_n(poller, *q1, 16, 8, &p);
  EXPECT_EQ(p.failed, 0);
  uint64_t entries = 0;
  for (int i = 0; i < 2; ++i) {
    const SharedConnectionStats s = ctrl.shared_connection_stats(i);
    EXPECT_GE(s.owner, 0);
    EXPECT_GT(s.owner_loop.polls, 0u);
    entries += s.connection.drain_entries();
    EXPECT_GE(s.connection.drain_passes(), 1u);
    EXPECT_EQ(s.connection.drain_per_pass().count, s.connection.drain_passes());
  }
  EXPECT_EQ(entries, 48u);  // every submission went through a send-list, once
  // A queue's view of its shared connection is that connection's.
  EXPECT_EQ(q0->stats().drain_entries(),
            ctrl.shared_connection_stats(q0->connection()).connection.drain_entries());
  // Out of range: empty, not a crash.
  EXPECT_EQ(ctrl.shared_connection_stats(2).connection.drain_entries(), 0u);
  EXPECT_EQ(ctrl.shared_connection_stats(-1).connection.pdus_sent(), 0u);

  q0->reset_stats();  // its connection's, every queue's on it
  EXPECT_EQ(ctrl.shared_connection_stats(q0->connection()).connection.drain_entries(), 0u);
  EXPECT_EQ(ctrl.shared_connection_stats(q1->connection()).connection.drain_entries(), 16u);
  ctrl.reset_shared_connection_stats();
  EXPECT_EQ(ctrl.shared_connection_stats(q1->connection()).connection.drain_entries(), 0u);
  q0.reset();
  q1.reset();
}

}  // namespace
}  // namespace sens
