#include "wire/pdu.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"

namespace sens::pdu {
namespace {

constexpr uint8_t kTypeICReq = 0x00, kTypeICResp = 0x01, kTypeH2CTermReq = 0x02,
                  kTypeC2HTermReq = 0x03, kTypeCapsuleCmd = 0x04, kTypeCapsuleResp = 0x05,
                  kTypeH2CData = 0x06, kTypeC2HData = 0x07, kTypeR2T = 0x09;

bool is_ic(uint8_t t) {
  return t == kTypeICReq || t == kTypeICResp;
}
bool is_term(uint8_t t) {
  return t == kTypeH2CTermReq || t == kTypeC2HTermReq;
}
// IC PDUs and TermReqs never carry digests, whatever was negotiated.
bool takes_hdgst(uint8_t t) {
  return expected_hlen(t) != 0 && !is_ic(t) && !is_term(t);
}

// Flag bits each type defines; every other bit is reserved. Real peers (Linux, SPDK) set
// only these, so anything else is garbage rather than a future extension worth tolerating.
uint8_t defined_flags(uint8_t t) {
  switch (t) {
    case kTypeCapsuleCmd:
      return flag::kHdgst | flag::kDdgst;
    case kTypeCapsuleResp:
    case kTypeR2T:
      return flag::kHdgst;
    case kTypeH2CData:
      return flag::kHdgst | flag::kDdgst | flag::kDataLast;
    case kTypeC2HData:
      return flag::kHdgst | flag::kDdgst | flag::kDataLast | flag::kDataSuccess;
    default:  // IC PDUs, TermReqs
      return 0;
  }
}

const char* side_name(Receiver r) {
  return r == Receiver::kController ? "controller" : "host";
}

// `why` strings live in a small per-thread ring: precise messages without allocation, and a
// few Checks can be held at once. Only failures format, so the valid path stays cheap.
__attribute__((format(printf, 1, 2))) const char* why(const char* fmt, ...) {
  constexpr int kSlots = 8, kLen = 128;
  thread_local char ring[kSlots][kLen];
  thread_local unsigned next = 0;
  char* buf = ring[next++ % kSlots];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, kLen, fmt, ap);
  va_end(ap);
  return buf;
}

Check fail(uint16_t fes, uint32_t fei, const char* reason) {
  return Check{fes, fei, reason};
}

constexpr uint32_t kFeiType = 0, kFeiFlags = 1, kFeiHlen = 2, kFeiPdo = 3, kFeiPlen = 4;

// Little-endian hosts only (see nvme.h).
void put_le32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, sizeof(v));
}

}  // namespace

const char* type_name(uint8_t type) {
  switch (type) {
    case kTypeICReq:
      return "ICReq";
    case kTypeICResp:
      return "ICResp";
    case kTypeH2CTermReq:
      return "H2CTermReq";
    case kTypeC2HTermReq:
      return "C2HTermReq";
    case kTypeCapsuleCmd:
      return "CapsuleCmd";
    case kTypeCapsuleResp:
      return "CapsuleResp";
    case kTypeH2CData:
      return "H2CData";
    case kTypeC2HData:
      return "C2HData";
    case 0x08:
      return "Reserved";
    case kTypeR2T:
      return "R2T";
    default:
      return "Unknown";
  }
}

uint8_t expected_hlen(uint8_t type) {
  switch (type) {
    case kTypeICReq:
    case kTypeICResp:
      return kICLen;
    case kTypeH2CTermReq:
    case kTypeC2HTermReq:
      return kTermReqHlen;
    case kTypeCapsuleCmd:
      return kCapsuleCmdHlen;
    case kTypeCapsuleResp:
      return kCapsuleRespHlen;
    case kTypeH2CData:
    case kTypeC2HData:
      return kDataHlen;
    case kTypeR2T:
      return kR2THlen;
    default:
      return 0;
  }
}

bool flows_to(uint8_t type, Receiver receiver) {
  switch (type) {
    case kTypeICReq:
    case kTypeH2CTermReq:
    case kTypeCapsuleCmd:
    case kTypeH2CData:
      return receiver == Receiver::kController;
    case kTypeICResp:
    case kTypeC2HTermReq:
    case kTypeCapsuleResp:
    case kTypeC2HData:
    case kTypeR2T:
      return receiver == Receiver::kHost;
    default:
      return false;
  }
}

bool carries_data(uint8_t type) {
  return type == kTypeCapsuleCmd || type == kTypeH2CData || type == kTypeC2HData;
}

