#pragma once
// The NBLK protocol (netblk): a block device over UDP. One 30-byte big-endian header shared by
// requests and replies; docs/netblk.md, "The wire format", has every field.
#include <cstdint>
#include <string>

namespace sens::netblk {

inline constexpr uint32_t kMagic = 0x4E424C4B;  // "NBLK"
inline constexpr uint8_t kVersion = 1;
inline constexpr uint32_t kHeaderSize = 30;
inline constexpr uint32_t kInfoBodySize = 32;
inline constexpr uint8_t kReplyBit = 0x80;
inline constexpr uint16_t kFlagFua = 1;
inline constexpr uint32_t kInfoFlagReadOnly = 1;
// A READ may ask for this many datagrams' worth of data (max_read = 16 x max_io).
inline constexpr uint32_t kMaxReadPieces = 16;
// What sits in front of the NBLK header in every datagram: IPv4 (20) and UDP (8).
inline constexpr uint32_t kIpUdpOverhead = 28;
inline constexpr uint32_t kMaxUdpPayload = 65507;

enum OpCode : uint8_t { kOpInfo = 1, kOpRead = 2, kOpWrite = 3, kOpFlush = 4 };

enum Status : uint16_t {
  kOk = 0,
  kBadRequest = 1,
  kOutOfRange = 2,
  kIoError = 3,
  kBusy = 4,
  kReadOnly = 5,
  // Never on the wire: the client gave up after retrying.
  kNoReply = 0x100,
};

const char* status_name(int status);
const char* op_name(uint8_t op);

struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t op = 0;
  uint16_t flags = 0;
  uint64_t cookie = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint16_t status = kOk;
};

void encode_header(const Header& h, uint8_t* out);
Header decode_header(const uint8_t* in);

struct Info {
  uint64_t size = 0;
  uint32_t sector_size = 0;
  uint32_t max_io = 0;
  uint32_t max_read = 0;
  uint32_t flags = 0;
  uint32_t slots = 0;
  bool read_only() const { return flags & kInfoFlagReadOnly; }
};

void encode_info(const Info& info, uint8_t* out);
Info decode_info(const uint8_t* in);

// The whole sectors that fit in one datagram of `mtu` bytes behind the IP, UDP and NBLK
// headers; 0 when not even one sector fits.
uint32_t max_io_for(uint32_t mtu, uint32_t sector_size);

}  // namespace sens::netblk
