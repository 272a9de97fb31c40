// The ownership rules of include/sens/host.h ("Ownership and lifetimes"), against `sens target`
// on a RAM namespace over TCP: a queue deleted from its own callback (with and without a
// poller), a poller deleted from a callback, the Controller, Poller and IoQueue destroyed in
// every order with commands in flight (the target stopped, so none is answered): each callback
// runs exactly once, with Command Aborted due to SQ Deletion, before the first destructor
// returns, and each destructor within abort_timeout_ms and a margin.
#include <sens/host.h>
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child.h"

namespace sens {
namespace {

using host::testing::TargetProcess;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kAbortMs = 500;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One command's record: how often its callback ran, and with what.
struct Cmd {
  std::atomic<int> calls{0};
  std::atomic<uint16_t> status{0xFFFF};
};
void count(void* ctx, const Completion& c) {
  auto* cmd = static_cast<Cmd*>(ctx);
  cmd->status = c.status.raw();
  ++cmd->calls;
}

ControllerOptions options(ShareMode mode) {
  ControllerOptions o;
  o.share = mode;
  o.connections = 1;
  o.connection_depth = 64;
  o.kato_ms = 0;  // a stopped target must not send the controller reconnecting meanwhile
  o.abort_timeout_ms = kAbortMs;
  return o;
}

std::unique_ptr<Controller> connect(const TargetProcess& t, const ControllerOptions& o) {
  ConnectResult r = Controller::connect(t.trid(), o).get();
  EXPECT_TRUE(r.controller) << r.error << "\n" << t.log();
  return std::move(r.controller);
}

// Submits `n` 4 KiB reads (and a write every fourth), each with its own record.
void submit(IoQueue& q, std::vector<Cmd>& cmds, std::vector<uint8_t>& buf, std::vector<iovec>& iov,
            int n) {
  buf.assign(size_t(n) * 4096, 0x5A);
  iov.resize(n);
  for (int i = 0; i < n; ++i) {
    iov[i] = {buf.data() + size_t(i) * 4096, 4096};
    const int rc = i % 4 == 3 ? q.write(1, uint64_t(i) * 8, 8, &iov[i], 1, count, &cmds[i])
                              : q.read(1, uint64_t(i) * 8, 8, &iov[i], 1, count, &cmds[i]);
    ASSERT_EQ(rc, 0) << i;
  }
}

std::string share_name(const ::testing::TestParamInfo<ShareMode>& info) {
  return share_mode_name(info.param);
}

// ---- a queue deleted from its own callback ----

class DeleteFromCallback : public ::testing::TestWithParam<ShareMode> {};

// With a poller: the first callback deletes its queue; the delete is deferred until
// process_completions returns, the other commands then complete (answered or aborted), each
// once, and the queue's cids are free again.
TEST_P(DeleteFromCallback, WithPoller) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o = options(GetParam());
  o.connection_depth = 16;  // one queue of 16 fills a shared connection
  auto ctrl = connect(t, o);
  ASSERT_TRUE(ctrl);
  for (int round = 0; round < 5; ++round) {
    Poller poller;
    std::string err;
    auto q = ctrl->create_io_queue(&poller, 16, &err);
    ASSERT_TRUE(q) << err;
    struct Ctx {
      std::unique_ptr<IoQueue>* q;
      std::vector<Cmd> cmds{16};
      std::atomic<int> deleted{0};
    } ctx;
    ctx.q = &q;
    std::vector<uint8_t> buf(16 * 4096);
    std::vector<iovec> iov(16);
    for (int i = 0; i < 16; ++i) {
      iov[i] = {buf.data() + size_t(i) * 4096, 4096};
      ASSERT_EQ(q->read(
                    1, uint64_t(i) * 8, 8, &iov[i], 1,
                    [](void* c, const Completion& comp) {
                      auto* x = static_cast<Ctx*>(c);
                      // The first callback deletes the queue; the others find it gone.
                      if (*x->q) {
                        x->q->reset();
                        ++x->deleted;
                      }
                      (void)comp;
                    },
                    &ctx),
                0);
    }
    // One context for all 16: counted by process_completions' return values (the deferred
    // close's callbacks included).
    int delivered = 0;
    for (int i = 0; i < 500 && delivered < 16; ++i)
      delivered += poller.process_completions(0, 10'000'000);
    EXPECT_EQ(delivered, 16);
    EXPECT_EQ(ctx.deleted.load(), 1);
    EXPECT_FALSE(q);
    // Its cids (shared) or qid (none) went back: a queue of the same depth fits again.
    auto again = ctrl->create_io_queue(&poller, 16, &err);
    EXPECT_TRUE(again) << err;
  }
}

// The same with each command's own record: exactly once each, answered or aborted.
TEST_P(DeleteFromCallback, WithPollerEachCallbackOnce) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t, options(GetParam()));
  ASSERT_TRUE(ctrl);
  Poller poller;
  std::unique_ptr<IoQueue> q = ctrl->create_io_queue(&poller, 32);
  ASSERT_TRUE(q);
  struct Rec {
    std::unique_ptr<IoQueue>* q;
    int calls = 0;
    uint16_t status = 0xFFFF;
  };
  std::vector<Rec> recs(32);
  std::vector<uint8_t> buf(32 * 4096);
  std::vector<iovec> iov(32);
  for (int i = 0; i < 32; ++i) {
    recs[i].q = &q;
    iov[i] = {buf.data() + size_t(i) * 4096, 4096};
    ASSERT_EQ(q->read(
                  1, uint64_t(i) * 8, 8, &iov[i], 1,
                  [](void* c, const Completion& comp) {
                    auto* r = static_cast<Rec*>(c);
                    ++r->calls;
                    r->status = comp.status.raw();
                    r->q->reset();  // the first deletes it; the others find it gone
                  },
                  &recs[i]),
              0);
  }
  for (int i = 0; i < 500; ++i) {
    poller.process_completions(0, 10'000'000);
    if (std::all_of(recs.begin(), recs.end(), [](const Rec& r) { return r.calls > 0; })) break;
  }
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(recs[i].calls, 1) << i;
    EXPECT_TRUE(recs[i].status == 0 || recs[i].status == Status::kAbortedSqDeletion)
        << i << ": " << Status(recs[i].status).to_string();
  }
  EXPECT_EQ(poller.process_completions(0, 1'000'000), 0);  // nothing more, nothing twice
}

