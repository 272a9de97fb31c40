#include "netblk/client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>

namespace sens::netblk {

namespace {

constexpr unsigned kRecvBatch = 32;
constexpr uint32_t kRecvBufferSize = 65536;  // any datagram
constexpr uint32_t kMaxWindow = 65535;       // the entry index lives in the cookie's low 16 bits
constexpr int kSocketBuffer = 8 << 20;

}  // namespace

struct Client::Entry {
  Io io;
  bool active = false;
  uint64_t cookie = 0;
  Nanos first_sent = 0;
  Nanos deadline = 0;      // resend (or give up) when passed
  uint32_t pieces = 1;     // READ: reply datagrams expected
  uint32_t received = 0;   // READ: bit i set when piece i arrived
  bool busy_wait = false;  // the resend due is for a busy answer, not a timeout
  uint8_t header[kHeaderSize];
  iovec iov[2];
};

Client::Client(int fd, const ClientOptions& options)
    : fd_(fd), options_(options), generation_(std::random_device{}()) {
  recv_space_.resize(size_t(kRecvBatch) * kRecvBufferSize);
  recv_msgs_.resize(kRecvBatch);
  recv_iovs_.resize(kRecvBatch);
  set_window(options.window);
}

Client::~Client() {
  ::close(fd_);
}

void Client::set_window(uint32_t window) {
  options_.window = std::clamp<uint32_t>(window, 1, kMaxWindow);
  entries_.assign(options_.window, Entry());
  free_entries_.clear();
  for (uint32_t i = options_.window; i-- > 0;) free_entries_.push_back(i);
  send_msgs_.resize(options_.window);
  active_ = 0;
}

std::unique_ptr<Client> Client::connect(const std::string& host, const std::string& port,
                                        const ClientOptions& options, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    *error = host + ":" + port + ": " + gai_strerror(gai);
    return nullptr;
  }
  int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // Connected: the kernel hands this socket the server's datagrams only.
  if (fd < 0 || ::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    *error = host + ":" + port + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    freeaddrinfo(found);
    return nullptr;
  }
  freeaddrinfo(found);
  int buffer = kSocketBuffer;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  std::unique_ptr<Client> client(new Client(fd, options));
  int status = client->query_info(&client->info_);
  if (status != kOk) {
    *error = host + ":" + port + ": INFO: " + status_name(status);
    return nullptr;
  }
  if (client->info_.sector_size == 0 || client->info_.max_io == 0 ||
      client->info_.max_io > kRecvBufferSize - kHeaderSize) {
    *error = host + ":" + port + ": INFO reply makes no sense (sector " +
             std::to_string(client->info_.sector_size) + ", max_io " +
             std::to_string(client->info_.max_io) + ")";
    return nullptr;
  }
  return client;
}

void Client::run(const NextFn& next, const DoneFn& done) {
  done_ = &done;
  bool more = true;
  next_deadline_ = LLONG_MAX;
  while (more || active_ > 0) {
    Nanos now = monotonic_now();
    while (more && !free_entries_.empty()) {
      uint32_t index = free_entries_.back();
      Entry& e = entries_[index];
      e.io = Io();
      if (!next(e.io)) {
        more = false;
        break;
      }
      free_entries_.pop_back();
      start(e, index, now);
    }
    flush_sends();
    if (active_ == 0) break;
    // A fresh clock: a reply to a request sent just now must not measure 0 ns.
    now = monotonic_now();
    int got = receive(now);
    if (got == 0 && options_.poll > 0) {
      const Nanos poll_end = now + options_.poll;
      do {
        now = monotonic_now();
        got = receive(now);
      } while (got == 0 && now < poll_end && now < next_deadline_);
    }
    if (got == 0) {
      // Nothing waiting: sleep until a reply or the nearest resend.
      now = monotonic_now();
      if (now < next_deadline_) {
        Nanos wait = next_deadline_ - now;
        timespec timeout{time_t(wait / kSecond), long(wait % kSecond)};
        pollfd pfd{fd_, POLLIN, 0};
        if (ppoll(&pfd, 1, &timeout, nullptr) > 0) receive(monotonic_now());
      }
    }
    now = monotonic_now();
    if (now >= next_deadline_) check_deadlines(now);
  }
  done_ = nullptr;
}

