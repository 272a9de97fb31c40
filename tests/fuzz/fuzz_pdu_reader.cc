// libFuzzer target: transport::PduReader reassembling an arbitrary byte stream.
//
// Input: byte 0 selects the set-up, byte 1 seeds the cuts, the rest is the stream.
//   bit 0, 1  header / data digests negotiated from the start
//   bit 2     receiver: 0 the controller (host PDUs), 1 the host (controller PDUs)
//   bit 3     start after IC (else the first PDU must be ICReq/ICResp, as on a real socket)
//   bit 4     read through a socket (read_from(), whose payloads land in place) instead of feed()
//   bit 5, 6  where payloads go: 0 an exact buffer, 1 discarded, 2 a buffer one byte short
//             (the reader must then discard), 3 alternating
//   bit 7     a small staging buffer (256 bytes) instead of 64 KiB
// The stream is cut into pieces of 1..64 bytes (or all at once) derived from byte 1. The sink
// checks what the reader promises: headers that passed validation, a layout that adds up to
// plen, payloads of exactly the announced length.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/pdu_reader.h"

namespace {

using sens::transport::PduReader;
namespace pdu = sens::pdu;

constexpr uint32_t kMaxPlen = 64 * 1024;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_pdu_reader: %s\n", what);
  std::abort();
}

struct Sink : PduReader::Sink {
  PduReader* reader = nullptr;
  pdu::Receiver receiver = pdu::Receiver::kController;
  int placement = 0;
  uint64_t pdus = 0;
  std::unique_ptr<uint8_t[]> buffer;  // exactly as long as the payload target: ASan sees overruns
  uint32_t expected_len = 0;
  bool in_payload = false;

  bool on_pdu_header(const pdu::CommonHeader& h, const pdu::Layout& l) override {
    if (in_payload) broken("a header while a payload is owed");
    if (h.plen > kMaxPlen) broken("a header over max_plen reached the sink");
    if (l.data_offset < l.header_len) broken("payload before the end of the header");
    if (l.data_len && uint64_t(l.data_offset) + l.data_len + l.trailer_len != h.plen)
      broken("layout does not add up to plen");
    if (h.type == uint8_t(pdu::Type::kICReq) || h.type == uint8_t(pdu::Type::kICResp)) {
      // What a connection does on IC: later PDUs are checked against the negotiation.
      const uint8_t digest = reinterpret_cast<const pdu::ICReq&>(h).digest;
      reader->set_after_ic(true);
      reader->set_digests({bool(digest & pdu::kDigestHeader), bool(digest & pdu::kDigestData)});
    }
    ++pdus;
    buffer.reset();
    if (!l.data_len) return true;
    in_payload = true;
    expected_len = l.data_len;
    int mode = placement == 3 ? int(pdus % 3) : placement;
    if (mode == 1) {
      reader->set_payload_target(nullptr, l.data_len);
    } else {
      uint32_t len = mode == 2 ? l.data_len - 1 : l.data_len;
      buffer.reset(new uint8_t[len ? len : 1]);
      reader->set_payload_target(buffer.get(), len);
    }
    return true;
  }
  bool on_pdu_payload(const pdu::CommonHeader& h, bool) override {
    if (!in_payload) broken("a payload without its header");
    if (pdu::layout_of(h).data_len != expected_len) broken("payload header changed");
    in_payload = false;
    buffer.reset();
    return true;
  }
  void on_pdu_error(const pdu::Check& c, const uint8_t*, uint32_t len) override {
    if (c.fes == 0) broken("an error without a fatal error status");
    if (len > pdu::kMaxHlen + pdu::kDigestLen) broken("offending header longer than a header");
  }
};

// Piece lengths from a small LCG seeded by the input: the same input cuts the same way.
struct Cutter {
  uint32_t state;
  size_t next(size_t left) {
    if (state == 0) return left;  // seed 0: one piece
    state = state * 1103515245u + 12345u;
    return std::min<size_t>(left, 1 + (state >> 16) % 64);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  Cutter cut{data[1]};
  data += 2;
  size -= 2;

  Sink sink;
  sink.receiver = (mode & 4) ? pdu::Receiver::kHost : pdu::Receiver::kController;
  sink.placement = (mode >> 5) & 3;
  PduReader reader(sink.receiver, sink, (mode & 0x80) ? 256 : 64 * 1024);
  sink.reader = &reader;
  reader.set_digests({bool(mode & 1), bool(mode & 2)});
  reader.set_max_plen(kMaxPlen);
  reader.set_after_ic(mode & 8);

  if (!(mode & 16)) {
    while (size) {
      size_t n = cut.next(size);
      if (reader.feed(data, n) != PduReader::Status::kOk) break;
      data += n;
      size -= n;
    }
    return 0;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) broken("socketpair");
  bool open = true;
  while (size && open) {
    size_t n = cut.next(size);
    ssize_t w = write(sv[1], data, n);
    if (w <= 0) broken("write to the socket pair");
    data += w;
    size -= size_t(w);
    for (;;) {
      PduReader::Status s = reader.read_from(sv[0], 1 << 20);
      if (s == PduReader::Status::kWouldBlock) break;
      if (s != PduReader::Status::kOk) {
        open = false;
        break;
      }
    }
  }
  if (open) {
    shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 4; ++i) {
      PduReader::Status s = reader.read_from(sv[0], 1 << 20);
      if (s == PduReader::Status::kClosed) break;
      if (s != PduReader::Status::kOk && s != PduReader::Status::kWouldBlock) break;
    }
  }
  close(sv[0]);
  close(sv[1]);
  return 0;
}
