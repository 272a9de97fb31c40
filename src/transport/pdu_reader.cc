#include "transport/pdu_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/crc32c.h"

namespace sens::transport {

PduReader::PduReader(pdu::Receiver receiver, Sink& sink, size_t staging_bytes)
    : receiver_(receiver), sink_(sink), staging_(staging_bytes) {}

void PduReader::set_staging(size_t bytes) {
  if (rd_ > 0) {
    std::memmove(staging_.data(), staging_.data() + rd_, wr_ - rd_);
    wr_ -= rd_;
    rd_ = 0;
  }
  if (bytes < wr_) bytes = wr_;
  staging_.resize(bytes);
  staging_.shrink_to_fit();
}

void PduReader::set_payload_target(void* dst, uint32_t len) {
  payload_ = static_cast<uint8_t*>(dst);
  payload_len_ = len;
}

void PduReader::reset_header() {
  state_ = State::kHeader;
  header_have_ = 0;
  header_need_ = sizeof(pdu::CommonHeader);
  payload_ = nullptr;
  payload_len_ = payload_have_ = 0;
  digest_have_ = 0;
  ++counters_.pdus;
}

PduReader::Status PduReader::finish_header() {
  auto& ch = *reinterpret_cast<const pdu::CommonHeader*>(header_);
  if (ch.flags & pdu::flag::kHdgst && !pdu::header_digest_ok(header_, ch.hlen)) {
    pdu::Check bad{pdu::fes::kHeaderDigestError, 0, "header digest mismatch"};
    sink_.on_pdu_error(bad, header_, ch.hlen);
    return Status::kStopped;
  }
  if (ch.plen > max_plen_) {
    bool h2c = ch.type == uint8_t(pdu::Type::kH2CData);
    pdu::Check big{h2c ? pdu::fes::kDataLimitExceeded : pdu::fes::kInvalidHeaderField,
                   h2c ? uint32_t(offsetof(pdu::DataHeader, datal)) : 4u,
                   h2c ? "H2CData larger than the connection accepts" : "PDU longer than allowed"};
    sink_.on_pdu_error(big, header_, ch.hlen);
    return Status::kStopped;
  }
  payload_ = nullptr;
  payload_len_ = 0;
  if (!sink_.on_pdu_header(ch, layout_)) return Status::kStopped;
  if (held_) {  // the header stays in header_ (state kHeader, complete) until resume()
    ++counters_.holds;
    return Status::kHeld;
  }
  if (layout_.data_len == 0) {
    reset_header();
    return Status::kOk;
  }
  // The sink names where the payload goes; anything else is read and dropped.
  if (payload_len_ != layout_.data_len) payload_ = nullptr;
  payload_len_ = layout_.data_len;
  payload_have_ = 0;
  skip_ = layout_.data_offset - layout_.header_len;
  crc_ = kCrc32cInit;
  state_ = State::kPayload;
  return Status::kOk;
}

PduReader::Status PduReader::payload_arrived() {
  if (layout_.trailer_len) {
    state_ = State::kDigest;
    digest_have_ = 0;
    return Status::kOk;
  }
  auto& ch = *reinterpret_cast<const pdu::CommonHeader*>(header_);
  bool go = sink_.on_pdu_payload(ch, true);
  reset_header();
  return go ? Status::kOk : Status::kStopped;
}

PduReader::Status PduReader::process() {
  while (rd_ < wr_) {
    size_t avail = wr_ - rd_;
    const uint8_t* src = staging_.data() + rd_;
    switch (state_) {
      case State::kHeader: {
        uint32_t take = uint32_t(std::min<size_t>(header_need_ - header_have_, avail));
        std::memcpy(header_ + header_have_, src, take);
        header_have_ += take;
        rd_ += take;
        if (header_have_ < header_need_) return Status::kOk;
        if (header_need_ == sizeof(pdu::CommonHeader)) {
          auto& ch = *reinterpret_cast<const pdu::CommonHeader*>(header_);
          // The size limit is checked once the whole header is in (finish_header), where an
          // H2CData's excess can be named as data limit exceeded.
          pdu::Check check = pdu::check_common(ch, receiver_, digests_, UINT32_MAX, !after_ic_);
          if (!check) {
            sink_.on_pdu_error(check, header_, header_have_);
            return Status::kStopped;
          }
          layout_ = pdu::layout_of(ch);
          header_need_ = layout_.header_len;
          if (header_have_ < header_need_) break;
        }
        Status s = finish_header();
        if (s != Status::kOk) return s;
        break;
      }
      case State::kPayload: {
        if (skip_) {
          uint32_t take = uint32_t(std::min<size_t>(skip_, avail));
          skip_ -= take;
          rd_ += take;
          break;
        }
        uint32_t take = uint32_t(std::min<size_t>(payload_len_ - payload_have_, avail));
        if (payload_) {
          std::memcpy(payload_ + payload_have_, src, take);
          counters_.copied_payload_bytes += take;
        }
        if (layout_.trailer_len) crc_ = crc32c_update(crc_, src, take);
        payload_have_ += take;
        rd_ += take;
        if (payload_have_ == payload_len_) {
          Status s = payload_arrived();
          if (s != Status::kOk) return s;
        }
        break;
      }
      case State::kDigest: {
        uint32_t take = uint32_t(std::min<size_t>(4 - digest_have_, avail));
        std::memcpy(digest_ + digest_have_, src, take);
        digest_have_ += take;
        rd_ += take;
        if (digest_have_ < 4) return Status::kOk;
        uint32_t got;
        std::memcpy(&got, digest_, 4);
        auto& ch = *reinterpret_cast<const pdu::CommonHeader*>(header_);
        bool go = sink_.on_pdu_payload(ch, got == crc32c_finish(crc_));
        reset_header();
        if (!go) return Status::kStopped;
        break;
      }
    }
  }
  return Status::kOk;
}

PduReader::Status PduReader::resume() {
  if (!held_) return Status::kOk;
  held_ = false;
  Status s = finish_header();
  if (s != Status::kOk) return s;
  return process();
}

PduReader::Status PduReader::feed(const uint8_t* data, size_t len) {
  if (held_) return Status::kHeld;
  while (len > 0) {
    if (rd_ == wr_) rd_ = wr_ = 0;
    size_t room = staging_.size() - wr_;
    if (room == 0) {
      std::memmove(staging_.data(), staging_.data() + rd_, wr_ - rd_);
      wr_ -= rd_;
      rd_ = 0;
      room = staging_.size() - wr_;
    }
    size_t n = std::min(room, len);
    std::memcpy(staging_.data() + wr_, data, n);
    wr_ += n;
    data += n;
    len -= n;
    Status s = process();
    if (s != Status::kOk) return s;
  }
  return Status::kOk;
}

PduReader::Status PduReader::read_from(int fd, size_t budget) {
  if (held_) return Status::kHeld;
  size_t total = 0;
  while (total < budget) {
    if (rd_ == wr_) rd_ = wr_ = 0;
    bool direct = state_ == State::kPayload && skip_ == 0 && rd_ == wr_ && payload_ &&
                  payload_have_ < payload_len_;
    iovec iov[2];
    int iovcnt;
    size_t direct_len = 0;
    if (direct) {
      // The rest of the payload lands in place; whatever follows it lands in staging.
      direct_len = payload_len_ - payload_have_;
      iov[0] = {payload_ + payload_have_, direct_len};
      iov[1] = {staging_.data(), staging_.size()};
      iovcnt = 2;
    } else {
      if (wr_ == staging_.size()) {  // compact: keep the unread tail at the front
        std::memmove(staging_.data(), staging_.data() + rd_, wr_ - rd_);
        wr_ -= rd_;
        rd_ = 0;
      }
      iov[0] = {staging_.data() + wr_, staging_.size() - wr_};
      iovcnt = 1;
    }
    size_t asked = iov[0].iov_len + (iovcnt == 2 ? iov[1].iov_len : 0);
    ssize_t n = readv(fd, iov, iovcnt);
    ++counters_.recv_calls;
    if (n == 0) return Status::kClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::kWouldBlock;
      return Status::kError;
    }
    counters_.bytes += size_t(n);
    total += size_t(n);
    if (direct) {
      size_t landed = std::min(size_t(n), direct_len);
      if (layout_.trailer_len) crc_ = crc32c_update(crc_, payload_ + payload_have_, landed);
      payload_have_ += uint32_t(landed);
      wr_ = size_t(n) - landed;
      if (payload_have_ == payload_len_) {
        Status s = payload_arrived();
        if (s != Status::kOk) return s;
      }
    } else {
      wr_ += size_t(n);
    }
    Status s = process();
    if (s != Status::kOk) return s;
    if (size_t(n) < asked) return Status::kWouldBlock;  // drained: skip the EAGAIN round trip
  }
  return Status::kOk;
}

}  // namespace sens::transport
