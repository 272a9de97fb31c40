// sens's TLS record layer (transport/tls_records.h) against OpenSSL's own: each side may use
// either, so every pairing must carry the same bytes both ways, across key updates asked for
// by either side, with reads smaller and larger than a record; a record changed on the wire
// or a header that is not a protected record's ends the connection with an error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tls_test_util.h"
#include "transport/tls.h"

namespace sens::transport {
namespace {

void nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// One end of the exchange: what it sends, what it has received.
struct End {
  TlsChannel* ch;
  int fd;
  const std::vector<uint8_t>* out;
  size_t sent = 0;
  bool updated = false;
  std::vector<uint8_t> got;
};

// (client records, server records, cipher suite hash)
using Combo = std::tuple<TlsRecords, TlsRecords, uint8_t>;

class TlsRecordsTest : public ::testing::TestWithParam<Combo> {};

// Both ends send 3 MiB at once in pieces of 24 bytes to 20 KiB from one thread (a channel
// belongs to one thread), each asks for a key update halfway if `key_updates`, and the client
// reads in 1000-byte calls (smaller than a record: the in-place path) while the server reads in
// 100 KB calls (the record straight into the caller's buffer).
void exchange(TlsChannel& c, int cfd, TlsChannel& s, int sfd, uint32_t seed, bool key_updates) {
  nonblocking(sfd);
  nonblocking(cfd);
  std::mt19937 rng(seed);
  std::vector<uint8_t> to_server(3 << 20), to_client(3 << 20);
  for (auto& b : to_server) b = uint8_t(rng());
  for (auto& b : to_client) b = uint8_t(rng());
  End ends[2] = {{&c, cfd, &to_server}, {&s, sfd, &to_client}};
  const size_t read_size[2] = {1000, 100000};
  std::vector<uint8_t> buf(100000);
  std::uniform_int_distribution<size_t> piece(24, 20000);
  for (int rounds = 0; rounds < 200000; ++rounds) {
    bool progress = false, done = true;
    for (int e = 0; e < 2; ++e) {
      End& me = ends[e];
      TlsChannel::Io io;
      if (me.sent < me.out->size()) {
        if (key_updates && !me.updated && me.sent >= me.out->size() / 2) {
          ASSERT_TRUE(me.ch->request_key_update());
          me.updated = true;
        }
        iovec v[3];
        size_t n = 0, off = me.sent;
        for (; n < 3 && off < me.out->size(); ++n) {
          size_t len = std::min(piece(rng), me.out->size() - off);
          v[n] = {const_cast<uint8_t*>(me.out->data()) + off, len};
          off += len;
        }
        size_t k = me.ch->send(v, n, 0, &io);
        ASSERT_TRUE(io == TlsChannel::Io::kOk || io == TlsChannel::Io::kWantWrite)
            << me.ch->error();
        me.sent += k;
        progress |= k > 0;
      }
      for (;;) {
        size_t k = me.ch->read(buf.data(), read_size[e], &io);
        if (k == 0) {
          ASSERT_TRUE(io == TlsChannel::Io::kWantRead) << me.ch->error();
          break;
        }
        me.got.insert(me.got.end(), buf.begin(), buf.begin() + long(k));
        progress = true;
      }
      done &= me.sent == me.out->size() && !me.ch->out_pending();
    }
    done &= ends[0].got.size() == to_client.size() && ends[1].got.size() == to_server.size();
    if (done) break;
    if (!progress) {
      pollfd p[2] = {{sfd, POLLIN | POLLOUT, 0}, {cfd, POLLIN | POLLOUT, 0}};
      poll(p, 2, 100);
    }
  }
  ASSERT_EQ(ends[1].got.size(), to_server.size());
  ASSERT_EQ(ends[0].got.size(), to_client.size());
  EXPECT_TRUE(ends[1].got == to_server) << "client -> server bytes changed";
  EXPECT_TRUE(ends[0].got == to_client) << "server -> client bytes changed";
}

// Every pairing of sens's and OpenSSL's records, across key updates (exchange()).
TEST_P(TlsRecordsTest, EveryPairingCarriesTheBytesBothWaysAcrossKeyUpdates) {
  auto [crec, srec, hash] = GetParam();
  TlsContexts ctx(hash);
  ASSERT_TRUE(ctx.server && ctx.client);
  ctx.client->use_records(crec);
  ctx.server->use_records(srec);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  TlsChannel s(*ctx.server, sv[0]), c(*ctx.client, sv[1]);
  tls_handshake(s, c);
  EXPECT_STREQ(c.records(), crec == TlsRecords::kSens ? "sens" : "openssl");
  EXPECT_STREQ(s.records(), srec == TlsRecords::kSens ? "sens" : "openssl");
  EXPECT_EQ(c.cipher(), hash == 2 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256");
  exchange(c, sv[1], s, sv[0], hash * 7 + int(crec) * 3 + int(srec), true);
  ::close(sv[0]);
  ::close(sv[1]);
}

INSTANTIATE_TEST_SUITE_P(
    Pairings, TlsRecordsTest,
    ::testing::Combine(::testing::Values(TlsRecords::kSens, TlsRecords::kOpenSsl),
                       ::testing::Values(TlsRecords::kSens, TlsRecords::kOpenSsl),
                       ::testing::Values(uint8_t(1), uint8_t(2))),
    [](const ::testing::TestParamInfo<Combo>& i) {
      auto name = [](TlsRecords r) { return r == TlsRecords::kSens ? "sens" : "openssl"; };
      return std::string("client_") + name(std::get<0>(i.param)) + "_server_" +
             name(std::get<1>(i.param)) + (std::get<2>(i.param) == 2 ? "_aes256" : "_aes128");
    });

// ---- the kernel's records (kTLS) ----

// A connected TCP pair on loopback (the kernel's TLS sits on TCP only): fd[0] the server's.
bool tcp_pair(int fd[2]) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = l >= 0 && bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            listen(l, 1) == 0 && getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  fd[1] = ok ? socket(AF_INET, SOCK_STREAM, 0) : -1;
  ok = ok && fd[1] >= 0 && connect(fd[1], reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  fd[0] = ok ? accept(l, nullptr, nullptr) : -1;
  if (l >= 0) ::close(l);
  return ok && fd[0] >= 0;
}

// The handshake on blocking sockets, each side on its own thread; either may fail (a side that
// wants the kernel's records fails where the kernel has none).
void handshake_both(TlsChannel& s, TlsChannel& c, TlsChannel::Io* sio, TlsChannel::Io* cio) {
  std::thread peer([&] { *sio = s.handshake(); });
  *cio = c.handshake();
  peer.join();
}

// Where the kernel has no tls module (this development machine's), a side that wants the
// kernel's records refuses with the reason and the test is skipped: `make interop` runs these
// tests in a VM whose kernel has it (tests/interop/sens_in_guest_ktls.sh). Any other refusal
// is a failure.
#define SKIP_IF_NO_KERNEL_TLS(side, io)                                             \
  do {                                                                              \
    if ((io) != TlsChannel::Io::kOk &&                                              \
        (side).error().find("kernel TLS: setsockopt(TCP_ULP") != std::string::npos) \
      GTEST_SKIP() << (side).error();                                               \
  } while (0)

// ((client records, server records), cipher suite hash)
using KernelCombo = std::tuple<std::tuple<TlsRecords, TlsRecords>, uint8_t>;
class TlsKernelRecordsTest : public ::testing::TestWithParam<KernelCombo> {};

// The kernel's records against sens's, OpenSSL's and the kernel's, both suites: the same bytes
// both ways, read in pieces smaller and larger than a record.
TEST_P(TlsKernelRecordsTest, CarryTheBytesBothWays) {
  const auto [pair, hash] = GetParam();
  const auto [crec, srec] = pair;
  TlsContexts ctx(hash);
  ASSERT_TRUE(ctx.server && ctx.client);
  ctx.client->use_records(crec);
  ctx.server->use_records(srec);
  int fd[2];
  ASSERT_TRUE(tcp_pair(fd));
  TlsChannel s(*ctx.server, fd[0]), c(*ctx.client, fd[1]);
  TlsChannel::Io sio, cio;
  handshake_both(s, c, &sio, &cio);
  TlsChannel& k = crec == TlsRecords::kKernel ? c : s;
  const TlsChannel::Io kio = crec == TlsRecords::kKernel ? cio : sio;
  if (kio != TlsChannel::Io::kOk) {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  SKIP_IF_NO_KERNEL_TLS(k, kio);
  ASSERT_EQ(sio, TlsChannel::Io::kOk) << s.error();
  ASSERT_EQ(cio, TlsChannel::Io::kOk) << c.error();
  EXPECT_STREQ(c.records(), tls_records_name(crec));
  EXPECT_STREQ(s.records(), tls_records_name(srec));
  EXPECT_STREQ(k.aes_gcm(), "kernel");
  EXPECT_EQ(kernel_tls_status(), "in use");
  EXPECT_FALSE(k.request_key_update()) << "a kernel side sends no KeyUpdate";
  exchange(c, fd[1], s, fd[0], hash * 11 + int(crec) * 3 + int(srec), false);
  ::close(fd[0]);
  ::close(fd[1]);
}

INSTANTIATE_TEST_SUITE_P(
    Pairings, TlsKernelRecordsTest,
    ::testing::Combine(::testing::Values(std::make_tuple(TlsRecords::kKernel, TlsRecords::kSens),
                                         std::make_tuple(TlsRecords::kSens, TlsRecords::kKernel),
                                         std::make_tuple(TlsRecords::kKernel, TlsRecords::kKernel),
                                         std::make_tuple(TlsRecords::kKernel, TlsRecords::kOpenSsl),
                                         std::make_tuple(TlsRecords::kOpenSsl,
                                                         TlsRecords::kKernel)),
                       ::testing::Values(uint8_t(1), uint8_t(2))),
    [](const ::testing::TestParamInfo<KernelCombo>& i) {
      const auto& pair = std::get<0>(i.param);
      return std::string("client_") + tls_records_name(std::get<0>(pair)) + "_server_" +
             tls_records_name(std::get<1>(pair)) +
             (std::get<1>(i.param) == 2 ? "_aes256" : "_aes128");
    });

// A peer's KeyUpdate reaches a kernel side. A kernel before 6.14 takes no new receive keys, and
// a KeyUpdate that asks for ours cannot be answered: either way the kernel side ends the
// connection with an error that names the KeyUpdate, after exactly the bytes sent before it
// (never bytes opened with the wrong keys).
TEST(TlsKernelRecords, APeersKeyUpdateEndsTheConnectionWithAClearError) {
  TlsContexts ctx(1);
  ASSERT_TRUE(ctx.server && ctx.client);
  ctx.client->use_records(TlsRecords::kSens);
  ctx.server->use_records(TlsRecords::kKernel);
  int fd[2];
  ASSERT_TRUE(tcp_pair(fd));
  TlsChannel s(*ctx.server, fd[0]), c(*ctx.client, fd[1]);
  TlsChannel::Io sio, cio;
  handshake_both(s, c, &sio, &cio);
  if (sio != TlsChannel::Io::kOk) {
    ::close(fd[0]);
    ::close(fd[1]);
  }
  SKIP_IF_NO_KERNEL_TLS(s, sio);
  ASSERT_EQ(sio, TlsChannel::Io::kOk) << s.error();
  ASSERT_EQ(cio, TlsChannel::Io::kOk) << c.error();
  std::vector<uint8_t> before(100000), after(20000, 0xee);  // (after: fits the socket buffers)
  std::mt19937 rng(5);
  for (auto& b : before) b = uint8_t(rng());
  // The server reads on its own thread (each channel belongs to one thread) until it fails.
  std::vector<uint8_t> got;
  TlsChannel::Io io = TlsChannel::Io::kOk;
  std::thread reader([&] {
    std::vector<uint8_t> buf(7000);
    for (int idle = 0; idle < 100;) {  // (10 s without a byte or an error: give up)
      size_t n = s.read(buf.data(), buf.size(), &io);
      if (n > 0) {
        got.insert(got.end(), buf.begin(), buf.begin() + long(n));
        idle = 0;
        continue;
      }
      if (io != TlsChannel::Io::kWantRead) break;
      pollfd p{fd[0], POLLIN, 0};
      idle += poll(&p, 1, 100) == 0;
    }
  });
  // A call seals a batch of records; the socket blocks, so each call makes progress. Writes
  // after the server's error may fail: the connection is gone.
  auto write_all = [&](const std::vector<uint8_t>& v) {
    TlsChannel::Io wio = TlsChannel::Io::kOk;
    for (size_t at = 0; at < v.size();) {
      at += c.write(v.data() + at, v.size() - at, &wio);
      if (wio != TlsChannel::Io::kOk && wio != TlsChannel::Io::kWantWrite) break;
    }
    return wio;
  };
  EXPECT_EQ(write_all(before), TlsChannel::Io::kOk) << c.error();
  EXPECT_TRUE(c.request_key_update());
  write_all(after);
  ::shutdown(fd[1], SHUT_WR);  // (a kernel that took the new keys reads to the end)
  reader.join();
  EXPECT_EQ(io, TlsChannel::Io::kError);
  EXPECT_NE(s.error().find("KeyUpdate"), std::string::npos) << s.error();
  EXPECT_TRUE(got == before) << got.size() << " bytes before the error, " << before.size()
                             << " sent before the KeyUpdate";
  ::close(fd[0]);
  ::close(fd[1]);
}

// The two AES-GCM implementations seal the same records byte for byte (same key, same
// sequence), from pieces cut anywhere (GCM's partial blocks between pieces), and each opens
// the other's, in place and into another buffer; a changed byte fails either. Both suites, and
// across a key update.
TEST(TlsRecordKeys, IpsecMbAndOpenSslSealAndOpenTheSameRecords) {
  std::string why;
  if (!set_aes_gcm(AesGcm::kIpsecMb, &why)) GTEST_SKIP() << why;
  ASSERT_TRUE(set_aes_gcm(AesGcm::kAuto, &why));
  std::mt19937 rng(42);
  for (uint16_t suite : {uint16_t(0x1301), uint16_t(0x1302)}) {
    const size_t hash = suite == 0x1301 ? 32 : 48;
    std::vector<uint8_t> secret(hash);
    for (auto& b : secret) b = uint8_t(rng());
    TlsRecordKeys seal_imb, seal_ossl, open_imb, open_ossl;
    ASSERT_TRUE(seal_imb.init(suite, secret.data(), hash, true, &why, AesGcm::kIpsecMb)) << why;
    ASSERT_TRUE(seal_ossl.init(suite, secret.data(), hash, true, &why, AesGcm::kOpenSsl)) << why;
    ASSERT_TRUE(open_imb.init(suite, secret.data(), hash, false, &why, AesGcm::kIpsecMb)) << why;
    ASSERT_TRUE(open_ossl.init(suite, secret.data(), hash, false, &why, AesGcm::kOpenSsl)) << why;
    EXPECT_EQ(seal_imb.engine(), AesGcm::kIpsecMb);
    EXPECT_EQ(seal_ossl.engine(), AesGcm::kOpenSsl);
    for (int n = 0; n < 300; ++n) {
      if (n == 150) {
        for (auto* k : {&seal_imb, &seal_ossl, &open_imb, &open_ossl})
          ASSERT_TRUE(k->update(&why)) << why;
      }
      // 0 to 16384 bytes in 1 to 5 pieces of any size.
      const size_t plain = n < 20 ? size_t(n) : rng() % (kTlsMaxPlain + 1);
      std::vector<uint8_t> data(plain);
      for (auto& b : data) b = uint8_t(rng());
      std::vector<iovec> iov;
      for (size_t at = 0; at < plain;) {
        size_t k = std::min(plain - at, size_t(1 + rng() % (plain / 2 + 17)));
        iov.push_back({data.data() + at, k});
        at += k;
      }
      std::vector<uint8_t> a(plain + 64), b(plain + 64);
      size_t ia = 0, oa = 0, ib = 0, ob = 0;
      const size_t la = seal_imb.seal(iov.data(), iov.size(), &ia, &oa, plain,
                                      tls_content::kApplicationData, a.data());
      const size_t lb = seal_ossl.seal(iov.data(), iov.size(), &ib, &ob, plain,
                                       tls_content::kApplicationData, b.data());
      ASSERT_EQ(la, kTlsHeaderBytes + plain + 1 + kTlsTagBytes);
      ASSERT_EQ(la, lb);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), la), 0) << "record " << n << ", " << plain << " B";
      // ipsec-mb opens OpenSSL's record into another buffer, OpenSSL ipsec-mb's in place.
      std::vector<uint8_t> out(plain + 17);
      uint8_t type = 0;
      ASSERT_EQ(open_imb.open(b.data(), lb, out.data(), &type), long(plain)) << n;
      EXPECT_EQ(type, tls_content::kApplicationData);
      EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin())) << n;
      ASSERT_EQ(open_ossl.open(a.data(), la, a.data() + kTlsHeaderBytes, &type), long(plain));
      EXPECT_TRUE(std::equal(data.begin(), data.end(), a.begin() + kTlsHeaderBytes)) << n;
    }
    // A flipped bit anywhere (header, body, tag) fails both; each consumes a sequence number,
    // as a connection ends there anyway.
    std::vector<uint8_t> data(1000, 0x77), rec(1100), out(1100);
    iovec v{data.data(), data.size()};
    for (size_t at :
         {size_t(2), size_t(kTlsHeaderBytes + 500), size_t(kTlsHeaderBytes + 1001 + 3)}) {
      size_t i = 0, o = 0;
      TlsRecordKeys s1, o1, o2;
      ASSERT_TRUE(s1.init(suite, secret.data(), hash, true, &why, AesGcm::kIpsecMb));
      ASSERT_TRUE(o1.init(suite, secret.data(), hash, false, &why, AesGcm::kIpsecMb));
      ASSERT_TRUE(o2.init(suite, secret.data(), hash, false, &why, AesGcm::kOpenSsl));
      const size_t len =
          s1.seal(&v, 1, &i, &o, data.size(), tls_content::kApplicationData, rec.data());
      rec[at] ^= 0x10;
      uint8_t type;
      EXPECT_EQ(o1.open(rec.data(), len, out.data(), &type), -1) << at;
      EXPECT_EQ(o2.open(rec.data(), len, out.data(), &type), -1) << at;
    }
  }
}

