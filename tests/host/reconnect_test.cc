// Reconnect with the Linux host's semantics (ControllerOptions::reconnect_delay_s,
// ctrl_loss_tmo_s) against a real `sens target` process that is stopped, killed and restarted
// on the same port with the same file namespace: commands in flight at the loss are retried,
// commands submitted while reconnecting are held, and both complete once the target is back;
// without a restart they fail with the host path error after about ctrl_loss_tmo. In every
// share mode (none, lock, sendlist); and `sens perf --reconnect-delay --ctrl-loss-tmo`
// through the same, under --verify.
#include <sens/host.h>

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "child.h"
#include "completions.h"

namespace sens {
namespace {

using host::testing::Clock;
using host::testing::count_done;
using host::testing::Io;
using host::testing::poll_all;
using host::testing::since;
using host::testing::TargetProcess;

// A file namespace that outlives one target process.
std::string make_file(const std::string& name, size_t bytes) {
  const std::string path = host::testing::temp_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.seekp(bytes - 1);
  f.put('\0');
  return path;
}

// Every state the controller reported, in order.
struct States {
  std::mutex mu;
  std::vector<ControllerState> seen;
  static void on(void* ctx, ControllerState s) {
    auto* self = static_cast<States*>(ctx);
    std::lock_guard<std::mutex> g(self->mu);
    self->seen.push_back(s);
  }
  std::string text() {
    std::lock_guard<std::mutex> g(mu);
    std::string t;
    for (auto s : seen) t += std::string(t.empty() ? "" : " ") + controller_state_name(s);
    return t;
  }
};

void fill(std::vector<uint8_t>& b, uint64_t lba, uint8_t tag) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(lba * 131 + i * 7 + tag);
}

ControllerOptions reconnect_options(ShareMode share, uint32_t tmo, States* states) {
  ControllerOptions o;
  o.share = share;
  o.connections = 2;
  o.reconnect_delay_s = 1;
  o.ctrl_loss_tmo_s = tmo;
  o.kato_ms = 2000;
  o.connect_timeout_ms = 2000;
  o.on_state = &States::on;
  o.on_state_ctx = states;
  return o;
}

class Reconnect : public ::testing::TestWithParam<ShareMode> {};

// In flight at the loss (the target stopped, then killed) and submitted while reconnecting:
// all held, all complete once a new target serves the same file on the same port, and the
// data is what was written.
TEST_P(Reconnect, HeldAndRetriedAcrossATargetRestart) {
  const std::string file =
      make_file(std::string("restart-") + share_mode_name(GetParam()) + ".img", 16 << 20);
  auto t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file);
  ASSERT_TRUE(t->ready()) << t->log();
  const uint16_t port = t->port, disc = t->disc_port;
  States states;
  auto r = Controller::connect(t->trid(), reconnect_options(GetParam(), 30, &states)).get();
  ASSERT_TRUE(r.controller) << r.error;
  auto& ctrl = *r.controller;
  const Namespace& ns = ctrl.namespaces().at(0);
  const uint32_t bs = ns.block_size;
  Poller poller;
  std::string err;
  // Two queues on one poller: in the shared modes they sit on both connections.
  auto q0 = ctrl.create_io_queue(&poller, 32, &err);
  ASSERT_TRUE(q0) << err;
  auto q1 = ctrl.create_io_queue(&poller, 32, &err);
  ASSERT_TRUE(q1) << err;
  IoQueue* qs[2] = {q0.get(), q1.get()};
  const uint16_t cntlid_before = ctrl.cntlid();

  // Blocks 0..15 written and acknowledged before anything happens.
  std::vector<Io> first(16);
  for (uint32_t i = 0; i < first.size(); ++i) {
    first[i].buf.resize(bs);
    fill(first[i].buf, i, 1);
    first[i].iov = {first[i].buf.data(), bs};
    ASSERT_EQ(qs[i % 2]->write(1, i, 1, &first[i].iov, 1, &Io::on, &first[i]), 0);
  }
  ASSERT_TRUE(poll_all(poller, first, 10));
  for (auto& io : first) ASSERT_TRUE(io.c.status.ok()) << io.c.status.to_string();

