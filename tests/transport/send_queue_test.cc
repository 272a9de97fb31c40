#include "transport/send_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace sens::transport {
namespace {

struct Owner : SendQueue::Owner {
  bool writable_wanted = false;
  int error = 0;
  void want_writable(bool on) override { writable_wanted = on; }
  void on_send_error(int err) override { error = err; }
};

struct Pair {
  int fd[2];
  Pair(int sndbuf) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
    fcntl(fd[0], F_SETFL, O_NONBLOCK);
    fcntl(fd[1], F_SETFL, O_NONBLOCK);
    if (sndbuf) setsockopt(fd[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  }
  ~Pair() {
    close(fd[0]);
    close(fd[1]);
  }
};

coalesce::Config cfg(coalesce::Policy p) {
  coalesce::Config c;
  c.policy = p;
  return c;
}

// Reads whatever is there without blocking.
size_t drain(int fd, std::vector<uint8_t>& out) {
  uint8_t buf[65536];
  size_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.insert(out.end(), buf, buf + n);
    total += size_t(n);
  }
  return total;
}

TEST(SendQueue, OffSendsEveryPduWithItsOwnCall) {
  Reactor r;
  Owner o;
  Pair p(0);
  SendQueue q(r, cfg(coalesce::Policy::kOff), o);
  q.set_fd(p.fd[0]);
  char a[] = "hello", b[] = "world";
  iovec v1{a, 5}, v2{b, 5};
  q.enqueue(&v1, 1, coalesce::PduClass::kData);
  q.enqueue(&v2, 1, coalesce::PduClass::kData);
  EXPECT_EQ(q.counters().sendmsg_calls, 2u);
  std::vector<uint8_t> got;
  drain(p.fd[1], got);
  EXPECT_EQ(std::string(got.begin(), got.end()), "helloworld");
}

// A read's data and its response queued in one call: one scheduler decision counting both
// under the pass-batched policies, two sends under off, the uniform group still cut at
// exactly B; the callback runs once, when both have left.
TEST(SendQueue, TwoPdusInOneCall) {
  for (auto policy : {coalesce::Policy::kAdaptive, coalesce::Policy::kEager, coalesce::Policy::kOff,
                      coalesce::Policy::kUniform}) {
    SCOPED_TRACE(coalesce::policy_name(policy));
    Reactor r;
    Owner o;
    Pair p(0);
    auto c = cfg(policy);
    c.pdus = 3;
    c.timeout = 10 * kSecond;
    SendQueue q(r, c, o);
    q.set_fd(p.fd[0]);
    char hdr[] = "H", data[] = "data", resp[] = "R";
    iovec v[3] = {{hdr, 1}, {data, 4}, {resp, 1}};
    int sent = 0;
    auto count = [](void* ctx, uint64_t) { ++*static_cast<int*>(ctx); };
    ASSERT_TRUE(q.enqueue(v, 3, coalesce::PduClass::kData, {count, &sent, 0}, 2));
    EXPECT_EQ(q.scheduler().queued_pdus() + q.scheduler().stats().pdus_sent, 2u);
    if (policy == coalesce::Policy::kOff) {
      EXPECT_EQ(q.counters().sendmsg_calls, 2u) << "one send per PDU";
      EXPECT_EQ(sent, 1);
    } else if (policy == coalesce::Policy::kUniform) {
      EXPECT_EQ(q.counters().sendmsg_calls, 0u) << "two of B = 3";
      char more[] = "x";
      iovec m{more, 1};
      q.enqueue(&m, 1, coalesce::PduClass::kData);
      EXPECT_EQ(q.counters().sendmsg_calls, 1u) << "the third PDU completes the group";
      EXPECT_EQ(sent, 1);
    } else {
      EXPECT_EQ(sent, 0) << "held for the pass end";
      r.run_once(0);
      EXPECT_EQ(q.counters().sendmsg_calls, 1u);
      EXPECT_EQ(q.scheduler().stats().pdus_sent, 2u);
      EXPECT_EQ(sent, 1);
    }
    std::vector<uint8_t> got;
    drain(p.fd[1], got);
    EXPECT_EQ(std::string(got.begin(), got.begin() + 6), "HdataR");
  }
}

TEST(SendQueue, UniformHoldsTheGroupUntilCapacity) {
  Reactor r;
  Owner o;
  Pair p(0);
  auto c = cfg(coalesce::Policy::kUniform);
  c.pdus = 4;
  c.timeout = 10 * kSecond;
  SendQueue q(r, c, o);
  q.set_fd(p.fd[0]);
  char d[4] = {'a', 'b', 'c', 'd'};
  for (int i = 0; i < 3; ++i) {
    iovec v{&d[i], 1};
    q.enqueue(&v, 1, coalesce::PduClass::kData);
  }
  EXPECT_EQ(q.counters().sendmsg_calls, 0u);
  iovec v{&d[3], 1};
  q.enqueue(&v, 1, coalesce::PduClass::kData);
  EXPECT_EQ(q.counters().sendmsg_calls, 1u);  // four PDUs, one sendmsg
  std::vector<uint8_t> got;
  drain(p.fd[1], got);
  EXPECT_EQ(std::string(got.begin(), got.end()), "abcd");
}

TEST(SendQueue, TimerFlushesAPartialGroup) {
  Reactor r;
  Owner o;
  Pair p(0);
  auto c = cfg(coalesce::Policy::kUniform);
  c.timeout = 200 * kMicro;
  SendQueue q(r, c, o);
  q.set_fd(p.fd[0]);
  char d[] = "x";
  iovec v{d, 1};
  q.enqueue(&v, 1, coalesce::PduClass::kData);
  EXPECT_EQ(q.counters().sendmsg_calls, 0u);
  Nanos stop = r.now() + 100 * kMilli;
  while (q.counters().sendmsg_calls == 0 && r.now() < stop) r.run_once(10 * kMilli);
  EXPECT_EQ(q.counters().sendmsg_calls, 1u);
  EXPECT_EQ(q.scheduler().stats().flushes[size_t(coalesce::FlushReason::kTimer)], 1u);
}

// Splits `got` into the PDUs sent: each PDU must arrive whole (never split or interleaved
// with another), data PDUs in the order queued, control PDUs in the order queued; with
// `control_may_overtake` a control PDU may arrive before data PDUs queued ahead of it (socket
// full), otherwise the order is exactly the queued one. Returns "" or what is wrong.
std::string check_stream(const std::vector<uint8_t>& got,
                         const std::vector<std::vector<uint8_t>>& pdus,
                         const std::vector<bool>& control, bool control_may_overtake) {
  std::vector<size_t> data_order, control_order;
  for (size_t i = 0; i < pdus.size(); ++i) (control[i] ? control_order : data_order).push_back(i);
  // Walk the stream: each PDU is the next data PDU or the next control PDU, whole (random
  // contents make a false match practically impossible).
  std::vector<size_t> arrival(pdus.size(), SIZE_MAX);
  size_t at = 0, d = 0, c = 0, pos = 0;
  auto matches = [&](size_t i) {
    return at + pdus[i].size() <= got.size() &&
           std::equal(pdus[i].begin(), pdus[i].end(), got.begin() + long(at));
  };
  while (at < got.size()) {
    size_t pick;
    if (c < control_order.size() && matches(control_order[c]))
      pick = control_order[c++];
    else if (d < data_order.size() && matches(data_order[d]))
      pick = data_order[d++];
    else
      return "byte " + std::to_string(at) + " starts no expected PDU (split or reordered)";
    arrival[pick] = pos++;
    at += pdus[pick].size();
  }
  for (size_t i = 0; i < pdus.size(); ++i) {
    if (arrival[i] == SIZE_MAX) return "PDU " + std::to_string(i) + " never arrived";
    if (!control_may_overtake && arrival[i] != i) return "PDU " + std::to_string(i) + " moved";
  }
  for (size_t i = 0; i < pdus.size(); ++i)
    for (size_t j = i + 1; j < pdus.size(); ++j)
      if (control[i] && !control[j] && arrival[i] > arrival[j])
        return "control PDU " + std::to_string(i) + " fell behind data PDU " + std::to_string(j);
  return "";
}

// A tiny socket buffer forces partial sends: every byte must still arrive, every PDU whole
// (control PDUs may overtake waiting ones under the class-aware policies), and each PDU's
// completion must fire exactly once, after its last byte left.
TEST(SendQueue, PartialSendsLoseNoByte) {
  for (auto policy : {coalesce::Policy::kOff, coalesce::Policy::kEager, coalesce::Policy::kUniform,
                      coalesce::Policy::kSemantic, coalesce::Policy::kAdaptive}) {
    Reactor r;
    Owner o;
    Pair p(4096);
    auto c = cfg(policy);
    c.timeout = 20 * kMicro;
    SendQueue q(r, c, o);
    q.set_fd(p.fd[0]);
    std::mt19937 rng(7);
    const int kPdus = 600;
    std::vector<std::vector<uint8_t>> pdus(kPdus);
    std::vector<uint8_t> expect;
    std::vector<int> sent(kPdus, 0);
    std::vector<bool> control(kPdus);
    for (int i = 0; i < kPdus; ++i) {
      control[size_t(i)] = i % 7 == 0;
      pdus[i].resize(1 + rng() % 9000);
      for (auto& b : pdus[i]) b = uint8_t(rng());
      expect.insert(expect.end(), pdus[i].begin(), pdus[i].end());
    }
    std::vector<uint8_t> got;
    int next = 0;
    Nanos stop = r.now() + 20 * kSecond;
    while (got.size() < expect.size() && r.now() < stop) {
      // Queue a few PDUs (split into two iovecs each), then let the reader catch up a bit.
      for (int k = 0; k < 5 && next < kPdus; ++k, ++next) {
        auto& d = pdus[next];
        size_t half = d.size() / 2;
        iovec v[2] = {{d.data(), half}, {d.data() + half, d.size() - half}};
        auto cls = next % 7 == 0 ? coalesce::PduClass::kControl : coalesce::PduClass::kData;
        q.enqueue(v, 2, cls,
                  {[](void* ctx, uint64_t i) { (*static_cast<std::vector<int>*>(ctx))[i]++; },
                   &sent, uint64_t(next)});
      }
      drain(p.fd[1], got);
      if (o.writable_wanted) q.on_writable();
      r.run_once(50 * kMicro);
      if (next == kPdus) q.flush(coalesce::FlushReason::kClose);
    }
    ASSERT_EQ(got.size(), expect.size()) << coalesce::policy_name(policy);
    const bool overtake =
        policy == coalesce::Policy::kSemantic || policy == coalesce::Policy::kAdaptive;
    EXPECT_EQ(check_stream(got, pdus, control, overtake), "") << coalesce::policy_name(policy);
    if (!overtake) {
      EXPECT_EQ(q.counters().control_first, 0u);
    }
    for (int i = 0; i < kPdus; ++i) ASSERT_EQ(sent[i], 1) << "pdu " << i;
    EXPECT_GT(q.counters().eagain +
                  q.scheduler().stats().flushes[size_t(coalesce::FlushReason::kSocketFull)],
              0u)
        << "the tiny buffer should have filled";
    EXPECT_EQ(o.error, 0);
  }
}

// A data digest of bytes that may change while they wait (a RAM namespace's, sent without a
// copy) is computed as they leave: a write that lands while the PDU waits in its group changes
// both the bytes and the digest, and a PDU that must wait for a full socket is copied and
// digested together, so the digest always describes the bytes the peer receives.
TEST(SendQueue, DeferredDigestDescribesTheBytesSent) {
  for (bool socket_full : {false, true}) {
    Reactor r;
    Owner o;
    Pair p(socket_full ? 4096 : 0);
    auto c = cfg(coalesce::Policy::kUniform);
    c.pdus = 2;
    c.timeout = 10 * kSecond;
    SendQueue q(r, c, o);
    q.set_fd(p.fd[0]);
    std::vector<uint8_t> filler(socket_full ? 1 << 20 : 0, 0xEE);
    if (socket_full) {  // one PDU larger than the socket takes: the queue waits for EPOLLOUT
      iovec f{filler.data(), filler.size()};
      q.enqueue(&f, 1, coalesce::PduClass::kData);
      iovec none{filler.data(), 1};
      q.enqueue(&none, 1, coalesce::PduClass::kData);  // completes the group of 2: sent
      ASSERT_TRUE(o.writable_wanted);
    }
    std::vector<uint8_t> block(4096, 0x11), stable(4096);
    uint32_t digest = 0;
    iovec v[2] = {{block.data(), block.size()}, {&digest, 4}};
    q.enqueue_changeable(v, 2, 0, stable.data(), coalesce::PduClass::kData, {}, &digest);
    std::fill(block.begin(), block.end(), 0x22);  // a write lands while the PDU waits
    char tail = 'T';
    iovec t{&tail, 1};
    q.enqueue(&t, 1, coalesce::PduClass::kData);  // the group of 2 leaves (or waits its turn)
    q.flush(coalesce::FlushReason::kClose);       // (socket full: the groups were cut otherwise)
    std::vector<uint8_t> got;
    Nanos stop = r.now() + 5 * kSecond;
    while (got.size() < filler.size() + (socket_full ? 1 : 0) + 4096 + 4 + 1 && r.now() < stop) {
      drain(p.fd[1], got);
      if (o.writable_wanted) q.on_writable();
      r.run_once(1 * kMilli);
    }
    const size_t at = filler.size() + (socket_full ? 1 : 0);
    ASSERT_EQ(got.size(), at + 4096 + 4 + 1);
    std::vector<uint8_t> sent(got.begin() + long(at), got.begin() + long(at) + 4096);
    uint32_t wire;
    std::memcpy(&wire, got.data() + at + 4096, 4);
    EXPECT_EQ(wire, crc32c(sent.data(), sent.size())) << "socket full " << socket_full;
    // Waiting behind a full socket, the block was copied as it was queued; otherwise it left
    // with the write's bytes.
    EXPECT_EQ(sent[0], socket_full ? 0x11 : 0x22) << "socket full " << socket_full;
  }
}

// A DigestSource (a RAM namespace's block CRCs) is asked for the deferred digest at the moment
// the digest is sealed, not at enqueue: a write that lands while the PDU waits in its group
// updates the source, and the digest on the wire is the one it gives then. When the source
// declines, the queue digests the bytes.
struct FakeTable {
  uint32_t crc = 0;     // what the "table" holds for the block
  bool answers = true;  // false: the range is not whole blocks, digest the data
  const void* asked_bytes = nullptr;
  size_t asked_len = 0;
  int calls = 0;
  static bool digest(const void* ctx, const void* bytes, size_t len, uint32_t* crc) {
    auto* t = const_cast<FakeTable*>(static_cast<const FakeTable*>(ctx));
    ++t->calls;
    t->asked_bytes = bytes;
    t->asked_len = len;
    if (!t->answers) return false;
    *crc = t->crc;
    return true;
  }
};

TEST(SendQueue, DigestSourceIsAskedWhenTheDigestIsSealed) {
  for (bool answers : {true, false}) {
    Reactor r;
    Owner o;
    Pair p(0);
    auto c = cfg(coalesce::Policy::kUniform);
    c.pdus = 2;
    c.timeout = 10 * kSecond;
    SendQueue q(r, c, o);
    q.set_fd(p.fd[0]);
    std::vector<uint8_t> block(4096, 0x11), stable(4096);
    FakeTable table;
    table.answers = answers;
    table.crc = crc32c(block.data(), block.size());
    uint32_t digest = 0;
    iovec v[2] = {{block.data(), block.size()}, {&digest, 4}};
    q.enqueue_changeable(v, 2, 0, stable.data(), coalesce::PduClass::kData, {}, &digest,
                         {&FakeTable::digest, &table});
    EXPECT_EQ(table.calls, 0) << "asked before the bytes leave";
    std::fill(block.begin(), block.end(), 0x22);  // a write lands, then its table entry
    table.crc = crc32c(block.data(), block.size());
    char tail = 'T';
    iovec t{&tail, 1};
    q.enqueue(&t, 1, coalesce::PduClass::kData);  // the group of 2 leaves
    std::vector<uint8_t> got;
    Nanos stop = r.now() + 5 * kSecond;
    while (got.size() < 4096 + 4 + 1 && r.now() < stop) {
      drain(p.fd[1], got);
      r.run_once(1 * kMilli);
    }
    ASSERT_EQ(got.size(), 4096u + 4 + 1);
    uint32_t wire;
    std::memcpy(&wire, got.data() + 4096, 4);
    EXPECT_EQ(got[0], 0x22);
    EXPECT_EQ(wire, crc32c(got.data(), 4096)) << "answers " << answers;
    EXPECT_EQ(table.calls, 1);
    EXPECT_EQ(table.asked_bytes, block.data());
    EXPECT_EQ(table.asked_len, 4096u);
    EXPECT_EQ(q.counters().digest_source_bytes, answers ? 4096u : 0u);
  }
}

// Socket full: an R2T queued behind waiting responses leaves right after the PDU being sent.
TEST(SendQueue, ControlPduOvertakesWaitingPdusWhenTheSocketIsFull) {
  for (auto policy :
       {coalesce::Policy::kSemantic, coalesce::Policy::kAdaptive, coalesce::Policy::kEager}) {
    Reactor r;
    Owner o;
    Pair p(4096);
    SendQueue q(r, cfg(coalesce::Policy::kOff), o);  // every data PDU is committed at once
    q.set_fd(p.fd[0]);
    std::vector<std::vector<uint8_t>> pdus;
    for (int i = 0; i < 40; ++i) pdus.emplace_back(8192, uint8_t('a' + i % 26));
    for (auto& d : pdus) {
      iovec v{d.data(), d.size()};
      q.enqueue(&v, 1, coalesce::PduClass::kData);
    }
    ASSERT_TRUE(o.writable_wanted) << "the socket should be full";
    q.set_config(cfg(policy));  // (set_config flushes: nothing new is queued)
    std::vector<uint8_t> r2t(24, 'R');
    iovec v{r2t.data(), r2t.size()};
    q.enqueue(&v, 1, coalesce::PduClass::kControl);
    std::vector<uint8_t> got;
    Nanos stop = r.now() + 5 * kSecond;
    size_t total = 40 * 8192 + 24;
    while (got.size() < total && r.now() < stop) {
      drain(p.fd[1], got);
      if (o.writable_wanted) q.on_writable();
      r.run_once(0);
    }
    ASSERT_EQ(got.size(), total) << coalesce::policy_name(policy);
    size_t where =
        size_t(std::search(got.begin(), got.end(), r2t.begin(), r2t.end()) - got.begin());
    if (policy == coalesce::Policy::kEager) {
      EXPECT_EQ(where, total - 24) << "eager keeps the order";
      EXPECT_EQ(q.counters().control_first, 0u);
    } else {
      EXPECT_LT(where, total / 2) << coalesce::policy_name(policy) << ": the R2T waited";
      EXPECT_EQ(where % 8192, 0u) << "a PDU was split";
      EXPECT_EQ(q.counters().control_first, 1u);
    }
  }
}

TEST(SendQueue, DeadSocketIsReported) {
  Reactor r;
  Owner o;
  int fd[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0);
  close(fd[1]);
  SendQueue q(r, cfg(coalesce::Policy::kOff), o);
  q.set_fd(fd[0]);
  char d[] = "x";
  iovec v{d, 1};
  q.enqueue(&v, 1, coalesce::PduClass::kData);
  EXPECT_EQ(o.error, EPIPE);
  close(fd[0]);
}

// After shutdown() (the connection closed its socket) the queue never writes again: not when
// its coalescing timer fires, not on enqueue, even though the descriptor number now belongs
// to another socket. No callback of a dropped PDU runs.
TEST(SendQueue, ShutdownNeverTouchesTheDescriptorAgain) {
  Reactor r;
  Owner o;
  auto* p = new Pair(0);
  coalesce::Config c = cfg(coalesce::Policy::kUniform);
  c.pdus = 16;
  c.timeout = 1 * kMilli;
  SendQueue q(r, c, o);
  q.set_fd(p->fd[0]);
  uint8_t pdu[64] = {1};
  int callbacks = 0;
  iovec iov{pdu, sizeof(pdu)};
  q.enqueue(&iov, 1, coalesce::PduClass::kData,
            {[](void* n, uint64_t) { ++*static_cast<int*>(n); }, &callbacks, 0});
  q.shutdown();
  int old_fd = p->fd[0];
  delete p;       // the descriptor number is free again...
  Pair other(0);  // ...and most likely reused right here
  q.enqueue(&iov, 1, coalesce::PduClass::kData);
  q.flush(coalesce::FlushReason::kImmediate);
  for (int i = 0; i < 5; ++i) r.run_once(2 * kMilli);  // past the group timer
  std::vector<uint8_t> got;
  EXPECT_EQ(drain(other.fd[0], got) + drain(other.fd[1], got), 0u)
      << "bytes written to descriptor " << old_fd << " after shutdown";
  EXPECT_EQ(callbacks, 0);
  EXPECT_EQ(q.counters().sendmsg_calls, 0u);
}

}  // namespace
}  // namespace sens::transport

