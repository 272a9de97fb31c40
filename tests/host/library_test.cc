// The public host API (include/sens/host.h) against `sens target`: connect, namespaces, every
// I/O kind with iovec lists, typed statuses, admin passthrough, keep alive, and the shared
// modes (lock, sendlist) with many submitting threads over few connections.
#include <sens/host.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "child.h"
#include "host/library.h"
#include "perf/verify.h"

namespace sens {
namespace {

using host::testing::TargetProcess;

struct Pending {
  int left = 0;
  int calls = 0;
  Completion last;
};
void on_done(void* ctx, const Completion& c) {
  auto* p = static_cast<Pending*>(ctx);
  --p->left;
  ++p->calls;
  p->last = c;
}

// Waits (bounded) until every submitted command of `p` has completed.
bool wait_all(Poller& poller, Pending& p) {
  for (int i = 0; i < 3000 && p.left > 0; ++i) poller.process_completions(0, 10'000'000);
  return p.left == 0;
}

std::unique_ptr<Controller> connect(const TargetProcess& t, ControllerOptions o = {}) {
  ConnectResult r = Controller::connect(t.trid(), o).get();
  EXPECT_TRUE(r.controller) << r.error << "\n" << t.log();
  return std::move(r.controller);
}

TEST(Library, ConnectNamespacesAndEveryIoKind) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  auto ctrl = connect(t);
  ASSERT_TRUE(ctrl);
  EXPECT_EQ(ctrl->state(), ControllerState::kLive);
  ASSERT_EQ(ctrl->namespaces().size(), 1u);
  const Namespace ns = ctrl->namespaces()[0];
  EXPECT_EQ(ns.nsid, 1u);
  EXPECT_EQ(ns.bytes(), 64ull << 20);
  EXPECT_EQ(ns.block_size, 512u);
  EXPECT_EQ(ctrl->subnqn(), t.nqn);

  Poller poller;
  std::string err;
  auto q = ctrl->create_io_queue(&poller, 16, &err);
  ASSERT_TRUE(q) << err;
  EXPECT_EQ(q->connection(), -1);  // share none: its own connection

  // A write gathered from three iovecs of odd sizes, read back scattered into two (and over
  // R2T: 64 KiB is past the 8 KiB in-capsule limit).
  const uint32_t len = 64 * 1024;
  std::vector<uint8_t> out(len), in(len, 0);
  host::fill_pattern(out.data(), 4096, len, 7);
  iovec wv[3] = {{out.data(), 512}, {out.data() + 512, 40960}, {out.data() + 41472, len - 41472}};
  iovec rv[2] = {{in.data(), 1536}, {in.data() + 1536, len - 1536}};
  Pending p;
  p.left = 1;
  ASSERT_EQ(q->write(ns.nsid, 8, len / 512, wv, 3, on_done, &p), 0);
  ASSERT_TRUE(wait_all(poller, p));
  EXPECT_TRUE(p.last.status.ok()) << p.last.status.to_string();
  p.left = 1;
  ASSERT_EQ(q->read(ns.nsid, 8, len / 512, rv, 2, on_done, &p), 0);
  ASSERT_TRUE(wait_all(poller, p));
  EXPECT_TRUE(p.last.status.ok()) << p.last.status.to_string();
  EXPECT_TRUE(host::check_pattern(in.data(), 4096, len, 7, nullptr));