// A relay between the client's socket and the server's, stopped after the handshake, so the
// test can put its own bytes on the server's wire.
struct Relay {
  Relay() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
    pump = std::thread([this] {
      char buf[65536];
      while (!stop) {
        pollfd p[2] = {{a[1], POLLIN, 0}, {b[0], POLLIN, 0}};
        if (poll(p, 2, 20) <= 0) continue;
        for (int i = 0; i < 2; ++i) {
          if (!(p[i].revents & POLLIN)) continue;
          ssize_t n = ::read(p[i].fd, buf, sizeof buf);
          if (n > 0) {
            EXPECT_EQ(::write(i == 0 ? b[0] : a[1], buf, size_t(n)), n);
          }
        }
      }
    });
  }
  ~Relay() {
    stop = true;
    if (pump.joinable()) pump.join();
    for (int fd : {a[0], a[1], b[0], b[1]}) ::close(fd);
  }
  void halt() {
    stop = true;
    pump.join();
  }
  int a[2], b[2];  // client on a[0], server on b[1]; the relay joins a[1] and b[0]
  std::atomic<bool> stop{false};
  std::thread pump;
};

// A session handshaken through the relay, which then stops: the test writes the server's wire.
struct RelayedSession {
  RelayedSession() : s(*ctx.server, r.b[1]), c(*ctx.client, r.a[0]) {
    tls_handshake(s, c);
    r.halt();
  }
  TlsContexts ctx{1};
  Relay r;
  TlsChannel s, c;
};

