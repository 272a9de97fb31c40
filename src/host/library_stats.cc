// The public statistics and diagnostics of include/sens/host.h (ConnectionStats, LoopStats,
// PollerTimer, the IoQueue and Controller readers) over the library's internals. Nothing here
// runs per I/O.
#include <algorithm>
#include <mutex>

#include "coalesce/scheduler.h"
#include "host/library.h"

namespace sens {

namespace host {

struct ConnectionStatsImpl {
  uint64_t sendmsg_calls = 0, recv_calls = 0;
  coalesce::Stats coalesce;
  DrainStats drain;

  // A connection's queue (the caller is on the thread that runs it).
  void read(const Queue& q) {
    sendmsg_calls = q.send_queue().counters().sendmsg_calls;
    recv_calls = q.recv_counters().recv_calls;
    coalesce = q.send_queue().scheduler().stats();
  }
};

class PollerTimerImpl {
 public:
  PollerTimerImpl(Reactor& reactor, void (*fire)(void*), void* ctx)
      : reactor_(reactor), timer_([fire, ctx] { fire(ctx); }) {}
  ~PollerTimerImpl() { cancel(); }
  void arm(Nanos deadline) { reactor_.arm(timer_, deadline); }
  void cancel() {
    if (timer_.armed()) reactor_.cancel(timer_);
  }
  bool armed() const { return timer_.armed(); }

 private:
  Reactor& reactor_;
  Timer timer_;
};

namespace {

Summary summarize(const Histogram& h, double divisor) {
  Summary s;
  s.count = h.count();
  s.mean = h.mean() / divisor;
  s.p50 = double(h.percentile(50)) / divisor;
  s.p90 = double(h.percentile(90)) / divisor;
  s.p99 = double(h.percentile(99)) / divisor;
  s.p99_9 = double(h.percentile(99.9)) / divisor;
  s.min = double(h.min()) / divisor;
  s.max = double(h.max()) / divisor;
  return s;
}

LoopStats loop_stats(const Reactor& r) {
  const ReactorStats& rs = r.stats();
  LoopStats s;
  s.polls = rs.polls;
  s.sleeps = rs.sleeps;
  s.spins = rs.spins;
  s.yields = rs.yields;
  s.wakeups = rs.wakeups;
  s.timer_late_us = summarize(rs.timer_late_ns, double(kMicro));
  return s;
}

void reset_queue_stats(Queue& q) {
  q.send_queue().scheduler().stats() = {};
}

// A shared connection's part, read on its owner thread.
void read_shared(SharedConnection& c, ConnectionStatsImpl* out) {
  c.owner().thread().call([&] {
    std::lock_guard<std::mutex> g(c.send_lock());  // kLock: submitters send and count under it
    if (const Queue* q = c.queue()) out->read(*q);
    out->drain = c.drain_stats();
  });
}

}  // namespace

}  // namespace host

using host::ApiAccess;

// ---- ConnectionStats ----

ConnectionStats::ConnectionStats() : impl_(std::make_unique<host::ConnectionStatsImpl>()) {}
ConnectionStats::~ConnectionStats() = default;
ConnectionStats::ConnectionStats(const ConnectionStats& other)
    : impl_(std::make_unique<host::ConnectionStatsImpl>(*other.impl_)) {}
ConnectionStats& ConnectionStats::operator=(const ConnectionStats& other) {
  if (this != &other) *impl_ = *other.impl_;
  return *this;
}
void ConnectionStats::merge(const ConnectionStats& other) {
  const host::ConnectionStatsImpl& o = *other.impl_;
  impl_->sendmsg_calls += o.sendmsg_calls;
  impl_->recv_calls += o.recv_calls;
  impl_->coalesce.merge(o.coalesce);
  impl_->drain.passes += o.drain.passes;
  impl_->drain.entries += o.drain.entries;
  impl_->drain.per_pass.merge(o.drain.per_pass);
}
uint64_t ConnectionStats::sendmsg_calls() const {
  return impl_->sendmsg_calls;
}
uint64_t ConnectionStats::recv_calls() const {
  return impl_->recv_calls;
}
uint64_t ConnectionStats::pdus_sent() const {
  return impl_->coalesce.pdus_sent;
}
uint64_t ConnectionStats::send_calls() const {
  return impl_->coalesce.send_calls;
}
uint64_t ConnectionStats::holds() const {
  return impl_->coalesce.holds;
}
std::vector<std::pair<std::string, uint64_t>> ConnectionStats::flushes() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  // kNone is not a flush (as in the --json schema).
  for (size_t r = size_t(coalesce::FlushReason::kImmediate);
       r < size_t(coalesce::FlushReason::kCount); ++r)
    out.emplace_back(coalesce::reason_name(coalesce::FlushReason(r)), impl_->coalesce.flushes[r]);
  return out;
}
uint64_t ConnectionStats::total_flushes() const {
  uint64_t n = 0;
  for (uint64_t f : impl_->coalesce.flushes) n += f;
  return n;
}
Summary ConnectionStats::pdus_per_flush() const {
  return host::summarize(impl_->coalesce.pdus_per_flush, 1.0);
}
Summary ConnectionStats::r2t_delay_us() const {
  return host::summarize(impl_->coalesce.r2t_delay_ns, double(kMicro));
}
Summary ConnectionStats::timer_flush_late_us() const {
  return host::summarize(impl_->coalesce.timer_flush_late_ns, double(kMicro));
}
uint64_t ConnectionStats::drain_passes() const {
  return impl_->drain.passes;
}
uint64_t ConnectionStats::drain_entries() const {
  return impl_->drain.entries;
}
Summary ConnectionStats::drain_per_pass() const {
  return host::summarize(impl_->drain.per_pass, 1.0);
}