// Fields are checked in header order (type, flags, hlen, pdo, plen) so that the reported FEI
// is the lowest offending field, as NVMe/TCP asks.
Check check_common(const CommonHeader& ch, Receiver receiver, Digests digests, uint32_t max_plen,
                   bool before_ic) {
  const uint8_t t = ch.type;
  const char* name = type_name(t);
  const uint8_t want_hlen = expected_hlen(t);
  const uint32_t plen = ch.plen;

  // ---- type ----
  if (want_hlen == 0)
    return fail(fes::kInvalidHeaderField, kFeiType, why("unknown PDU type 0x%02x", t));
  if (!flows_to(t, receiver))
    return fail(fes::kInvalidHeaderField, kFeiType,
                why("%s received by the %s: it flows the other way", name, side_name(receiver)));
  // A TermReq is accepted before IC too: a controller refusing an ICReq answers with a
  // C2HTermReq, and a TermReq must never be answered with another one.
  if (before_ic && !is_ic(t) && !is_term(t))
    return fail(fes::kPduSequenceError, kFeiType,
                why("%s before %s", name, receiver == Receiver::kController ? "ICReq" : "ICResp"));
  if (!before_ic && is_ic(t))
    return fail(fes::kPduSequenceError, kFeiType, why("%s after connection set-up", name));

  // ---- flags ----
  const uint8_t flags = ch.flags;
  const bool hdgst = flags & flag::kHdgst;
  const bool ddgst = flags & flag::kDdgst;
  // From the type's hlen, not the received one: the flags verdict must not hinge on a field
  // validated later.
  const uint32_t full_hlen = want_hlen + (hdgst ? kDigestLen : 0);
  // Whether bytes follow the header (and digest); decides if a data digest is due.
  const bool has_data = carries_data(t) && plen > full_hlen;

  const bool want_hdgst = digests.header && takes_hdgst(t);
  if (hdgst != want_hdgst)
    return fail(fes::kInvalidHeaderField, kFeiFlags,
                hdgst ? why("HDGSTF set on %s, header digests %s", name,
                            takes_hdgst(t) ? "not negotiated" : "never used on this type")
                      : why("HDGSTF clear on %s, header digests negotiated", name));
  // Data digest flag must match negotiation whenever data is present (NVMe/TCP 1.0; the
  // Linux target refuses data without DDGSTF), and is never set without data.
  const bool want_ddgst = digests.data && has_data;
  if (ddgst != want_ddgst) {
    const char* reason;
    if (!ddgst)
      reason = why("DDGSTF clear on %s with data, data digests negotiated", name);
    else if (!carries_data(t))
      reason = why("DDGSTF set on %s, which never carries data", name);
    else if (!digests.data)
      reason = why("DDGSTF set on %s, data digests not negotiated", name);
    else
      reason = why("DDGSTF set on %s without data (plen %u)", name, plen);
    return fail(fes::kInvalidHeaderField, kFeiFlags, reason);
  }
  if (flags & ~defined_flags(t))
    return fail(fes::kInvalidHeaderField, kFeiFlags,
                why("flags 0x%02x on %s: only 0x%02x defined", flags, name, defined_flags(t)));
  // SUCCESS stands in for the CapsuleResp of the last PDU only; the Linux host treats
  // SUCCESS without LAST as a protocol error.
  if (t == kTypeC2HData && (flags & flag::kDataSuccess) && !(flags & flag::kDataLast))
    return fail(fes::kInvalidHeaderField, kFeiFlags, why("C2HData DATA_SUCCESS without DATA_LAST"));

  // ---- hlen ----
  if (ch.hlen != want_hlen)
    return fail(fes::kInvalidHeaderField, kFeiHlen,
                why("hlen %u for %s, expected %u", ch.hlen, name, want_hlen));

  // ---- pdo ----
  const uint32_t pdo = ch.pdo;
  if (!has_data) {
    if (pdo != 0)
      return fail(fes::kInvalidHeaderField, kFeiPdo,
                  why("pdo %u on %s without data (plen %u), expected 0", pdo, name, plen));
  } else if (pdo < full_hlen) {
    return fail(fes::kInvalidHeaderField, kFeiPdo,
                why("pdo %u inside the %u-byte header of %s", pdo, full_hlen, name));
  } else if (pdo > plen) {
    return fail(fes::kInvalidHeaderField, kFeiPdo,
                why("pdo %u past plen %u of %s", pdo, plen, name));
  }

  // ---- plen ----
  switch (t) {
    case kTypeICReq:
    case kTypeICResp:
      if (plen != kICLen)
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("plen %u for %s, expected %u", plen, name, kICLen));
      break;
    case kTypeH2CTermReq:
    case kTypeC2HTermReq:
      if (plen < kTermReqHlen || plen > kTermReqHlen + kTermReqMaxData)
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("plen %u for %s, expected %u..%u", plen, name, kTermReqHlen,
                        kTermReqHlen + kTermReqMaxData));
      break;
    case kTypeCapsuleResp:
    case kTypeR2T:
      if (plen != full_hlen)
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("plen %u for %s, expected %u", plen, name, full_hlen));
      break;
    default:  // CapsuleCmd, H2CData, C2HData
      if (plen < full_hlen)
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("plen %u shorter than the %u-byte header of %s", plen, full_hlen, name));
      if (has_data && plen - pdo <= (ddgst ? kDigestLen : 0))
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("plen %u leaves no data after pdo %u%s on %s", plen, pdo,
                        ddgst ? " and the data digest" : "", name));
      if (!has_data && t != kTypeCapsuleCmd)
        return fail(fes::kInvalidHeaderField, kFeiPlen,
                    why("%s without data (plen %u)", name, plen));
      break;
  }
  // A local buffer limit, not the spec's data transfer limit (that one is about DATAL vs
  // MAXH2CDATA, which the caller checks on H2CData): so an invalid plen.
  if (plen > max_plen)
    return fail(fes::kInvalidHeaderField, kFeiPlen,
                why("plen %u of %s exceeds the limit %u", plen, name, max_plen));
  return Check{};
}

