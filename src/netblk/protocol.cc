#include "netblk/protocol.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

namespace sens::netblk {

namespace {

template <typename T>
void put(uint8_t*& p, T value) {
  if constexpr (sizeof(T) == 2) value = T(htobe16(value));
  if constexpr (sizeof(T) == 4) value = T(htobe32(value));
  if constexpr (sizeof(T) == 8) value = T(htobe64(value));
  std::memcpy(p, &value, sizeof(T));
  p += sizeof(T);
}

template <typename T>
T get(const uint8_t*& p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  p += sizeof(T);
  if constexpr (sizeof(T) == 2) value = T(be16toh(value));
  if constexpr (sizeof(T) == 4) value = T(be32toh(value));
  if constexpr (sizeof(T) == 8) value = T(be64toh(value));
  return value;
}

}  // namespace

const char* status_name(int status) {
  switch (status) {
    case kOk:
      return "ok";
    case kBadRequest:
      return "bad request";
    case kOutOfRange:
      return "out of range";
    case kIoError:
      return "I/O error";
    case kBusy:
      return "busy";
    case kReadOnly:
      return "read-only";
    case kNoReply:
      return "no reply (server unreachable?)";
  }
  return "unknown status";
}

const char* op_name(uint8_t op) {
  switch (op & ~kReplyBit) {
    case kOpInfo:
      return "INFO";
    case kOpRead:
      return "READ";
    case kOpWrite:
      return "WRITE";
    case kOpFlush:
      return "FLUSH";
  }
  return "unknown";
}

void encode_header(const Header& h, uint8_t* out) {
  put<uint32_t>(out, h.magic);
  put<uint8_t>(out, h.version);
  put<uint8_t>(out, h.op);
  put<uint16_t>(out, h.flags);
  put<uint64_t>(out, h.cookie);
  put<uint64_t>(out, h.offset);
  put<uint32_t>(out, h.length);
  put<uint16_t>(out, h.status);
}

Header decode_header(const uint8_t* in) {
  Header h;
  h.magic = get<uint32_t>(in);
  h.version = get<uint8_t>(in);
  h.op = get<uint8_t>(in);
  h.flags = get<uint16_t>(in);
  h.cookie = get<uint64_t>(in);
  h.offset = get<uint64_t>(in);
  h.length = get<uint32_t>(in);
  h.status = get<uint16_t>(in);
  return h;
}

void encode_info(const Info& info, uint8_t* out) {
  put<uint64_t>(out, info.size);
  put<uint32_t>(out, info.sector_size);
  put<uint32_t>(out, info.max_io);
  put<uint32_t>(out, info.max_read);
  put<uint32_t>(out, info.flags);
  put<uint32_t>(out, info.slots);
  put<uint32_t>(out, 0);  // reserved
}

Info decode_info(const uint8_t* in) {
  Info info;
  info.size = get<uint64_t>(in);
  info.sector_size = get<uint32_t>(in);
  info.max_io = get<uint32_t>(in);
  info.max_read = get<uint32_t>(in);
  info.flags = get<uint32_t>(in);
  info.slots = get<uint32_t>(in);
  return info;
}

uint32_t max_io_for(uint32_t mtu, uint32_t sector_size) {
  if (sector_size == 0) return 0;
  uint32_t datagram = std::min(mtu, kMaxUdpPayload + kIpUdpOverhead);
  if (datagram <= kIpUdpOverhead + kHeaderSize) return 0;
  uint32_t room = datagram - kIpUdpOverhead - kHeaderSize;
  return room / sector_size * sector_size;
}

}  // namespace sens::netblk