INSTANTIATE_TEST_SUITE_P(ShareModes, DeleteFromCallback,
                         ::testing::Values(ShareMode::kNone, ShareMode::kLock,
                                           ShareMode::kSendList),
                         share_name);

// Without a poller (callbacks on the owner thread): the delete returns at once, the queue
// closes on a thread of its own (the owner goes on delivering), and its cids come back.
class DeleteFromOwnerCallback : public ::testing::TestWithParam<ShareMode> {};

TEST_P(DeleteFromOwnerCallback, CidsComeBackAndEachCallbackRunsOnce) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o = options(GetParam());
  o.connection_depth = 16;
  auto ctrl = connect(t, o);
  ASSERT_TRUE(ctrl);
  std::unique_ptr<IoQueue> q = ctrl->create_io_queue(nullptr, 16);
  ASSERT_TRUE(q);
  struct Shared {
    std::unique_ptr<IoQueue>* q;
    std::atomic<bool> armed{false};  // set once this round's submissions are all in
    std::atomic<bool> deleted{false};
    std::thread::id main = std::this_thread::get_id();
    std::atomic<int> on_main{0};
  } sh;
  sh.q = &q;
  struct Rec {
    Shared* sh;
    std::atomic<int> calls{0};
    std::atomic<uint16_t> status{0xFFFF};
  };
  std::vector<uint8_t> buf(16 * 4096);
  std::vector<iovec> iov(16);
  auto all_called = [](const std::vector<Rec>& recs) {
    return std::all_of(recs.begin(), recs.end(), [](const Rec& r) { return r.calls > 0; });
  };
  // Rounds of 16 reads until a callback that runs after the round's submissions deletes the
  // queue (a fast target may answer a whole round first).
  for (int round = 0; round < 50 && !sh.deleted; ++round) {
    std::vector<Rec> recs(16);
    for (int i = 0; i < 16; ++i) {
      recs[i].sh = &sh;
      iov[i] = {buf.data() + size_t(i) * 4096, 4096};
      ASSERT_EQ(q->read(
                    1, uint64_t(i) * 8, 8, &iov[i], 1,
                    [](void* c, const Completion& comp) {
                      auto* r = static_cast<Rec*>(c);
                      if (std::this_thread::get_id() == r->sh->main) ++r->sh->on_main;
                      if (r->sh->armed && !r->sh->deleted.exchange(true)) r->sh->q->reset();
                      r->status = comp.status.raw();
                      ++r->calls;  // last: the test thread may free r once it sees it
                    },
                    &recs[i]),
                0);
    }
    sh.armed = true;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 5 && !all_called(recs))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(recs[i].calls.load(), 1) << i;
      const uint16_t st = recs[i].status;
      EXPECT_TRUE(st == 0 || st == Status::kAbortedSqDeletion)
          << i << ": " << Status(st).to_string();
    }
    if (sh.deleted) {
      // The queue's 16 cids (the whole connection) are reserved again once its close is done.
      std::unique_ptr<IoQueue> again;
      std::string err;
      for (int i = 0; i < 200 && !again; ++i) {
        again = ctrl->create_io_queue(nullptr, 16, &err);
        if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_TRUE(again) << err;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int i = 0; i < 16; ++i) EXPECT_EQ(recs[i].calls.load(), 1) << i;  // never twice
    }
    sh.armed = false;
  }
  EXPECT_TRUE(sh.deleted.load());
  EXPECT_EQ(sh.on_main.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(ShareModes, DeleteFromOwnerCallback,
                         ::testing::Values(ShareMode::kLock, ShareMode::kSendList), share_name);

// A callback deletes the poller itself: it goes when process_completions returns; its queue
// stays a valid shell (-ENODEV) and every command completed once.
TEST(Ownership, PollerDeletedFromACallback) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t, options(ShareMode::kSendList));
  ASSERT_TRUE(ctrl);
  auto poller = std::make_unique<Poller>();
  Poller* raw = poller.get();
  auto q = ctrl->create_io_queue(raw, 8);
  ASSERT_TRUE(q);
  struct Rec {
    std::unique_ptr<Poller>* p;
    int calls = 0;
    uint16_t status = 0xFFFF;
  };
  std::vector<Rec> recs(8);
  std::vector<uint8_t> buf(8 * 4096);
  std::vector<iovec> iov(8);
  for (int i = 0; i < 8; ++i) {
    recs[i].p = &poller;
    iov[i] = {buf.data() + size_t(i) * 4096, 4096};
    ASSERT_EQ(q->read(
                  1, uint64_t(i) * 8, 8, &iov[i], 1,
                  [](void* c, const Completion& comp) {
                    auto* r = static_cast<Rec*>(c);
                    ++r->calls;
                    r->status = comp.status.raw();
                    r->p->reset();
                  },
                  &recs[i]),
              0);
  }
  // Driven through the raw pointer until the poller is gone (the call that deletes it returns
  // normally; it is not used after).
  for (int i = 0; i < 500 && poller; ++i) raw->process_completions(0, 10'000'000);
  ASSERT_FALSE(poller);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(recs[i].calls, 1) << i;
    EXPECT_TRUE(recs[i].status == 0 || recs[i].status == Status::kAbortedSqDeletion) << i;
  }
  iovec v{buf.data(), 4096};
  EXPECT_EQ(q->read(1, 0, 8, &v, 1, count, nullptr), -ENODEV);
  EXPECT_EQ(q->process_completions(), 0);
  q.reset();
}