// Saturating arithmetic keeps this harmless on an unvalidated header.
Layout layout_of(const CommonHeader& ch) {
  const uint8_t t = ch.type;
  const uint32_t plen = ch.plen;
  Layout l{};
  if (is_term(t)) {
    // The quoted header is the payload: right after the header, never digested.
    l.header_len = ch.hlen;
    l.data_offset = ch.hlen;
    l.data_len = plen > ch.hlen ? plen - ch.hlen : 0;
    return l;
  }
  l.header_len = ch.hlen + ((ch.flags & flag::kHdgst) ? kDigestLen : 0);
  if (ch.pdo != 0 && carries_data(t)) {
    l.data_offset = ch.pdo;
    l.trailer_len = (ch.flags & flag::kDdgst) ? kDigestLen : 0;
    const uint64_t used = uint64_t(l.data_offset) + l.trailer_len;
    l.data_len = plen > used ? uint32_t(plen - used) : 0;
  } else {
    // No data: the "data" starts where the PDU ends, so offset + len + trailer == plen.
    l.data_offset = l.header_len;
  }
  return l;
}

Check check_icreq(const ICReq& req) {
  // FreeBSD's nvmf reports an unknown PFV as unsupported parameter; the spec's FES 06h is
  // exactly "a PDU header field holds a value this end does not support".
  if (req.pfv != 0)
    return fail(fes::kUnsupportedParameter, offsetof(ICReq, pfv),
                why("ICReq pfv %u, only 0 (NVMe/TCP 1.0) supported", req.pfv));
  if (req.hpda > 31)
    return fail(fes::kInvalidHeaderField, offsetof(ICReq, hpda),
                why("ICReq hpda %u, expected 0..31", req.hpda));
  if (req.digest & ~(kDigestHeader | kDigestData))
    return fail(fes::kInvalidHeaderField, offsetof(ICReq, digest),
                why("ICReq digest 0x%02x has reserved bits", req.digest));
  return Check{};
}

Check check_icresp(const ICResp& resp) {
  if (resp.pfv != 0)
    return fail(fes::kUnsupportedParameter, offsetof(ICResp, pfv),
                why("ICResp pfv %u, only 0 (NVMe/TCP 1.0) supported", resp.pfv));
  if (resp.cpda > 31)
    return fail(fes::kInvalidHeaderField, offsetof(ICResp, cpda),
                why("ICResp cpda %u, expected 0..31", resp.cpda));
  if (resp.digest & ~(kDigestHeader | kDigestData))
    return fail(fes::kInvalidHeaderField, offsetof(ICResp, digest),
                why("ICResp digest 0x%02x has reserved bits", resp.digest));
  if (resp.maxh2cdata < 4096 || resp.maxh2cdata % 4 != 0)
    return fail(
        fes::kInvalidHeaderField, offsetof(ICResp, maxh2cdata),
        why("ICResp maxh2cdata %u, expected a multiple of 4 >= 4096", uint32_t(resp.maxh2cdata)));
  return Check{};
}

namespace {

// Common header of a PDU that may carry header/data digests and `data_len` payload bytes.
void fill_common(CommonHeader& ch, uint8_t type, uint8_t hlen, uint32_t data_len, Digests d) {
  const uint32_t hd = d.header ? kDigestLen : 0;
  const uint32_t dd = (d.data && data_len > 0) ? kDigestLen : 0;
  ch.type = type;
  ch.flags = uint8_t((hd ? flag::kHdgst : 0) | (dd ? flag::kDdgst : 0));
  ch.hlen = hlen;
  ch.pdo = data_len > 0 ? uint8_t(hlen + hd) : 0;
  ch.plen = hlen + hd + data_len + dd;
}

}  // namespace

