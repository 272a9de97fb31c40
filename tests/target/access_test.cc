// Who may connect (allowed hosts, subsystem NQNs, cntlids), keep alive, and the I/O queues
// of a controller that goes away.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <set>
#include <thread>

#include "target_fixture.h"

namespace sens::testing {
namespace {

namespace st = nvme::status;
using Clock = std::chrono::steady_clock;

constexpr const char* kRestricted = "nqn.2026-11.dev.sens:restricted";
constexpr const char* kAllowedHost =
    "nqn.2014-08.org.nvmexpress:uuid:a11a11a1-0000-4000-8000-000000000002";

class AccessTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.subsystems.push_back({kRestricted, {"ram:1M"}, {kAllowedHost}});
    return c;
  }
};

TEST_F(AccessTest, HostNotInAllowedListIsRefused) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.connect_queue(0, kRestricted, 0xFFFF, 0, 0, 31, kHostNqn);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kConnectInvalidHost) << r.describe();
  EXPECT_TRUE(r.cqe.dnr());
  // Connect response dw0: IATTR bit 16 (in Connect data) + IPO = the hostnqn's offset.
  EXPECT_EQ(r.cqe.dw0, (1u << 16) | offsetof(nvme::ConnectData, hostnqn));
  // The connection stays usable for a Connect that is allowed.
  r = c.connect_queue(0, kRestricted, 0xFFFF, 0, 0, 31, kAllowedHost);
  EXPECT_TRUE(r.ok()) << r.describe();
}

TEST_F(AccessTest, AllowedHostGetsIn) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.connect_queue(0, kRestricted, 0xFFFF, 0, 0, 31, kAllowedHost);
  ASSERT_TRUE(r.ok()) << r.describe();
  ASSERT_TRUE(c.enable().ok());  // CC.EN
  nvme::IdentifyController idc{};
  r = c.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(std::string(nvme::fixed_string(idc.subnqn, sizeof(idc.subnqn))), kRestricted);
  // The open subsystem lets anyone in.
  RawClient d;
  ASSERT_TRUE(d.connect(port_));
  ASSERT_TRUE(d.ic(0)) << d.last_error();
  r = d.connect_queue(0, kNqn, 0xFFFF, 0, 0, 31, "nqn.2014-08.org.nvmexpress:uuid:anyone");
  EXPECT_TRUE(r.ok()) << r.describe();
}

TEST_F(AccessTest, UnknownSubsystemIsInvalidParameters) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.connect_queue(0, "nqn.2026-11.dev.sens:nobody");
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
  EXPECT_EQ(r.cqe.dw0, (1u << 16) | offsetof(nvme::ConnectData, subnqn));
  // No discovery controller on this target (discovery_port 0).
  r = c.connect_queue(0, nvme::kDiscoveryNqn);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
}

TEST_F(AccessTest, IoQueueWithUnknownCntlidIsInvalidParameters) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  uint16_t unknown = uint16_t(s.cntlid + 100);
  Result r = c.connect_queue(1, kNqn, unknown);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << r.describe();
  EXPECT_EQ(r.cqe.dw0, (1u << 16) | offsetof(nvme::ConnectData, cntlid));
  // A real cntlid but another host NQN, or another subsystem.
  r = c.connect_queue(1, kNqn, s.cntlid, 0, 0, 31, "nqn.2014-08.org.nvmexpress:uuid:someone-else");
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << "other host: " << r.describe();
  r = c.connect_queue(1, kRestricted, s.cntlid, 0, 0, 31, kAllowedHost);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << "other subsystem: " << r.describe();
  // A qid beyond what Set Features granted (Session asked for 4).
  r = c.connect_queue(9, kNqn, s.cntlid);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << "qid 9 of 4: " << r.describe();
  // An admin Connect must ask for cntlid 0xFFFF (dynamic controller model).
  r = c.connect_queue(0, kNqn, 5);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << "admin cntlid 5: " << r.describe();
  // sqsize 0 is invalid (a queue of one entry).
  r = c.connect_queue(0, kNqn, 0xFFFF, 0, 0, 0);
  EXPECT_EQ(r.status(), st::kConnectInvalidParam) << "sqsize 0: " << r.describe();
  // Then a correct one succeeds on the same connection.
  r = c.connect_queue(2, kNqn, s.cntlid);
  EXPECT_TRUE(r.ok()) << r.describe();
}

