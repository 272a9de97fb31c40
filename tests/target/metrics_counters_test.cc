// The counters behind `sens target --metrics` (target/metrics_source.h), read in process with
// Target::metrics_snapshot(): exact counts per opcode, also when a read's last C2HData carries
// success (SQ flow control disabled: no response capsule), and reset_metrics() run on the
// reactors zeroes them.
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "target/metrics_source.h"
#include "target/request.h"
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

// A command's latency ends with the pass that queued its answer (when the pass's answers leave),
// recorded then with one clock read for the queue: an answer queued early in a long pass counts
// the rest of the pass.
TEST(QueueLatency, RecordedAtThePassEnd) {
  Reactor reactor;
  target::IoMetrics m;
  target::NsIoMetrics* e = m.entry("nqn.test", 1);
  const auto& reads = e->ops[size_t(IoKind::kRead)];
  auto below = [&](size_t bucket) {  // samples in the buckets under kLatencyBounds[bucket]
    uint64_t n = 0;
    for (size_t b = 0; b < bucket; ++b) n += reads.latency.counts[b];
    return n;
  };
  std::vector<target::Request> reqs(3);
  for (auto& r : reqs) {
    r.sqe.opcode = nvme::io_op::kRead;
    r.metrics = e;
  }
  auto q = std::make_unique<target::QueueIoMetrics>(reactor);
  q->reserve(reqs.size());
  reactor.defer([&] {
    for (auto& r : reqs) {
      r.started = reactor.now();
      q->on_complete(m, nullptr, r, nvme::status::kSuccess);
    }
    EXPECT_EQ(reads.commands, 3u) << "counted at once";
    EXPECT_EQ(reads.latency.sum_ns, 0u) << "timed at the pass end";
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the rest of a long pass
  });
  reactor.run_once(0);
  EXPECT_EQ(reads.commands, 3u);
  EXPECT_GE(reads.latency.sum_ns, 3u * 3 * kMilli);
  EXPECT_EQ(below(9), 0u) << "none under 2.5 ms: each waited for the pass end";

  // A queue closed mid-pass records what it answered before it goes.
  reactor.defer([&] {
    reqs[0].metrics = e;
    reqs[0].started = reactor.now() - 10 * kMilli;
    q->on_complete(m, nullptr, reqs[0], nvme::status::kSuccess);
    q.reset();
  });
  reactor.run_once(0);
  EXPECT_EQ(reads.commands, 4u);
  uint64_t timed = 0;
  for (uint64_t n : reads.latency.counts) timed += n;
  EXPECT_EQ(timed, 4u);
  EXPECT_GE(reads.latency.sum_ns, 3u * 3 * kMilli + 10 * kMilli);
}

}  // namespace
}  // namespace sens::testing
