// Writes the seed corpora of the fuzz targets: valid PDU streams, with and without digests,
// in each target's input format (see the comment at the top of each fuzz_*.cc).
//   build-fuzz/fuzz_make_seeds tests/fuzz/corpus
// The output is checked in; rerun after changing an input format.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "pdu_stream.h"
#include "wire/nvme_auth.h"

namespace {

using namespace sens;
using fuzz::Bytes;
using nvme::Xfer;

void write_seed(const std::filesystem::path& dir, const std::string& name, uint8_t lead,
                const Bytes& stream, int extra_lead = -1) {
  std::filesystem::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary);
  f.put(char(lead));
  if (extra_lead >= 0) f.put(char(extra_lead));
  f.write(reinterpret_cast<const char*>(stream.data()), std::streamsize(stream.size()));
}

Bytes pattern(uint32_t len, uint8_t seed) {
  Bytes b(len);
  for (uint32_t i = 0; i < len; ++i) b[i] = uint8_t(seed + i * 7);
  return b;
}

// ---------------------------------------------------------------- the target's command layer

// Admin commands on a connected admin queue.
Bytes admin_commands(pdu::Digests dg) {
  Bytes s;
  uint16_t cid = 10;
  fuzz::append_capsule(s, nvme::make_property_get(nvme::reg::kCap, true), cid++, dg);
  fuzz::append_capsule(s, nvme::make_property_set(nvme::reg::kCc, 0x460001, false), cid++, dg);
  fuzz::append_capsule(s, nvme::make_property_get(nvme::reg::kCsts, false), cid++, dg);
  for (uint8_t cns : {0, 1, 2, 3})
    fuzz::append_capsule(s, nvme::make_identify(cns, cns == 1 ? 0 : 1), cid++, dg);
  for (uint8_t lid : {nvme::log_page::kError, nvme::log_page::kSmart, nvme::log_page::kFirmware,
                      nvme::log_page::kChangedNs})
    fuzz::append_capsule(s, nvme::make_get_log_page(lid, 0xFFFFFFFF, 512, 0), cid++, dg);
  fuzz::append_capsule(s, nvme::make_set_num_queues(4, 4), cid++, dg);
  fuzz::append_capsule(s, nvme::make_get_features(nvme::feature::kKeepAliveTimer), cid++, dg);
  fuzz::append_capsule(s, nvme::make_set_features(nvme::feature::kAsyncEventConfig, 0x100), cid++,
                       dg);
  fuzz::append_capsule(s, nvme::make_keep_alive(), cid++, dg);
  fuzz::append_capsule(s, nvme::make_async_event(), cid++, dg);
  return s;
}

// I/O commands on a connected I/O queue (namespace 1, 16 MiB of 512-byte blocks).
Bytes io_commands(pdu::Digests dg) {
  Bytes s;
  // Small transfers keep the corpus small; the command paths are the same for any size.
  Bytes d1k = pattern(1024, 1), d4k = pattern(4096, 2);
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kWrite, 1, 8, 2, Xfer::kInCapsule, 1024), 20,
                       dg, d1k.data(), 1024);
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kRead, 1, 8, 8, Xfer::kTransport, 4096), 21,
                       dg);
  // A write the target asks for with an R2T; its first slot is ttag 0 on a fresh queue.
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kWrite, 1, 64, 8, Xfer::kTransport, 4096), 22,
                       dg);
  fuzz::append_h2c_data(s, 22, 0, 0, d4k.data(), 2048, false, dg);
  fuzz::append_h2c_data(s, 22, 0, 2048, d4k.data() + 2048, 2048, true, dg);
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kFlush, 1, 0, 0, Xfer::kTransport, 0), 23, dg);
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kWriteZeroes, 1, 128, 16, Xfer::kTransport, 0),
                       24, dg);
  nvme::DsmRange ranges[2] = {{0, 8, 8}, {0, 32, 64}};
  fuzz::append_capsule(s, nvme::make_dsm_deallocate(1, 2, Xfer::kInCapsule), 25, dg, ranges,
                       sizeof ranges);
  return s;
}

// Byte 0: digests (bits 0-1), preamble (2-3), coalescing policy (4-5: off, uniform, semantic,
// adaptive).
constexpr uint8_t kOff = 0 << 4, kUniform = 1 << 4, kSemantic = 2 << 4;