namespace sens::transport {
namespace {

// The callback of a connection's last PDU closes it (shutdown() empties the queue) while the
// queue is still walking the bytes of the send that took it: no callback may run after that,
// neither one of a PDU behind it nor, again, one of a PDU sent before (the walk used to go
// on through the emptied vector, whose old entries were still there to run).
TEST(SendQueue, NoCallbackRunsAfterACallbackShutTheQueueDown) {
  Reactor r;
  Owner o;
  Pair p(4096);
  SendQueue q(r, cfg(coalesce::Policy::kOff), o);
  q.set_fd(p.fd[0]);
  struct Seen {
    SendQueue* q;
    std::vector<int> sent = std::vector<int>(300);
    int last = 0, behind = 0;
  } seen{&q};
  std::vector<uint8_t> small(256, 'd');
  for (int i = 0; i < 300; ++i) {  // 75 KiB of small PDUs: the socket fills
    iovec d{small.data(), small.size()};
    q.enqueue(&d, 1, coalesce::PduClass::kData,
              {[](void* s, uint64_t i) { ++static_cast<Seen*>(s)->sent[i]; }, &seen, uint64_t(i)});
  }
  ASSERT_TRUE(o.writable_wanted) << "the socket should be full";
  uint8_t last[24] = {'T'}, behind[24] = {'B'};
  iovec v{last, sizeof(last)};
  q.enqueue(&v, 1, coalesce::PduClass::kUrgent,
            {[](void* s, uint64_t) {
               auto* x = static_cast<Seen*>(s);
               ++x->last;
               x->q->shutdown();
             },
             &seen, 0});
  for (int i = 0; i < 64; ++i) {
    v = {behind, sizeof(behind)};
    q.enqueue(&v, 1, coalesce::PduClass::kUrgent,
              {[](void* s, uint64_t) { ++static_cast<Seen*>(s)->behind; }, &seen, 0});
  }
  std::vector<uint8_t> got;
  Nanos stop = r.now() + 5 * kSecond;
  while (seen.last == 0 && r.now() < stop) {
    drain(p.fd[1], got);
    if (o.writable_wanted) q.on_writable();
    r.run_once(0);
  }
  EXPECT_EQ(seen.last, 1);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(seen.sent[size_t(i)], 1) << "the callback of PDU " << i;
  EXPECT_EQ(seen.behind, 0) << "a callback ran for a PDU the shutdown dropped";
}

}  // namespace
}  // namespace sens::transport

