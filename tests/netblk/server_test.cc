// The NBLK server on 127.0.0.1 (ephemeral ports), driven by the client library and by raw
// datagrams.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/stat.h>

#include <ctime>
#include <future>

#include "netblk/client.h"
#include "netblk/server.h"
#include "netblk/workload.h"
#include "netblk_test_util.h"

namespace sens::netblk {
namespace {

using testing::eventually;
using testing::GatedDevice;
using testing::RawPeer;
using testing::ServerThread;

using testing::connect_to;
using testing::loopback;
using testing::ram;
using testing::TempFile;

TEST(NetblkServer, InfoDescribesTheNamespace) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(64), "ram:64M", &error)) << error;
  auto client = connect_to(st);
  ASSERT_NE(client, nullptr);
  const Info& info = client->info();
  EXPECT_EQ(info.size, 64ull << 20);
  EXPECT_EQ(info.sector_size, 512u);
  EXPECT_EQ(info.max_io, 1024u);  // MTU 1500, 512-byte sectors
  EXPECT_EQ(info.max_read, 16384u);
  EXPECT_FALSE(info.read_only());
  EXPECT_EQ(info.slots, 64u);

  // On the wire: one 62-byte datagram echoing the cookie, op with the reply bit.
  RawPeer peer(st.port());
  peer.send(RawPeer::request(kOpInfo, 0, 0, 0xabcdef));
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->size(), kHeaderSize + kInfoBodySize);
  Header h = decode_header(reply->data());
  EXPECT_EQ(h.op, kOpInfo | kReplyBit);
  EXPECT_EQ(h.cookie, 0xabcdefu);
  EXPECT_EQ(h.status, kOk);
  EXPECT_EQ(decode_info(reply->data() + kHeaderSize).size, 64ull << 20);
  EXPECT_EQ(st.stop(), 0);
}

TEST(NetblkServer, WriteReadFuaFlushRoundtrip) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), ram("16M"), &error)) << error;
  auto client = connect_to(st);
  ASSERT_NE(client, nullptr);
  std::vector<uint8_t> data(256 * 1024), back(data.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + (i >> 9));
  EXPECT_EQ(client->write(1 << 20, data.data(), data.size()), kOk);
  EXPECT_EQ(client->write(8 << 20, data.data(), 1024, /*fua=*/true), kOk);
  EXPECT_EQ(client->flush(), kOk);
  EXPECT_EQ(client->read(1 << 20, back.data(), back.size()), kOk);
  EXPECT_EQ(back, data);
  std::vector<uint8_t> small(1024);
  EXPECT_EQ(client->read(8 << 20, small.data(), small.size()), kOk);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), data.begin()));
  // The bytes are on the device itself.
  EXPECT_EQ(std::memcmp(st.server().device().mapped(1 << 20, 4096), data.data(), 4096), 0);
  ServerStats stats = st.server().stats();
  EXPECT_EQ(stats.bytes_written, data.size() + 1024);
  EXPECT_EQ(stats.refused + stats.busy + stats.io_errors, 0u);
}

// A READ is answered one datagram per max_io bytes, each with its own offset and length.
TEST(NetblkServer, ReadIsSplitInMaxIoDatagrams) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), ram("1M"), &error)) << error;
  auto client = connect_to(st);
  std::vector<uint8_t> data(16384);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i ^ (i >> 8));
  ASSERT_EQ(client->write(65536, data.data(), data.size()), kOk);

  RawPeer peer(st.port());
  peer.send(RawPeer::request(kOpRead, 65536, 16384, 77));
  std::vector<bool> seen(16, false);
  for (int i = 0; i < 16; ++i) {
    auto reply = peer.receive();
    ASSERT_TRUE(reply) << "piece " << i;
    ASSERT_EQ(reply->size(), kHeaderSize + 1024);
    Header h = decode_header(reply->data());
    EXPECT_EQ(h.op, kOpRead | kReplyBit);
    EXPECT_EQ(h.cookie, 77u);
    EXPECT_EQ(h.length, 1024u);
    uint64_t at = h.offset - 65536;
    ASSERT_LT(at, 16384u);
    ASSERT_EQ(at % 1024, 0u);
    seen[at / 1024] = true;
    EXPECT_EQ(std::memcmp(reply->data() + kHeaderSize, data.data() + at, 1024), 0);
  }
  for (bool s : seen) EXPECT_TRUE(s);
  EXPECT_FALSE(peer.receive(100));  // exactly 16

  peer.send(RawPeer::request(kOpRead, 65536, 1536, 78));  // 1024 + 512
  uint32_t total = 0;
  for (int i = 0; i < 2; ++i) {
    auto reply = peer.receive();
    ASSERT_TRUE(reply);
    Header h = decode_header(reply->data());
    EXPECT_EQ(reply->size(), kHeaderSize + h.length);
    EXPECT_EQ(h.offset == 65536 ? 1024u : 512u, h.length);
    total += h.length;
  }
  EXPECT_EQ(total, 1536u);
}