  // The target stops: these are sent and stay in flight. Then it dies without answering.
  t->signal(SIGSTOP);
  std::vector<Io> inflight(24);
  for (uint32_t i = 0; i < inflight.size(); ++i) {
    Io& io = inflight[i];
    io.buf.resize(bs);
    io.iov = {io.buf.data(), bs};
    if (i < 16) {  // rewrites of 0..15 with another pattern
      fill(io.buf, i, 2);
      ASSERT_EQ(qs[i % 2]->write(1, i, 1, &io.iov, 1, &Io::on, &io), 0);
    } else {  // reads of blocks 100.. (never written: zeroes)
      ASSERT_EQ(qs[i % 2]->read(1, 100 + i, 1, &io.iov, 1, &Io::on, &io), 0);
    }
  }
  for (int i = 0; i < 20; ++i) poller.process_completions(0, 10'000'000);
  EXPECT_EQ(count_done(inflight), 0);
  t->kill_hard();
  t.reset();

  // Noticed (the sockets reset): reconnecting, nothing completes, new I/O is held too.
  const auto t0 = Clock::now();
  while (ctrl.state() != ControllerState::kReconnecting && since(t0) < 10)
    poller.process_completions(0, 10'000'000);
  ASSERT_EQ(ctrl.state(), ControllerState::kReconnecting) << states.text();
  std::vector<Io> during(8);
  for (uint32_t i = 0; i < during.size(); ++i) {
    Io& io = during[i];
    io.buf.resize(bs);
    fill(io.buf, 200 + i, 3);
    io.iov = {io.buf.data(), bs};
    ASSERT_EQ(qs[i % 2]->write(1, 200 + i, 1, &io.iov, 1, &Io::on, &io), 0);
  }
  // At least one failed attempt against the dead port (reconnect_delay 1 s).
  while (since(t0) < 2.5) poller.process_completions(0, 10'000'000);
  EXPECT_EQ(count_done(inflight) + count_done(during), 0);
  EXPECT_EQ(ctrl.state(), ControllerState::kReconnecting);
  EXPECT_GE(ctrl.counters().reconnect_attempts, 1u);
  EXPECT_FALSE(ctrl.last_error().empty());

  // A new target, the same port and file: everything completes, successfully.
  t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file, port, disc);
  ASSERT_TRUE(t->ready()) << t->log();
  EXPECT_TRUE(poll_all(poller, inflight, 20)) << count_done(inflight) << " " << states.text();
  EXPECT_TRUE(poll_all(poller, during, 10));
  for (auto& io : inflight) EXPECT_TRUE(io.c.status.ok()) << io.c.status.to_string();
  for (auto& io : during) EXPECT_TRUE(io.c.status.ok()) << io.c.status.to_string();
  EXPECT_EQ(ctrl.state(), ControllerState::kLive);
  EXPECT_NE(ctrl.cntlid(), 0xFFFF);
  (void)cntlid_before;
  const ControllerCounters c = ctrl.counters();
  EXPECT_EQ(c.reconnects, 1u);
  EXPECT_GE(c.losses, 1u);
  // A write submitted before its own connection saw the reset is in flight on it, and so
  // retried rather than held: together they are every command.
  EXPECT_GE(c.retried, inflight.size());
  EXPECT_EQ(c.retried + c.held, inflight.size() + during.size());
  for (uint32_t i = 16; i < inflight.size(); ++i)
    EXPECT_EQ(inflight[i].buf, std::vector<uint8_t>(bs, 0)) << "block " << 100 + i;

  // Read back from the new target: the rewrites and the writes made while reconnecting.
  std::vector<Io> back(24);
  for (uint32_t i = 0; i < back.size(); ++i) {
    back[i].buf.assign(bs, 0xEE);
    back[i].iov = {back[i].buf.data(), bs};
    const uint64_t lba = i < 16 ? i : 200 + (i - 16);
    ASSERT_EQ(qs[i % 2]->read(1, lba, 1, &back[i].iov, 1, &Io::on, &back[i]), 0);
  }
  ASSERT_TRUE(poll_all(poller, back, 10));
  for (uint32_t i = 0; i < back.size(); ++i) {
    ASSERT_TRUE(back[i].c.status.ok()) << back[i].c.status.to_string();
    std::vector<uint8_t> want(bs);
    if (i < 16)
      fill(want, i, 2);
    else
      fill(want, 200 + (i - 16), 3);
    EXPECT_EQ(back[i].buf, want) << "read-back " << i;
  }
  const std::string seen = states.text();
  EXPECT_NE(seen.find("connecting live reconnecting live"), std::string::npos) << seen;
}

