#pragma once
// NVMe in-band authentication (NVMe Base 2.0, 8.13 / 5.3 DH-HMAC-CHAP): the AUTH_Send and
// AUTH_Receive Fabrics commands and the DH-HMAC-CHAP messages their data carries. All fields
// are little-endian; variable parts (challenge, response, DH value) follow each header.
#include <cstddef>
#include <cstdint>

#include "wire/nvme.h"
#include "wire/nvme_build.h"

namespace sens::nvme::auth {

// AUTH_Send / AUTH_Receive over an Sqe: SPSP0 at byte 41, SPSP1 at 42, SECP at 43 (all in
// cdw10), TL (send) / AL (receive) in cdw11 (byte 44).
inline constexpr uint8_t kSecpDhchap = 0xE9;  // the DH-HMAC-CHAP security protocol
inline constexpr uint8_t kSpsp = 0x01;        // SPSP0 and SPSP1 for DH-HMAC-CHAP
inline uint8_t spsp0(const Sqe& s) {
  return uint8_t(s.cdw10 >> 8);
}
inline uint8_t spsp1(const Sqe& s) {
  return uint8_t(s.cdw10 >> 16);
}
inline uint8_t secp(const Sqe& s) {
  return uint8_t(s.cdw10 >> 24);
}
inline uint32_t length(const Sqe& s) {
  return s.cdw11;
}  // TL or AL
inline constexpr uint32_t kOffsetSpsp0 = 41, kOffsetSpsp1 = 42, kOffsetSecp = 43,
                          kOffsetLength = 44;

// Connect response dword 0: bit 17 AUTHREQ.ATR (authentication required), bit 18 ASCR
// (secure channel concatenation required; not offered here).
inline constexpr uint32_t kAuthreqAtr = 1u << 17, kAuthreqAscr = 1u << 18;

// Message types: AUTH-Type in byte 0, AUTH-Id in byte 1.
inline constexpr uint8_t kTypeCommon = 0x00, kTypeDhchap = 0x01;
inline constexpr uint8_t kIdNegotiate = 0x00, kIdChallenge = 0x01, kIdReply = 0x02,
                         kIdSuccess1 = 0x03, kIdSuccess2 = 0x04, kIdFailure2 = 0xF0,
                         kIdFailure1 = 0xF1;
inline constexpr uint8_t kAuthIdDhchap = 0x01;  // protocol descriptor AUTHID
inline constexpr uint8_t kScNone = 0x00;        // SC_C: no secure channel concatenation

// Hash functions (HashID) and Diffie-Hellman groups (DHgroupID).
inline constexpr uint8_t kHashSha256 = 1, kHashSha384 = 2, kHashSha512 = 3;
inline constexpr uint8_t kDhNull = 0, kDhFfdhe2048 = 1, kDhFfdhe3072 = 2, kDhFfdhe4096 = 3,
                         kDhFfdhe6144 = 4, kDhFfdhe8192 = 5;

// Failure reason code (REASON CODE = 1, "authentication failure") explanations.
inline constexpr uint8_t kReasonFailed = 0x01;
inline constexpr uint8_t kFailFailed = 0x01, kFailNotUsable = 0x02, kFailConcatMismatch = 0x03,
                         kFailHashUnusable = 0x04, kFailDhgroupUnusable = 0x05,
                         kFailIncorrectPayload = 0x06, kFailIncorrectMessage = 0x07;
const char* failure_name(uint8_t explanation);  // "incorrect payload", ...

inline constexpr uint32_t kMaxHashIds = 30, kMaxDhIds = 30;
inline constexpr uint32_t kMaxHashLen = 64;  // SHA-512

struct __attribute__((packed)) ProtocolDescriptor {
  uint8_t authid;  // kAuthIdDhchap
  uint8_t rsvd;
  uint8_t halen;  // hash ids in idlist[0..halen)
  uint8_t dhlen;  // DH group ids in idlist[30..30 + dhlen)
  uint8_t idlist[60];
};
static_assert(sizeof(ProtocolDescriptor) == 64);

struct __attribute__((packed)) Header {  // what every message starts with
  uint8_t auth_type, auth_id;
  uint16_t rsvd;
  uint16_t t_id;  // transaction identifier, chosen by the host
};
static_assert(sizeof(Header) == 6);

struct __attribute__((packed)) Negotiate {
  uint8_t auth_type, auth_id;  // kTypeCommon, kIdNegotiate
  uint16_t rsvd;
  uint16_t t_id;
  uint8_t sc_c;  // secure channel concatenation
  uint8_t napd;  // protocol descriptors that follow
  ProtocolDescriptor descriptors[];
};
static_assert(sizeof(Negotiate) == 8);

struct __attribute__((packed)) Challenge {
  uint8_t auth_type, auth_id;  // kTypeDhchap, kIdChallenge
  uint16_t rsvd1;
  uint16_t t_id;
  uint8_t hl;  // hash length
  uint8_t rsvd2;
  uint8_t hashid, dhgid;
  uint16_t dhvlen;
  uint32_t seqnum;  // S1
  uint8_t cval[];   // C1 (hl bytes), then the controller's DH value (dhvlen bytes)
};
static_assert(sizeof(Challenge) == 16);

struct __attribute__((packed)) Reply {
  uint8_t auth_type, auth_id;  // kTypeDhchap, kIdReply
  uint16_t rsvd1;
  uint16_t t_id;
  uint8_t hl;
  uint8_t rsvd2;
  uint8_t cvalid;  // bit 0: C2 is valid (the host authenticates the controller)
  uint8_t rsvd3;
  uint16_t dhvlen;
  uint32_t seqnum;  // S2 (0: no controller authentication)
  uint8_t rval[];   // R1 (hl), C2 (hl), then the host's DH value (dhvlen)
};
static_assert(sizeof(Reply) == 16);

struct __attribute__((packed)) Success1 {
  uint8_t auth_type, auth_id;  // kTypeDhchap, kIdSuccess1
  uint16_t rsvd1;
  uint16_t t_id;
  uint8_t hl;
  uint8_t rsvd2;
  uint8_t rvalid;  // bit 0: R2 is valid
  uint8_t rsvd3[7];
  uint8_t rval[];  // R2 (hl)
};
static_assert(sizeof(Success1) == 16);

struct __attribute__((packed)) Success2 {
  uint8_t auth_type, auth_id;  // kTypeDhchap, kIdSuccess2
  uint16_t rsvd1;
  uint16_t t_id;
  uint8_t rsvd2[10];
};
static_assert(sizeof(Success2) == 16);

struct __attribute__((packed)) Failure {
  uint8_t auth_type, auth_id;  // kTypeCommon, kIdFailure1 / kIdFailure2
  uint16_t rsvd1;
  uint16_t t_id;
  uint8_t rescode;      // kReasonFailed
  uint8_t rescode_exp;  // kFail...
};
static_assert(sizeof(Failure) == 8);

// AUTH_Send of `tl` bytes / AUTH_Receive of `al` bytes (SECP E9h, SPSP 01h 01h).
Sqe make_auth_send(uint32_t tl, Xfer xfer);
Sqe make_auth_receive(uint32_t al);

}  // namespace sens::nvme::auth