// DH-HMAC-CHAP messages on the target with keys (lead bit 6): a whole exchange as far as an
// input can take it (the response cannot match: the challenge is random), and broken ones.
constexpr uint8_t kAuth = 1 << 6;
namespace wa = nvme::auth;

Bytes negotiate(uint16_t t_id, uint8_t hash, uint8_t group) {
  Bytes m(8 + 64, 0);
  m[0] = wa::kTypeCommon;
  m[1] = wa::kIdNegotiate;
  m[4] = uint8_t(t_id);
  m[7] = 1;
  m[8] = wa::kAuthIdDhchap;
  m[10] = 1;
  m[11] = 1;
  m[12] = hash;
  m[42] = group;
  return m;
}

Bytes reply(uint16_t t_id, uint8_t hl, uint16_t dhvlen, bool cvalid) {
  Bytes m(16 + 2 * hl + dhvlen, 0x5A);
  std::fill(m.begin(), m.begin() + 16, 0);
  m[0] = wa::kTypeDhchap;
  m[1] = wa::kIdReply;
  m[4] = uint8_t(t_id);
  m[6] = hl;
  m[8] = cvalid ? 1 : 0;
  m[10] = uint8_t(dhvlen);
  m[11] = uint8_t(dhvlen >> 8);
  m[12] = cvalid ? 7 : 0;
  return m;
}

void append_auth_send(Bytes& s, const Bytes& msg, uint16_t cid, pdu::Digests dg) {
  fuzz::append_capsule(s, wa::make_auth_send(uint32_t(msg.size()), Xfer::kInCapsule), cid, dg,
                       msg.data(), uint32_t(msg.size()));
}

void append_auth_receive(Bytes& s, uint32_t al, uint16_t cid, pdu::Digests dg) {
  fuzz::append_capsule(s, wa::make_auth_receive(al), cid, dg);
}

Bytes auth_exchange(pdu::Digests dg, uint8_t hash, uint8_t group, bool cvalid) {
  Bytes s;
  uint16_t cid = 40;
  append_auth_send(s, negotiate(1, hash, group), cid++, dg);
  append_auth_receive(s, 4096, cid++, dg);
  static const uint16_t kDh[] = {0, 256, 384, 512, 768, 1024};
  const uint8_t hl = uint8_t(16 * (hash + 1));
  append_auth_send(s, reply(1, hl, kDh[group % 6], cvalid), cid++, dg);
  append_auth_receive(s, 4096, cid++, dg);
  // What an unauthenticated queue may not do, then a FAILURE2 and a fresh start.
  fuzz::append_capsule(s, nvme::make_property_get(nvme::reg::kCap, true), cid++, dg);
  fuzz::append_capsule(s, nvme::make_identify(1, 0), cid++, dg);
  Bytes f2 = {wa::kTypeCommon, wa::kIdFailure2, 0, 0, 1, 0, wa::kReasonFailed, wa::kFailFailed};
  append_auth_send(s, f2, cid++, dg);
  append_auth_send(s, negotiate(2, 1, 0), cid++, dg);
  append_auth_receive(s, 64, cid++, dg);  // too short for the challenge
  return s;
}

void auth_seeds(const std::filesystem::path& dir) {
  for (uint8_t digest = 0; digest < 4; ++digest) {
    const pdu::Digests dg = fuzz::digests_of(digest);
    const std::string d = "-d" + std::to_string(digest);
    write_seed(dir, "auth-null" + d, uint8_t(kAuth | 1 << 2 | digest),
               auth_exchange(dg, 1, 0, false));
  }
  const pdu::Digests none{};
  write_seed(dir, "auth-ffdhe2048-bidirectional", kAuth | 1 << 2, auth_exchange(none, 2, 1, true));
  write_seed(dir, "auth-sha512-ffdhe3072", kAuth | 1 << 2, auth_exchange(none, 3, 2, false));
  write_seed(dir, "auth-io-queue", kAuth | 2 << 2, auth_exchange(none, 1, 0, false));
  Bytes s;
  // Out of order, unknown types and ids, replayed transactions, broken lengths.
  append_auth_receive(s, 4096, 1, none);
  append_auth_send(s, reply(3, 32, 0, false), 2, none);
  Bytes unknown = negotiate(4, 1, 0);
  unknown[0] = 9;
  append_auth_send(s, unknown, 3, none);
  append_auth_send(s, {1, 2, 3}, 4, none);
  Bytes napd = negotiate(5, 1, 0);
  napd[7] = 200;
  append_auth_send(s, napd, 5, none);
  append_auth_send(s, negotiate(6, 1, 0), 6, none);
  append_auth_receive(s, 4096, 7, none);
  append_auth_send(s, reply(5, 32, 0, false), 8, none);  // another transaction
  append_auth_receive(s, 4096, 9, none);
  write_seed(dir, "auth-malformed", kAuth | 1 << 2, s);
  // AUTH commands on a target without keys, and with bad SECP / lengths.
  s.clear();
  append_auth_send(s, negotiate(1, 1, 0), 1, none);
  nvme::Sqe bad = wa::make_auth_receive(4096);
  bad.cdw10 = 0;
  fuzz::append_capsule(s, bad, 2, none);
  fuzz::append_capsule(s, wa::make_auth_receive(1u << 30), 3, none);
  write_seed(dir, "auth-no-keys", 1 << 2, s);
  write_seed(dir, "auth-bad-fields", kAuth | 1 << 2, s);
}