// No target comes back: held commands, and those submitted after, fail with the host path
// error once ctrl_loss_tmo has passed, not before and not much after; the controller is failed.
TEST_P(Reconnect, FailsWithPathErrorAfterCtrlLossTmo) {
  auto t = std::make_unique<TargetProcess>();
  ASSERT_TRUE(t->ready()) << t->log();
  States states;
  constexpr uint32_t kTmo = 3;
  auto r = Controller::connect(t->trid(), reconnect_options(GetParam(), kTmo, &states)).get();
  ASSERT_TRUE(r.controller) << r.error;
  auto& ctrl = *r.controller;
  const uint32_t bs = ctrl.namespaces().at(0).block_size;
  Poller poller;
  std::string err;
  auto q = ctrl.create_io_queue(&poller, 32, &err);
  ASSERT_TRUE(q) << err;

  t->signal(SIGSTOP);
  std::vector<Io> ios(16);
  for (uint32_t i = 0; i < ios.size(); ++i) {
    ios[i].buf.resize(bs);
    ios[i].iov = {ios[i].buf.data(), bs};
    ASSERT_EQ(q->read(1, i, 1, &ios[i].iov, 1, &Io::on, &ios[i]), 0);
  }
  for (int i = 0; i < 10; ++i) poller.process_completions(0, 10'000'000);
  t->kill_hard();
  const auto t0 = Clock::now();
  ASSERT_TRUE(poll_all(poller, ios, 30)) << states.text();
  const double elapsed = since(t0);
  // ctrl_loss_tmo counts from the loss, which the host sees right away (the sockets reset).
  EXPECT_GE(elapsed, kTmo - 0.5);
  EXPECT_LE(elapsed, kTmo + 5.0);
  for (auto& io : ios) {
    EXPECT_EQ(io.c.status.raw(), Status::kHostPathError) << io.c.status.to_string();
    EXPECT_TRUE(io.c.status.path_error());
    EXPECT_EQ(io.c.status.type(), Status::Type::kPath);
  }
  EXPECT_EQ(ctrl.state(), ControllerState::kFailed);
  EXPECT_NE(ctrl.last_error().find("ctrl_loss_tmo"), std::string::npos) << ctrl.last_error();
  EXPECT_EQ(ctrl.counters().reconnects, 0u);
  EXPECT_GE(ctrl.counters().reconnect_attempts, 1u);

  // Submitted to a failed controller: accepted, and failed the same way.
  std::vector<Io> after(4);
  for (auto& io : after) {
    io.buf.resize(bs);
    io.iov = {io.buf.data(), bs};
    ASSERT_EQ(q->write(1, 0, 1, &io.iov, 1, &Io::on, &io), 0);
  }
  ASSERT_TRUE(poll_all(poller, after, 5));
  for (auto& io : after) EXPECT_EQ(io.c.status.raw(), Status::kHostPathError);
  const std::string seen = states.text();
  EXPECT_NE(seen.find("live reconnecting failed"), std::string::npos) << seen;
  q.reset();  // with the controller failed, the queue still goes cleanly
}

