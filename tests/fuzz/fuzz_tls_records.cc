// libFuzzer target: sens's TLS record reader (TlsChannel::read in records mode) on a stream
// of records a peer that holds the keys may send, well formed or not.
//
// Input: byte 0 picks the suite (bit 0: AES-256) and the AES-GCM (bit 1: OpenSSL, else the
// process's default); then records, each [flags][length: 2 bytes][content: length bytes]:
//   flags & 3   the inner content type: application data, handshake, alert, or the next byte
//   flags & 4   a raw record: the header with this length and the content as it is (not sealed)
//   flags & 8   one bit of the sealed record flipped (the byte the content's first byte names)
//   flags >> 4  how many bytes each read asks for: 1 << (flags >> 4) (1 byte to 32 KiB)
// Handshake content that is a well-formed KeyUpdate makes the sender update its keys after
// that record, as a real peer does, so that the records after it open too. The stream goes
// through a socket to the reader. Checks: no crash, no sanitizer report, every read returns
// within the asked length, and the application bytes read are exactly those of the records
// before the first one the reader must refuse.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transport/tls.h"

namespace {

using sens::transport::TlsChannel;
using sens::transport::TlsContext;
using sens::transport::TlsRecordKeys;
namespace tls_content = sens::transport::tls_content;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_tls_records: %s\n", what);
  std::abort();
}

