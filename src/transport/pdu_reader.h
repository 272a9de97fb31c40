#pragma once
// Reassembles NVMe/TCP PDUs from a byte stream cut anywhere. Headers are read into a staging
// buffer in large reads; a payload goes to the place its owner names (a command's buffer),
// and whatever of it is not yet in the staging buffer is read there directly (readv into
// [payload, staging]) so that large payloads are never copied in user space.
#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "wire/pdu.h"

namespace sens::transport {

class TlsChannel;

struct RecvCounters {
  uint64_t recv_calls = 0;  // readv() calls, EAGAIN included
  uint64_t bytes = 0;
  uint64_t pdus = 0;
  uint64_t copied_payload_bytes = 0;  // payload that had landed in staging and was moved
  uint64_t holds = 0;                 // PDUs the sink could not take at once (back-pressure)
};

class PduReader {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    // A validated header (hlen bytes, header digest checked). The sink either calls
    // set_payload_target() (the PDU has a payload) or returns. Return false to stop reading
    // (the sink has started tearing the connection down).
    virtual bool on_pdu_header(const pdu::CommonHeader& header, const pdu::Layout& layout) = 0;
    // The payload named by set_payload_target() has fully arrived. `digest_ok` is false when
    // data digests are on and the payload's CRC did not match (the sink fails the command).
    virtual bool on_pdu_payload(const pdu::CommonHeader& header, bool digest_ok) = 0;
    // A fatal transport error: bad header field, digest mismatch. `header` has what was read
    // of the offending header (up to hlen bytes). The reader stops; the sink sends a TermReq.
    virtual void on_pdu_error(const pdu::Check& check, const uint8_t* header, uint32_t len) = 0;
  };

  // kHeld: the sink called hold() from on_pdu_header(); nothing more is read until resume().
  enum class Status { kOk, kWouldBlock, kClosed, kError, kStopped, kHeld };

  PduReader(pdu::Receiver receiver, Sink& sink, size_t staging_bytes = 64 * 1024);

  void set_digests(pdu::Digests d) { digests_ = d; }
  void set_max_plen(uint32_t max_plen) { max_plen_ = max_plen; }
  void set_after_ic(bool v) { after_ic_ = v; }
  // Reads through TLS from now on (null: plain readv).
  void set_tls(TlsChannel* tls) { tls_ = tls; }
  // Grows (or shrinks) the staging buffer, keeping what it holds unread.
  void set_staging(size_t bytes);
  // Stages into the caller's `bytes` at `mem` from now on (a cache-coloured buffer), keeping
  // what is unread; the caller keeps it alive while this reader uses it. False (nothing
  // changes) if it cannot hold what is unread.
  bool use_staging(uint8_t* mem, size_t bytes);
  const uint8_t* staging() const { return stg_; }
  pdu::Digests digests() const { return digests_; }

  // Directs the current PDU's payload to [dst, dst + len). Called from on_pdu_header(). A
  // null `dst` discards the payload (it is still digest-checked when data digests are on).
  void set_payload_target(void* dst, uint32_t len);
  // The same into a scattered buffer: the payload lands at byte `skip` of the list `iov`
  // (which must hold skip + len bytes and stay valid until the payload has arrived).
  void set_payload_target(const iovec* iov, int iovcnt, size_t skip, uint32_t len);

  // Called from on_pdu_header(): the sink cannot take this PDU yet (e.g. no buffer for its
  // payload). The header is kept and delivered again by resume(); until then the reader
  // reads nothing, so the peer meets TCP back-pressure instead of an error.
  void hold() { held_ = true; }
  bool held() const { return held_; }
  // Part of a PDU (header, payload or digest) is in and the rest is not (stall deadlines).
  bool mid_pdu() const { return state_ != State::kHeader || header_have_ != 0 || rd_ != wr_; }
  // Delivers the held header again and goes on with what is already buffered.
  Status resume();

  // Reads and dispatches as much as is available on `fd`, at most `budget` bytes.
  // kClosed: the peer closed; kError: errno set; kStopped: the sink returned false.
  Status read_from(int fd, size_t budget);

  // For tests and in-memory use: feeds bytes as if read from a socket.
  Status feed(const uint8_t* data, size_t len);

  const RecvCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = RecvCounters{}; }

 private:
  enum class State { kHeader, kPayload, kDigest };
  Status process();  // consumes staging
  Status finish_header();
  Status payload_arrived();  // after the payload's last byte
  Status read_tls(size_t budget);
  void reset_header();

  pdu::Receiver receiver_;
  Sink& sink_;
  pdu::Digests digests_;
  uint32_t max_plen_ = 1u << 20;
  bool after_ic_ = false;
  TlsChannel* tls_ = nullptr;

  std::vector<uint8_t> owned_;  // the staging buffer unless use_staging() gave another
  uint8_t* stg_ = nullptr;
  size_t stg_size_ = 0;
  size_t rd_ = 0, wr_ = 0;  // unread bytes are stg_[rd_, wr_)

  State state_ = State::kHeader;
  alignas(8) uint8_t header_[pdu::kMaxHlen + pdu::kDigestLen];
  pdu::Layout layout_{};
  uint32_t header_have_ = 0;
  uint32_t header_need_ = 8;
  uint32_t skip_ = 0;  // padding bytes between header and payload still to drop
  // Where the payload goes: a cursor into an iovec list (one_ for a contiguous target); a
  // null list discards it.
  void scatter_copy(const uint8_t* src, size_t n);
  void scatter_advance(size_t n);
  static constexpr int kMaxDirect = 16;  // payload segments read in place by one readv
  iovec one_{};
  const iovec* piov_ = nullptr;
  int piovcnt_ = 0, pidx_ = 0;
  size_t poff_ = 0;
  uint32_t payload_len_ = 0, payload_have_ = 0;
  uint32_t crc_ = 0;
  uint8_t digest_[4];
  uint32_t digest_have_ = 0;
  bool held_ = false;
  RecvCounters counters_;
};

}  // namespace sens::transport