struct Refusal {
  const char* what;
  std::vector<uint8_t> datagram;
  uint16_t status;
};

TEST(NetblkServer, RefusesEachBadRequestWithItsStatus) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), ram("1M"), &error)) << error;
  const uint64_t size = 1 << 20;
  std::vector<uint8_t> wrong_version = RawPeer::request(kOpRead, 0, 512, 1);
  wrong_version[4] = 2;
  std::vector<uint8_t> short_write = RawPeer::request(kOpWrite, 0, 1024, 1, 0, 512);
  std::vector<uint8_t> long_write = RawPeer::request(kOpWrite, 0, 512, 1, 0, 1024);
  std::vector<Refusal> cases = {
      {"misaligned offset", RawPeer::request(kOpRead, 100, 512, 1), kBadRequest},
      {"misaligned length", RawPeer::request(kOpRead, 0, 700, 1), kBadRequest},
      {"empty read", RawPeer::request(kOpRead, 0, 0, 1), kBadRequest},
      {"read too long", RawPeer::request(kOpRead, 0, 16384 + 512, 1), kBadRequest},
      {"write too long", RawPeer::request(kOpWrite, 0, 1536, 1, 0, 1536), kBadRequest},
      {"write misaligned", RawPeer::request(kOpWrite, 512 + 8, 512, 1, 0, 512), kBadRequest},
      {"length past the datagram", short_write, kBadRequest},
      {"datagram past the length", long_write, kBadRequest},
      {"wrong version", wrong_version, kBadRequest},
      {"unknown op", RawPeer::request(9, 0, 512, 1), kBadRequest},
      {"read past the end", RawPeer::request(kOpRead, size - 512, 1024, 1), kOutOfRange},
      {"read at the end", RawPeer::request(kOpRead, size, 512, 1), kOutOfRange},
      {"offset wraps", RawPeer::request(kOpRead, ~0ull - 511, 1024, 1), kOutOfRange},
      {"write past the end", RawPeer::request(kOpWrite, size, 512, 1, 0, 512), kOutOfRange},
  };
  RawPeer peer(st.port());
  uint64_t cookie = 1000;
  for (auto& c : cases) {
    Header sent = decode_header(c.datagram.data());
    sent.cookie = ++cookie;
    encode_header(sent, c.datagram.data());
    peer.send(c.datagram);
    auto reply = peer.receive();
    ASSERT_TRUE(reply) << c.what;
    EXPECT_EQ(reply->size(), kHeaderSize) << c.what;  // a bare header
    Header h = decode_header(reply->data());
    EXPECT_EQ(h.status, c.status) << c.what;
    EXPECT_EQ(h.cookie, cookie) << c.what;
    EXPECT_EQ(h.op, sent.op | kReplyBit) << c.what;
    EXPECT_EQ(h.offset, sent.offset) << c.what;  // the request's own extent
    EXPECT_EQ(h.length, sent.length) << c.what;
  }
  EXPECT_EQ(st.server().stats().refused, cases.size());
  EXPECT_EQ(st.server().stats().bytes_written, 0u);
}

TEST(NetblkServer, ReadOnlyRefusesWrites) {
  ServerThread st;
  std::string error;
  ServerOptions options = loopback();
  options.read_only = true;
  ASSERT_TRUE(st.start(options, "ram:1M", &error)) << error;
  auto client = connect_to(st);
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->info().read_only());
  std::vector<uint8_t> buf(4096, 0x42);
  EXPECT_EQ(client->write(0, buf.data(), buf.size()), kReadOnly);
  EXPECT_EQ(client->read(0, buf.data(), buf.size()), kOk);
  EXPECT_EQ(buf, std::vector<uint8_t>(4096, 0));
  EXPECT_EQ(client->flush(), kOk);
  RawPeer peer(st.port());
  auto h = peer.ask(RawPeer::request(kOpWrite, 0, 512, 5, kFlagFua, 512));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, kReadOnly);
  EXPECT_EQ(st.server().stats().bytes_written, 0u);
}