// The target stops answering (SIGSTOP) without closing anything: the unanswered keep alive
// times out, the controller reconnects, and once the same target runs again (SIGCONT) the
// I/O sent to it while stopped is retried on the new association and completes.
TEST_P(Reconnect, KeepAliveTimeoutThenTheSameTargetAgain) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  States states;
  ControllerOptions o = reconnect_options(GetParam(), 60, &states);
  o.kato_ms = 1000;
  o.admin_timeout_ms = 1000;  // a keep alive unanswered for this long loses the association
  auto r = Controller::connect(t.trid(), o).get();
  ASSERT_TRUE(r.controller) << r.error;
  auto& ctrl = *r.controller;
  const uint32_t bs = ctrl.namespaces().at(0).block_size;
  Poller poller;
  auto q = ctrl.create_io_queue(&poller, 16);
  ASSERT_TRUE(q);
  t.signal(SIGSTOP);
  std::vector<Io> ios(8);
  for (uint32_t i = 0; i < ios.size(); ++i) {
    ios[i].buf.resize(bs);
    ios[i].iov = {ios[i].buf.data(), bs};
    ASSERT_EQ(q->read(1, i, 1, &ios[i].iov, 1, &Io::on, &ios[i]), 0);
  }
  const auto t0 = Clock::now();
  while (ctrl.state() == ControllerState::kLive && since(t0) < 15)
    poller.process_completions(0, 10'000'000);
  EXPECT_EQ(ctrl.state(), ControllerState::kReconnecting) << states.text();
  EXPECT_NE(ctrl.last_error().find("admin queue"), std::string::npos) << ctrl.last_error();
  EXPECT_EQ(count_done(ios), 0);
  while (since(t0) < 4) poller.process_completions(0, 10'000'000);
  t.signal(SIGCONT);
  ASSERT_TRUE(poll_all(poller, ios, 30)) << states.text() << " " << ctrl.last_error();
  for (auto& io : ios) EXPECT_TRUE(io.c.status.ok()) << io.c.status.to_string();
  EXPECT_EQ(ctrl.state(), ControllerState::kLive);
  EXPECT_EQ(ctrl.counters().reconnects, 1u);
  EXPECT_GE(ctrl.counters().retried, ios.size());
}

INSTANTIATE_TEST_SUITE_P(ShareModes, Reconnect,
                         ::testing::Values(ShareMode::kNone, ShareMode::kLock,
                                           ShareMode::kSendList),
                         [](const auto& info) { return std::string(share_mode_name(info.param)); });

// ctrl_loss_tmo 0: no reconnect, a lost connection fails the controller and its I/O at once.
TEST(ReconnectOff, LossFailsAtOnce) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  States states;
  ControllerOptions o = reconnect_options(ShareMode::kSendList, 0, &states);
  auto r = Controller::connect(t.trid(), o).get();
  ASSERT_TRUE(r.controller) << r.error;
  Poller poller;
  auto q = r.controller->create_io_queue(&poller, 8);
  ASSERT_TRUE(q);
  const uint32_t bs = r.controller->namespaces().at(0).block_size;
  t.signal(SIGSTOP);
  std::vector<Io> ios(4);
  for (auto& io : ios) {
    io.buf.resize(bs);
    io.iov = {io.buf.data(), bs};
    ASSERT_EQ(q->read(1, 0, 1, &io.iov, 1, &Io::on, &io), 0);
  }
  for (int i = 0; i < 10; ++i) poller.process_completions(0, 10'000'000);
  t.kill_hard();
  const auto t0 = Clock::now();
  ASSERT_TRUE(poll_all(poller, ios, 10));
  EXPECT_LT(since(t0), 2.0);
  for (auto& io : ios) EXPECT_EQ(io.c.status.raw(), Status::kHostPathError);
  for (int i = 0; i < 100 && r.controller->state() != ControllerState::kFailed; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(r.controller->state(), ControllerState::kFailed);
  EXPECT_EQ(r.controller->counters().reconnect_attempts, 0u);
}

