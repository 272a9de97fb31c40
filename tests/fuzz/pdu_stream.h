#pragma once
// Byte streams of well-formed NVMe/TCP PDUs as a host sends them: the seeds of the fuzz
// corpus (make_seeds.cc) and the ICReq/Connect preamble the dispatch fuzzer puts before its
// input so that mutations reach the command layer.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "common/crc32c.h"
#include "wire/nvme_build.h"
#include "wire/pdu.h"

namespace sens::fuzz {

using Bytes = std::vector<uint8_t>;

inline constexpr std::string_view kSubNqn = "nqn.2026-11.dev.sens:fuzz";
inline constexpr std::string_view kHostNqn = "nqn.2014-08.org.nvmexpress:uuid:fuzz";
inline constexpr uint16_t kSqsize = 7;  // zero-based; the fuzz target's queues hold 16

inline pdu::Digests digests_of(uint8_t digest) {
  return {bool(digest & pdu::kDigestHeader), bool(digest & pdu::kDigestData)};
}

inline void append_raw(Bytes& out, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

inline void append_icreq(Bytes& out, uint8_t digest, uint32_t maxr2t = 15) {
  pdu::ICReq req{};
  pdu::build_icreq(req, digest, maxr2t);
  append_raw(out, &req, sizeof req);
}

// The header in `slot` (built for `dg`), its padding, `len` payload bytes and their digest.
inline void append_pdu(Bytes& out, pdu::HeaderSlot& slot, pdu::Digests dg, const void* data,
                       uint32_t len) {
  const uint32_t hl = pdu::finish_header(slot, dg);
  const pdu::Layout l = pdu::layout_of(slot.ch);
  append_raw(out, slot.bytes, hl);
  if (!len) return;
  out.resize(out.size() + (l.data_offset - hl), 0);
  append_raw(out, data, len);
  if (l.trailer_len) {
    uint32_t crc = crc32c(data, len);
    append_raw(out, &crc, sizeof crc);
  }
}

inline void append_capsule(Bytes& out, nvme::Sqe sqe, uint16_t cid, pdu::Digests dg,
                           const void* data = nullptr, uint32_t len = 0) {
  sqe.cid = cid;
  pdu::HeaderSlot slot{};
  pdu::build_capsule_cmd(slot.cmd, sqe, len, dg);
  append_pdu(out, slot, dg, data, len);
}

inline void append_h2c_data(Bytes& out, uint16_t cccid, uint16_t ttag, uint32_t datao,
                            const void* data, uint32_t len, bool last, pdu::Digests dg) {
  pdu::HeaderSlot slot{};
  pdu::build_data(slot.data, pdu::Type::kH2CData, cccid, ttag, datao, len,
                  last ? pdu::flag::kDataLast : 0, dg);
  append_pdu(out, slot, dg, data, len);
}

inline void append_term_req(Bytes& out, uint16_t fes, uint32_t fei) {
  pdu::HeaderSlot slot{};
  uint8_t offending[24] = {0x0A, 0, 24, 0, 24, 0, 0, 0};
  uint32_t n =
      pdu::build_term_req(slot, pdu::Type::kH2CTermReq, fes, fei, offending, sizeof offending);
  append_raw(out, slot.term_bytes, n);
}

// Fabrics Connect: the admin queue (qid 0, cntlid 0xFFFF) or an I/O queue of `cntlid`.
inline void append_connect(Bytes& out, uint16_t qid, uint16_t cntlid, uint16_t cid, pdu::Digests dg,
                           std::string_view subnqn = kSubNqn) {
  nvme::ConnectData data{};
  const uint8_t hostid[16] = {0xf0, 0x22, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  nvme::fill_connect_data(data, hostid, cntlid, subnqn, kHostNqn);
  append_capsule(out, nvme::make_connect(qid, kSqsize, 0), cid, dg, &data, sizeof data);
}

}  // namespace sens::fuzz
