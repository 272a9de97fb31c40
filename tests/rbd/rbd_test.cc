// RBD namespaces against a real one-node Ceph cluster (tests/rbd/cluster.sh), which
// this binary starts itself in a private directory on free ports and removes at the end:
// `sens target --ns rbd:...` under `sens perf --verify` (4 KiB in-capsule writes, 128 KiB
// R2T writes, reads), Flush / Write Zeroes / FUA / Deallocate read back through a raw client,
// one identity (NGUID, UUID) from two targets on one image (reservations:
// rbd_reservation_test.cc), and quick, precise refusals of a missing
// image or pool and of a cluster nobody answers for.
//
// No cluster means a failure, not a skip: only SENS_SKIP_RBD=1 skips these tests.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "rbd_cluster.h"

namespace sens::testing {
namespace {

::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new CephCluster);

TEST(Rbd, PerfVerifyReadsAndWrites) {
  REQUIRE_CLUSTER();
  RunningTarget t;
  ASSERT_EQ(t.start({image_spec("disk0")}), "");
  EXPECT_NE(t.log().find("rbd rbd/disk0 (1 GiB"), std::string::npos) << t.log();
  // 4 KiB writes travel in the capsule (8 KiB in-capsule data); 128 KiB writes after an R2T.
  for (const char* bs : {"4k", "128k"}) {
    for (const char* rw : {"randwrite", "randread", "randrw"}) {
      RunResult r =
          run_command({SENS_BINARY, "perf", "-r", t.trid(), "--rw", rw, "--bs", bs, "--qd", "16",
                       "--time", "2", "--warmup", "0", "--size", "64M", "--verify", "-q"},
                      60000);
      SCOPED_TRACE(std::string(rw) + " " + bs + ":\n" + r.out + r.err);
      EXPECT_EQ(r.code, 0);
      EXPECT_NE(r.out.find("errors: 0"), std::string::npos);
      EXPECT_NE(r.out.find(" 0 failed"), std::string::npos);
      EXPECT_EQ(r.out.find("verify: 0 blocks checked"), std::string::npos);
    }
  }
}

// qd=2: at most two requests in librbd per queue, the host keeps 32 in flight; the rest wait
// in order and none fails.
TEST(Rbd, FullQueueWaitsAndNeverFails) {
  REQUIRE_CLUSTER();
  RunningTarget t;
  const std::string stats = t.dir.file("stats.json");
  ASSERT_EQ(t.start({image_spec("disk0") + ",qd=2"}, {"--stats-json", stats}), "");
  for (const char* rw : {"randwrite", "randread"}) {
    RunResult r =
        run_command({SENS_BINARY, "perf", "-r", t.trid(), "--rw", rw, "--bs", "4k", "--qd", "32",
                     "--time", "2", "--warmup", "0", "--size", "64M", "--verify", "-q"},
                    60000);
    SCOPED_TRACE(std::string(rw) + ":\n" + r.out + r.err);
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("errors: 0"), std::string::npos);
  }
  ASSERT_TRUE(t.child.signal(SIGTERM));
  ASSERT_EQ(t.child.wait(60000), 0) << t.log();
  std::string j = read_file(stats);
  auto at = j.find("\"waited\"");
  ASSERT_NE(at, std::string::npos) << j;
  EXPECT_GT(std::atoll(j.c_str() + j.find(':', at) + 1), 0) << j;
}

// NGUID (descriptor type 2) and UUID (type 3) from Identify CNS 03h of namespace 1.
std::string identity(uint16_t port, std::vector<uint8_t>* nguid, std::vector<uint8_t>* uuid) {
  Session s;
  std::string why = s.open(port, kNqn);
  if (!why.empty()) return why;
  std::vector<uint8_t> buf(4096);
  Result r = s.admin.exec(nvme::make_identify(3, 1), nullptr, 0, buf.data(), 4096);
  if (!r.ok()) return "identify 03h: " + r.describe();
  for (size_t off = 0; off + 4 <= buf.size() && buf[off] != 0;) {
    uint8_t type = buf[off], len = buf[off + 1];
    if (type == nvme::kNidtNguid) nguid->assign(&buf[off + 4], &buf[off + 4 + len]);
    if (type == nvme::kNidtUuid) uuid->assign(&buf[off + 4], &buf[off + 4 + len]);
    off += 4 + len;
  }
  if (nguid->size() != 16 || uuid->size() != 16) return "no NGUID or UUID descriptor";
  return "";
}