// Garbage is dropped without an answer, and a well-behaved client next to it is not disturbed.
TEST(NetblkServer, DropsGarbageWithoutDisturbingOthers) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), ram("8M"), &error)) << error;
  RawPeer peer(st.port());
  std::vector<uint8_t> wrong_magic = RawPeer::request(kOpRead, 0, 512, 1);
  wrong_magic[0] = 'X';
  std::vector<uint8_t> reply_bit = RawPeer::request(kOpRead | kReplyBit, 0, 512, 1);
  std::vector<uint8_t> truncated = RawPeer::request(kOpRead, 0, 512, 1);
  truncated.resize(29);
  std::vector<std::vector<uint8_t>> garbage = {wrong_magic, reply_bit, truncated, {}, {0x4e}};

  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::thread noise([&] {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done && std::chrono::steady_clock::now() < end) {
      for (auto& g : garbage) peer.send(g);
      sent += int(garbage.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // well inside the rcvbuf
    }
  });
  auto client = connect_to(st, 16);
  ASSERT_NE(client, nullptr);
  VerifyResult result = verify(*client, 0, 4 << 20, 99);
  done = true;
  noise.join();
  EXPECT_TRUE(result.ok()) << status_name(result.status) << ", " << result.mismatched_bytes
                           << " bad bytes";
  EXPECT_FALSE(peer.receive(200));  // none of it was answered
  EXPECT_TRUE(eventually([&] { return st.server().stats().dropped == uint64_t(sent.load()); }))
      << st.server().stats().dropped << " dropped of " << sent.load();
  EXPECT_EQ(client->stats().failed, 0u);
}

// With every slot taken, a request is answered busy; the held one completes once the device
// moves again, and a client retries busy until it gets through.
TEST(NetblkServer, BusyWhenNoSlotIsFree) {
  auto control = std::make_shared<GatedDevice::Control>();
  control->open = false;
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(1), std::make_unique<GatedDevice>(ram("1M"), control), &error))
      << error;
  RawPeer first(st.port()), second(st.port());
  first.send(RawPeer::request(kOpRead, 0, 512, 1));
  ASSERT_TRUE(eventually([&] { return control->submitted.load() == 1; }));
  auto busy = second.ask(RawPeer::request(kOpWrite, 0, 512, 2, 0, 512));
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, kBusy);
  EXPECT_EQ(busy->cookie, 2u);
  EXPECT_EQ(busy->op, kOpWrite | kReplyBit);
  EXPECT_FALSE(first.receive(50));  // still held
  control->set_open(true);
  auto held = first.receive();
  ASSERT_TRUE(held);
  EXPECT_EQ(decode_header(held->data()).status, kOk);
  EXPECT_EQ(decode_header(held->data()).cookie, 1u);

  // A client with more in flight than the server has slots gets busy answers, and retries.
  control->open = false;
  auto client = connect_to(st, 4);
  ASSERT_NE(client, nullptr);
  std::vector<uint8_t> data(4096, 0x3c);
  auto writer =
      std::async(std::launch::async, [&] { return client->write(0, data.data(), data.size()); });
  ASSERT_TRUE(eventually([&] { return st.server().stats().busy >= 3; }));
  control->set_open(true);
  EXPECT_EQ(writer.get(), kOk);
  EXPECT_GT(client->stats().busy, 0u);
  std::vector<uint8_t> back(4096);
  EXPECT_EQ(client->read(0, back.data(), back.size()), kOk);
  EXPECT_EQ(back, data);
}

TEST(NetblkServer, DeviceErrorIsAnIoError) {
  auto control = std::make_shared<GatedDevice::Control>();
  control->fail_with = -EIO;
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), std::make_unique<GatedDevice>(ram("1M"), control), &error));
  RawPeer peer(st.port());
  for (auto& request :
       {RawPeer::request(kOpRead, 0, 4096, 1), RawPeer::request(kOpWrite, 0, 512, 2, 0, 512),
        RawPeer::request(kOpFlush, 0, 0, 3)}) {
    auto h = peer.ask(request);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, kIoError) << op_name(h->op);
    EXPECT_EQ(h->length, decode_header(request.data()).length);
  }
  EXPECT_EQ(st.server().stats().io_errors, 3u);
}