void build_icreq(ICReq& pdu, uint8_t digest, uint32_t maxr2t) {
  std::memset(&pdu, 0, sizeof(pdu));
  pdu.ch.type = kTypeICReq;
  pdu.ch.hlen = kICLen;
  pdu.ch.plen = kICLen;
  pdu.pfv = 0;
  pdu.hpda = 0;  // no padding: our receive path reads data right behind the header
  pdu.digest = digest;
  pdu.maxr2t = maxr2t;
}

void build_icresp(ICResp& pdu, uint8_t digest, uint32_t maxh2cdata) {
  std::memset(&pdu, 0, sizeof(pdu));
  pdu.ch.type = kTypeICResp;
  pdu.ch.hlen = kICLen;
  pdu.ch.plen = kICLen;
  pdu.pfv = 0;
  pdu.cpda = 0;  // the Linux host refuses any other cpda
  pdu.digest = digest;
  pdu.maxh2cdata = maxh2cdata;
}

void build_capsule_cmd(CapsuleCmd& pdu, const nvme::Sqe& sqe, uint32_t incapsule_len,
                       Digests digests) {
  std::memset(&pdu, 0, sizeof(pdu));
  fill_common(pdu.ch, kTypeCapsuleCmd, kCapsuleCmdHlen, incapsule_len, digests);
  pdu.sqe = sqe;
}

void build_capsule_resp(CapsuleResp& pdu, const nvme::Cqe& cqe, Digests digests) {
  std::memset(&pdu, 0, sizeof(pdu));
  fill_common(pdu.ch, kTypeCapsuleResp, kCapsuleRespHlen, 0, digests);
  pdu.cqe = cqe;
}

void build_data(DataHeader& pdu, Type type, uint16_t cccid, uint16_t ttag, uint32_t datao,
                uint32_t datal, uint8_t extra_flags, Digests digests) {
  std::memset(&pdu, 0, sizeof(pdu));
  const uint8_t t = static_cast<uint8_t>(type);
  fill_common(pdu.ch, t, kDataHlen, datal, digests);
  // Only the flags this type defines (H2CData has no SUCCESS), so reserved bits stay 0.
  pdu.ch.flags |= extra_flags & defined_flags(t) & (flag::kDataLast | flag::kDataSuccess);
  pdu.cccid = cccid;
  pdu.ttag = t == kTypeH2CData ? ttag : 0;  // reserved in C2HData
  pdu.datao = datao;
  pdu.datal = datal;
}

void build_r2t(R2T& pdu, uint16_t cccid, uint16_t ttag, uint32_t r2to, uint32_t r2tl,
               Digests digests) {
  std::memset(&pdu, 0, sizeof(pdu));
  fill_common(pdu.ch, kTypeR2T, kR2THlen, 0, digests);
  pdu.cccid = cccid;
  pdu.ttag = ttag;
  pdu.r2to = r2to;
  pdu.r2tl = r2tl;
}

uint32_t build_term_req(HeaderSlot& slot, Type type, uint16_t fes, uint32_t fei,
                        const void* offending, uint32_t offending_len) {
  const uint32_t quoted = offending ? std::min(offending_len, kTermReqMaxData) : 0;
  // memmove: the offending header may already sit in this very slot.
  if (quoted) std::memmove(slot.term_bytes + kTermReqHlen, offending, quoted);
  std::memset(slot.term_bytes, 0, kTermReqHlen);
  std::memset(slot.term_bytes + kTermReqHlen + quoted, 0, kTermReqMaxData - quoted);
  TermReq& t = slot.term;
  t.ch.type = static_cast<uint8_t>(type);
  t.ch.flags = 0;  // never digests
  t.ch.hlen = kTermReqHlen;
  t.ch.pdo = 0;
  t.ch.plen = kTermReqHlen + quoted;
  t.fes = fes;
  t.fei = fei;
  return kTermReqHlen + quoted;
}

uint32_t finish_header(HeaderSlot& slot, Digests digests) {
  // Read through the byte view: going through slot.ch makes GCC believe the digest is
  // written into the 1-byte `type` member (-Wstringop-overflow false positive).
  uint8_t* const bytes = slot.term_bytes;
  const uint8_t type = bytes[offsetof(CommonHeader, type)];
  const uint32_t hlen = bytes[offsetof(CommonHeader, hlen)];
  // hlen <= kMaxHlen guards the slot against a header that was never built.
  if (!digests.header || !takes_hdgst(type) || hlen > kMaxHlen) return hlen;
  put_le32(bytes + hlen, crc32c(bytes, hlen));
  return hlen + kDigestLen;
}

bool header_digest_ok(const void* header, uint32_t hlen) {
  uint32_t stored;
  std::memcpy(&stored, static_cast<const uint8_t*>(header) + hlen, sizeof(stored));
  return stored == crc32c(header, hlen);
}

}  // namespace sens::pdu
