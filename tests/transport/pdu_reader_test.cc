#include "transport/pdu_reader.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "tls_test_util.h"

namespace sens::transport {
namespace {

// Collects PDUs; payloads of data PDUs go to a buffer of the sink's.
struct Sink : PduReader::Sink {
  PduReader* reader = nullptr;
  std::vector<uint8_t> types;
  std::vector<uint8_t> payload = std::vector<uint8_t>(1 << 20);
  size_t payload_bytes = 0;
  int bad_digests = 0;
  pdu::Check error;
  bool on_pdu_header(const pdu::CommonHeader& h, const pdu::Layout& l) override {
    types.push_back(h.type);
    if (l.data_len) reader->set_payload_target(payload.data() + payload_bytes, l.data_len);
    return true;
  }
  bool on_pdu_payload(const pdu::CommonHeader& h, bool ok) override {
    auto l = pdu::layout_of(h);
    payload_bytes += l.data_len;
    if (!ok) ++bad_digests;
    return true;
  }
  void on_pdu_error(const pdu::Check& c, const uint8_t*, uint32_t) override { error = c; }
};

// A stream of PDUs a host would send after IC: capsules with in-capsule data and H2CData.
std::vector<uint8_t> make_stream(pdu::Digests dg, std::vector<uint8_t>* data) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 20; ++i) {
    uint32_t len = (i % 3 == 0) ? 0 : uint32_t(100 + i * 37);
    std::vector<uint8_t> d(len);
    for (auto& b : d) b = uint8_t(i * 11 + (&b - d.data()));
    pdu::HeaderSlot slot{};
    if (i % 2 == 0) {
      nvme::Sqe sqe{};
      sqe.cid = uint16_t(i);
      pdu::build_capsule_cmd(slot.cmd, sqe, len, dg);
    } else {
      pdu::build_data(slot.data, pdu::Type::kH2CData, uint16_t(i), 0, 0, len ? len : 4,
                      pdu::flag::kDataLast, dg);
      if (!len) d.resize(4, 0xAB), len = 4;
    }
    uint32_t hl = pdu::finish_header(slot, dg);
    auto l = pdu::layout_of(slot.ch);
    out.insert(out.end(), slot.bytes, slot.bytes + hl);
    out.resize(out.size() + (l.data_offset > hl && len ? l.data_offset - hl : 0), 0);
    out.insert(out.end(), d.begin(), d.end());
    data->insert(data->end(), d.begin(), d.end());
    if (len && dg.data) {
      uint32_t crc = crc32c(d.data(), d.size());
      out.insert(out.end(), reinterpret_cast<uint8_t*>(&crc), reinterpret_cast<uint8_t*>(&crc) + 4);
    }
  }
  return out;
}

class PduReaderSplit : public ::testing::TestWithParam<int> {};

// The same stream cut into pieces of every size from 1 byte up must parse identically.
TEST_P(PduReaderSplit, EveryCutGivesTheSamePdus) {
  int mode = GetParam();
  pdu::Digests dg{bool(mode & 1), bool(mode & 2)};
  std::vector<uint8_t> data;
  auto stream = make_stream(dg, &data);
  for (size_t piece = 1; piece <= 97; piece += (piece < 16 ? 1 : 9)) {
    Sink s;
    PduReader r(pdu::Receiver::kController, s, 256);
    s.reader = &r;
    r.set_digests(dg);
    r.set_after_ic(true);
    for (size_t off = 0; off < stream.size(); off += piece)
      ASSERT_EQ(r.feed(stream.data() + off, std::min(piece, stream.size() - off)),
                PduReader::Status::kOk)
          << "piece " << piece << " why " << (s.error.why ? s.error.why : "");
    ASSERT_EQ(s.types.size(), 20u) << piece;
    ASSERT_EQ(s.payload_bytes, data.size());
    EXPECT_EQ(0, std::memcmp(s.payload.data(), data.data(), data.size()));
    EXPECT_EQ(s.bad_digests, 0);
  }
}
INSTANTIATE_TEST_SUITE_P(Digests, PduReaderSplit, ::testing::Values(0, 1, 2, 3));