TEST(NetblkServer, Verify64MiBAtWindow64) {
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(256), "ram:64M", &error)) << error;
  auto client = connect_to(st, 64);
  ASSERT_NE(client, nullptr);
  VerifyResult result = verify(*client, 0, 64 << 20, 2024);
  EXPECT_EQ(result.status, kOk) << status_name(result.status);
  EXPECT_EQ(result.bytes, 64u << 20);
  EXPECT_EQ(result.mismatched_bytes, 0u) << "first at " << result.first_mismatch;
  // Checked on the device too, not only through the protocol.
  const uint8_t* bytes = st.server().device().mapped(0, 64 << 20);
  ASSERT_NE(bytes, nullptr);
  for (uint64_t i = 0; i < (64u << 20); i += 4093)
    ASSERT_EQ(bytes[i], verify_pattern_byte(2024, i)) << i;
  EXPECT_EQ(client->stats().failed, 0u);
}

TEST(NetblkServer, FileNamespaceNeedsAnMtuItsSectorsFit) {
  TempFile file(1 << 20);
  ServerOptions options = loopback();
  std::string error;
  EXPECT_EQ(Server::create(options, "file:" + file.path, &error), nullptr);
  EXPECT_NE(error.find("4096-byte sectors do not fit in one datagram at MTU 1500"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("use --mtu 4154 or more"), std::string::npos) << error;
}

TEST(NetblkServer, FileContentsMatchAfterTheServerExits) {
  TempFile file(16 << 20);
  ASSERT_FALSE(file.path.empty());
  ServerOptions options = loopback();
  options.mtu = 9000;
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(options, "file:" + file.path, &error)) << error;
  auto client = connect_to(st, 32);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->info().sector_size, 4096u);
  EXPECT_EQ(client->info().max_io, 8192u);
  VerifyResult result = verify(*client, 1 << 20, 8 << 20, 5);
  EXPECT_TRUE(result.ok()) << status_name(result.status);
  std::vector<uint8_t> tail(8192, 0x5e);
  EXPECT_EQ(client->write((16 << 20) - 8192, tail.data(), tail.size(), /*fua=*/true), kOk);
  EXPECT_EQ(st.stop(), 0);  // the graceful stop syncs the file

  std::vector<uint8_t> contents(16 << 20);
  int fd = ::open(file.path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, contents.data(), contents.size(), 0), ssize_t(contents.size()));
  ::close(fd);
  for (uint64_t i = 0; i < (1u << 20); ++i) ASSERT_EQ(contents[i], 0) << i;
  for (uint64_t i = 1 << 20; i < (9u << 20); ++i)
    ASSERT_EQ(contents[i], verify_pattern_byte(5, i)) << i;
  for (uint64_t i = (16 << 20) - 8192; i < (16u << 20); ++i) ASSERT_EQ(contents[i], 0x5e) << i;
}

TEST(NetblkServer, StopFinishesOwedIoAndSyncs) {
  auto control = std::make_shared<GatedDevice::Control>();
  control->open = false;
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), std::make_unique<GatedDevice>(ram("1M"), control), &error));
  RawPeer peer(st.port());
  peer.send(RawPeer::request(kOpWrite, 0, 512, 9, 0, 512));
  ASSERT_TRUE(eventually([&] { return control->submitted.load() == 1; }));
  st.server().stop();
  // Nothing to wait for: a stop() that synced before the owed write would do so in this window.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(control->syncs.load(), 0);  // the write is still owed
  control->set_open(true);
  EXPECT_EQ(st.stop(), 0);
  EXPECT_EQ(control->syncs.load(), 1);
  auto reply = peer.receive(500);
  ASSERT_TRUE(reply);  // answered before the worker left
  EXPECT_EQ(decode_header(reply->data()).status, kOk);
}

// Datagrams waiting when the loop starts are taken in one recvmmsg batch, and their device
// I/O goes to the device with one kick at the end of that loop iteration.
TEST(NetblkServer, OneBatchIsOneKick) {
  auto control = std::make_shared<GatedDevice::Control>();
  std::string error;
  auto server =
      Server::create(loopback(), std::make_unique<GatedDevice>(ram("1M"), control), &error);
  ASSERT_NE(server, nullptr) << error;
  RawPeer peer(server->port());
  constexpr int kRequests = 32;
  for (int i = 0; i < kRequests; ++i)
    peer.send(RawPeer::request(kOpWrite, uint64_t(i) * 512, 512, uint64_t(i), 0, 512));
  std::thread worker([&] { EXPECT_EQ(server->run(), 0); });
  int answered = 0;
  while (answered < kRequests) {
    auto reply = peer.receive();
    if (!reply) break;
    EXPECT_EQ(decode_header(reply->data()).status, kOk);
    ++answered;
  }
  EXPECT_EQ(answered, kRequests);
  EXPECT_EQ(control->submitted.load(), kRequests);
  EXPECT_EQ(control->kicks.load(), 1);
  server->stop();
  worker.join();
  EXPECT_EQ(server->stats().replies, uint64_t(kRequests));
  EXPECT_EQ(control->syncs.load(), 1);
}