TEST(ReconnectOff, ZeroDelayWithATimeoutIsRefused) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  ControllerOptions o;
  o.reconnect_delay_s = 0;
  o.ctrl_loss_tmo_s = 5;
  ConnectResult r = Controller::connect(t.trid(), o).get();
  EXPECT_FALSE(r.controller);
  EXPECT_NE(r.error.find("reconnect_delay_s must be >= 1"), std::string::npos) << r.error;
}

// A peer that accepts connections and never answers (a stopped target: the kernel completes
// the handshakes): an attempt under way when ctrl_loss_tmo expires ends by it, not a connect
// timeout (10 s here) past it.
TEST(ReconnectBound, SilentPeerFailsNearCtrlLossTmo) {
  TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  States states;
  ControllerOptions o = reconnect_options(ShareMode::kSendList, 3, &states);
  o.kato_ms = 1000;
  o.admin_timeout_ms = 1000;
  o.connect_timeout_ms = 10000;
  auto r = Controller::connect(t.trid(), o).get();
  ASSERT_TRUE(r.controller) << r.error;
  auto& ctrl = *r.controller;
  Poller poller;
  auto q = ctrl.create_io_queue(&poller, 8);
  ASSERT_TRUE(q);
  t.signal(SIGSTOP);
  const auto t0 = Clock::now();
  while (ctrl.state() == ControllerState::kLive && since(t0) < 15)
    poller.process_completions(0, 10'000'000);
  ASSERT_EQ(ctrl.state(), ControllerState::kReconnecting);
  const auto lost = Clock::now();
  while (ctrl.state() == ControllerState::kReconnecting && since(lost) < 30)
    poller.process_completions(0, 10'000'000);
  EXPECT_EQ(ctrl.state(), ControllerState::kFailed) << states.text();
  EXPECT_LE(since(lost), 6.0);
  EXPECT_GE(since(lost), 2.5);
  t.signal(SIGCONT);
}

// A queue without a poller (callbacks on the owner thread): held while reconnecting, retried
// once a target is back; then, with no target, failed with the path error after the timeout,
// and a command submitted to the failed controller too.
TEST(ReconnectNoPoller, HeldRetriedThenFailedOnTheOwnerThread) {
  const std::string file = make_file("nopoller.img", 8 << 20);
  auto t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file);
  ASSERT_TRUE(t->ready()) << t->log();
  const uint16_t port = t->port, disc = t->disc_port;
  States states;
  auto r =
      Controller::connect(t->trid(), reconnect_options(ShareMode::kSendList, 3, &states)).get();
  ASSERT_TRUE(r.controller) << r.error;
  auto& ctrl = *r.controller;
  const uint32_t bs = ctrl.namespaces().at(0).block_size;
  auto q = ctrl.create_io_queue(nullptr, 8);
  ASSERT_TRUE(q);
  struct Done {
    std::atomic<int> n{0}, ok{0}, path{0};
    static void on(void* ctx, const Completion& c) {
      auto* d = static_cast<Done*>(ctx);
      if (c.status.ok()) ++d->ok;
      if (c.status.raw() == Status::kHostPathError) ++d->path;
      ++d->n;
    }
  };
  auto wait_n = [](Done& d, int n, double s) {
    const auto t0 = Clock::now();
    while (d.n < n && since(t0) < s) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return d.n.load() == n;
  };
  std::vector<uint8_t> buf(4 * bs);
  iovec v[4];
  for (int i = 0; i < 4; ++i) v[i] = {buf.data() + i * bs, bs};
  t->signal(SIGSTOP);
  Done a;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(q->read(1, i, 1, &v[i], 1, &Done::on, &a), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  t->kill_hard();
  t.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(a.n.load(), 0);
  EXPECT_EQ(ctrl.state(), ControllerState::kReconnecting);
  t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file, port, disc);
  ASSERT_TRUE(t->ready()) << t->log();
  ASSERT_TRUE(wait_n(a, 4, 20)) << states.text();
  EXPECT_EQ(a.ok.load(), 4);

  t->kill_hard();
  Done b;
  const auto t0 = Clock::now();
  while (ctrl.state() == ControllerState::kLive && since(t0) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 0; i < 4; ++i) ASSERT_EQ(q->read(1, i, 1, &v[i], 1, &Done::on, &b), 0);
  ASSERT_TRUE(wait_n(b, 4, 30)) << states.text();
  EXPECT_GE(since(t0), 2.5);
  EXPECT_EQ(b.path.load(), 4);
  EXPECT_EQ(ctrl.state(), ControllerState::kFailed);
  Done c;
  ASSERT_EQ(q->read(1, 0, 1, &v[0], 1, &Done::on, &c), 0);
  ASSERT_TRUE(wait_n(c, 1, 5));
  EXPECT_EQ(c.path.load(), 1);
  EXPECT_NE(states.text().find("live reconnecting live reconnecting failed"), std::string::npos)
      << states.text();
}

