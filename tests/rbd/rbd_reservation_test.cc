// Reservations on an RBD image, one state for every gateway of the image (a RADOS object
// beside it): shared, enforced on every gateway once a command has returned (a stopped gateway
// included: the lease), never lost in a race, never trusted when unreadable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rbd_cluster.h"

namespace sens::testing {
namespace {

using nvme::Xfer;

// Reservations on an RBD image are one state for every gateway: a RADOS object beside the
// image, updated by compare-and-swap and pushed to each gateway before the command completes.
const uint8_t kHostA[16] = {0xa0, 0xa0, 1, 2, 3, 4, 0x40, 5, 0x80, 6, 7, 8, 9, 10, 11, 12};
const uint8_t kHostB[16] = {0xb0, 0xb0, 1, 2, 3, 4, 0x40, 5, 0x80, 6, 7, 8, 9, 10, 11, 12};
constexpr const char* kHostANqn =
    "nqn.2014-08.org.nvmexpress:uuid:a0a00102-0304-4005-8006-0708090a0b0c";
constexpr const char* kHostBNqn =
    "nqn.2014-08.org.nvmexpress:uuid:b0b00102-0304-4005-8006-0708090a0b0c";

// The Reservation Status extended data structure; *status gets the command's status.
std::vector<uint8_t> report(RawClient& io, uint16_t* status) {
  std::vector<uint8_t> out(4096);
  auto sqe = nvme::make_io(kReport, 1, 0, 0, Xfer::kTransport, 4096);
  sqe.cdw10 = 4096 / 4 - 1;
  sqe.cdw11 = 1;  // EDS
  *status = io.exec(sqe, nullptr, 0, out.data(), 4096, false, 20000).status();
  return out;
}
template <typename T>
T field(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
uint16_t write_status(RawClient& io) {
  return write_blocks(io, 0, pattern(4096, 5), false).status();
}
uint16_t read_status(RawClient& io) {
  Result r;
  read_blocks(io, 0, 8, &r);
  return r.status();
}

std::string open_as(Session& s, uint16_t port, const uint8_t* hostid, const char* hostnqn) {
  s.hostid = hostid;
  s.hostnqn = hostnqn;
  return s.open(port, kNqn);
}

TEST(Rbd, ReservationsAreSharedByEveryGateway) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(rbd_cli({"create", "--size", "64M", "rbd/resv"}).code, 0);
  RunningTarget g1, g2;
  ASSERT_EQ(g1.start({image_spec("resv")}), "");
  ASSERT_EQ(g2.start({image_spec("resv")}), "");
  EXPECT_NE(g1.log().find("reservations shared in rados object rbd/sens_resv."), std::string::npos)
      << g1.log();
  Session a1, a2, b2;  // host A through both gateways, host B through gateway 2
  ASSERT_EQ(open_as(a1, g1.port, kHostA, kHostANqn), "");
  ASSERT_EQ(open_as(a2, g2.port, kHostA, kHostANqn), "");
  ASSERT_EQ(open_as(b2, g2.port, kHostB, kHostBNqn), "");

  // A registers and takes Write Exclusive on gateway 1. Gateway 2 enforces it as soon as the
  // command has completed (no waiting: the write waits for every gateway's acknowledgement).
  ASSERT_TRUE(resv(a1.io, kRegister, 0, 0, 0xAAAA).ok());
  ASSERT_TRUE(resv(a1.io, kAcquire, 1u << 8, 0xAAAA).ok());
  EXPECT_EQ(read_status(b2.io), 0);
  EXPECT_EQ(write_status(b2.io), kConflict);
  EXPECT_EQ(write_status(a2.io), 0);  // the holder, through the other gateway
  EXPECT_EQ(write_status(a1.io), 0);

  // Report on gateway 2: A's registration, key and holding, and gateway 1's PRGEN.
  uint16_t status = 0;
  auto r2 = report(b2.io, &status);
  ASSERT_EQ(status, 0);
  auto r1 = report(a1.io, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(field<uint32_t>(r2, 0), 1u);  // PRGEN: one register
  EXPECT_EQ(field<uint32_t>(r2, 0), field<uint32_t>(r1, 0));
  EXPECT_EQ(r2[4], 1);                   // Write Exclusive
  EXPECT_EQ(field<uint16_t>(r2, 5), 1);  // REGCTL
  EXPECT_EQ(field<uint64_t>(r2, 64 + 8), 0xAAAAu);
  EXPECT_EQ(std::memcmp(r2.data() + 64 + 16, kHostA, 16), 0);
  EXPECT_EQ(r2[64 + 2] & 1, 1);  // RCSTS: holds it

  // B registers through gateway 2; gateway 1 reports it. B cannot take what A holds.
  ASSERT_TRUE(resv(b2.io, kRegister, 0, 0, 0xBBBB).ok());
  r1 = report(a1.io, &status);
  EXPECT_EQ(field<uint16_t>(r1, 5), 2);
  EXPECT_EQ(field<uint32_t>(r1, 0), 2u);
  EXPECT_EQ(resv(b2.io, kAcquire, 1u << 8, 0xBBBB).status(), kConflict);
  EXPECT_EQ(write_status(b2.io), kConflict);  // registered, not the holder

  // A releases on gateway 1: B's write on gateway 2 succeeds at once.
  ASSERT_TRUE(resv(a1.io, kRelease, 1u << 8, 0xAAAA).ok());
  EXPECT_EQ(write_status(b2.io), 0);

  // Fencing across gateways: A takes it again, B preempts A through gateway 2, and A's
  // writes through gateway 1 are refused from then on.
  ASSERT_TRUE(resv(a1.io, kAcquire, 1u << 8, 0xAAAA).ok());
  ASSERT_TRUE(resv(b2.io, kAcquire, 1 | (1u << 8), 0xBBBB, 0xAAAA).ok());
  EXPECT_EQ(write_status(a1.io), kConflict);
  EXPECT_EQ(write_status(b2.io), 0);
  EXPECT_EQ(resv(a1.io, kRelease, 1u << 8, 0xAAAA).status(), kConflict);  // unregistered
  r1 = report(a1.io, &status);
  EXPECT_EQ(field<uint16_t>(r1, 5), 1);
  EXPECT_EQ(std::memcmp(r1.data() + 64 + 16, kHostB, 16), 0);

  // A gateway started now reads the state from the cluster.
  RunningTarget g3;
  ASSERT_EQ(g3.start({image_spec("resv")}), "");
  Session a3;
  ASSERT_EQ(open_as(a3, g3.port, kHostA, kHostANqn), "");
  EXPECT_EQ(write_status(a3.io), kConflict);
  // Clear through gateway 1 (by B, a registrant there too): every gateway lets A write.
  Session b1;
  ASSERT_EQ(open_as(b1, g1.port, kHostB, kHostBNqn), "");
  ASSERT_TRUE(resv(b1.io, kRelease, 1, 0xBBBB).ok());
  EXPECT_EQ(write_status(a3.io), 0);
  EXPECT_EQ(write_status(a2.io), 0);
}

// A reservation command waits for every gateway to apply it; for one that does not
// acknowledge (stopped here with SIGSTOP), 3 s and then the lease plus op_timeout (5 s here).
// That wait runs off the reactor: the gateway's other host reads all along, each read
// answered in far less than the command takes.
TEST(Rbd, ReservationWaitingForAStoppedGatewayDoesNotStallIo) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(rbd_cli({"create", "--size", "64M", "rbd/resvstall"}).code, 0);
  RunningTarget g1, g2;
  const std::string spec = image_spec("resvstall") + ",op_timeout=5";
  ASSERT_EQ(g1.start({spec}), "");  // one reactor: both hosts share it
  ASSERT_EQ(g2.start({spec}), "");
  Session a1, b1;
  ASSERT_EQ(open_as(a1, g1.port, kHostA, kHostANqn), "");
  ASSERT_EQ(open_as(b1, g1.port, kHostB, kHostBNqn), "");
  ASSERT_EQ(read_status(b1.io), 0);
  ASSERT_TRUE(g2.child.signal(SIGSTOP));
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> done{false};
  uint16_t register_status = 0xFFFF;
  Clock::duration register_took{};
  std::thread reg([&] {
    auto t0 = Clock::now();
    register_status = resv(a1.io, kRegister, 0, 0, 0xAAAA).status();
    register_took = Clock::now() - t0;
    done = true;
  });
  int reads = 0, failed = 0;
  Clock::duration slowest{};
  while (!done) {
    auto t0 = Clock::now();
    if (read_status(b1.io) != 0) ++failed;
    slowest = std::max(slowest, Clock::now() - t0);
    ++reads;
  }
  reg.join();
  ASSERT_TRUE(g2.child.signal(SIGCONT));
  auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  EXPECT_EQ(register_status, 0);
  // The command did wait for the stopped gateway (else this test shows nothing) ...
  ASSERT_GE(ms(register_took), 2000) << "the notify did not wait for the stopped gateway";
  // ... for the stopped gateway's lease (4 s) and its writes in flight (op_timeout 5 s) ...
  EXPECT_GE(ms(register_took), 9000) << "success before the stopped gateway was fenced";
  // ... and the reads went on meanwhile.
  EXPECT_EQ(failed, 0);
  EXPECT_GE(reads, 10) << "reads during a " << ms(register_took) << " ms Register";
  EXPECT_LT(ms(slowest), 1000) << reads << " reads during a " << ms(register_took)
                               << " ms Register";
  // The registration holds on both gateways once the stopped one runs again.
  uint16_t status = 0;
  Session a2;
  ASSERT_EQ(open_as(a2, g2.port, kHostA, kHostANqn), "");
  auto rep = report(a2.io, &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(field<uint16_t>(rep, 5), 1);  // REGCTL: one registrant
}

// A record this sens cannot read (another program's, a newer format, cut short) is never
// trusted: the command that finds it fails with Internal Error, the log says why, the target
// keeps serving, and removing the object starts over with no reservation.
TEST(Rbd, CorruptSharedReservationsAreRefused) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(rbd_cli({"create", "--size", "64M", "rbd/resvbad"}).code, 0);
  RunningTarget g;
  ASSERT_EQ(g.start({image_spec("resvbad")}), "");
  std::string log = g.log();
  auto at = log.find("rados object rbd/sens_resv.");
  ASSERT_NE(at, std::string::npos) << log;
  at += std::strlen("rados object rbd/");
  std::string object = log.substr(at, log.find(')', at) - at);
  Session a;
  ASSERT_EQ(open_as(a, g.port, kHostA, kHostANqn), "");
  ASSERT_TRUE(resv(a.io, kRegister, 0, 0, 0xAAAA).ok());
  auto rados = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/rados", "--conf", g_conf, "-p", "rbd"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, 60000);
  };
  struct Case {
    std::string bytes, why;
  };
  std::string header = std::string("SNRV\x01\x00\x05\x00", 8) + std::string(20, '\0');
  std::vector<Case> cases = {
      {"garbage, not a reservation record", "no SNRV magic: not a sens record"},
      {std::string("SNRV\x02", 5) + std::string(23, '\0'), "format 2, this sens reads format 1"},
      {header, "28 bytes for 5 registrants, which take 148"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    std::string file = g.dir.file("bad");
    ASSERT_TRUE(write_file(file, c.bytes));
    RunResult put = rados({"put", object, file});
    ASSERT_EQ(put.code, 0) << put.err;
    EXPECT_EQ(resv(a.io, kRegister, 2, 0xAAAA, 0xCCCC).status(), nvme::status::kInternalError);
    uint16_t status = 0;
    report(a.io, &status);
    EXPECT_EQ(status, nvme::status::kInternalError);
    EXPECT_NE(g.log().find("Reservation Register refused: the shared reservations in rados object "
                           "rbd/" +
                           object + " are unreadable: " + c.why),
              std::string::npos)
        << g.log();
    EXPECT_EQ(write_status(a.io), 0);  // I/O goes on under the last good state
  }
  // The periodic re-read says so too, once per bad version.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (g.log().find("keeping the last good state") == std::string::npos &&
         Clock::now() < deadline)
    usleep(100 * 1000);
  EXPECT_NE(g.log().find("keeping the last good state"), std::string::npos) << g.log();
  EXPECT_EQ(waitpid(g.child.pid(), nullptr, WNOHANG), 0);  // still running
  // Removed: no reservation, no registrant; a new registration works.
  ASSERT_EQ(rados({"rm", object}).code, 0);
  EXPECT_TRUE(resv(a.io, kRegister, 0, 0, 0xDDDD).ok());
  uint16_t status = 0;
  auto r = report(a.io, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(field<uint16_t>(r, 5), 1);
  EXPECT_EQ(field<uint64_t>(r, 64 + 8), 0xDDDDu);
  // A valid record written behind the gateways' backs (no notify): the periodic re-read
  // enforces it within seconds. Here B holds Exclusive Access, so A may not even read.
  std::string record = std::string("SNRV\x01\x02\x01\x00\x07\x00\x00\x00", 12) +
                       std::string(reinterpret_cast<const char*>(kHostB), 16) +
                       std::string(reinterpret_cast<const char*>(kHostB), 16) +
                       std::string("\xBB\xBB\0\0\0\0\0\0", 8);
  std::string file = g.dir.file("good");
  ASSERT_TRUE(write_file(file, record));
  ASSERT_EQ(rados({"put", object, file}).code, 0);
  deadline = Clock::now() + std::chrono::seconds(10);
  // Until then reads pass; one may also meet Namespace Not Ready, the gateway's lease on the
  // record lapsing on a loaded machine (a host retries such a read).
  uint16_t seen = 0;
  while (((seen = read_status(a.io)) == 0 || seen == nvme::status::kNsNotReady) &&
         Clock::now() < deadline)
    usleep(100 * 1000);
  EXPECT_EQ(seen, kConflict);
  r = report(a.io, &status);
  EXPECT_EQ(field<uint32_t>(r, 0), 7u);
  EXPECT_EQ(std::memcmp(r.data() + 64 + 16, kHostB, 16), 0);
}

// Registrations racing through two gateways: every compare-and-swap that loses reads again,
// so none is lost and PRGEN counts each one.
TEST(Rbd, ConcurrentRegistrationsThroughTwoGatewaysLoseNone) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(rbd_cli({"create", "--size", "64M", "rbd/resvrace"}).code, 0);
  RunningTarget g1, g2;
  ASSERT_EQ(g1.start({image_spec("resvrace")}), "");
  ASSERT_EQ(g2.start({image_spec("resvrace")}), "");
  constexpr int kHosts = 8, kRounds = 3;  // each host registers, then replaces its key twice
  std::vector<std::array<uint8_t, 16>> ids(kHosts);
  std::vector<std::string> nqns(kHosts);
  std::vector<Session> sessions(kHosts);
  for (int h = 0; h < kHosts; ++h) {
    ids[h].fill(uint8_t(0x10 + h));
    nqns[h] = "nqn.2014-08.org.nvmexpress:uuid:race-host-" + std::to_string(h);
    ASSERT_EQ(open_as(sessions[h], h % 2 ? g2.port : g1.port, ids[h].data(), nqns[h].c_str()), "");
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int h = 0; h < kHosts; ++h)
    threads.emplace_back([&, h] {
      uint64_t key = 0x1000 + h;
      if (!resv(sessions[h].io, kRegister, 0, 0, key).ok()) ++failures;
      for (int round = 1; round < kRounds; ++round, key += 0x100)
        if (!resv(sessions[h].io, kRegister, 2, key, key + 0x100).ok()) ++failures;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  uint16_t status = 0;
  auto r = report(sessions[0].io, &status);
  ASSERT_EQ(status, 0);
  EXPECT_EQ(field<uint16_t>(r, 5), kHosts);
  EXPECT_EQ(field<uint32_t>(r, 0), uint32_t(kHosts * kRounds));
  for (int i = 0; i < kHosts; ++i) {
    int h = r[64 + 64 * i + 16] - 0x10;
    ASSERT_GE(h, 0);
    ASSERT_LT(h, kHosts);
    EXPECT_EQ(field<uint64_t>(r, 64 + 64 * i + 8), 0x1000u + h + 0x100u * (kRounds - 1));
  }
  auto r2 = report(sessions[1].io, &status);  // the other gateway, the same state
  EXPECT_EQ(r2, r);
}

// The fence. Host A holds Write Exclusive and writes through gateway 1 on four connections;
// gateway 1 stops (SIGSTOP) and A sends a write on each connection, which waits in gateway 1's
// socket; host B preempts A through gateway 2. Once the preempt has returned (B then reads A's
// blocks), gateway 1 runs again: none of A's writes may land any more, and none of them
// succeeds (Namespace Not Ready while gateway 1 renews its lease, then Reservation Conflict).
// Before the lease, gateway 1 admitted the waiting writes under the state it had when it
// stopped, and they landed after the preempt. (Writes are started only once gateway 1 has
// stopped: one inside librbd's client at the stop would be sent on SIGCONT, a case the lease
// cannot cover, see the README. B does not write while gateway 1 is stopped either: librbd's
// exclusive lock would wait for the stopped owner.)
TEST(Rbd, PreemptFencesAStoppedGateway) {
  REQUIRE_CLUSTER();
  ASSERT_EQ(rbd_cli({"create", "--size", "64M", "rbd/resvfence"}).code, 0);
  RunningTarget g1, g2;
  // op_timeout bounds the writes a gateway handed to librbd before its lease lapsed; a preempt
  // that a gateway did not acknowledge waits it out (with the lease): short here.
  const std::string spec = image_spec("resvfence") + ",op_timeout=5";
  ASSERT_EQ(g1.start({spec}), "");
  ASSERT_EQ(g2.start({spec}), "");
  constexpr int kWriters = 4;
  std::array<Session, kWriters> a1;
  for (auto& s : a1) ASSERT_EQ(open_as(s, g1.port, kHostA, kHostANqn), "");
  Session b2;
  ASSERT_EQ(open_as(b2, g2.port, kHostB, kHostBNqn), "");
  ASSERT_TRUE(resv(a1[0].io, kRegister, 0, 0, 0xAAAA).ok());
  ASSERT_TRUE(resv(a1[0].io, kAcquire, 1u << 8, 0xAAAA).ok());
  ASSERT_TRUE(resv(b2.io, kRegister, 0, 0, 0xBBBB).ok());

  // Writer w writes blocks [8w, 8w + 8) over and over, each time with its own pattern; it
  // pauses while `hold` is set.
  std::atomic<bool> stop{false}, hold{false}, resumed{false};
  std::atomic<int> paused{0}, ok_before{0}, ok_after{0}, conflicts_after{0}, other_after{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      for (uint32_t seq = 1; !stop; ++seq) {
        if (hold) {
          ++paused;
          while (hold && !stop) usleep(1000);
          --paused;
        }
        Result r = write_blocks(a1[w].io, 8 * w, pattern(4096, (uint32_t(w) << 24) | seq), false);
        bool after = resumed;  // completed after the preempt returned
        if (!after) {
          if (r.ok()) ++ok_before;
        } else if (r.ok()) {
          ++ok_after;
        } else if (r.status() == kConflict) {
          ++conflicts_after;
        } else {
          ++other_after;
          usleep(10 * 1000);
        }
        if (!r.error.empty()) return;  // the connection is gone
      }
    });
  auto resume_g1 = [&] { g1.child.signal(SIGCONT); };
  usleep(300 * 1000);
  EXPECT_GT(ok_before.load(), 0);
  hold = true;
  while (paused < kWriters) usleep(1000);
  ASSERT_TRUE(g1.child.signal(SIGSTOP));
  hold = false;        // each writer sends one write, which waits in gateway 1's socket
  usleep(300 * 1000);  // (and in the kernel's receive buffer once it is there)
  auto t0 = Clock::now();
  Result preempt = resv(b2.io, kAcquire, 1 | (1u << 8), 0xBBBB, 0xAAAA);
  auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  if (!preempt.ok()) resume_g1();
  ASSERT_TRUE(preempt.ok()) << preempt.error << " status " << preempt.status();
  std::printf("[ fence    ] the preempt returned after %lld ms with gateway 1 stopped\n",
              static_cast<long long>(took_ms));
  std::array<std::vector<uint8_t>, kWriters> at_preempt;
  for (int w = 0; w < kWriters; ++w) {
    Result r;
    at_preempt[w] = read_blocks(b2.io, 8 * w, 8, &r);
    if (!r.ok()) resume_g1();
    ASSERT_TRUE(r.ok()) << r.error << " status " << r.status();
  }
  resumed = true;
  ASSERT_TRUE(g1.child.signal(SIGCONT));
  usleep(4000 * 1000);  // gateway 1 runs: A's waiting writes arrive, and A goes on writing
  stop = true;
  for (auto& t : writers) t.join();
  for (int w = 0; w < kWriters; ++w) {
    SCOPED_TRACE("writer " + std::to_string(w));
    Result r;
    std::vector<uint8_t> now = read_blocks(b2.io, 8 * w, 8, &r);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(first_difference(now, at_preempt[w]), -1)
        << "a write of host A landed after the preempt returned";
  }
  EXPECT_EQ(ok_after.load(), 0) << "writes of host A succeeded after the preempt returned";
  EXPECT_GT(conflicts_after.load(), 0) << other_after.load() << " other failures";
  EXPECT_EQ(write_status(b2.io), 0);  // the new holder
}
}  // namespace
}  // namespace sens::testing