// stop() before run(): run() returns at once, still syncing the device.
TEST(NetblkServer, StopBeforeRun) {
  auto control = std::make_shared<GatedDevice::Control>();
  std::string error;
  auto server =
      Server::create(loopback(), std::make_unique<GatedDevice>(ram("1M"), control), &error);
  ASSERT_NE(server, nullptr) << error;
  server->stop();
  EXPECT_EQ(server->run(), 0);
  EXPECT_EQ(control->syncs.load(), 1);
  EXPECT_EQ(server->stats().requests, 0u);
}

TEST(NetblkServer, AllowListDropsOtherSources) {
  std::string error;
  {
    ServerOptions options = loopback();
    options.allow = {"10.0.0.0/8", "::1/128"};
    ServerThread st;
    ASSERT_TRUE(st.start(options, "ram:1M", &error)) << error;
    RawPeer peer(st.port());
    EXPECT_FALSE(peer.ask(RawPeer::request(kOpInfo, 0, 0, 1), 200));
    EXPECT_EQ(st.server().stats().filtered, 1u);
    EXPECT_EQ(st.server().stats().requests, 0u);
  }
  {
    ServerOptions options = loopback();
    options.allow = {"10.0.0.0/8", "127.0.0.0/8"};
    ServerThread st;
    ASSERT_TRUE(st.start(options, "ram:1M", &error)) << error;
    RawPeer peer(st.port());
    auto h = peer.ask(RawPeer::request(kOpInfo, 0, 0, 1));
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, kOk);
  }
  ServerOptions bad = loopback();
  bad.allow = {"10.0.0.0/40"};
  EXPECT_EQ(Server::create(bad, "ram:1M", &error), nullptr);
  EXPECT_EQ(error, "--allow 10.0.0.0/40: prefix must be 0..32");
}

Nanos thread_cpu(std::thread& t) {
  clockid_t clock;
  pthread_getcpuclockid(t.native_handle(), &clock);
  timespec ts;
  clock_gettime(clock, &ts);
  return Nanos(ts.tv_sec) * kSecond + ts.tv_nsec;
}

// Idle, and also with a completion owed by a slow device, the worker sleeps in the kernel
// after polling --poll-us: it does not spin.
TEST(NetblkServer, IdleWorkerCostsNoCpu) {
  auto control = std::make_shared<GatedDevice::Control>();
  ServerThread st;
  std::string error;
  ASSERT_TRUE(st.start(loopback(), std::make_unique<GatedDevice>(ram("4M"), control), &error));
  auto client = connect_to(st);
  ASSERT_NE(client, nullptr);
  std::vector<uint8_t> buf(65536, 1);
  ASSERT_EQ(client->write(0, buf.data(), buf.size()), kOk);
  ASSERT_EQ(client->read(0, buf.data(), buf.size()), kOk);

  Nanos cpu = thread_cpu(st.thread());
  uint64_t wakeups = st.server().stats().wakeups;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the idle window measured
  EXPECT_LT(thread_cpu(st.thread()) - cpu, 20 * kMilli);
  EXPECT_EQ(st.server().stats().wakeups, wakeups);

  control->open = false;
  const int submitted = control->submitted.load();
  RawPeer peer(st.port());
  peer.send(RawPeer::request(kOpRead, 0, 512, 1));
  ASSERT_TRUE(eventually([&] { return control->submitted.load() == submitted + 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past its 50 us of polling
  cpu = thread_cpu(st.thread());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the blocked window measured
  EXPECT_LT(thread_cpu(st.thread()) - cpu, 20 * kMilli);        // owed, but blocked in epoll_wait
  control->set_open(true);
  auto reply = peer.receive();
  ASSERT_TRUE(reply);
  EXPECT_EQ(decode_header(reply->data()).status, kOk);
}

}  // namespace
}  // namespace sens::netblk