// `sens perf` with --reconnect-delay / --ctrl-loss-tmo: the target is killed mid-run and
// restarted on the same port with the same file; the verified run completes with no error
// and reports the reconnect and the retried I/Os.
class PerfReconnect : public ::testing::TestWithParam<ShareMode> {};

TEST_P(PerfReconnect, VerifiedRunSurvivesATargetRestart) {
  const std::string file =
      make_file(std::string("perf-") + share_mode_name(GetParam()) + ".img", 32 << 20);
  auto t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file);
  ASSERT_TRUE(t->ready()) << t->log();
  const uint16_t port = t->port, disc = t->disc_port;
  const std::string out =
      host::testing::temp_dir() + "/perf-reconnect-" + share_mode_name(GetParam()) + ".log";
  std::vector<std::string> args = {SENS_BINARY,
                                   "perf",
                                   "-r",
                                   t->trid(),
                                   "--rw",
                                   "randrw",
                                   "--bs",
                                   "4096",
                                   "--qd",
                                   "16",
                                   "--time",
                                   "6",
                                   "--size",
                                   "8M",
                                   "--verify",
                                   "--threads",
                                   "2",
                                   "--share",
                                   share_mode_name(GetParam()),
                                   "--reconnect-delay",
                                   "1",
                                   "--ctrl-loss-tmo",
                                   "30",
                                   "--kato",
                                   "2000",
                                   "-q"};
  if (GetParam() != ShareMode::kNone) {
    args.push_back("--connections");
    args.push_back("2");
  }
  const auto t0 = Clock::now();
  pid_t pid = host::testing::spawn(args, out);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  t->kill_hard();
  t.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  t = std::make_unique<TargetProcess>(std::vector<std::string>{}, "file:" + file, port, disc);
  ASSERT_TRUE(t->ready()) << t->log();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (since(t0) > 60) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "sens perf hangs\n" << host::testing::read_file(out);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string log = host::testing::read_file(out);
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("errors: 0"), std::string::npos) << log;
  EXPECT_NE(log.find(" 0 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("1 reconnect(s)"), std::string::npos) << log;
  // Some I/O was in flight when the target died (qd 16 x 2 threads, closed loop).
  const size_t at = log.find("I/Os retried");
  ASSERT_NE(at, std::string::npos) << log;
  const size_t start = log.rfind(", ", at);
  EXPECT_GT(std::stoull(log.substr(start + 2, at - start - 2)), 0u) << log;
}

INSTANTIATE_TEST_SUITE_P(ShareModes, PerfReconnect,
                         ::testing::Values(ShareMode::kNone, ShareMode::kLock,
                                           ShareMode::kSendList),
                         [](const auto& info) { return std::string(share_mode_name(info.param)); });

}  // namespace
}  // namespace sens