// ---- Poller, PollerTimer ----

LoopStats Poller::stats() const {
  return host::loop_stats(impl_->reactor());
}

PollerTimer::PollerTimer(Poller& poller, void (*fire)(void* ctx), void* ctx)
    : impl_(std::make_unique<host::PollerTimerImpl>(ApiAccess::impl(poller).reactor(), fire, ctx)) {
}
PollerTimer::~PollerTimer() = default;
void PollerTimer::arm(int64_t deadline_ns) {
  impl_->arm(deadline_ns);
}
void PollerTimer::cancel() {
  impl_->cancel();
}
bool PollerTimer::armed() const {
  return impl_->armed();
}

// ---- IoQueue: the connection carrying it ----

// `get` of the queue carrying `impl`: its own connection's, here, or a shared connection's,
// read on that connection's owner thread; `none` when there is no connection.
template <typename T, typename Get>
T read_connection(host::IoQueueImpl& impl, Get get, T none) {
  if (const host::Queue* q = impl.inline_queue()) return get(*q);
  host::SharedConnection* c = impl.shared();
  if (!c) return none;
  T value = none;
  c->owner().thread().call([&] {
    if (c->queue()) value = get(*c->queue());
  });
  return value;
}

uint16_t IoQueue::qid() const {
  return read_connection(
      *impl_, [](const host::Queue& q) { return q.qid(); }, uint16_t(0));
}

uint32_t IoQueue::maxh2cdata() const {
  return read_connection(
      *impl_, [](const host::Queue& q) { return q.maxh2cdata(); }, 0u);
}

const char* IoQueue::tls_records() const {
  return read_connection(
      *impl_, [](const host::Queue& q) { return q.tls_records(); }, "");
}

std::string IoQueue::last_error() const {
  const host::Queue* q = impl_->inline_queue();
  return q ? q->error() : std::string();
}

ConnectionStats IoQueue::stats() const {
  ConnectionStats s;
  if (const host::Queue* q = impl_->inline_queue())
    ApiAccess::impl(s).read(*q);
  else if (host::SharedConnection* c = impl_->shared())
    host::read_shared(*c, &ApiAccess::impl(s));
  return s;
}

void IoQueue::reset_stats() {
  if (host::Queue* q = impl_->inline_queue()) {
    host::reset_queue_stats(*q);
  } else if (host::SharedConnection* c = impl_->shared()) {
    c->owner().thread().call([c] {
      c->reset_drain_stats();
      std::lock_guard<std::mutex> g(c->send_lock());  // kLock: submitters flush under it
      if (host::Queue* q = c->queue()) host::reset_queue_stats(*q);
    });
  }
}

bool IoQueue::use_receive_buffer(void* mem, size_t bytes) {
  host::Queue* q = impl_->inline_queue();
  return q && q->use_staging(static_cast<uint8_t*>(mem), bytes);
}

// ---- Controller ----

uint32_t Controller::io_incapsule_bytes() const {
  return impl_->admin_controller().io_incapsule_bytes();
}

int Controller::shared_connection_count() const {
  return int(impl_->shared().size());
}

SharedConnectionStats Controller::shared_connection_stats(int index) const {
  SharedConnectionStats s;
  auto& shared = impl_->shared();
  if (index < 0 || size_t(index) >= shared.size()) return s;
  // Owners by first appearance: an owner thread may run several connections.
  std::vector<const host::OwnerThread*> owners;
  for (int i = 0; i <= index; ++i) {
    const host::OwnerThread* o = &shared[size_t(i)]->owner();
    if (std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
  }
  host::SharedConnection& c = *shared[size_t(index)];
  s.owner = int(std::find(owners.begin(), owners.end(), &c.owner()) - owners.begin());
  host::ConnectionStatsImpl& out = ApiAccess::impl(s.connection);
  c.owner().thread().call([&] {
    std::lock_guard<std::mutex> g(c.send_lock());  // kLock: submitters send and count under it
    if (const host::Queue* q = c.queue()) out.read(*q);
    out.drain = c.drain_stats();
    s.owner_loop = host::loop_stats(c.owner().reactor());
  });
  s.owner_wakeups = c.owner().doorbell_wakeups();
  return s;
}

void Controller::reset_shared_connection_stats() {
  for (auto& sc : impl_->shared()) {
    host::SharedConnection* c = sc.get();
    c->owner().thread().call([c] {
      c->reset_drain_stats();
      std::lock_guard<std::mutex> g(c->send_lock());  // kLock: submitters flush under it
      if (host::Queue* q = c->queue()) host::reset_queue_stats(*q);
    });
  }
}

}  // namespace sens