// The Controller deleted from a callback on a library thread (a queue without poller): the
// destructor returns at once, the shutdown runs on a thread of its own, every other command
// completes once (answered or aborted), and the queue then refuses submissions.
TEST(Ownership, ControllerDeletedFromAnOwnerCallback) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t, options(ShareMode::kSendList));
  ASSERT_TRUE(ctrl);
  auto q = ctrl->create_io_queue(nullptr, 16);
  ASSERT_TRUE(q);
  struct Shared {
    std::unique_ptr<Controller>* ctrl;
    std::atomic<bool> armed{false}, deleted{false};
  } sh;
  sh.ctrl = &ctrl;
  struct Rec {
    Shared* sh;
    std::atomic<int> calls{0};
    std::atomic<uint16_t> status{0xFFFF};
  };
  std::vector<uint8_t> buf(16 * 4096);
  std::vector<iovec> iov(16);
  for (int round = 0; round < 50 && !sh.deleted; ++round) {
    std::vector<Rec> recs(16);
    for (int i = 0; i < 16; ++i) {
      recs[i].sh = &sh;
      iov[i] = {buf.data() + size_t(i) * 4096, 4096};
      ASSERT_EQ(q->read(
                    1, uint64_t(i) * 8, 8, &iov[i], 1,
                    [](void* c, const Completion& comp) {
                      auto* r = static_cast<Rec*>(c);
                      if (r->sh->armed && !r->sh->deleted.exchange(true)) r->sh->ctrl->reset();
                      r->status = comp.status.raw();
                      ++r->calls;  // last: the test thread may free r once it sees it
                    },
                    &recs[i]),
                0);
    }
    sh.armed = true;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 5 &&
           !std::all_of(recs.begin(), recs.end(), [](const Rec& r) { return r.calls > 0; }))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(recs[i].calls.load(), 1) << i;
      const uint16_t st = recs[i].status;
      EXPECT_TRUE(st == 0 || st == Status::kAbortedSqDeletion) << Status(st).to_string();
    }
    sh.armed = false;
  }
  ASSERT_TRUE(sh.deleted.load());
  ASSERT_FALSE(ctrl);
  // The shutdown (on its own thread) closes the connection: submissions are refused.
  iovec v{buf.data(), 4096};
  int rc = 0;
  for (int i = 0; i < 300 && rc != -ENODEV; ++i) {
    Cmd c;
    rc = q->read(1, 0, 8, &v, 1, count, &c);
    if (rc == 0)
      for (int k = 0; k < 2000 && c.calls == 0; ++k)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (rc != -ENODEV) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(rc, -ENODEV);
  q.reset();
}