  // Write zeroes and deallocate read back as zeroes; flush succeeds.
  p.left = 3;
  ASSERT_EQ(q->write_zeroes(ns.nsid, 8, 2, on_done, &p), 0);
  ASSERT_EQ(q->deallocate(ns.nsid, 10, 2, on_done, &p), 0);
  ASSERT_EQ(q->flush(ns.nsid, on_done, &p), 0);
  ASSERT_TRUE(wait_all(poller, p));
  EXPECT_TRUE(p.last.status.ok());
  std::fill(in.begin(), in.end(), 0xAA);
  iovec one{in.data(), 4096};
  p.left = 1;
  ASSERT_EQ(q->read(ns.nsid, 8, 8, &one, 1, on_done, &p), 0);
  ASSERT_TRUE(wait_all(poller, p));
  EXPECT_TRUE(std::all_of(in.begin(), in.begin() + 2048, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(host::check_pattern(in.data() + 2048, 4096 + 2048, 2048, 7, nullptr));

  // Bad arguments are refused before anything is sent.
  EXPECT_EQ(q->read(ns.nsid, ns.blocks, 8, &one, 1, on_done, &p), -EINVAL);  // past the end
  EXPECT_EQ(q->read(ns.nsid, 0, 7, &one, 1, on_done, &p), -EINVAL);          // 7 blocks != 4 KiB
  EXPECT_EQ(q->read(99, 0, 8, &one, 1, on_done, &p), -EINVAL);               // no such namespace
  // The queue's depth bounds what is in flight.
  p.left = 0;
  int accepted = 0;
  for (int i = 0; i < 20; ++i)
    if (q->read(ns.nsid, 0, 8, &one, 1, on_done, &p) == 0) ++accepted, ++p.left;
  EXPECT_EQ(accepted, 16);
  EXPECT_EQ(q->inflight(), 16u);
  ASSERT_TRUE(wait_all(poller, p));
  EXPECT_EQ(q->inflight(), 0u);

  // Admin passthrough, with the controller's typed status: Identify CNS 0x55 is refused.
  AdminCommand id;
  id.opcode = 0x06;
  id.cdw10 = 1;  // Identify Controller
  id.data = AdminCommand::Data::kFromController;
  std::vector<uint8_t> page(4096);
  Completion c = ctrl->admin_sync(id, page.data(), 4096);
  EXPECT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(std::string(reinterpret_cast<char*>(page.data()) + 768, t.nqn.size()), t.nqn);
  id.cdw10 = 0x55;
  c = ctrl->admin_sync(id, page.data(), 4096);
  EXPECT_EQ(c.status.type(), Status::Type::kGeneric);
  EXPECT_EQ(c.status.raw(), 0x002) << c.status.to_string();  // Invalid Field in Command
  EXPECT_NE(c.status.to_string().find("0x002"), std::string::npos);
  q.reset();
  ctrl->shutdown();
  EXPECT_EQ(ctrl->state(), ControllerState::kClosed);
}

TEST(Library, ConnectErrorsAreNamed) {
  ConnectResult r = Controller::connect("traddr:127.0.0.1").get();
  EXPECT_FALSE(r.controller);
  EXPECT_NE(r.error.find("subnqn"), std::string::npos) << r.error;
  r = Controller::connect("trtype:tcp traddr:127.0.0.1 trsvcid:1 subnqn:nqn.2026-11.x:y").get();
  EXPECT_FALSE(r.controller);
  EXPECT_NE(r.error.find("refused"), std::string::npos) << r.error;
  ControllerOptions o;
  o.coalesce = "greedy";
  r = Controller::connect("trtype:tcp traddr:127.0.0.1 subnqn:nqn.2026-11.x:y", o).get();
  EXPECT_NE(r.error.find("greedy"), std::string::npos) << r.error;
}

TEST(Library, ConnectCallbackKeepAliveAndAer) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  struct Got {
    std::promise<ConnectResult> p;
  } got;
  auto f = got.p.get_future();
  ControllerOptions o;
  o.kato_ms = 200;
  Controller::connect(
      t.trid(), o,
      [](void* ctx, ConnectResult r) { static_cast<Got*>(ctx)->p.set_value(std::move(r)); }, &got);
  ConnectResult r = f.get();
  ASSERT_TRUE(r.controller) << r.error;
  // An AER stays outstanding, exempt from the command timeout; keep alives flow meanwhile.
  r.controller->set_async_event_callback([](void*, uint32_t) {}, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_GE(r.controller->keep_alives_sent(), 2u);
  EXPECT_EQ(r.controller->state(), ControllerState::kLive);
  r.controller->shutdown();
}

// T threads, each with its own poller and queue, over the controller's shared connections:
// every thread writes its own blocks and reads them back, checking the pattern.
void run_shared(ShareMode mode, int threads, uint32_t connections, uint32_t qd) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.share = mode;
  o.connections = connections;
  o.connection_depth = 512;
  auto ctrl = connect(t, o);
  ASSERT_TRUE(ctrl);
  const Namespace ns = ctrl->namespaces()[0];
  std::atomic<int> failures{0}, ready{0};
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      Poller poller;
      std::string err;
      auto q = ctrl->create_io_queue(&poller, qd, &err);
      if (!q) {
        errors[k] = err;
        ++failures;
        return;
      }
      ++ready;
      const uint32_t bs = 4096;
      std::vector<uint8_t> buf(size_t(qd) * bs);
      std::vector<iovec> iov(qd);
      for (int round = 0; round < 8; ++round) {
        for (int phase = 0; phase < 2; ++phase) {
          Pending p;
          for (uint32_t i = 0; i < qd; ++i) {
            const uint64_t block = (uint64_t(k) * qd + i) * 8 + round % 2;  // 4 KiB apart
            uint8_t* b = buf.data() + size_t(i) * bs;
            iov[i] = {b, bs};
            int rc;
            if (phase == 0) {
              host::fill_pattern(b, block * 512, bs, 99);
              rc = q->write(ns.nsid, block, 8, &iov[i], 1, on_done, &p);
            } else {
              std::memset(b, 0, bs);
              rc = q->read(ns.nsid, block, 8, &iov[i], 1, on_done, &p);
            }
            if (rc == 0)
              ++p.left;
            else
              ++failures;
          }
          if (!wait_all(poller, p) || !p.last.status.ok()) ++failures;
          if (phase == 1)
            for (uint32_t i = 0; i < qd; ++i) {
              const uint64_t block = (uint64_t(k) * qd + i) * 8 + round % 2;
              if (!host::check_pattern(buf.data() + size_t(i) * bs, block * 512, bs, 99, nullptr))
                ++failures;
            }
        }
      }
      EXPECT_LT(q->connection(), int(connections));
      EXPECT_GE(q->connection(), 0);
    });
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ready.load(), threads);
  // Every submission went through the owners: sendlist drains its lists, lock never does.
  uint64_t drained = 0;
  for (int i = 0; i < ctrl->shared_connection_count(); ++i)
    drained += ctrl->shared_connection_stats(i).connection.drain_entries();
  if (mode == ShareMode::kSendList)
    EXPECT_EQ(drained, uint64_t(threads) * qd * 16);
  else
    EXPECT_EQ(drained, 0u);
}

