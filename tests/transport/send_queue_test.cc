#include "transport/send_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

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

// A tiny socket buffer forces partial sends: every byte must still arrive, in order, and
// each PDU's completion must fire exactly once, after its last byte left.
TEST(SendQueue, PartialSendsLoseNoByte) {
  for (auto policy :
       {coalesce::Policy::kOff, coalesce::Policy::kUniform, coalesce::Policy::kSemantic}) {
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
    for (int i = 0; i < kPdus; ++i) {
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
    EXPECT_TRUE(got == expect) << coalesce::policy_name(policy);
    for (int i = 0; i < kPdus; ++i) ASSERT_EQ(sent[i], 1) << "pdu " << i;
    EXPECT_GT(q.counters().eagain +
                  q.scheduler().stats().flushes[size_t(coalesce::FlushReason::kSocketFull)],
              0u)
        << "the tiny buffer should have filled";
    EXPECT_EQ(o.error, 0);
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