TEST(Rbd, IdentityIsTheImagesOnEveryTarget) {
  REQUIRE_CLUSTER();
  RunningTarget a, b, other;
  ASSERT_EQ(a.start({image_spec("disk1")}), "");
  // The second gateway names the same image its own way: CEPH_CONF instead of conf=.
  ASSERT_EQ(b.start({"rbd:rbd/disk1"}), "");
  ASSERT_EQ(other.start({image_spec("disk0")}), "");
  std::vector<uint8_t> nguid_a, uuid_a, nguid_b, uuid_b, nguid_o, uuid_o;
  ASSERT_EQ(identity(a.port, &nguid_a, &uuid_a), "");
  ASSERT_EQ(identity(b.port, &nguid_b, &uuid_b), "");
  ASSERT_EQ(identity(other.port, &nguid_o, &uuid_o), "");
  EXPECT_EQ(nguid_a, nguid_b);
  EXPECT_EQ(uuid_a, uuid_b);
  EXPECT_NE(nguid_a, nguid_o);
  EXPECT_NE(uuid_a, uuid_o);
  EXPECT_NE(nguid_a, std::vector<uint8_t>(16, 0));
  EXPECT_EQ(uuid_a[6] >> 4, 8);  // RFC 9562 version 8
  EXPECT_EQ(uuid_a[8] >> 6, 2);  // variant 10
  // Identify Namespace: the same NGUID, EUI64 its first 8 bytes, the image's size.
  Session s;
  ASSERT_EQ(s.open(a.port, kNqn), "");
  nvme::IdentifyNamespace idn{};
  ASSERT_TRUE(s.admin.exec(nvme::make_identify(0, 1), nullptr, 0, &idn, sizeof idn).ok());
  EXPECT_EQ(idn.nsze, (1ull << 30) / kBlock);
  EXPECT_EQ(std::memcmp(idn.nguid, nguid_a.data(), 16), 0);
  EXPECT_EQ(std::memcmp(idn.eui64, nguid_a.data(), 8), 0);
  EXPECT_EQ(idn.dlfeat, 0);  // librbd skips partial discards: deallocated blocks may keep data
}

TEST(Rbd, FlushWriteZeroesFuaAndDeallocateReadBack) {
  REQUIRE_CLUSTER();
  RunningTarget t;
  ASSERT_EQ(t.start({image_spec("small")}), "");
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  Result r;
  // 64 KiB through the R2T path, FUA (write, then a librbd flush), read back.
  auto data = pattern(64 * 1024, 7);
  ASSERT_TRUE(write_blocks(s.io, 1000, data, true).ok());
  EXPECT_EQ(read_blocks(s.io, 1000, 128, &r), data);
  ASSERT_TRUE(r.ok()) << r.describe();
  ASSERT_TRUE(s.io.exec(nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, Xfer::kTransport, 0)).ok());
  // Write Zeroes over 16 blocks in the middle: zeroes there, the pattern around them.
  auto wz = nvme::make_io(nvme::io_op::kWriteZeroes, 1, 1000 + 40, 16, Xfer::kTransport, 0);
  ASSERT_TRUE(s.io.exec(wz, nullptr, 0, nullptr, 0, false, 20000).ok());
  auto expect = data;
  std::fill(expect.begin() + 40 * kBlock, expect.begin() + 56 * kBlock, 0);
  EXPECT_EQ(read_blocks(s.io, 1000, 128, &r), expect);
  // And with FUA.
  wz = nvme::make_io(nvme::io_op::kWriteZeroes, 1, 1000, 8, Xfer::kTransport, 0);
  wz.cdw12 |= 1u << 30;
  ASSERT_TRUE(s.io.exec(wz, nullptr, 0, nullptr, 0, false, 20000).ok());
  std::fill(expect.begin(), expect.begin() + 8 * kBlock, 0);
  EXPECT_EQ(read_blocks(s.io, 1000, 128, &r), expect);
  // Deallocate one whole 4 MiB RBD object (LBA 8192..16383): it reads as zeroes after. The
  // block past it keeps its data.
  auto obj = pattern(64 * 1024, 9);
  ASSERT_TRUE(write_blocks(s.io, 8192 + 4096, obj, false).ok());
  ASSERT_TRUE(write_blocks(s.io, 16384, pattern(4096, 10), false).ok());
  nvme::DsmRange range{0, 8192, 8192};
  auto dsm = nvme::make_dsm_deallocate(1, 1, Xfer::kInCapsule);
  ASSERT_TRUE(s.io.exec(dsm, &range, sizeof range, nullptr, 0, false, 20000).ok());
  EXPECT_EQ(read_blocks(s.io, 8192 + 4096, 128, &r), std::vector<uint8_t>(64 * 1024, 0));
  EXPECT_EQ(read_blocks(s.io, 16384, 8, &r), pattern(4096, 10));
  // Past the end: the target's range check, before librbd.
  r = s.io.exec(
      nvme::make_io(nvme::io_op::kRead, 1, (64 << 20) / kBlock, 1, Xfer::kTransport, kBlock),
      nullptr, 0, nullptr, 0);
  EXPECT_EQ(r.status(), nvme::status::kLbaOutOfRange);
}

// Starts a target that must refuse: returns its exit code, stderr and how long it took.
struct Refusal {
  int code = 0;
  std::string err;
  double seconds = 0;
};
Refusal refuse(const std::string& spec) {
  auto t0 = Clock::now();
  RunResult r =
      run_command({SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(free_port()),
                   "--discovery-port", "0", "--ns", spec},
                  120000);
  return {r.code, r.out + r.err, std::chrono::duration<double>(Clock::now() - t0).count()};
}