// ---- every destruction order, commands in flight on a stopped target ----

enum Obj { kC, kP, kQ };
struct Order {
  ShareMode mode;
  Obj first, second, third;
};
std::string order_name(const ::testing::TestParamInfo<Order>& info) {
  const char* n[] = {"Controller", "Poller", "Queue"};
  return std::string(share_mode_name(info.param.mode)) + "_" + n[info.param.first] +
         n[info.param.second] + n[info.param.third];
}

class DestroyOrder : public ::testing::TestWithParam<Order> {};

TEST_P(DestroyOrder, EachCallbackOnceAbortedAndBounded) {
  const Order ord = GetParam();
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t, options(ord.mode));
  ASSERT_TRUE(ctrl);
  auto poller = std::make_unique<Poller>();
  std::string err;
  auto q = ctrl->create_io_queue(poller.get(), 16, &err);
  ASSERT_TRUE(q) << err;
  // A round trip first (the connection is up and answering), then the target stops.
  {
    Cmd one;
    std::vector<uint8_t> b(4096);
    iovec v{b.data(), 4096};
    ASSERT_EQ(q->read(1, 0, 8, &v, 1, count, &one), 0);
    for (int i = 0; i < 500 && one.calls == 0; ++i) poller->process_completions(0, 10'000'000);
    ASSERT_EQ(one.status.load(), 0);
  }
  t.signal(SIGSTOP);
  std::vector<Cmd> cmds(16);
  std::vector<uint8_t> buf;
  std::vector<iovec> iov;
  submit(*q, cmds, buf, iov, 16);
  for (int i = 0; i < 5; ++i) poller->process_completions(0, 10'000'000);  // sent, unanswered
  for (auto& c : cmds) ASSERT_EQ(c.calls.load(), 0);

  auto destroy = [&](Obj o) {
    const auto t0 = Clock::now();
    if (o == kC) ctrl.reset();
    if (o == kP) poller.reset();
    if (o == kQ) q.reset();
    return seconds_since(t0);
  };
  // Bounded: abort_timeout_ms (a shared connection's unanswered commands, or CC.SHN), plus a
  // margin for a loaded machine. Not the 30 s I/O timeout.
  const double bound = kAbortMs / 1000.0 + 1.5;
  const double s1 = destroy(ord.first);
  EXPECT_LT(s1, bound);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(cmds[i].calls.load(), 1) << i;
    EXPECT_EQ(cmds[i].status.load(), Status::kAbortedSqDeletion)
        << i << ": " << Status(cmds[i].status).to_string();
  }
  // What is left still works as far as it can: a queue whose poller or controller went
  // refuses submissions.
  if (q) {
    Cmd late;
    iovec v{buf.data(), 4096};
    EXPECT_EQ(q->read(1, 0, 8, &v, 1, count, &late), -ENODEV);
    if (poller) poller->process_completions(0, 1'000'000);
    EXPECT_EQ(late.calls.load(), 0);
  }
  const double s2 = destroy(ord.second);
  EXPECT_LT(s2, bound);
  const double s3 = destroy(ord.third);
  EXPECT_LT(s3, bound);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(cmds[i].calls.load(), 1) << i;  // never twice
  t.signal(SIGCONT);
}