// An I/O qid that a controller already has cannot be connected twice (Linux nvmet and SPDK
// answer Command Sequence Error; Connect Invalid Parameters would do too).
TEST_F(AccessTest, DuplicateIoQueueIdIsRefused) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");  // qid 1 is connected
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.connect_queue(1, kNqn, s.cntlid);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_FALSE(r.cqe.ok()) << "a second qid 1 for cntlid " << s.cntlid << " was accepted";
  EXPECT_TRUE(r.status() == st::kCmdSeqError || r.status() == st::kConnectInvalidParam)
      << r.describe();
}

// Commands other than Connect before Connect: Command Sequence Error.
TEST_F(AccessTest, CommandsBeforeConnectAreSequenceErrors) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.exec(nvme::make_property_get(nvme::reg::kCap, true));
  EXPECT_EQ(r.status(), st::kCmdSeqError) << r.describe();
  nvme::IdentifyController idc{};
  r = c.exec(nvme::make_identify(1, 0), nullptr, 0, &idc, sizeof(idc));
  EXPECT_EQ(r.status(), st::kCmdSeqError) << r.describe();
  r = c.connect_queue(0, kNqn);
  EXPECT_TRUE(r.ok()) << r.describe();
  // A second Connect on a connected queue.
  r = c.connect_queue(0, kNqn);
  EXPECT_EQ(r.status(), st::kCmdSeqError) << r.describe();
}

// Closing the admin queue takes the controller's I/O queues with it.
TEST_F(AccessTest, AdminQueueCloseClosesIoQueues) {
  Session s;
  ASSERT_EQ(s.open(port_, kNqn), "");
  ASSERT_EQ(write_read(s.io, 0, 4096, 1, true), "");
  s.admin.close();
  EXPECT_TRUE(s.io.wait_closed(2000)) << s.io.last_error();
}

// ---------------------------------------------------------------------------- keep alive

TEST_F(AccessTest, KeepAliveTimeout) {
  // Host A: kato 1000 ms and silence, with an I/O queue. Host B: kato 1000 ms and a Keep
  // Alive every 300 ms.
  RawClient silent, silent_io, active;
  ASSERT_TRUE(silent.connect(port_));
  ASSERT_TRUE(silent.ic(0)) << silent.last_error();
  Result r = silent.connect_queue(0, kNqn, 0xFFFF, 1000);
  ASSERT_TRUE(r.ok()) << r.describe();
  uint16_t cntlid = uint16_t(r.cqe.dw0);
  ASSERT_TRUE(silent.enable().ok());  // CC.EN
  r = silent.exec(nvme::make_get_features(nvme::feature::kKeepAliveTimer));
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.cqe.dw0, 1000u);
  auto silent_since = Clock::now();
  ASSERT_TRUE(silent_io.connect(port_));
  ASSERT_TRUE(silent_io.ic(0)) << silent_io.last_error();
  r = silent_io.connect_queue(1, kNqn, cntlid);
  ASSERT_TRUE(r.ok()) << r.describe();

  ASSERT_TRUE(active.connect(port_));
  ASSERT_TRUE(active.ic(0)) << active.last_error();
  r = active.connect_queue(0, kNqn, 0xFFFF, 1000);
  ASSERT_TRUE(r.ok()) << r.describe();
  ASSERT_TRUE(active.enable().ok());

  auto start = Clock::now();
  auto next_ka = start + std::chrono::milliseconds(300);
  bool silent_closed = false, io_closed = false;
  double closed_after_ms = 0;
  while (Clock::now() - start < std::chrono::milliseconds(2500)) {
    if (Clock::now() >= next_ka) {
      r = active.exec(nvme::make_keep_alive(), nullptr, 0, nullptr, 0, false, 1000);
      ASSERT_TRUE(r.ok()) << "keep alive at "
                          << std::chrono::duration<double, std::milli>(Clock::now() - start).count()
                          << " ms: " << r.describe();
      next_ka += std::chrono::milliseconds(300);
    }
    if (!silent_closed && !silent.still_open(0)) {
      silent_closed = true;
      closed_after_ms =
          std::chrono::duration<double, std::milli>(Clock::now() - silent_since).count();
    }
    if (!io_closed && !silent_io.still_open(0)) io_closed = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(silent_closed) << "the silent host is still connected after 2.5 s (kato 1 s)";
  EXPECT_GE(closed_after_ms, 900) << "closed before kato expired";
  EXPECT_TRUE(io_closed) << "the silent host's I/O queue outlived its controller";
  EXPECT_TRUE(active.still_open(0)) << "the host sending Keep Alive was dropped";
  r = active.exec(nvme::make_keep_alive());
  EXPECT_TRUE(r.ok()) << r.describe();
}

