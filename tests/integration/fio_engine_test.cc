// The fio ioengine (build/libsens_fio.so) run by the real fio against `sens target`:
// verify=crc32c over in-capsule and R2T writes, jobs in separate processes and as threads
// sharing connections (lock, sendlist), and a bad transport ID refused with its reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../host/child.h"
#include "child_process.h"

namespace sens::testing {
namespace {

bool have_engine() {
  return std::string(SENS_FIO_ENGINE).size() > 0;
}

constexpr const char* kNoEngine =
    "libsens_fio.so is not built: it needs fio's configured source (make deps puts it under "
    "/usr/local/src/sens-fio; make test configures again and builds the engine)";

RunResult fio(const host::testing::TargetProcess& t, std::vector<std::string> extra) {
  std::vector<std::string> argv = {"/usr/bin/fio",
                                   "--name=sens",
                                   "--ioengine=external:" + std::string(SENS_FIO_ENGINE),
                                   "--sens_trid=" + t.trid(),
                                   "--verify=crc32c",
                                   "--do_verify=1",
                                   "--verify_fatal=1",
                                   "--group_reporting"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv, 120000);
}

void expect_clean(const RunResult& r) {
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("err= 0"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("verify: bad"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("verify: bad"), std::string::npos) << r.err;
}

TEST(FioEngine, VerifiesInCapsuleAndR2TWrites) {
  if (!have_engine()) GTEST_SKIP() << kNoEngine;
  host::testing::TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  // 4 KiB writes go in-capsule (8 KiB limit), 64 KiB through R2T; two forked jobs on their own
  // halves, each with its own controller.
  expect_clean(fio(t, {"--rw=randwrite", "--bs=4k", "--size=8M", "--iodepth=16"}));
  expect_clean(fio(t, {"--rw=randrw", "--bs=64k", "--size=16M", "--iodepth=8", "--numjobs=2",
                       "--offset_increment=16M"}));
}

class FioShare : public ::testing::TestWithParam<const char*> {};

TEST_P(FioShare, FourThreadsOverTwoConnections) {
  if (!have_engine()) GTEST_SKIP() << kNoEngine;
  host::testing::TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  expect_clean(fio(t, {"--thread", "--numjobs=4", "--sens_share=" + std::string(GetParam()),
                       "--sens_connections=2", "--rw=randwrite", "--bs=4k", "--size=4M",
                       "--offset_increment=4M", "--iodepth=16"}));
}

INSTANTIATE_TEST_SUITE_P(Modes, FioShare, ::testing::Values("none", "lock", "sendlist"));

TEST(FioEngine, RecordsSubmissionLatencyAndPrintsTransportCounters) {
  // With a commit hook the engine itself hands fio each sent io_u (io_u_queued): without that
  // fio has no slat samples and an empty submit histogram.
  if (!have_engine()) GTEST_SKIP() << kNoEngine;
  host::testing::TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  RunResult r = run_command(
      {"/usr/bin/fio", "--name=sens", "--ioengine=external:" + std::string(SENS_FIO_ENGINE),
       "--sens_trid=" + t.trid(), "--rw=randread", "--bs=4k", "--size=4M", "--iodepth=8",
       "--number_ios=2000", "--sens_stats=1", "--output-format=json"},
      120000);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string all = r.out + r.err;
  const size_t slat = r.out.find("\"slat_ns\"");
  ASSERT_NE(slat, std::string::npos) << r.out;
  const size_t n = r.out.find("\"N\" : ", slat);
  ASSERT_NE(n, std::string::npos) << r.out;
  EXPECT_GT(std::stoll(r.out.substr(n + 6)), 0) << r.out.substr(slat, 200);
  EXPECT_NE(all.find("fio: sens: sens: "), std::string::npos) << all;
  EXPECT_NE(all.find(" I/Os; per I/O: epoll "), std::string::npos) << all;
  EXPECT_NE(all.find(" recv "), std::string::npos) << all;
  EXPECT_NE(all.find("PDUs per flush (its own connection)"), std::string::npos) << all;
}

TEST(FioEngine, SharedConnectionCountersComeFromItsOwner) {
  // In lock and sendlist modes the sends are the owner thread's: sens_stats reports the
  // connection's totals (not zeros, as a job's own counters would read).
  if (!have_engine()) GTEST_SKIP() << kNoEngine;
  host::testing::TargetProcess t;
  ASSERT_TRUE(t.ready()) << t.log();
  for (const char* share : {"sendlist", "lock"}) {
    RunResult r = run_command(
        {"/usr/bin/fio", "--name=sens", "--ioengine=external:" + std::string(SENS_FIO_ENGINE),
         "--sens_trid=" + t.trid(), "--thread", "--numjobs=2", "--sens_share=" + std::string(share),
         "--sens_connections=1", "--rw=randread", "--bs=4k", "--size=4M", "--iodepth=8",
         "--number_ios=1000", "--sens_stats=1"},
        120000);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const std::string all = r.out + r.err;
    const std::string tag = std::string("shared connection 0 (") + share + ", every job on it): ";
    const size_t at = all.find(tag);
    ASSERT_NE(at, std::string::npos) << all;
    // Two jobs of 1000 reads each, 16 commands in flight: at least one send per 16 commands;
    // lock sends each command on its own, a partial send may take two calls.
    const long long sends = std::stoll(all.substr(at + tag.size()));
    EXPECT_GE(sends, 2000 / 16) << all.substr(at, 200);
    EXPECT_LT(sends, 2 * 2000 + 16) << all.substr(at, 200);
    EXPECT_NE(all.find(" recvs, ", at), std::string::npos) << all.substr(at, 200);
  }
}

TEST(FioEngine, BadTransportIdIsNamed) {
  if (!have_engine()) GTEST_SKIP() << kNoEngine;
  host::testing::TargetProcess t;
  RunResult r = run_command(
      {"/usr/bin/fio", "--name=bad", "--ioengine=external:" + std::string(SENS_FIO_ENGINE),
       "--sens_trid=traddr:127.0.0.1 trsvcid:1 subnqn:nqn.2026-11.x:y", "--rw=read", "--size=1M"},
      60000);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(
      (r.out + r.err).find("fio: sens: admin queue to 127.0.0.1:1: connect: Connection refused"),
      std::string::npos)
      << r.out << r.err;
}

}  // namespace
}  // namespace sens::testing