// Through a real socket: the payload lands in place (readv) and the counters say so.
TEST(PduReader, LargePayloadIsReadInPlace) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  pdu::Digests dg{true, true};
  Sink s;
  PduReader r(pdu::Receiver::kController, s, 4096);
  s.reader = &r;
  r.set_digests(dg);
  r.set_after_ic(true);
  std::vector<uint8_t> d(200000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = uint8_t(i * 7);
  pdu::HeaderSlot slot{};
  pdu::build_data(slot.data, pdu::Type::kH2CData, 1, 0, 0, uint32_t(d.size()), pdu::flag::kDataLast,
                  dg);
  uint32_t hl = pdu::finish_header(slot, dg);
  uint32_t crc = crc32c(d.data(), d.size());
  r.set_max_plen(1 << 20);
  size_t sent = 0;
  std::vector<uint8_t> all(slot.bytes, slot.bytes + hl);
  all.insert(all.end(), d.begin(), d.end());
  all.insert(all.end(), reinterpret_cast<uint8_t*>(&crc), reinterpret_cast<uint8_t*>(&crc) + 4);
  while (sent < all.size()) {
    ssize_t n = write(sv[1], all.data() + sent, all.size() - sent);
    if (n > 0) sent += size_t(n);
    auto st = r.read_from(sv[0], 1 << 20);
    ASSERT_TRUE(st == PduReader::Status::kOk || st == PduReader::Status::kWouldBlock);
  }
  for (int i = 0; i < 10 && s.payload_bytes < d.size(); ++i) r.read_from(sv[0], 1 << 20);
  ASSERT_EQ(s.payload_bytes, d.size());
  EXPECT_EQ(0, std::memcmp(s.payload.data(), d.data(), d.size()));
  EXPECT_EQ(s.bad_digests, 0);
  EXPECT_LT(r.counters().copied_payload_bytes, d.size() / 2);
  close(sv[0]);
  close(sv[1]);
}

TEST(PduReader, CorruptDataDigestIsReportedNotFatal) {
  pdu::Digests dg{false, true};
  std::vector<uint8_t> data;
  auto stream = make_stream(dg, &data);
  stream[stream.size() - 1] ^= 0xFF;  // the last PDU's data digest
  Sink s;
  PduReader r(pdu::Receiver::kController, s);
  s.reader = &r;
  r.set_digests(dg);
  r.set_after_ic(true);
  EXPECT_EQ(r.feed(stream.data(), stream.size()), PduReader::Status::kOk);
  EXPECT_EQ(s.types.size(), 20u);
  EXPECT_EQ(s.bad_digests, 1);
}

TEST(PduReader, BadHeaderDigestIsFatal) {
  pdu::Digests dg{true, false};
  std::vector<uint8_t> data;
  auto stream = make_stream(dg, &data);
  stream[10] ^= 1;  // inside the first header
  Sink s;
  PduReader r(pdu::Receiver::kController, s);
  s.reader = &r;
  r.set_digests(dg);
  r.set_after_ic(true);
  EXPECT_EQ(r.feed(stream.data(), stream.size()), PduReader::Status::kStopped);
  EXPECT_EQ(s.error.fes, pdu::fes::kHeaderDigestError);
}