void target_dispatch_seeds(const std::filesystem::path& dir) {
  auth_seeds(dir);
  for (uint8_t digest = 0; digest < 4; ++digest) {
    const pdu::Digests dg = fuzz::digests_of(digest);
    const std::string d = "-d" + std::to_string(digest);
    // Preamble 3: the whole conversation, ICReq first.
    Bytes raw;
    fuzz::append_icreq(raw, digest);
    fuzz::append_connect(raw, 0, 0xFFFF, 1, dg);
    Bytes admin = admin_commands(dg);
    raw.insert(raw.end(), admin.begin(), admin.end());
    write_seed(dir, "raw-admin" + d, uint8_t(3 << 2 | digest), raw);
    // Preamble 0: after ICReq, a Connect then commands; and an I/O Connect for no controller.
    Bytes after_ic;
    fuzz::append_connect(after_ic, 0, 0xFFFF, 1, dg);
    after_ic.insert(after_ic.end(), admin.begin(), admin.end());
    write_seed(dir, "ic-connect-admin" + d, digest, after_ic);
    Bytes stray_io;
    fuzz::append_connect(stray_io, 1, 0x1234, 1, dg);
    write_seed(dir, "ic-io-connect-no-controller" + d, digest, stray_io);
    // Preamble 1: admin commands on a connected admin queue.
    write_seed(dir, "admin" + d, uint8_t(1 << 2 | digest), admin);
    // Preamble 2: I/O commands on a connected I/O queue.
    // The R2T's ttag is known in advance with policy off only (see fuzz_target_dispatch.cc).
    write_seed(dir, "io" + d, uint8_t(kOff | 2 << 2 | digest), io_commands(dg));
    write_seed(dir, "io-semantic" + d, uint8_t(kSemantic | 2 << 2 | digest), io_commands(dg));
  }
  write_seed(dir, "io-uniform", uint8_t(kUniform | 2 << 2), io_commands({}));
  write_seed(dir, "admin-semantic", uint8_t(kSemantic | 1 << 2), admin_commands({}));
  const pdu::Digests none{};
  Bytes s;
  // Preamble 2, single commands and the ways an I/O queue ends.
  s.clear();
  fuzz::append_capsule(s, nvme::make_io(nvme::io_op::kRead, 1, 0, 128, Xfer::kTransport, 65536), 7,
                       none);
  write_seed(dir, "io-read-64k", 2 << 2, s);
  s.clear();
  fuzz::append_capsule(
      s, nvme::make_io(nvme::io_op::kRead, 1, (16u << 20) / 512 - 1, 2, Xfer::kTransport, 1024), 7,
      none);
  write_seed(dir, "io-read-out-of-range", 2 << 2, s);
  s.clear();
  Bytes d = pattern(512, 9);
  fuzz::append_h2c_data(s, 7, 3, 0, d.data(), 512, true, none);
  write_seed(dir, "io-h2c-unknown-ttag", 2 << 2, s);
  s.clear();
  fuzz::append_capsule(s, nvme::make_disconnect(), 7, none);
  write_seed(dir, "io-disconnect", 2 << 2, s);
  s.clear();
  fuzz::append_term_req(s, pdu::fes::kInvalidHeaderField, 0);
  write_seed(dir, "io-term-req", 2 << 2, s);
  write_seed(dir, "admin-term-req", 1 << 2, s);
  // Preamble 3: IC requests the target must refuse.
  s.clear();
  fuzz::append_icreq(s, 0);
  s[8] = 7;  // pfv
  write_seed(dir, "raw-icreq-bad-pfv", 3 << 2, s);
  s.clear();
  fuzz::append_capsule(s, nvme::make_keep_alive(), 1, none);
  write_seed(dir, "raw-capsule-before-ic", 3 << 2, s);
}