void Client::start(Entry& e, uint32_t index, Nanos now) {
  e.active = true;
  e.cookie = (++generation_ << 16) | index;
  e.io.sends = 0;
  e.pieces =
      e.io.op == kOpRead && e.io.length > 0 ? (e.io.length + info_.max_io - 1) / info_.max_io : 1;
  e.received = 0;
  e.busy_wait = false;
  Header h;
  h.op = e.io.op;
  h.flags = e.io.fua ? kFlagFua : 0;
  h.cookie = e.cookie;
  h.offset = e.io.offset;
  h.length = e.io.length;
  encode_header(h, e.header);
  e.iov[0] = {e.header, kHeaderSize};
  e.iov[1] = {e.io.buf, e.io.op == kOpWrite ? e.io.length : 0};
  e.first_sent = now;
  ++active_;
  queue_send(e);
  e.deadline = now + options_.retry_after;
  next_deadline_ = std::min(next_deadline_, e.deadline);
}

void Client::queue_send(Entry& e) {
  msghdr& m = send_msgs_[send_count_++].msg_hdr;
  m = msghdr{};
  m.msg_iov = e.iov;
  m.msg_iovlen = e.io.op == kOpWrite ? 2 : 1;
  ++e.io.sends;
}

void Client::flush_sends() {
  size_t sent = 0;
  while (sent < send_count_) {
    int n = sendmmsg(fd_, &send_msgs_[sent], unsigned(send_count_ - sent), 0);
    if (n > 0) {
      sent += size_t(n);
      stats_.sent += uint64_t(n);
    } else if (errno != EINTR) {
      ++sent;  // lost like a dropped datagram: the timeout sends it again
    }
  }
  send_count_ = 0;
}

int Client::receive(Nanos now) {
  for (unsigned i = 0; i < kRecvBatch; ++i) {
    recv_iovs_[i] = {&recv_space_[size_t(i) * kRecvBufferSize], kRecvBufferSize};
    msghdr& m = recv_msgs_[i].msg_hdr;
    m = msghdr{};
    m.msg_iov = &recv_iovs_[i];
    m.msg_iovlen = 1;
  }
  int got = recvmmsg(fd_, recv_msgs_.data(), kRecvBatch, MSG_DONTWAIT, nullptr);
  if (got <= 0) return 0;  // nothing, or an ICMP error from a server not (yet) there
  for (int i = 0; i < got; ++i)
    handle_reply(&recv_space_[size_t(i) * kRecvBufferSize], recv_msgs_[i].msg_len, now);
  return got;
}

void Client::handle_reply(const uint8_t* datagram, uint32_t len, Nanos now) {
  if (len < kHeaderSize) {
    ++stats_.stray;
    return;
  }
  Header h = decode_header(datagram);
  uint32_t index = uint32_t(h.cookie & 0xffff);
  if (h.magic != kMagic || !(h.op & kReplyBit) || index >= entries_.size()) {
    ++stats_.stray;
    return;
  }
  Entry& e = entries_[index];
  if (!e.active || e.cookie != h.cookie || (h.op & ~kReplyBit) != e.io.op) {
    ++stats_.stray;  // a late answer to a finished request
    return;
  }
  if (h.status == kBusy) {
    ++stats_.busy;
    e.busy_wait = true;
    e.deadline = now + options_.busy_retry_after;
    next_deadline_ = std::min(next_deadline_, e.deadline);
    return;
  }
  if (h.status != kOk) return finish(e, h.status, now);
  const uint8_t* body = datagram + kHeaderSize;
  uint32_t body_len = len - kHeaderSize;
  switch (e.io.op) {
    case kOpRead: {
      uint64_t at = h.offset - e.io.offset;
      if (h.offset < e.io.offset || at >= e.io.length || at % info_.max_io != 0 ||
          at / info_.max_io >= 32 ||
          h.length != std::min<uint64_t>(info_.max_io, e.io.length - at) || body_len != h.length) {
        ++stats_.stray;
        return;
      }
      uint32_t bit = 1u << (at / info_.max_io);
      if (e.received & bit) return;  // a duplicate piece, from a resend
      e.received |= bit;
      if (e.io.buf) std::memcpy(e.io.buf + at, body, h.length);
      if (e.received == (e.pieces >= 32 ? ~0u : (1u << e.pieces) - 1)) finish(e, kOk, now);
      return;
    }
    case kOpInfo:
      if (body_len < kInfoBodySize) {
        ++stats_.stray;
        return;
      }
      if (e.io.buf) std::memcpy(e.io.buf, body, kInfoBodySize);
      return finish(e, kOk, now);
    default:
      return finish(e, kOk, now);
  }
}

