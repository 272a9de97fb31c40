#pragma once
// NVMe/TCP PDUs (NVMe/TCP Transport Specification 1.0): layouts, constants and validation.
// Headers are laid out exactly as on the wire, so a received header is used in place and an
// outgoing one is built in a preallocated slot and sent from there (no copies, no allocation).
#include <cstddef>
#include <cstdint>

#include "wire/nvme.h"

namespace sens::pdu {

enum class Type : uint8_t {
  kICReq = 0x00,
  kICResp = 0x01,
  kH2CTermReq = 0x02,
  kC2HTermReq = 0x03,
  kCapsuleCmd = 0x04,
  kCapsuleResp = 0x05,
  kH2CData = 0x06,
  kC2HData = 0x07,
  kR2T = 0x09,
};
const char* type_name(uint8_t type);

namespace flag {
inline constexpr uint8_t kHdgst = 0x01, kDdgst = 0x02, kDataLast = 0x04, kDataSuccess = 0x08;
}

// Fatal error status carried by a TermReq.
namespace fes {
inline constexpr uint16_t kInvalidHeaderField = 0x01, kPduSequenceError = 0x02,
                          kHeaderDigestError = 0x03, kDataOutOfRange = 0x04,
                          kR2TLimitExceeded = 0x05, kDataLimitExceeded = 0x05,
                          kUnsupportedParameter = 0x06;
}

inline constexpr uint32_t kDigestLen = 4;
inline constexpr uint32_t kICLen = 128;
inline constexpr uint32_t kTermReqHlen = 24;
inline constexpr uint32_t kTermReqMaxData = 128;  // offending header bytes a TermReq carries
inline constexpr uint32_t kCapsuleCmdHlen = 72;
inline constexpr uint32_t kCapsuleRespHlen = 24;
inline constexpr uint32_t kDataHlen = 24;  // H2CData, C2HData
inline constexpr uint32_t kR2THlen = 24;
inline constexpr uint32_t kMaxHlen = 128;

struct __attribute__((packed)) CommonHeader {
  uint8_t type;
  uint8_t flags;
  uint8_t hlen;
  uint8_t pdo;
  uint32_t plen;
};
static_assert(sizeof(CommonHeader) == 8);

struct __attribute__((packed)) ICReq {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t hpda;
  uint8_t digest;   // bit 0 header digest, bit 1 data digest
  uint32_t maxr2t;  // zero-based
  uint8_t rsvd[112];
};
static_assert(sizeof(ICReq) == kICLen);

struct __attribute__((packed)) ICResp {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t cpda;
  uint8_t digest;
  uint32_t maxh2cdata;
  uint8_t rsvd[112];
};
static_assert(sizeof(ICResp) == kICLen);
inline constexpr uint8_t kDigestHeader = 0x01, kDigestData = 0x02;

// H2CTermReq and C2HTermReq share one layout; the offending header follows (plen - 24 bytes).
struct __attribute__((packed)) TermReq {
  CommonHeader ch;
  uint16_t fes;
  uint32_t fei;  // field error information: the byte offset of the bad field, or the PDU's
  uint8_t rsvd[10];
};
static_assert(sizeof(TermReq) == kTermReqHlen);

struct __attribute__((packed)) CapsuleCmd {
  CommonHeader ch;
  nvme::Sqe sqe;
};
static_assert(sizeof(CapsuleCmd) == kCapsuleCmdHlen);

struct __attribute__((packed)) CapsuleResp {
  CommonHeader ch;
  nvme::Cqe cqe;
};
static_assert(sizeof(CapsuleResp) == kCapsuleRespHlen);

// H2CData and C2HData share one layout (ttag is reserved in C2HData).
struct __attribute__((packed)) DataHeader {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;
  uint32_t datao;
  uint32_t datal;
  uint8_t rsvd[4];
};
static_assert(sizeof(DataHeader) == kDataHlen);

struct __attribute__((packed)) R2T {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;
  uint32_t r2to;
  uint32_t r2tl;
  uint8_t rsvd[4];
};
static_assert(sizeof(R2T) == kR2THlen);

// Room for any PDU header plus its header digest: one fixed-size slot per outgoing header.
union HeaderSlot {
  CommonHeader ch;
  ICReq icreq;
  ICResp icresp;
  TermReq term;
  CapsuleCmd cmd;
  CapsuleResp resp;
  DataHeader data;
  R2T r2t;
  uint8_t bytes[kMaxHlen + kDigestLen];
  // A TermReq quotes up to 128 bytes behind its 24-byte header: 152 > 132 bytes above.
  uint8_t term_bytes[kTermReqHlen + kTermReqMaxData];
};
static_assert(sizeof(HeaderSlot) == kTermReqHlen + kTermReqMaxData);

// Which end of the connection received the PDU; each type flows one way only.
enum class Receiver { kController, kHost };

// What a connection negotiated in ICReq/ICResp.
struct Digests {
  bool header = false;
  bool data = false;
};

// The outcome of validating a received header. fes == 0 means valid.
struct Check {
  uint16_t fes = 0;
  uint32_t fei = 0;  // byte offset of the offending field within the PDU header
  // Human-readable reason, for logs and errors. Static storage, but per thread and reused after
  // 8 more failed checks on that thread: copy it to keep it longer.
  const char* why = nullptr;
  explicit operator bool() const { return fes == 0; }
};

// The fixed hlen of a PDU type, or 0 for an unknown/reserved type.
uint8_t expected_hlen(uint8_t type);
// Whether `type` may travel towards `receiver`.
bool flows_to(uint8_t type, Receiver receiver);
// Whether PDUs of this type may carry data (and so a data digest).
bool carries_data(uint8_t type);

// Validates the 8-byte common header of a PDU received after connection set-up (or, with
// `before_ic`, the ICReq/ICResp that opens it): type and direction, hlen, digest flags
// matching the negotiation, pdo and plen consistent, plen no larger than `max_plen`.
// Before IC a TermReq is accepted too (a peer refusing our IC PDU); never answer it with one.
// Fields are checked in header order, so `fei` names the lowest offending field.
Check check_common(const CommonHeader& ch, Receiver receiver, Digests digests, uint32_t max_plen,
                   bool before_ic = false);
// The same check, field by field, without check_common()'s shortcut for the usual header of
// a PDU without data (tests compare the two).
Check check_common_fields(const CommonHeader& ch, Receiver receiver, Digests digests,
                          uint32_t max_plen, bool before_ic = false);

// Sizes derived from a validated common header.
struct Layout {
  uint32_t header_len;   // hlen + header digest
  uint32_t data_offset;  // pdo (== header_len + padding) when data_len > 0, else header_len
  uint32_t data_len;     // payload bytes
  uint32_t trailer_len;  // data digest bytes after the payload
};
Layout layout_of(const CommonHeader& ch);

// Validates a complete ICReq (controller side) / ICResp (host side) beyond the common header.
Check check_icreq(const ICReq& req);
Check check_icresp(const ICResp& resp);

// Builders: fill a header in place (zeroing reserved bytes), computing hlen, pdo and plen
// from the payload length and the negotiated digests. The header digest, if any, is written
// behind the header by finish_header().
void build_icreq(ICReq& pdu, uint8_t digest, uint32_t maxr2t);
void build_icresp(ICResp& pdu, uint8_t digest, uint32_t maxh2cdata);
void build_capsule_cmd(CapsuleCmd& pdu, const nvme::Sqe& sqe, uint32_t incapsule_len,
                       Digests digests);
void build_capsule_resp(CapsuleResp& pdu, const nvme::Cqe& cqe, Digests digests);
void build_data(DataHeader& pdu, Type type, uint16_t cccid, uint16_t ttag, uint32_t datao,
                uint32_t datal, uint8_t extra_flags, Digests digests);
void build_r2t(R2T& pdu, uint16_t cccid, uint16_t ttag, uint32_t r2to, uint32_t r2tl,
               Digests digests);
// A TermReq quoting up to 128 bytes of the offending header (never digests). Returns the
// number of bytes to send: 24 + quoted bytes, which follow the header in `slot`.
uint32_t build_term_req(HeaderSlot& slot, Type type, uint16_t fes, uint32_t fei,
                        const void* offending, uint32_t offending_len);

// Writes the header digest behind the hlen bytes when enabled; returns header_len.
uint32_t finish_header(HeaderSlot& slot, Digests digests);
// Verifies the header digest of a received header (hlen bytes followed by 4 digest bytes).
bool header_digest_ok(const void* header, uint32_t hlen);

}  // namespace sens::pdu