TEST(Rbd, MissingImageOrPoolIsRefusedAtOnce) {
  REQUIRE_CLUSTER();
  Refusal r = refuse(image_spec("nosuchimage"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("image 'nosuchimage' does not exist in pool 'rbd'"), std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
  r = refuse("rbd:nosuchpool/disk0,conf=" + g_conf);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("pool 'nosuchpool' does not exist"), std::string::npos) << r.err;
  r = refuse("rbd:rbd/disk0,conf=/nonexistent/ceph.conf");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot read the Ceph configuration '/nonexistent/ceph.conf'"),
            std::string::npos)
      << r.err;
  // Bad specs never reach librbd.
  r = refuse("rbd:rbd");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("names no image"), std::string::npos) << r.err;
  r = refuse("rbd:rbd/disk0,color=blue");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option 'color'"), std::string::npos) << r.err;
  r = refuse("rbd:rbd/disk0,qd=0");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("qd must be 1..4096"), std::string::npos) << r.err;
}

// A user who may use the image but not create the reservation object beside it: the target
// refuses to start rather than keep reservations no other gateway would see.
TEST(Rbd, NoAccessToTheReservationObjectIsRefusedAtStart) {
  REQUIRE_CLUSTER();
  TempDir dir;
  std::string keyring = dir.file("keyring");
  RunResult auth = run_command(
      {"/usr/bin/ceph", "--conf", g_conf, "auth", "get-or-create", "client.imageonly", "mon",
       "profile rbd", "osd", "allow rwx pool=rbd object_prefix rbd_", "-o", keyring},
      60000);
  ASSERT_EQ(auth.code, 0) << auth.err;
  std::string conf = dir.file("ceph.conf");
  ASSERT_TRUE(
      write_file(conf, read_file(g_conf) + "\n[client.imageonly]\nkeyring = " + keyring + "\n"));
  Refusal r = refuse("rbd:rbd/disk1,conf=" + conf + ",id=imageonly");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rbd:rbd/disk1: cannot create the reservation record rados object "
                       "rbd/sens_resv."),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Operation not permitted"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 15) << r.err;
}

TEST(Rbd, UnreachableClusterFailsWithinTheTimeout) {
  REQUIRE_CLUSTER();
  TempDir dir;
  // The real cluster's keyring, but a monitor address where nothing listens.
  uint16_t dead = free_port();
  std::string conf = dir.file("dead.conf");
  ASSERT_TRUE(write_file(conf, "[global]\nmon_host = v2:127.0.0.1:" + std::to_string(dead) +
                                   "\n[client]\nkeyring = " + g_base + "/keyring\n"));
  Refusal r = refuse("rbd:rbd/disk0,conf=" + conf + ",timeout=3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("cannot reach the cluster's monitors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("within 3 s"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 20) << r.err;  // not client_mount_timeout's 300 s
  // The default timeout is 10 s.
  r = refuse("rbd:rbd/disk0,conf=" + conf);
  EXPECT_NE(r.err.find("within 10 s"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 30) << r.err;
}

// Last (gtest runs a file's tests in order): the cluster stops under a running target, whose
// I/O and reservation commands then fail with an NVMe error within op_timeout instead of
// hanging, the cause logged.
TEST(Rbd, ZClusterLostUnderATargetFailsIoWithAStatus) {
  REQUIRE_CLUSTER();
  RunningTarget t;
  ASSERT_EQ(t.start({image_spec("disk0") + ",op_timeout=3"}), "");
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  ASSERT_TRUE(write_blocks(s.io, 0, pattern(4096, 3), false).ok());
  // cluster.sh stop tolerates a daemon that exits between its liveness check and its kill
  // (with the launcher used before, that race once failed a clean-clone run): one call does.
  RunResult stop = cluster_command("stop");
  ASSERT_EQ(stop.code, 0) << stop.out << stop.err;
  auto t0 = Clock::now();
  Result r = write_blocks(s.io, 64, pattern(4096, 4), false);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(r.have_cqe) << r.describe();
  EXPECT_FALSE(r.ok()) << r.describe();
  EXPECT_LT(seconds, 15);
  // A timed-out request is transient: Namespace Not Ready, without Do Not Retry.
  EXPECT_EQ(r.status(), nvme::status::kNsNotReady) << r.describe();
  EXPECT_NE(t.log().find("Connection timed out"), std::string::npos) << t.log();
  // A reservation command fails the same way, within op_timeout, and says why.
  t0 = Clock::now();
  r = resv(s.io, kRegister, 0, 0, 0xAAAA);
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(r.status(), nvme::status::kNsNotReady) << r.describe();
  EXPECT_LT(seconds, 6);
  EXPECT_NE(t.log().find("Reservation Register failed: cannot read the shared reservations in "
                         "rados object rbd/sens_resv."),
            std::string::npos)
      << t.log();
  t.child.kill_now();  // no cluster to release a lock to, and a close would wait for it
}

}  // namespace
}  // namespace sens::testing
