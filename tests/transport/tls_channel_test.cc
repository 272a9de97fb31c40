// The TLS channel over a real socket pair: a write to a peer that has gone returns an error
// and never raises SIGPIPE (which would kill an application embedding the host library).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>
#include <poll.h>

#include <random>
#include <thread>
#include <vector>

#include "tls_test_util.h"
#include "transport/tls.h"

namespace sens::transport {
namespace {

TEST(TlsChannel, WriteToAClosedPeerFailsWithoutSigpipe) {
  signal(SIGPIPE, SIG_DFL);  // the default action: a raised SIGPIPE ends this test binary
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  TlsContexts ctx;
  ASSERT_TRUE(ctx.server && ctx.client);
  TlsChannel s(*ctx.server, sv[0]), c(*ctx.client, sv[1]);
  tls_handshake(s, c);
  const char hello[] = "capsule";
  TlsChannel::Io io;
  EXPECT_GT(c.write(hello, sizeof hello, &io), 0u);
  char got[sizeof hello] = {};
  EXPECT_EQ(s.read(got, sizeof got, &io), sizeof hello);
  EXPECT_STREQ(got, hello);
  ::close(sv[0]);  // the peer goes away
  std::vector<char> block(16384, 'x');
  bool failed = false;
  for (int i = 0; i < 64 && !failed; ++i) {
    if (c.write(block.data(), block.size(), &io) == 0) failed = true;
  }
  EXPECT_TRUE(failed) << "writes to a closed peer kept succeeding";
  EXPECT_TRUE(io == TlsChannel::Io::kError || io == TlsChannel::Io::kClosed);
  EXPECT_NE(c.error().find("TLS write"), std::string::npos) << c.error();
  ::close(sv[1]);
}

// A list of many small and large pieces leaves in records of up to 16 KiB, a batch of records
// per send(), over a non-blocking socket that fills up: the bytes arrive in order, each counted
// as sent exactly once and only once its record is in the kernel, and fewer send() calls than
// records are made.
TEST(TlsChannel, SendBatchesRecordsAndCountsBytesOnceTheyLeave) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int small = 32 * 1024;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  TlsContexts ctx;
  ASSERT_TRUE(ctx.server && ctx.client);
  TlsChannel s(*ctx.server, sv[0]), c(*ctx.client, sv[1]);
  tls_handshake(s, c);
  fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);

  // 4 MiB in pieces of 24 bytes (a PDU header) and 4 KiB (a block), as a send queue holds them.
  std::vector<uint8_t> data(4 << 20);
  std::mt19937 rng(7);
  for (auto& b : data) b = uint8_t(rng());
  std::vector<iovec> pieces;
  for (size_t off = 0; off < data.size();) {
    size_t len = std::min<size_t>(pieces.size() % 2 ? 4096 : 24, data.size() - off);
    pieces.push_back({data.data() + off, len});
    off += len;
  }
  std::vector<uint8_t> got;
  std::thread reader([&] {
    std::vector<uint8_t> buf(100000);
    TlsChannel::Io io;
    while (got.size() < data.size()) {
      size_t n = s.read(buf.data(), buf.size(), &io);
      if (n == 0) break;
      got.insert(got.end(), buf.begin(), buf.begin() + long(n));
    }
  });
  size_t first = 0, skip = 0, counted = 0;  // the caller's view: its first uncounted byte
  int blocked = 0;
  while (counted < data.size()) {
    TlsChannel::Io io;
    size_t n = c.send(pieces.data() + first, pieces.size() - first, skip, &io);
    ASSERT_TRUE(io == TlsChannel::Io::kOk || io == TlsChannel::Io::kWantWrite) << c.error();
    counted += n;
    for (n += skip, skip = 0; n > 0;) {  // advance the caller's list by what was counted
      ASSERT_LT(first, pieces.size());
      if (n < pieces[first].iov_len) {
        skip = n;
        break;
      }
      n -= pieces[first++].iov_len;
    }
    if (io == TlsChannel::Io::kWantWrite) {
      ++blocked;
      pollfd p{sv[1], POLLOUT, 0};
      ASSERT_EQ(poll(&p, 1, 5000), 1);
    }
  }
  EXPECT_EQ(counted, data.size());
  EXPECT_FALSE(c.out_pending());
  reader.join();
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data) << "bytes changed or reordered";
  EXPECT_GT(blocked, 0) << "the socket never filled: the test did not exercise waiting records";
  const uint64_t records = data.size() / 16384;
  // Each wait costs one send() that finds the socket full; the rest carry batches: a call's
  // first record alone, then the rest of its 4 in one send().
  EXPECT_LT(c.send_syscalls() - uint64_t(blocked), records * 3 / 4)
      << "send() calls " << c.send_syscalls() << ", waits " << blocked;
  ::close(sv[0]);
  ::close(sv[1]);
}

}  // namespace
}  // namespace sens::transport