// Any admin command counts as keep-alive traffic; Set Features KATO changes the timeout.
TEST_F(AccessTest, KeepAliveSetFeatures) {
  RawClient c;
  ASSERT_TRUE(c.connect(port_));
  ASSERT_TRUE(c.ic(0)) << c.last_error();
  Result r = c.connect_queue(0, kNqn, 0xFFFF, 0);  // no keep alive at first
  ASSERT_TRUE(r.ok()) << r.describe();
  ASSERT_TRUE(c.enable().ok());  // CC.EN
  r = c.exec(nvme::make_set_features(nvme::feature::kKeepAliveTimer, 500));
  ASSERT_TRUE(r.ok()) << r.describe();
  auto t0 = Clock::now();
  EXPECT_TRUE(c.wait_closed(2000)) << "kato 500 ms set by Set Features never expired";
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_GE(ms, 400);
}

// --cntlid-range: every cntlid comes from it, the last free one is found, a full range is
// Controller Busy (not a crash or a reused id), and an id is free again once its host leaves.
class CntlidRangeTest : public TargetFixture {
 protected:
  target::TargetConfig config() override {
    auto c = test_config();
    c.cntlid_min = 700;
    c.cntlid_max = 702;
    return c;
  }
};

TEST_F(CntlidRangeTest, ControllersGetIdsFromTheRangeUntilItIsFull) {
  std::vector<std::unique_ptr<RawClient>> admins;
  std::set<uint16_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto c = std::make_unique<RawClient>();
    ASSERT_TRUE(c->connect(port_));
    ASSERT_TRUE(c->ic(0)) << c->last_error();
    Result r = c->connect_queue(0, kNqn);
    ASSERT_TRUE(r.ok()) << r.describe();
    uint16_t id = uint16_t(r.cqe.dw0 & 0xFFFF);
    EXPECT_GE(id, 700);
    EXPECT_LE(id, 702);
    ids.insert(id);
    admins.push_back(std::move(c));
  }
  EXPECT_EQ(ids.size(), 3u);  // all three, none twice
  RawClient full;
  ASSERT_TRUE(full.connect(port_));
  ASSERT_TRUE(full.ic(0)) << full.last_error();
  Result r = full.connect_queue(0, kNqn);
  ASSERT_TRUE(r.have_cqe) << r.describe();
  EXPECT_EQ(r.status(), st::kConnectControllerBusy) << r.describe();
  // The hosts leave; their ids are handed out again (the target notices the closes on its
  // reactor, so the Connect is retried until it does).
  for (auto& c : admins) c->close();
  admins.clear();
  Result again;
  for (auto until = Clock::now() + std::chrono::seconds(5); Clock::now() < until;) {
    again = full.connect_queue(0, kNqn);
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(again.ok()) << again.describe();
  uint16_t id = uint16_t(again.cqe.dw0 & 0xFFFF);
  EXPECT_GE(id, 700);
  EXPECT_LE(id, 702);
}

}  // namespace
}  // namespace sens::testing
