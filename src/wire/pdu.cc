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

// What the header check needs of each type, in one table indexed by type: one load per
// property instead of a switch each (the check runs on every PDU received).
struct TypeInfo {
  const char* name;
  uint8_t hlen;           // 0: not a type a peer may send
  uint8_t defined_flags;  // every other flag bit is reserved
  uint8_t props;
};
// kBare: a type whose header alone is the whole PDU unless it carries data (CapsuleCmd,
// CapsuleResp, R2T), so its usual header has one valid form (see bare_header()).
constexpr uint8_t kToController = 1, kToHost = 2, kIc = 4, kTerm = 8, kCarriesData = 16,
                  kBare = 32;
constexpr uint8_t kHd = flag::kHdgst, kDd = flag::kDdgst, kLast = flag::kDataLast,
                  kSuccess = flag::kDataSuccess;
// Flags: real peers (Linux, SPDK) set only the defined ones, so anything else is garbage
// rather than a future extension worth tolerating. IC PDUs and TermReqs never carry digests,
// whatever was negotiated.
constexpr TypeInfo kTypes[] = {
    {"ICReq", kICLen, 0, kToController | kIc},
    {"ICResp", kICLen, 0, kToHost | kIc},
    {"H2CTermReq", kTermReqHlen, 0, kToController | kTerm},
    {"C2HTermReq", kTermReqHlen, 0, kToHost | kTerm},
    {"CapsuleCmd", kCapsuleCmdHlen, kHd | kDd, kToController | kCarriesData | kBare},
    {"CapsuleResp", kCapsuleRespHlen, kHd, kToHost | kBare},
    {"H2CData", kDataHlen, kHd | kDd | kLast, kToController | kCarriesData},
    {"C2HData", kDataHlen, kHd | kDd | kLast | kSuccess, kToHost | kCarriesData},
    {"Reserved", 0, 0, 0},
    {"R2T", kR2THlen, kHd, kToHost | kBare},
};
constexpr TypeInfo kUnknownType = {"Unknown", 0, 0, 0};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == kTypeR2T + 1);

const TypeInfo& info(uint8_t t) {
  return t < sizeof(kTypes) / sizeof(kTypes[0]) ? kTypes[t] : kUnknownType;
}
bool is_ic(uint8_t t) {
  return info(t).props & kIc;
}
bool is_term(uint8_t t) {
  return info(t).props & kTerm;
}
bool takes_hdgst(uint8_t t) {
  return info(t).hlen != 0 && !(info(t).props & (kIc | kTerm));
}
uint8_t defined_flags(uint8_t t) {
  return info(t).defined_flags;
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
  return info(type).name;
}

uint8_t expected_hlen(uint8_t type) {
  return info(type).hlen;
}

bool flows_to(uint8_t type, Receiver receiver) {
  return info(type).props & (receiver == Receiver::kController ? kToController : kToHost);
}

bool carries_data(uint8_t type) {
  return info(type).props & kCarriesData;
}

namespace {

// The one header check_common_fields() accepts for a bare PDU of type `t` without data (a
// command without in-capsule data, a response, an R2T): its flags only the header digest's
// (when negotiated), its hlen the type's, pdo 0, plen the header and its digest. As the 8
// bytes on the wire (little-endian, as nvme.h assumes).
uint64_t bare_header(uint8_t t, uint8_t hlen, Digests digests) {
  const uint32_t hd = digests.header ? kDigestLen : 0;
  const uint64_t flags = digests.header ? flag::kHdgst : 0;
  return uint64_t(t) | flags << 8 | uint64_t(hlen) << 16 | uint64_t(hlen + hd) << 32;
}

}  // namespace

Check check_common(const CommonHeader& ch, Receiver receiver, Digests digests, uint32_t max_plen,
                   bool before_ic) {
  // Most PDUs a queue receives are bare (a read's command, a response): one comparison of
  // the 8 bytes accepts them. Anything else, valid or not, takes the field-by-field check.
  const TypeInfo& ti = info(ch.type);
  const uint8_t to = receiver == Receiver::kController ? kToController : kToHost;
  if (!before_ic && (ti.props & (kBare | to)) == (kBare | to)) {
    uint64_t wire;
    std::memcpy(&wire, &ch, sizeof(wire));
    if (wire == bare_header(ch.type, ti.hlen, digests) && ch.plen <= max_plen) return Check{};
  }
  return check_common_fields(ch, receiver, digests, max_plen, before_ic);
}

// Fields are checked in header order (type, flags, hlen, pdo, plen) so that the reported FEI
// is the lowest offending field, as NVMe/TCP asks.
Check check_common_fields(const CommonHeader& ch, Receiver receiver, Digests digests,
                          uint32_t max_plen, bool before_ic) {
  const uint8_t t = ch.type;
  const TypeInfo& ti = info(t);
  const char* name = ti.name;
  const uint8_t want_hlen = ti.hlen;
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
