// The counters behind `sens target --metrics` (target/metrics_source.h), read in process with
// Target::metrics_snapshot(): exact counts per opcode, also when a read's last C2HData carries
// success (SQ flow control disabled: no response capsule), and reset_metrics() run on the
// reactors zeroes them.
#include <vector>

#include "target_fixture.h"

namespace sens::testing {
namespace {

using target::IoKind;

class MetricsCounters : public TargetFixture {
 protected:
  // The reactors' entries of namespace 1, summed.
  target::NsIoMetrics ns1() {
    target::NsIoMetrics sum;
    for (auto& r : target_->metrics_snapshot().reactors)
      for (auto& e : r.namespaces) {
        if (e.nqn != kNqn || e.nsid != 1) continue;
        for (size_t k = 0; k < target::kIoKinds; ++k) {
          sum.ops[k].commands += e.ops[k].commands;
          sum.ops[k].bytes += e.ops[k].bytes;
        }
        for (auto& err : e.errors) sum.errors.push_back(err);
        sum.inflight += e.inflight;
      }
    return sum;
  }
  void io(uint8_t io_cattr) {
    Session s;
    ASSERT_EQ(s.open(port_, kNqn, 0, io_cattr), "");
    for (uint32_t i = 0; i < 3; ++i) ASSERT_EQ(write_read(s.io, i * 8, 4096, i, i == 0), "");
    Result f = s.io.exec(nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, nvme::Xfer::kTransport, 0));
    ASSERT_TRUE(f.ok()) << f.describe();
    Result bad = s.io.exec(
        nvme::make_io(nvme::io_op::kRead, 1, kNsBytes / 512, 8, nvme::Xfer::kTransport, 4096),
        nullptr, 0, nullptr, 0);
    EXPECT_EQ(bad.status(), nvme::status::kLbaOutOfRange) << bad.describe();
  }
  void expect_counts() {
    auto n = ns1();
    EXPECT_EQ(n.ops[size_t(IoKind::kRead)].commands, 4u);  // 3 and the one out of range
    EXPECT_EQ(n.ops[size_t(IoKind::kRead)].bytes, 3u * 4096);
    EXPECT_EQ(n.ops[size_t(IoKind::kWrite)].commands, 3u);
    EXPECT_EQ(n.ops[size_t(IoKind::kWrite)].bytes, 3u * 4096);
    EXPECT_EQ(n.ops[size_t(IoKind::kFlush)].commands, 1u);
    ASSERT_EQ(n.errors.size(), 1u);
    EXPECT_EQ(n.errors[0].first, nvme::status::kLbaOutOfRange);
    EXPECT_EQ(n.errors[0].second, 1u);
    EXPECT_EQ(n.inflight, 0u);
  }
};

TEST_F(MetricsCounters, CountsEachOpcodeAndResets) {
  io(0);
  expect_counts();
  target_->reset_metrics();
  auto n = ns1();
  for (size_t k = 0; k < target::kIoKinds; ++k) {
    EXPECT_EQ(n.ops[k].commands, 0u) << k;
    EXPECT_EQ(n.ops[k].bytes, 0u) << k;
  }
  EXPECT_TRUE(n.errors.empty());
  // The stats JSON's counters stay.
  auto snap = target_->metrics_snapshot();
  ASSERT_FALSE(snap.reactors.empty());
  EXPECT_GT(snap.reactors[0].coalesce.pdus_sent, 0u);
}

TEST_F(MetricsCounters, ReadsAnsweredByTheirLastDataPdu) {
  io(nvme::kCattrDisableSqFlowControl);
  expect_counts();
}

}  // namespace
}  // namespace sens::testing
