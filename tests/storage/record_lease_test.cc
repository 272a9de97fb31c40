// The lease on a shared record's copy (storage/record_lease.h), on a clock that moves only
// when told to.
#include <gtest/gtest.h>

#include "storage/record_lease.h"

namespace sens::storage {
namespace {

constexpr Nanos kLease = 4 * kSecond;

TEST(RecordLease, NothingIsAdmittedBeforeTheFirstConfirmation) {
  ManualClock clock(100 * kSecond);
  RecordLease lease(clock, kLease);
  EXPECT_FALSE(lease.fresh());
  EXPECT_EQ(lease.deadline(), 0);
}

TEST(RecordLease, AConfirmationRunsFromWhenItsReadStarted) {
  ManualClock clock(100 * kSecond);
  RecordLease lease(clock, kLease);
  Nanos started = clock.now();
  clock.advance(300 * kMilli);  // the read took 300 ms
  lease.confirm(started);
  EXPECT_EQ(lease.deadline(), started + kLease);
  EXPECT_TRUE(lease.fresh(started + kLease - 1));
  EXPECT_FALSE(lease.fresh(started + kLease));
  clock.set(started + kLease - 1);
  EXPECT_TRUE(lease.fresh());
  clock.advance(1);
  EXPECT_FALSE(lease.fresh());  // a stopped gateway's clock ran on: lapsed when it resumes
}

TEST(RecordLease, AnOlderReadNeverShortensIt) {
  ManualClock clock(100 * kSecond);
  RecordLease lease(clock, kLease);
  lease.confirm(101 * kSecond);
  lease.confirm(100 * kSecond + 500 * kMilli);  // finished later, started earlier
  EXPECT_EQ(lease.deadline(), 101 * kSecond + kLease);
}

TEST(RecordLease, ALostWatchLapsesItUntilALaterReadConfirms) {
  ManualClock clock(100 * kSecond);
  RecordLease lease(clock, kLease);
  lease.confirm(clock.now());
  clock.advance(kSecond);
  Nanos read_before_lapse = clock.now();
  clock.advance(kMilli);
  lease.lapse();
  EXPECT_FALSE(lease.fresh());
  lease.confirm(read_before_lapse);  // in flight when the watch was lost: confirms nothing
  EXPECT_FALSE(lease.fresh());
  lease.confirm(clock.now());  // started at the lapse itself: may predate it
  EXPECT_FALSE(lease.fresh());
  clock.advance(1);
  lease.confirm(clock.now());
  EXPECT_TRUE(lease.fresh());
  EXPECT_EQ(lease.deadline(), clock.now() + kLease);
}

// The writer's side: a gateway that last confirmed just before the change committed holds its
// lease until before fenced_at(), and writes it handed on until then are done by it.
TEST(RecordLease, AnUnacknowledgedChangeIsFencedOnceEveryOlderLeaseLapsedAndItsWritesEnded) {
  ManualClock clock(100 * kSecond);
  RecordLease stale(clock, kLease), writer(clock, kLease);
  const Nanos op_timeout = 5 * kSecond;
  stale.confirm(clock.now());  // the other gateway's last read, just before the commit
  clock.advance(kMilli);
  Nanos committed_by = clock.now();
  Nanos fenced = writer.fenced_at(committed_by, op_timeout);
  EXPECT_EQ(fenced, committed_by + kLease + op_timeout);
  Nanos last_handed_on = stale.deadline() - 1;  // the last moment it admits a write
  EXPECT_TRUE(stale.fresh(last_handed_on));
  EXPECT_LE(last_handed_on + op_timeout, fenced);
  EXPECT_FALSE(stale.fresh(fenced));
}

}  // namespace
}  // namespace sens::storage
