// The TLS channel over a real socket pair: a write to a peer that has gone returns an error
// and never raises SIGPIPE (which would kill an application embedding the host library).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "transport/tls.h"

namespace sens::transport {
namespace {

TEST(TlsChannel, WriteToAClosedPeerFailsWithoutSigpipe) {
  signal(SIGPIPE, SIG_DFL);  // the default action: a raised SIGPIPE ends this test binary
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  TlsPsk psk;
  psk.identity = "NVMe0R01 host subsys";
  psk.key.assign(32, 0x5a);
  std::string err;
  auto server = TlsContext::server(
      [&](const std::string& id, TlsPsk* out, std::string*) {
        *out = psk;
        return id == psk.identity;
      },
      &err);
  ASSERT_TRUE(server) << err;
  auto client = TlsContext::client(psk, &err);
  ASSERT_TRUE(client) << err;
  TlsChannel s(*server, sv[0]), c(*client, sv[1]);
  // Blocking sockets: each side's handshake waits for the other's messages.
  std::thread peer([&] { EXPECT_EQ(s.handshake(), TlsChannel::Io::kOk) << s.error(); });
  EXPECT_EQ(c.handshake(), TlsChannel::Io::kOk) << c.error();
  peer.join();
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

}  // namespace
}  // namespace sens::transport