// ---------------------------------------------------------------- the PDU reader

// What a host sends: ICReq (asking for `digest`), capsules with and without data, H2CData,
// an H2CTermReq.
Bytes host_stream(uint8_t digest) {
  const pdu::Digests dg = fuzz::digests_of(digest);
  Bytes s;
  fuzz::append_icreq(s, digest);
  fuzz::append_connect(s, 0, 0xFFFF, 1, dg);
  Bytes a = admin_commands(dg), io = io_commands(dg);
  s.insert(s.end(), a.begin(), a.begin() + std::min<size_t>(a.size(), 600));
  s.insert(s.end(), io.begin(), io.end());
  fuzz::append_term_req(s, pdu::fes::kPduSequenceError, 0);
  return s;
}

// What a controller sends: ICResp, CapsuleResp, C2HData (with SUCCESS), R2T, C2HTermReq.
Bytes controller_stream(uint8_t digest) {
  const pdu::Digests dg = fuzz::digests_of(digest);
  Bytes s;
  pdu::ICResp icresp{};
  pdu::build_icresp(icresp, digest, 128 * 1024);
  fuzz::append_raw(s, &icresp, sizeof icresp);
  pdu::HeaderSlot slot{};
  pdu::build_capsule_resp(slot.resp, nvme::make_cqe(1, 0, 1, 0, 1), dg);
  fuzz::append_pdu(s, slot, dg, nullptr, 0);
  Bytes d = pattern(3000, 4);
  slot = {};
  pdu::build_data(slot.data, pdu::Type::kC2HData, 2, 0, 0, 3000, 0, dg);
  fuzz::append_pdu(s, slot, dg, d.data(), 3000);
  slot = {};
  pdu::build_data(slot.data, pdu::Type::kC2HData, 2, 0, 3000, 1096,
                  pdu::flag::kDataLast | pdu::flag::kDataSuccess, dg);
  fuzz::append_pdu(s, slot, dg, d.data(), 1096);
  slot = {};
  pdu::build_r2t(slot.r2t, 3, 0, 0, 16384, dg);
  fuzz::append_pdu(s, slot, dg, nullptr, 0);
  slot = {};
  pdu::build_capsule_resp(slot.resp, nvme::make_cqe(3, 1, 2, nvme::status::kLbaOutOfRange), dg);
  fuzz::append_pdu(s, slot, dg, nullptr, 0);
  slot = {};
  uint32_t n = pdu::build_term_req(slot, pdu::Type::kC2HTermReq, pdu::fes::kHeaderDigestError, 0,
                                   s.data() + sizeof icresp, 24);
  fuzz::append_raw(s, slot.term_bytes, n);
  return s;
}

void pdu_reader_seeds(const std::filesystem::path& dir) {
  // Byte 0: digests (bits 0-1), host receiver (2), after IC (3), read_from (4), payload
  // placement (5-6), small staging (7); byte 1: the cut seed.
  for (uint8_t digest = 0; digest < 4; ++digest) {
    const std::string d = "-d" + std::to_string(digest);
    Bytes host = host_stream(digest), ctrl = controller_stream(digest);
    write_seed(dir, "host-whole" + d, 0, host, 0);
    write_seed(dir, "host-cut" + d, uint8_t(digest << 5), host, 1 + digest * 50);
    write_seed(dir, "host-socket" + d, uint8_t(0x10 | 0x80), host, 7 + digest);
    write_seed(dir, "ctrl-whole" + d, 0x04, ctrl, 0);
    write_seed(dir, "ctrl-cut" + d, uint8_t(0x04 | 0x80 | (digest << 5)), ctrl, 3 + digest);
    write_seed(dir, "ctrl-socket" + d, 0x14, ctrl, 11 + digest);
    // Started after IC with digests already on: the stream without its IC PDU.
    Bytes host_after(host.begin() + pdu::kICLen, host.end());
    write_seed(dir, "host-after-ic" + d, uint8_t(0x08 | digest), host_after, 5);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  target_dispatch_seeds(root / "target_dispatch");
  pdu_reader_seeds(root / "pdu_reader");
  return 0;
}
