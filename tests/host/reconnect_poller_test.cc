// Issue 32: a reconnect never blocks the poller's thread. Two controllers, each on a real
// `sens target` process, and one queue on each with a connection of its own (ShareMode::kNone:
// the application's poller drives both connections). Target A is killed and started again on
// its port; the moment A's controller is live again (its state callback, before the pollers
// hear of it) the new target is stopped (SIGSTOP): its kernel still accepts the I/O queue's
// TCP connection, but nothing answers ICReq. While A's queue waits for ICResp, and past its
// connect timeout (the attempt fails, the controller reconnects again), B's reads keep
// completing and no process_completions call takes more than a few ms. Once A runs again
// (SIGCONT) its held writes complete.
#include <sens/host.h>

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "child.h"
#include "completions.h"

namespace sens {
namespace {

using host::testing::Clock;
using host::testing::Io;
using host::testing::since;
using host::testing::TargetProcess;

// Stops the target the second time the controller goes live (the first is the bring-up).
struct StopWhenLiveAgain {
  std::atomic<TargetProcess*> target{nullptr};
  std::atomic<int> lives{0};
  std::atomic<bool> stopped{false};
  static void on(void* ctx, ControllerState s) {
    auto* self = static_cast<StopWhenLiveAgain*>(ctx);
    if (s != ControllerState::kLive || ++self->lives != 2) return;
    if (TargetProcess* t = self->target.load()) t->signal(SIGSTOP);  // waits until it is
    self->stopped = true;
  }
};

// Reads kept in flight on one queue: each completion submits the next.
struct ReadLoop {
  IoQueue* q = nullptr;
  std::vector<uint8_t> buf;
  iovec iov{};
  uint64_t lba = 0;
  uint64_t* done = nullptr;
  uint64_t* errors = nullptr;
  static void on(void* ctx, const Completion& c) {
    auto* self = static_cast<ReadLoop*>(ctx);
    if (!self->q) return;  // the loop is over (its queue is being deleted)
    ++*(c.status.ok() ? self->done : self->errors);
    self->q->read(1, self->lba, 1, &self->iov, 1, &ReadLoop::on, self);
  }
};

TEST(ReconnectPoller, OtherQueuesKeepCompletingWhileOneReconnects) {
  auto ta = std::make_unique<TargetProcess>();
  TargetProcess tb;
  ASSERT_TRUE(ta->ready()) << ta->log();
  ASSERT_TRUE(tb.ready()) << tb.log();
  const uint16_t port = ta->port, disc = ta->disc_port;

  StopWhenLiveAgain hook;
  ControllerOptions oa;
  oa.share = ShareMode::kNone;
  oa.reconnect_delay_s = 1;
  oa.ctrl_loss_tmo_s = 60;
  oa.kato_ms = 5000;
  oa.connect_timeout_ms = 1000;  // the stalled set-up fails at this deadline, then retries
  oa.on_state = &StopWhenLiveAgain::on;
  oa.on_state_ctx = &hook;
  auto ra = Controller::connect(ta->trid(), oa).get();
  ASSERT_TRUE(ra.controller) << ra.error;
  auto rb = Controller::connect(tb.trid()).get();
  ASSERT_TRUE(rb.controller) << rb.error;
  Controller& a = *ra.controller;
  const uint32_t bs = a.namespaces().at(0).block_size;

  Poller poller;
  std::string err;
  auto qa = a.create_io_queue(&poller, 8, &err);
  ASSERT_TRUE(qa) << err;
  auto qb = rb.controller->create_io_queue(&poller, 8, &err);
  ASSERT_TRUE(qb) << err;
  EXPECT_STREQ(qa->connection_state(), "open");

  uint64_t b_done = 0, b_errors = 0;
  std::vector<ReadLoop> loops(4);
  for (size_t i = 0; i < loops.size(); ++i) {
    ReadLoop& l = loops[i];
    l.q = qb.get();
    l.buf.resize(bs);
    l.iov = {l.buf.data(), bs};
    l.lba = i;
    l.done = &b_done;
    l.errors = &b_errors;
    ASSERT_EQ(qb->read(1, l.lba, 1, &l.iov, 1, &ReadLoop::on, &l), 0);
  }
  // Writes in flight on A when its target dies: held, then sent again.
  std::vector<Io> writes(4);
  for (size_t i = 0; i < writes.size(); ++i) {
    writes[i].buf.assign(bs, uint8_t(0x40 + i));
    writes[i].iov = {writes[i].buf.data(), bs};
    ASSERT_EQ(qa->write(1, 100 + i, 1, &writes[i].iov, 1, &Io::on, &writes[i]), 0);
  }
  ta->signal(SIGSTOP);
  poller.process_completions(0, 1'000'000);
  ta->kill_hard();
  ta.reset();
  ta = std::make_unique<TargetProcess>(std::vector<std::string>{}, "64M", port, disc);
  ASSERT_TRUE(ta->ready()) << ta->log();
  hook.target = ta.get();

  // Poll in 1 ms steps, timing every call, until A has been stopped for 2.5 s (past its
  // 1 s connect timeout: one set-up waits for ICResp, fails, and the next one waits again).
  std::set<std::string> a_states, a_errors;
  double longest_ms = 0;
  int over_5ms = 0;
  uint64_t calls = 0, b_at_stop = 0;
  Clock::time_point stop_seen{};
  const auto t0 = Clock::now();
  while (since(t0) < 30) {
    const auto c0 = Clock::now();
    poller.process_completions(0, 1'000'000);
    const double ms = since(c0) * 1000;
    if (hook.stopped) {
      if (stop_seen == Clock::time_point{}) {
        stop_seen = Clock::now();
        b_at_stop = b_done;
      }
      ++calls;
      longest_ms = std::max(longest_ms, ms);
      over_5ms += ms > 5;
      a_states.insert(qa->connection_state());
      a_errors.insert(a.last_error());
      if (since(stop_seen) > 2.5) break;
    }
  }
  ASSERT_TRUE(hook.stopped) << "A's controller did not come back: " << a.last_error();
  const uint64_t b_during = b_done - b_at_stop;
  ta->signal(SIGCONT);

  std::string states, errors;
  for (auto& s : a_states) states += s + " ";
  for (auto& e : a_errors) errors += "[" + e + "] ";
  // The stall was seen: A's queue waited for ICResp, and that attempt hit its deadline.
  EXPECT_TRUE(a_states.count("icresp")) << states;
  EXPECT_TRUE(std::any_of(a_errors.begin(), a_errors.end(), [](const std::string& e) {
    return e.find("reconnect: I/O queue") != std::string::npos &&
           e.find("no ICResp before the connect timeout") != std::string::npos;
  })) << errors;
  // Meanwhile B went on, and the poller's calls returned promptly.
  EXPECT_GE(b_during, 100u) << "B completed only " << b_during << " reads in 2.5 s";
  EXPECT_EQ(b_errors, 0u);
  EXPECT_LT(longest_ms, 100.0) << "a process_completions call took " << longest_ms << " ms";
  std::printf(
      "[ measured ] A stalled 2.5 s: %llu poller calls, longest %.2f ms, %d over 5 ms; "
      "B completed %llu reads meanwhile\n",
      (unsigned long long)calls, longest_ms, over_5ms, (unsigned long long)b_during);

  // A runs again: its queue reconnects and the held writes complete.
  const auto t1 = Clock::now();
  auto writes_done = [&] {
    return std::all_of(writes.begin(), writes.end(), [](const Io& w) { return w.done; });
  };
  while (!writes_done() && since(t1) < 20) poller.process_completions(0, 1'000'000);
  ASSERT_TRUE(writes_done()) << qa->connection_state() << " " << a.last_error();
  for (auto& w : writes) EXPECT_TRUE(w.c.status.ok()) << w.c.status.to_string();
  EXPECT_STREQ(qa->connection_state(), "open");
  EXPECT_EQ(a.state(), ControllerState::kLive);
  EXPECT_GE(a.counters().reconnects, 2u);  // the stalled association, then the good one

  // Stop B's loop: its reads complete with the queue's deletion.
  for (auto& l : loops) l.q = nullptr;
  qb.reset();
}

}  // namespace
}  // namespace sens