void Client::finish(Entry& e, int status, Nanos now) {
  e.active = false;
  e.io.status = status;
  e.io.latency = now - e.first_sent;
  if (status != kOk) ++stats_.failed;
  --active_;
  free_entries_.push_back(uint32_t(&e - entries_.data()));
  (*done_)(e.io);
}

void Client::check_deadlines(Nanos now) {
  Nanos nearest = LLONG_MAX;
  for (Entry& e : entries_) {
    if (!e.active) continue;
    if (e.deadline <= now) {
      if (now - e.first_sent >= options_.give_up_after) {
        finish(e, kNoReply, now);
        continue;
      }
      // Heard nothing (or busy): ask again; pieces already here are kept.
      if (!e.busy_wait) ++stats_.timeouts;
      e.busy_wait = false;
      queue_send(e);
      e.deadline = now + options_.retry_after;
    }
    nearest = std::min(nearest, e.deadline);
  }
  next_deadline_ = nearest;
  flush_sends();
}

int Client::read(uint64_t offset, void* buf, uint64_t length) {
  uint64_t done_bytes = 0;
  int first_error = kOk;
  auto* out = static_cast<uint8_t*>(buf);
  run(
      [&](Io& io) {
        if (done_bytes >= length || first_error != kOk) return false;
        io.op = kOpRead;
        io.offset = offset + done_bytes;
        io.length = uint32_t(std::min<uint64_t>(info_.max_read, length - done_bytes));
        io.buf = out + done_bytes;
        done_bytes += io.length;
        return true;
      },
      [&](const Io& io) {
        if (io.status != kOk && first_error == kOk) first_error = io.status;
      });
  return first_error;
}

int Client::write(uint64_t offset, const void* buf, uint64_t length, bool fua) {
  uint64_t done_bytes = 0;
  int first_error = kOk;
  auto* in = static_cast<uint8_t*>(const_cast<void*>(buf));  // only ever sent from
  run(
      [&](Io& io) {
        if (done_bytes >= length || first_error != kOk) return false;
        io.op = kOpWrite;
        io.fua = fua;
        io.offset = offset + done_bytes;
        io.length = uint32_t(std::min<uint64_t>(info_.max_io, length - done_bytes));
        io.buf = in + done_bytes;
        done_bytes += io.length;
        return true;
      },
      [&](const Io& io) {
        if (io.status != kOk && first_error == kOk) first_error = io.status;
      });
  return first_error;
}

namespace {

int run_single(Client& client, uint8_t op, uint8_t* buf) {
  bool issued = false;
  int status = kNoReply;
  client.run(
      [&](Io& io) {
        if (issued) return false;
        issued = true;
        io.op = op;
        io.buf = buf;
        return true;
      },
      [&](const Io& io) { status = io.status; });
  return status;
}

}  // namespace

int Client::flush() {
  return run_single(*this, kOpFlush, nullptr);
}

int Client::query_info(Info* info) {
  uint8_t body[kInfoBodySize];
  int status = run_single(*this, kOpInfo, body);
  if (status == kOk) *info = decode_info(body);
  return status;
}

}  // namespace sens::netblk
