#pragma once
// A deliberately simple NVMe/TCP host for tests: one blocking TCP socket to 127.0.0.1, PDUs
// built by hand with the pdu:: and nvme:: builders (or corrupted on purpose), whole PDUs read
// back (8-byte common header, then plen - 8 bytes) with every wait bounded by a timeout, and
// the digests of every received PDU verified when they were negotiated.
//
// Shared by tests/target (compiled there through raw_client_impl.cc, since each tests/ folder
// is its own binary) and tests/integration.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "wire/nvme.h"
#include "wire/nvme_build.h"
#include "wire/pdu.h"

namespace sens::testing {

inline constexpr int kDefaultTimeoutMs = 3000;
inline constexpr const char* kHostNqn =
    "nqn.2014-08.org.nvmexpress:uuid:5e115e11-0000-4000-8000-000000000001";

// One received PDU, exactly as it came off the wire (header, digests, padding, data).
struct Pdu {
  std::vector<uint8_t> bytes;

  const pdu::CommonHeader& ch() const {
    return *reinterpret_cast<const pdu::CommonHeader*>(bytes.data());
  }
  uint8_t type() const { return bytes[0]; }
  uint8_t flags() const { return bytes[1]; }
  uint32_t plen() const { return ch().plen; }
  // The header viewed as `T` (copied: no alignment or aliasing worries).
  template <class T>
  T as() const {
    T v{};
    std::memcpy(&v, bytes.data(), std::min(sizeof(T), bytes.size()));
    return v;
  }
  // Payload bytes (between pdo and the data digest); for a TermReq the quoted header.
  const uint8_t* data() const;
  uint32_t data_len() const;
};

enum class RecvStatus { kOk, kTimeout, kClosed, kReset, kError, kBadPdu };
const char* recv_status_name(RecvStatus s);

// The outcome of one command run by RawClient::exec().
struct Result {
  uint16_t cid = 0;
  std::string error;  // non-empty: a transport-level failure (timeout, bad PDU, digest...)
  bool have_cqe = false;
  nvme::Cqe cqe{};
  bool data_success = false;  // the last C2HData carried DATA_SUCCESS (no CapsuleResp)
  std::vector<pdu::R2T> r2ts;
  std::vector<pdu::DataHeader> c2h;  // C2HData headers received
  std::vector<uint32_t> h2c_sizes;   // H2CData payload sizes sent
  std::vector<uint8_t> h2c_flags;
  uint32_t c2h_bytes = 0;

  bool ok() const { return error.empty() && (data_success || (have_cqe && cqe.ok())); }
  uint16_t status() const { return cqe.status_code(); }
  std::string describe() const;
};

class RawClient {
 public:
  RawClient() = default;
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // TCP connect to 127.0.0.1:port (TCP_NODELAY on). False (and last_error()) on failure.
  bool connect(uint16_t port, int timeout_ms = kDefaultTimeoutMs);
  void close();
  int fd() const { return fd_; }
  // SO_RCVBUF for the next connect() (0: the kernel's default), to make a slow reader.
  void set_rcvbuf(int bytes) { rcvbuf_ = bytes; }
  const std::string& last_error() const { return error_; }

  // ---- raw bytes
  bool send_bytes(const void* data, size_t len);
  bool send_bytes(const std::vector<uint8_t>& b) { return send_bytes(b.data(), b.size()); }
  // One send() per `chunk` bytes.
  bool send_chunked(const std::vector<uint8_t>& b, size_t chunk);
  // Reads exactly `len` bytes or fails (timeout / close).
  RecvStatus recv_exact(void* dst, size_t len, int timeout_ms);
  // Reads one whole PDU. kBadPdu: its header or data digest did not verify, or its header is
  // inconsistent (last_error() says why; `out` still holds the bytes).
  RecvStatus recv_pdu(Pdu* out, int timeout_ms = kDefaultTimeoutMs);
  // Waits for the peer to close: true when recv() returns 0 (or the connection is reset)
  // within the timeout. Bytes still arriving are read and dropped (a PDU the test did not
  // ask for makes it false only if the peer then keeps the connection open).
  bool wait_closed(int timeout_ms = kDefaultTimeoutMs);
  // Whether the connection is still open: nothing to read and no EOF within `ms`.
  bool still_open(int ms);
  // Whether nothing at all (no byte, no EOF) arrives within `ms`.
  bool quiet(int ms);