// A sink that cannot take every other PDU at first (as the target without a free buffer)
// holds the reader; the held header comes again on resume() and nothing is lost or reordered.
TEST(PduReader, HoldKeepsTheHeaderUntilResume) {
  struct HoldingSink : Sink {
    bool refuse_next = true;
    bool on_pdu_header(const pdu::CommonHeader& h, const pdu::Layout& l) override {
      if (refuse_next) {
        refuse_next = false;
        reader->hold();
        return true;
      }
      refuse_next = true;
      return Sink::on_pdu_header(h, l);
    }
  };
  for (bool digests : {false, true}) {
    pdu::Digests dg{digests, digests};
    std::vector<uint8_t> data;
    auto stream = make_stream(dg, &data);
    HoldingSink s;
    PduReader r(pdu::Receiver::kController, s, 1 << 20);  // the whole stream fits in staging
    s.reader = &r;
    r.set_digests(dg);
    r.set_after_ic(true);
    auto st = r.feed(stream.data(), stream.size());
    int holds = 0;
    while (st == PduReader::Status::kHeld) {
      ++holds;
      EXPECT_TRUE(r.held());
      EXPECT_EQ(r.feed(stream.data(), 0), PduReader::Status::kHeld);  // nothing moves
      st = r.resume();
    }
    EXPECT_EQ(st, PduReader::Status::kOk);
    EXPECT_EQ(holds, 20);
    EXPECT_EQ(r.counters().holds, 20u);
    ASSERT_EQ(s.types.size(), 20u);
    ASSERT_EQ(s.payload_bytes, data.size());
    EXPECT_EQ(std::memcmp(s.payload.data(), data.data(), data.size()), 0);
    EXPECT_EQ(s.bad_digests, 0);
  }
}

// Over TLS a large payload starts a record of its own (the sender cuts before it), so the
// reader opens it straight into the payload's place: no byte of it goes through staging. With
// and without data digests, 16 KiB and 40 KiB payloads (the second spans records).
TEST(PduReader, TlsPayloadRecordsOpenIntoPlace) {
  for (bool digests : {false, true}) {
    for (uint32_t len : {16384u, 40000u}) {
      TlsContexts ctx;
      int sv[2];
      ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      TlsChannel server(*ctx.server, sv[0]), client(*ctx.client, sv[1]);
      tls_handshake(server, client);
      for (int fd : sv) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      pdu::Digests dg{digests, digests};
      Sink s;
      PduReader r(pdu::Receiver::kController, s);
      s.reader = &r;
      r.set_digests(dg);
      r.set_after_ic(true);
      r.set_max_plen(1 << 20);
      r.set_tls(&server);
      constexpr int kPdus = 8;
      std::vector<uint8_t> data(size_t(len) * kPdus);
      for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + i / 4096);
      pdu::HeaderSlot slots[kPdus]{};
      uint32_t crcs[kPdus];
      std::vector<iovec> iov;
      for (int k = 0; k < kPdus; ++k) {
        pdu::build_data(slots[k].data, pdu::Type::kH2CData, uint16_t(k), 0, 0, len,
                        pdu::flag::kDataLast, dg);
        const uint32_t hl = pdu::finish_header(slots[k], dg);
        iov.push_back({slots[k].bytes, hl});
        iov.push_back({data.data() + size_t(k) * len, len});
        crcs[k] = crc32c(data.data() + size_t(k) * len, len);
        if (digests) iov.push_back({&crcs[k], 4});
      }
      size_t total = 0;
      for (auto& v : iov) total += v.iov_len;
      size_t sent = 0;
      for (int rounds = 0; rounds < 100000 && s.payload_bytes < data.size(); ++rounds) {
        if (sent < total) {
          size_t i = 0, skip = sent;
          while (skip >= iov[i].iov_len) skip -= iov[i++].iov_len;
          TlsChannel::Io io;
          sent += client.send(iov.data() + i, iov.size() - i, skip, &io);
          ASSERT_TRUE(io == TlsChannel::Io::kOk || io == TlsChannel::Io::kWantWrite)
              << client.error();
        }
        const auto st = r.read_from(sv[0], 1 << 20);
        ASSERT_TRUE(st == PduReader::Status::kOk || st == PduReader::Status::kWouldBlock)
            << server.error();
      }
      ASSERT_EQ(s.payload_bytes, data.size()) << "digests " << digests << " len " << len;
      EXPECT_EQ(std::memcmp(s.payload.data(), data.data(), data.size()), 0);
      EXPECT_EQ(s.bad_digests, 0);
      EXPECT_EQ(r.counters().copied_payload_bytes, 0u) << "digests " << digests << " len " << len;
      ::close(sv[0]);
      ::close(sv[1]);
    }
  }
}

}  // namespace
}  // namespace sens::transport