TEST(Library, SendListSixteenThreadsOverTwoConnections) {
  run_shared(ShareMode::kSendList, 16, 2, 8);
}

TEST(Library, LockSixteenThreadsOverTwoConnections) {
  run_shared(ShareMode::kLock, 16, 2, 8);
}

TEST(Library, SharedConnectionCidSpaceIsBounded) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.share = ShareMode::kSendList;
  o.connections = 1;
  o.connection_depth = 40;
  auto ctrl = connect(t, o);
  ASSERT_TRUE(ctrl);
  Poller poller;
  std::string err;
  auto a = ctrl->create_io_queue(&poller, 32, &err);
  ASSERT_TRUE(a) << err;
  auto b = ctrl->create_io_queue(&poller, 16, &err);
  EXPECT_FALSE(b);
  EXPECT_NE(err.find("no room"), std::string::npos) << err;
  auto c = ctrl->create_io_queue(&poller, 8, &err);
  EXPECT_TRUE(c) << err;
}

// Callbacks on the owner thread: for callers that do not poll.
TEST(Library, NoPollerCallbacksRunOnTheOwnerThread) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.share = ShareMode::kSendList;
  auto ctrl = connect(t, o);
  ASSERT_TRUE(ctrl);
  auto q = ctrl->create_io_queue(nullptr, 4);
  ASSERT_TRUE(q);
  struct Done {
    std::atomic<int> n{0};
    std::atomic<bool> other_thread{true};
    std::thread::id me = std::this_thread::get_id();
  } d;
  std::vector<uint8_t> buf(4096);
  iovec v{buf.data(), 4096};
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(q->read(
                  1, 0, 8, &v, 1,
                  [](void* ctx, const Completion& c) {
                    auto* d = static_cast<Done*>(ctx);
                    if (std::this_thread::get_id() == d->me || !c.status.ok())
                      d->other_thread = false;
                    ++d->n;
                  },
                  &d),
              0);
  for (int i = 0; i < 1000 && d.n < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(d.n.load(), 4);
  EXPECT_TRUE(d.other_thread.load());
}

}  // namespace
}  // namespace sens