namespace sens::transport {
namespace {

// A sealed queue (its last PDU queued: a C2HTermReq, a Disconnect's response) takes nothing
// more: the last PDU is the last on the wire, and a PDU offered later is refused, its
// callback never run.
TEST(SendQueue, NothingIsQueuedBehindTheLastPdu) {
  Reactor r;
  Owner o;
  Pair p(4096);
  SendQueue q(r, cfg(coalesce::Policy::kOff), o);
  q.set_fd(p.fd[0]);
  std::vector<std::vector<uint8_t>> fill;
  for (int i = 0; i < 40; ++i) {
    fill.emplace_back(8192, uint8_t('a' + i % 26));
    iovec d{fill.back().data(), fill.back().size()};
    q.enqueue(&d, 1, coalesce::PduClass::kData);
  }
  ASSERT_TRUE(o.writable_wanted) << "the socket should be full";
  int last_sent = 0, late_sent = 0;
  std::vector<uint8_t> last(24, 'T'), late(24, 'L');
  iovec v{last.data(), last.size()};
  ASSERT_TRUE(q.enqueue_last(&v, 1, coalesce::PduClass::kUrgent,
                             {[](void* n, uint64_t) { ++*static_cast<int*>(n); }, &last_sent, 0}));
  EXPECT_TRUE(q.sealed());
  v = {late.data(), late.size()};
  EXPECT_FALSE(q.enqueue(&v, 1, coalesce::PduClass::kControl,
                         {[](void* n, uint64_t) { ++*static_cast<int*>(n); }, &late_sent, 0}));
  std::vector<uint8_t> got;
  const size_t total = 40 * 8192 + 24;
  Nanos stop = r.now() + 5 * kSecond;
  while (got.size() < total && r.now() < stop) {
    drain(p.fd[1], got);
    if (o.writable_wanted) q.on_writable();
    r.run_once(0);
  }
  drain(p.fd[1], got);
  ASSERT_EQ(got.size(), total);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), got.end() - 24)) << "the last PDU was not last";
  EXPECT_EQ(last_sent, 1);
  EXPECT_EQ(late_sent, 0);
  EXPECT_EQ(q.counters().refused_sealed, 1u);
}

}  // namespace
}  // namespace sens::transport
