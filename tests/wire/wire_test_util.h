#pragma once
// Helpers shared by the wire tests: raw little-endian reads and valid headers of every type.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "wire/pdu.h"

namespace sens::pdu::testing {

inline constexpr uint32_t kMaxPlen = 1u << 20;
inline constexpr Digests kDigestCombos[] = {
    {false, false}, {true, false}, {false, true}, {true, true}};
inline constexpr uint8_t kKnownTypes[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x09};

// Reads a T at byte `off` of `base`, as the peer would see it on the wire.
template <class T>
T rd(const void* base, size_t off) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + off, sizeof(v));
  return v;
}
template <class T>
void wr(void* base, size_t off, T v) {
  std::memcpy(static_cast<uint8_t*>(base) + off, &v, sizeof(v));
}

inline bool is_ic_type(uint8_t t) {
  return t <= 0x01;
}
inline Receiver receiver_of(uint8_t t) {
  return flows_to(t, Receiver::kController) ? Receiver::kController : Receiver::kHost;
}
inline Receiver other(Receiver r) {
  return r == Receiver::kController ? Receiver::kHost : Receiver::kController;
}

// A valid header of type `t` under `d`; data-carrying types get `data_len` bytes (data PDUs at
// least 1, since they may not be empty).
inline HeaderSlot valid_header(uint8_t t, Digests d, uint32_t data_len = 512) {
  HeaderSlot s;
  std::memset(&s, 0xA5, sizeof(s));  // builders must overwrite everything they own
  nvme::Sqe sqe{};
  sqe.opcode = 0x01;
  nvme::Cqe cqe{};
  const uint8_t quote[8] = {4, 0, 72, 0, 72, 0, 0, 0};
  switch (t) {
    case 0x00:
      build_icreq(s.icreq, 0, 0);
      break;
    case 0x01:
      build_icresp(s.icresp, 0, 4096);
      break;
    case 0x02:
      build_term_req(s, Type::kH2CTermReq, fes::kInvalidHeaderField, 0, quote, sizeof(quote));
      break;
    case 0x03:
      build_term_req(s, Type::kC2HTermReq, fes::kInvalidHeaderField, 0, quote, sizeof(quote));
      break;
    case 0x04:
      build_capsule_cmd(s.cmd, sqe, data_len, d);
      break;
    case 0x05:
      build_capsule_resp(s.resp, cqe, d);
      break;
    case 0x06:
      build_data(s.data, Type::kH2CData, 1, 2, 0, data_len ? data_len : 1, flag::kDataLast, d);
      break;
    case 0x07:
      build_data(s.data, Type::kC2HData, 1, 0, 0, data_len ? data_len : 1, flag::kDataLast, d);
      break;
    case 0x09:
      build_r2t(s.r2t, 1, 2, 0, 4096, d);
      break;
  }
  return s;
}

// check_common with the receiver and IC phase the type belongs to.
inline Check check_valid_side(const CommonHeader& ch, Digests d, uint32_t max_plen = kMaxPlen) {
  return check_common(ch, receiver_of(ch.type), d, max_plen, is_ic_type(ch.type));
}

inline std::string describe(Digests d) {
  return std::string("hdgst=") + (d.header ? "1" : "0") + " ddgst=" + (d.data ? "1" : "0");
}

// A refusal with exactly this FES and FEI, and a reason.
inline void expect_fail(const Check& c, uint16_t fes, uint32_t fei) {
  EXPECT_FALSE(c) << "accepted";
  EXPECT_EQ(c.fes, fes) << (c.why ? c.why : "(no why)");
  EXPECT_EQ(c.fei, fei) << (c.why ? c.why : "(no why)");
  EXPECT_NE(c.why, nullptr);
}

}  // namespace sens::pdu::testing