  // ---- PDUs as bytes (for tests that cut or corrupt them); digests as negotiated
  static std::vector<uint8_t> icreq_bytes(uint8_t digest, uint32_t maxr2t = 0, uint8_t hpda = 0);
  std::vector<uint8_t> capsule_bytes(const nvme::Sqe& sqe, const void* data = nullptr,
                                     uint32_t len = 0) const;
  std::vector<uint8_t> h2c_bytes(uint16_t cccid, uint16_t ttag, uint32_t datao, const void* data,
                                 uint32_t len, bool last) const;
  // `hostid`: 16 bytes (null: kDefaultHostId).
  static std::vector<uint8_t> connect_data(std::string_view subnqn, std::string_view hostnqn,
                                           uint16_t cntlid, const uint8_t* hostid = nullptr);
  // The Host Identifier the next Connects send (reservations tell hosts apart by it).
  void set_hostid(const uint8_t hostid[16]) { std::memcpy(hostid_, hostid, 16); }

  // ---- set-up
  // Sends ICReq and reads ICResp; checks it and records digests and maxh2cdata.
  bool ic(uint8_t digest = 0, pdu::ICResp* resp = nullptr, int timeout_ms = kDefaultTimeoutMs);
  pdu::Digests digests() const { return digests_; }
  void set_digests(pdu::Digests d) { digests_ = d; }
  // After an IC exchange done by hand: what it negotiated.
  void assume_ic(pdu::Digests d, uint32_t maxh2cdata) {
    digests_ = d;
    maxh2cdata_ = maxh2cdata;
  }
  uint32_t maxh2cdata() const { return maxh2cdata_; }
  void set_h2c_chunk(uint32_t chunk) { h2c_chunk_ = chunk; }  // 0: maxh2cdata

  uint16_t next_cid() { return cid_++; }

  // ---- commands
  // Sends `sqe` (cid assigned unless `keep_cid`) with `write_len` bytes of `write_data`
  // in-capsule when the SGL says so, or after an R2T otherwise (split into H2CData PDUs of
  // at most h2c_chunk); reads C2HData into `read_buf` (up to `read_len` bytes); returns when
  // the CapsuleResp (or a DATA_SUCCESS C2HData) for the command arrives.
  Result exec(nvme::Sqe sqe, const void* write_data = nullptr, uint32_t write_len = 0,
              void* read_buf = nullptr, uint32_t read_len = 0, bool keep_cid = false,
              int timeout_ms = kDefaultTimeoutMs);
  // For a command whose capsule was already sent by hand: the same receive loop.
  Result await(uint16_t cid, const void* write_data, uint32_t write_len, void* read_buf,
               uint32_t read_len, int timeout_ms = kDefaultTimeoutMs);

  // Property Set CC = EN with 64-byte SQEs and 16-byte CQEs, as a host enables a controller.
  Result enable();

  // Fabrics Connect; on the admin queue (qid 0) cntlid is 0xFFFF.
  Result connect_queue(uint16_t qid, std::string_view subnqn, uint16_t cntlid = 0xFFFF,
                       uint32_t kato_ms = 0, uint8_t cattr = 0, uint16_t sqsize = 31,
                       std::string_view hostnqn = kHostNqn);

 private:
  bool fail(std::string e) {
    error_ = std::move(e);
    return false;
  }
  int fd_ = -1;
  int rcvbuf_ = 0;
  std::string error_;
  pdu::Digests digests_{};
  uint32_t maxh2cdata_ = 0;
  uint32_t h2c_chunk_ = 0;
  uint16_t cid_ = 1;
  uint8_t hostid_[16] = {0x5e, 0x11, 0x5e, 0x11, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1};
};

// A fresh admin + I/O queue pair against an I/O subsystem, ready for commands.
struct Session {
  RawClient admin, io;
  uint16_t cntlid = 0;
  // Who connects (set before open(); defaults: kHostNqn and the RawClient's host ID).
  std::string hostnqn = kHostNqn;
  const uint8_t* hostid = nullptr;
  // IC (with `digest` on both queues), admin Connect, CC.EN=1, Set Features queues, I/O
  // Connect on qid 1. Returns "" or what failed.
  std::string open(uint16_t port, std::string_view subnqn, uint8_t digest = 0, uint8_t io_cattr = 0,
                   uint16_t io_sqsize = 31);
};

// Writes `len` bytes of a pattern at `slba` of namespace 1 (in the capsule or after an R2T),
// reads them back and compares. Returns "" or what went wrong.
std::string write_read(RawClient& io, uint64_t slba, uint32_t len, uint32_t seed, bool in_capsule);

// Deterministic test patterns.
std::vector<uint8_t> pattern(size_t len, uint32_t seed);
// Index of the first differing byte, or -1.
long first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);

// A free TCP port on 127.0.0.1 (bound then released).
uint16_t free_port();

}  // namespace sens::testing