TEST(TlsRecords, ARecordChangedOnTheWireFailsAuthentication) {
  RelayedSession t;
  TlsChannel &s = t.s, &c = t.c;
  Relay& r = t.r;
  const char msg[] = "a capsule that must arrive intact";
  TlsChannel::Io io;
  ASSERT_EQ(c.write(msg, sizeof msg, &io), sizeof msg) << c.error();
  std::vector<uint8_t> wire(512);
  ssize_t n = ::read(r.a[1], wire.data(), wire.size());
  ASSERT_GT(n, 30);
  wire[size_t(n) - 20] ^= 0x01;  // one bit of the ciphertext
  ASSERT_EQ(::write(r.b[0], wire.data(), size_t(n)), n);
  char got[64];
  EXPECT_EQ(s.read(got, sizeof got, &io), 0u);
  EXPECT_EQ(io, TlsChannel::Io::kError);
  EXPECT_NE(s.error().find("bad_record_mac"), std::string::npos) << s.error();
}

TEST(TlsRecords, AHeaderThatIsNotAProtectedRecordIsRefused) {
  // A plaintext handshake record (type 22), and one claiming 40,000 bytes (over 2^14 + 256).
  for (std::string bad :
       {std::string("\x16\x03\x03\x00\x05hello", 10), std::string("\x17\x03\x03\x9c\x40", 5)}) {
    RelayedSession t;
    TlsChannel& s = t.s;
    ASSERT_EQ(::write(t.r.b[0], bad.data(), bad.size()), ssize_t(bad.size()));
    char got[64];
    TlsChannel::Io io;
    EXPECT_EQ(s.read(got, sizeof got, &io), 0u);
    EXPECT_EQ(io, TlsChannel::Io::kError);
    EXPECT_NE(s.error().find("not a TLS 1.3 protected record"), std::string::npos) << s.error();
  }
}

}  // namespace
}  // namespace sens::transport