std::vector<Order> all_orders() {
  std::vector<Order> v;
  const Obj perms[6][3] = {{kC, kP, kQ}, {kC, kQ, kP}, {kP, kC, kQ},
                           {kP, kQ, kC}, {kQ, kC, kP}, {kQ, kP, kC}};
  for (ShareMode m : {ShareMode::kNone, ShareMode::kLock, ShareMode::kSendList})
    for (auto& p : perms) v.push_back({m, p[0], p[1], p[2]});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllOrders, DestroyOrder, ::testing::ValuesIn(all_orders()), order_name);

// The Controller destroyed on one thread while another thread polls its queue: that thread
// delivers the aborts in its next process_completions, which the destructor waits for.
class DestroyAcrossThreads : public ::testing::TestWithParam<ShareMode> {};

TEST_P(DestroyAcrossThreads, ControllerWaitsForThePollerThread) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t, options(GetParam()));
  ASSERT_TRUE(ctrl);
  std::vector<Cmd> cmds(16);
  // 1: the worker's queue is up; 2: the target is stopped; 3: submitted; 4: the controller
  // is gone.
  std::atomic<int> stage{0};
  std::atomic<bool> refused{false};
  std::thread worker([&] {
    Poller poller;
    auto q = ctrl->create_io_queue(&poller, 16);
    if (!q) {
      stage = -1;
      return;
    }
    stage = 1;
    while (stage.load() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<uint8_t> buf;
    std::vector<iovec> iov;
    submit(*q, cmds, buf, iov, 16);
    stage = 3;
    while (stage.load() == 3) poller.process_completions(0, 1'000'000);
    iovec v{buf.data(), 4096};
    refused = q->read(1, 0, 8, &v, 1, count, nullptr) == -ENODEV;
    // Queue then poller, after the Controller.
  });
  while (stage.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(stage.load(), 1);
  t.signal(SIGSTOP);
  stage = 2;
  while (stage.load() == 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 16; ++i) ASSERT_EQ(cmds[i].calls.load(), 0) << i;
  const auto t0 = Clock::now();
  ctrl.reset();
  const double s = seconds_since(t0);
  EXPECT_LT(s, kAbortMs / 1000.0 + 1.5);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(cmds[i].calls.load(), 1) << i;
    EXPECT_EQ(cmds[i].status.load(), Status::kAbortedSqDeletion) << i;
  }
  stage = 4;
  worker.join();
  EXPECT_TRUE(refused.load());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(cmds[i].calls.load(), 1) << i;
  t.signal(SIGCONT);
}

INSTANTIATE_TEST_SUITE_P(ShareModes, DestroyAcrossThreads,
                         ::testing::Values(ShareMode::kNone, ShareMode::kLock,
                                           ShareMode::kSendList),
                         share_name);

// A live target, queues created and destroyed with their whole depth in flight, many times:
// each callback exactly once, answered or aborted, and never after the destructor.
TEST(Ownership, DestroyWithIoInFlightRepeatedly) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  for (ShareMode mode : {ShareMode::kNone, ShareMode::kLock, ShareMode::kSendList}) {
    auto ctrl = connect(t, options(mode));
    ASSERT_TRUE(ctrl);
    Poller poller;
    for (int round = 0; round < 20; ++round) {
      auto q = ctrl->create_io_queue(&poller, 16);
      ASSERT_TRUE(q) << share_mode_name(mode);
      std::vector<Cmd> cmds(16);
      std::vector<uint8_t> buf;
      std::vector<iovec> iov;
      submit(*q, cmds, buf, iov, 16);
      if (round % 2) poller.process_completions(0, 0);
      q.reset();
      for (int i = 0; i < 16; ++i) {
        ASSERT_EQ(cmds[i].calls.load(), 1) << share_mode_name(mode) << " round " << round;
        const uint16_t st = cmds[i].status;
        ASSERT_TRUE(st == 0 || st == Status::kAbortedSqDeletion) << Status(st).to_string();
      }
    }
  }
}

}  // namespace
}  // namespace sens
