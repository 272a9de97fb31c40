#include "transport/pdu_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/crc32c.h"
#include "transport/tls.h"

namespace sens::transport {

PduReader::PduReader(pdu::Receiver receiver, Sink& sink, size_t staging_bytes)
    : receiver_(receiver), sink_(sink), owned_(staging_bytes) {
  stg_ = owned_.data();
  stg_size_ = owned_.size();
}

void PduReader::set_staging(size_t bytes) {
  if (bytes < wr_ - rd_) bytes = wr_ - rd_;
  std::vector<uint8_t> next(bytes);
  std::memcpy(next.data(), stg_ + rd_, wr_ - rd_);
  wr_ -= rd_;
  rd_ = 0;
  owned_.swap(next);
  stg_ = owned_.data();
  stg_size_ = owned_.size();
}

bool PduReader::use_staging(uint8_t* mem, size_t bytes) {
  if (!mem || bytes < wr_ - rd_) return false;
  std::memmove(mem, stg_ + rd_, wr_ - rd_);
  wr_ -= rd_;
  rd_ = 0;
  stg_ = mem;
  stg_size_ = bytes;
  owned_.clear();
  owned_.shrink_to_fit();
  return true;
}

void PduReader::set_payload_target(void* dst, uint32_t len) {
  if (!dst) {
    piov_ = nullptr;
  } else {
    one_ = {dst, len};
    piov_ = &one_;
    piovcnt_ = 1;
    pidx_ = 0;
    poff_ = 0;
  }
  payload_len_ = len;
}

void PduReader::set_payload_target(const iovec* iov, int iovcnt, size_t skip, uint32_t len) {
  piov_ = iov;
  piovcnt_ = iovcnt;
  pidx_ = 0;
  poff_ = 0;
  payload_len_ = len;
  while (pidx_ < piovcnt_ && skip >= piov_[pidx_].iov_len) skip -= piov_[pidx_++].iov_len;
  poff_ = skip;
  if (pidx_ == piovcnt_) piov_ = nullptr;  // nowhere to put it (the sink checked: not reached)
}

void PduReader::scatter_copy(const uint8_t* src, size_t n) {
  while (n > 0 && pidx_ < piovcnt_) {
    const iovec& v = piov_[pidx_];
    const size_t k = std::min(v.iov_len - poff_, n);
    std::memcpy(static_cast<uint8_t*>(v.iov_base) + poff_, src, k);
    src += k;
    n -= k;
    poff_ += k;
    if (poff_ == v.iov_len) {
      ++pidx_;
      poff_ = 0;
    }
  }
}

void PduReader::scatter_advance(size_t n) {
  while (n > 0 && pidx_ < piovcnt_) {
    const size_t k = std::min(piov_[pidx_].iov_len - poff_, n);
    n -= k;
    poff_ += k;
    if (poff_ == piov_[pidx_].iov_len) {
      ++pidx_;
      poff_ = 0;
    }
  }
}

void PduReader::reset_header() {
  state_ = State::kHeader;
  header_have_ = 0;
  header_need_ = sizeof(pdu::CommonHeader);
  piov_ = nullptr;
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
  piov_ = nullptr;
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
  if (payload_len_ != layout_.data_len) piov_ = nullptr;
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
    const uint8_t* src = stg_ + rd_;
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
        if (piov_) {
          scatter_copy(src, take);
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
    size_t room = stg_size_ - wr_;
    if (room == 0) {
      std::memmove(stg_, stg_ + rd_, wr_ - rd_);
      wr_ -= rd_;
      rd_ = 0;
      room = stg_size_ - wr_;
    }
    size_t n = std::min(room, len);
    std::memcpy(stg_ + wr_, data, n);
    wr_ += n;
    data += n;
    len -= n;
    Status s = process();
    if (s != Status::kOk) return s;
  }
  return Status::kOk;
}

PduReader::Status PduReader::read_tls(size_t budget) {
  size_t total = 0;
  // Past the budget, plaintext OpenSSL already holds is read too: no socket event would
  // announce it.
  while (total < budget || tls_->pending()) {
    if (rd_ == wr_) rd_ = wr_ = 0;
    // Empty segments of the caller's list take no bytes: step over them.
    while (piov_ && pidx_ < piovcnt_ && poff_ == piov_[pidx_].iov_len) {
      ++pidx_;
      poff_ = 0;
    }
    const bool direct = state_ == State::kPayload && skip_ == 0 && rd_ == wr_ && piov_ &&
                        pidx_ < piovcnt_ && payload_have_ < payload_len_;
    uint8_t* dst;
    size_t want;
    if (direct) {  // decrypted straight into the payload's place (its current segment)
      dst = static_cast<uint8_t*>(piov_[pidx_].iov_base) + poff_;
      want = std::min<size_t>(piov_[pidx_].iov_len - poff_, payload_len_ - payload_have_);
    } else {
      if (wr_ == stg_size_) {
        std::memmove(stg_, stg_ + rd_, wr_ - rd_);
        wr_ -= rd_;
        rd_ = 0;
      }
      dst = stg_ + wr_;
      want = stg_size_ - wr_;
    }
    TlsChannel::Io io;
    const uint64_t calls = tls_->recv_syscalls();
    size_t n = tls_->read(dst, want, &io);
    counters_.recv_calls += tls_->recv_syscalls() - calls;
    if (n == 0) {
      if (io == TlsChannel::Io::kWantRead || io == TlsChannel::Io::kWantWrite)
        return Status::kWouldBlock;
      if (io == TlsChannel::Io::kClosed) return Status::kClosed;
      errno = EPROTO;
      return Status::kError;
    }
    counters_.bytes += n;
    total += n;
    if (direct) {
      if (layout_.trailer_len) crc_ = crc32c_update(crc_, dst, n);
      scatter_advance(n);
      payload_have_ += uint32_t(n);
      if (payload_have_ == payload_len_) {
        Status s = payload_arrived();
        if (s != Status::kOk) return s;
      }
    } else {
      wr_ += n;
    }
    Status s = process();
    if (s != Status::kOk) return s;
  }
  return Status::kOk;
}

PduReader::Status PduReader::read_from(int fd, size_t budget) {
  if (held_) return Status::kHeld;
  if (tls_) return read_tls(budget);
  size_t total = 0;
  while (total < budget) {
    if (rd_ == wr_) rd_ = wr_ = 0;
    bool direct = state_ == State::kPayload && skip_ == 0 && rd_ == wr_ && piov_ &&
                  payload_have_ < payload_len_;
    iovec iov[kMaxDirect + 1];
    int iovcnt = 0;
    size_t direct_len = 0, asked = 0;
    if (direct) {
      // The rest of the payload lands in place; whatever follows it lands in staging.
      size_t left = payload_len_ - payload_have_;
      size_t off = poff_;
      for (int i = pidx_; i < piovcnt_ && left > 0 && iovcnt < kMaxDirect; ++i) {
        const size_t k = std::min(piov_[i].iov_len - off, left);
        iov[iovcnt++] = {static_cast<uint8_t*>(piov_[i].iov_base) + off, k};
        left -= k;
        direct_len += k;
        off = 0;
      }
      iov[iovcnt++] = {stg_, stg_size_};
    } else {
      if (wr_ == stg_size_) {  // compact: keep the unread tail at the front
        std::memmove(stg_, stg_ + rd_, wr_ - rd_);
        wr_ -= rd_;
        rd_ = 0;
      }
      iov[0] = {stg_ + wr_, stg_size_ - wr_};
      iovcnt = 1;
    }
    for (int i = 0; i < iovcnt; ++i) asked += iov[i].iov_len;
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
      const size_t landed = std::min(size_t(n), direct_len);
      if (layout_.trailer_len) {
        size_t left = landed;
        for (int i = 0; left > 0; ++i) {
          const size_t k = std::min(iov[i].iov_len, left);
          crc_ = crc32c_update(crc_, iov[i].iov_base, k);
          left -= k;
        }
      }
      scatter_advance(landed);
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
