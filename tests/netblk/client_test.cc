// The NBLK client library against a server on 127.0.0.1: retries, giving up, polling for
// replies, and the `netblk bench` workload (the server itself is in server_test.cc).
#include <gtest/gtest.h>

#include <future>

#include "netblk/client.h"
#include "netblk/server.h"
#include "netblk/workload.h"
#include "netblk_test_util.h"

namespace sens::netblk {
namespace {

using testing::connect_to;
using testing::loopback;
using testing::ServerThread;

// A request that hears nothing is sent again after the timeout: here the server starts late.
TEST(NetblkClient, RetriesUntilTheServerAnswers) {
  int probe = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(probe, reinterpret_cast<sockaddr*>(&addr), &len);
  uint16_t port = ntohs(addr.sin_port);
  ::close(probe);

  auto connecting = std::async(std::launch::async, [port] {
    ClientOptions options;
    options.give_up_after = 5 * kSecond;
    std::string error;
    return Client::connect("127.0.0.1", std::to_string(port), options, &error);
  });
  // The test itself: no server for 400 ms, so the client has to time out and retry.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ServerOptions options = loopback();
  options.port = port;
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(options, "ram:1M", &error)) << error;
  auto client = connecting.get();
  ASSERT_NE(client, nullptr);
  EXPECT_GE(client->stats().timeouts, 1u);
  EXPECT_GE(client->stats().sent, 2u);
  EXPECT_EQ(client->info().size, 1u << 20);
}

TEST(NetblkClient, GivesUpOnASilentServer) {
  // A bound socket that never answers.
  int silent = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  ClientOptions options;
  options.give_up_after = 600 * kMilli;
  std::string error;
  Nanos start = monotonic_now();
  auto client = Client::connect("127.0.0.1", std::to_string(ntohs(addr.sin_port)), options, &error);
  Nanos took = monotonic_now() - start;
  ::close(silent);
  EXPECT_EQ(client, nullptr);
  EXPECT_NE(error.find("INFO: no reply"), std::string::npos) << error;
  EXPECT_GE(took, 600 * kMilli);
  EXPECT_LT(took, 2 * kSecond);
}

// A client that spins for replies before sleeping still checks, retries and completes the same.
TEST(NetblkClient, PollingClientVerifies) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), "ram:4M", &error)) << error;
  ClientOptions options;
  options.window = 8;
  options.poll = 50 * kMicro;
  auto client = Client::connect("127.0.0.1", st.port_text(), options, &error);
  ASSERT_NE(client, nullptr) << error;
  VerifyResult result = verify(*client, 0, 2 << 20, 17);
  EXPECT_TRUE(result.ok()) << status_name(result.status);
  EXPECT_EQ(result.bytes, 2u << 20);
}

TEST(NetblkBench, RunsAndCountsEveryIo) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), "ram:16M", &error)) << error;
  auto client = connect_to(st, 8);
  ASSERT_NE(client, nullptr);
  for (BenchMode mode :
       {BenchMode::kRandRead, BenchMode::kRandWrite, BenchMode::kRead, BenchMode::kWrite}) {
    BenchOptions options;
    options.mode = mode;
    options.block_size = 1024;
    options.duration = 150 * kMilli;
    BenchResult result;
    ASSERT_TRUE(bench(*client, options, &result, &error)) << error;
    EXPECT_GT(result.ios, 100u) << bench_mode_name(mode);
    EXPECT_EQ(result.errors, 0u);
    EXPECT_EQ(result.latency_ns.count(), result.ios);
    EXPECT_GE(result.elapsed, 150 * kMilli);
    EXPECT_GT(result.latency_ns.percentile(50), 0u);
  }
  ServerStats stats = st.server().stats();
  EXPECT_GT(stats.bytes_read, 0u);
  EXPECT_GT(stats.bytes_written, 0u);
  BenchOptions too_big;
  too_big.mode = BenchMode::kRandWrite;
  too_big.block_size = 2048;  // more than max_io
  BenchResult result;
  EXPECT_FALSE(bench(*client, too_big, &result, &error));
  EXPECT_NE(error.find("at most 1024 (max_io)"), std::string::npos) << error;
}

}  // namespace
}  // namespace sens::netblk