TlsContext& server_context() {
  static std::unique_ptr<TlsContext> ctx = [] {
    std::string error;
    auto c = TlsContext::server(
        [](const std::string&, sens::transport::TlsPsk*, std::string*) { return false; }, &error);
    if (!c) broken(error.c_str());
    return c;
  }();
  return *ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool aes256 = data[0] & 1;
  const auto engine =
      (data[0] & 2) ? sens::transport::AesGcm::kOpenSsl : sens::transport::AesGcm::kAuto;
  const uint16_t suite = aes256 ? 0x1302 : 0x1301;
  const size_t hash = aes256 ? 48 : 32;
  uint8_t client_secret[48], server_secret[48];
  for (size_t i = 0; i < sizeof client_secret; ++i) {
    client_secret[i] = uint8_t(i * 7 + 1);
    server_secret[i] = uint8_t(i * 11 + 3);
  }
  std::string why;
  // The peer is the client: it seals with the client's secret, which the server opens with.
  TlsRecordKeys peer;
  if (!peer.init(suite, client_secret, hash, true, &why, engine)) broken(why.c_str());
  if (!sens::transport::set_aes_gcm(engine, &why)) broken(why.c_str());

  // The stream, and what the reader must deliver: the application bytes of the records up to
  // the first it must refuse (a raw or flipped record, an unknown type, a malformed control
  // record, an alert).
  std::vector<uint8_t> stream, expected;
  std::vector<size_t> read_sizes;
  bool refused = false;
  size_t at = 1;
  while (at + 3 <= size && stream.size() < (1u << 20)) {
    const uint8_t flags = data[at];
    const size_t len = size_t(data[at + 1]) << 8 | data[at + 2];
    at += 3;
    const size_t n = std::min(len, size - at);
    const uint8_t* content = data + at;
    at += n;
    read_sizes.push_back(size_t(1) << (flags >> 4));
    if (flags & 4) {  // raw: a header of the given length and whatever follows
      const uint8_t h[5] = {tls_content::kApplicationData, 3, 3, uint8_t(len >> 8), uint8_t(len)};
      stream.insert(stream.end(), h, h + 5);
      stream.insert(stream.end(), content, content + n);
      refused = true;  // whatever it is, it does not authenticate (or is too long)
      continue;
    }
    uint8_t type = tls_content::kApplicationData;
    switch (flags & 3) {
      case 1:
        type = tls_content::kHandshake;
        break;
      case 2:
        type = tls_content::kAlert;
        break;
      case 3:
        type = n > 0 ? content[0] : 0;
        break;
    }
    const size_t plain = std::min<size_t>(n, sens::transport::kTlsMaxPlain);
    std::vector<uint8_t> rec(5 + plain + 1 + 16);
    iovec v{const_cast<uint8_t*>(content), plain};
    size_t i = 0, off = 0;
    const size_t rl = peer.seal(&v, plain ? 1 : 0, &i, &off, plain, type, rec.data());
    if (flags & 8) {
      rec[(plain ? content[0] : 0) % rl] ^= 0x01;
      refused = true;
    }
    stream.insert(stream.end(), rec.begin(), rec.begin() + long(rl));
    if (refused) continue;
    // What the reader must make of it (RFC 8446 5.4): the inner type is the last non-zero
    // byte of content + type (zeros after it are padding); none: refused.
    size_t end = plain + 1;
    auto inner_at = [&](size_t k) { return k < plain ? content[k] : type; };
    while (end > 0 && inner_at(end - 1) == 0) --end;
    if (end == 0) {
      refused = true;
      continue;
    }
    const uint8_t t = inner_at(end - 1);
    const size_t body = end - 1;  // content[0, body)
    if (t == tls_content::kApplicationData) {
      expected.insert(expected.end(), content, content + body);
      continue;
    }
    if (t != tls_content::kHandshake) {  // an alert ends it; other types are refused
      refused = true;
      continue;
    }
    // Handshake messages after the handshake: well-formed KeyUpdates are followed (each moves
    // the keys one generation on), new-session tickets dropped, anything else refused.
    for (size_t p = 0; p < body;) {
      if (body - p < 4) {
        refused = true;
        break;
      }
      const size_t ml = size_t(content[p + 1]) << 16 | size_t(content[p + 2]) << 8 | content[p + 3];
      if (ml > body - p - 4) {
        refused = true;
        break;
      }
      if (content[p] == 24) {
        if (ml != 1 || content[p + 4] > 1) {
          refused = true;
          break;
        }
        if (!peer.update(&why)) broken(why.c_str());
      } else if (content[p] != 4) {
        refused = true;
        break;
      }
      p += 4 + ml;
    }
  }

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  int big = 4 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  {
    TlsChannel reader(server_context(), sv[0]);
    if (!reader.start_records_with(suite, true, client_secret, server_secret, hash))
      broken(reader.error().c_str());
    std::vector<uint8_t> got, buf(32 * 1024);
    size_t sent = 0, reads = 0;
    bool ended = false;
    while (!ended) {
      if (sent < stream.size()) {
        const ssize_t w = ::send(sv[1], stream.data() + sent, stream.size() - sent, 0);
        if (w > 0) sent += size_t(w);
      } else if (sv[1] >= 0) {
        ::close(sv[1]);  // all sent: the reader sees the end of the stream
        sv[1] = -1;
      }
      for (;;) {
        const size_t ask = read_sizes.empty() ? buf.size() : read_sizes[reads % read_sizes.size()];
        ++reads;
        TlsChannel::Io io;
        const size_t k = reader.read(buf.data(), std::min(ask, buf.size()), &io);
        if (k > std::min(ask, buf.size())) broken("a read returned more than it was asked for");
        if (k > 0) {
          got.insert(got.end(), buf.begin(), buf.begin() + long(k));
          continue;
        }
        if (io == TlsChannel::Io::kWantRead) break;
        ended = true;  // closed or refused
        break;
      }
    }
    if (got.size() > expected.size() || !std::equal(got.begin(), got.end(), expected.begin()))
      broken("the reader delivered bytes the records did not carry");
    if (!refused && got.size() != expected.size())
      broken("the reader lost application bytes of records it should have accepted");
  }
  ::close(sv[0]);
  if (sv[1] >= 0) ::close(sv[1]);
  std::string ignored;
  sens::transport::set_aes_gcm(sens::transport::AesGcm::kAuto, &ignored);
  return 0;
}
