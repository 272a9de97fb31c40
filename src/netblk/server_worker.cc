#include "netblk/server_worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace sens::netblk::detail {

Worker::~Worker() {
  queue.reset();  // waits for owed I/O before the slots go away
  if (region) munmap(region, region_size);
  if (fd >= 0) ::close(fd);
  if (stop_fd >= 0) ::close(stop_fd);
}

// Registers the descriptors; throws (from the reactor) if epoll refuses one.
void Worker::attach() {
  reactor.add(fd, EPOLLIN, &socket_handler);
  reactor.add(stop_fd, EPOLLIN, &stop_handler);
  if (queue_fd >= 0) reactor.add(queue_fd, EPOLLIN, &queue_handler);
}

// ---- the loop: handlers, then one round at the end of the iteration ----

// Every handler and the poll timer come here first: one end_round() per loop iteration.
void Worker::begin_round() {
  if (round_scheduled) return;
  round_scheduled = true;
  // Woken from a blocking wait (not a poll while completions are owed).
  if (!poll_timer.armed()) bump(counters.wakeups);
  reactor.defer([this] { end_round(); });
}

void Worker::on_socket() {
  begin_round();
  if (stopping) return;
  work += receive();
}

void Worker::on_queue() {
  begin_round();
  work += queue->reap();  // also clears the eventfd
}

void Worker::on_stop() {
  uint64_t value;
  (void)!::read(stop_fd, &value, sizeof value);
  begin_round();
  if (stopping) return;
  stopping = true;
  // No more requests: a readable socket must not wake the wait for the I/O still owed.
  reactor.remove(fd);
}

// The poll timer: one more look at the socket (the iteration's zero-timeout epoll did it)
// and at the completions.
void Worker::poll() {
  begin_round();
}

void Worker::end_round() {
  round_scheduled = false;
  if (submitted) {
    queue->kick();  // the whole batch in one system call
    submitted = false;
  }
  if (queue->ready()) work += queue->reap();
  flush_replies();
  unsigned owed = queue->inflight();
  if (stopping && owed == 0) {
    done = true;  // Server::run() leaves its loop
    reactor.cancel(poll_timer);
    return;
  }
  if (owed > 0) {
    // Completions owed: poll for poll_us after the last work (the timer, due now, makes the
    // reactor's next wait a zero-timeout one), then sleep until the queue's eventfd. A queue
    // without an eventfd is looked at every millisecond.
    Nanos now = reactor.now();
    if (work > 0) poll_deadline = now + poll_ns;
    if (now < poll_deadline)
      reactor.arm(poll_timer, now);
    else if (queue_fd < 0)
      reactor.arm(poll_timer, now + kMilli);
    else
      reactor.cancel(poll_timer);
  } else {
    reactor.cancel(poll_timer);
  }
  work = 0;
}

// ---- receiving ----

// One batch; returns the datagrams taken. More waiting keep the socket readable, so the
// reactor's next (zero-timeout) wait comes straight back here.
int Worker::receive() {
  if (free_count == 0) return receive_busy();
  unsigned want = unsigned(std::min<size_t>(free_count, kRecvBatch));
  for (unsigned i = 0; i < want; ++i) {
    Slot* s = free_slots[free_count - 1 - i];
    msghdr& m = recv_msgs[i].msg_hdr;
    m.msg_name = &s->peer;
    m.msg_namelen = sizeof s->peer;
    m.msg_iov = s->recv_iov;
    m.msg_iovlen = 2;
    m.msg_control = nullptr;
    m.msg_controllen = 0;
    m.msg_flags = 0;
  }
  // MSG_TRUNC: msg_len is the datagram's real length, so an oversized one is seen as such.
  int got = recvmmsg(fd, recv_msgs, want, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  if (got <= 0) return 0;
  // Off the stack first: dispatch() gives the slot of a dropped datagram straight back.
  Slot* taken[kRecvBatch];
  for (int i = 0; i < got; ++i) taken[i] = free_slots[free_count - 1 - size_t(i)];
  free_count -= size_t(got);
  for (int i = 0; i < got; ++i) {
    taken[i]->peer_len = recv_msgs[i].msg_hdr.msg_namelen;
    dispatch(taken[i], recv_msgs[i].msg_len);
  }
  return got;
}

int Worker::receive_busy() {
  for (unsigned i = 0; i < kBusyBatch; ++i) {
    BusyBuffer& b = busy[i];
    b.iov = {b.header, kHeaderSize};
    msghdr& m = busy_msgs[i].msg_hdr;
    m = msghdr{};
    m.msg_name = &b.peer;
    m.msg_namelen = sizeof b.peer;
    m.msg_iov = &b.iov;
    m.msg_iovlen = 1;
  }
  int got = recvmmsg(fd, busy_msgs, kBusyBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
  if (got <= 0) return 0;
  for (int i = 0; i < got; ++i) {
    BusyBuffer& b = busy[i];
    socklen_t peer_len = busy_msgs[i].msg_hdr.msg_namelen;
    Header h;
    if (!accept_datagram(reinterpret_cast<sockaddr*>(&b.peer), b.header, busy_msgs[i].msg_len, &h))
      continue;
    bump(counters.requests);
    bump(counters.busy);
    h.op |= kReplyBit;
    h.status = kBusy;
    encode_header(h, b.header);
    queue_datagram(&b.peer, peer_len, &b.iov, 1);
  }
  return got;
}

// Whether a datagram is an NBLK request from an allowed source at all (else it is dropped
// without an answer).
bool Worker::accept_datagram(const sockaddr* peer, const uint8_t* bytes, uint32_t len, Header* h) {
  if (!filter.allows(peer)) {
    bump(counters.filtered);
    return false;
  }
  if (len < kHeaderSize) {
    bump(counters.dropped);
    return false;
  }
  *h = decode_header(bytes);
  if (h->magic != kMagic || (h->op & kReplyBit)) {
    bump(counters.dropped);
    return false;
  }
  return true;
}

// ---- requests ----

void Worker::dispatch(Slot* s, uint32_t len) {
  if (!accept_datagram(reinterpret_cast<sockaddr*>(&s->peer), s->request_header(), len,
                       &s->request)) {
    free_slots[free_count++] = s;
    return;
  }
  bump(counters.requests);
  const Header& req = s->request;
  if (req.version != kVersion) return answer_bare(s, kBadRequest);
  uint32_t body = len - kHeaderSize;
  switch (req.op) {
    case kOpInfo:
      return answer_info(s);
    case kOpRead:
      if (uint16_t status = check_extent(req, info.max_read)) return answer_bare(s, status);
      return start_read(s);
    case kOpWrite:
      // Too long, or a length the datagram does not carry (truncated or padded).
      if (req.length > info.max_io || body != req.length) return answer_bare(s, kBadRequest);
      if (read_only) return answer_bare(s, kReadOnly);
      if (uint16_t status = check_extent(req, info.max_io)) return answer_bare(s, status);
      return start_device_io(s, storage::Op::kWrite, s->payload);
    case kOpFlush:
      return start_device_io(s, storage::Op::kFlush, nullptr);
  }
  return answer_bare(s, kBadRequest);
}

uint16_t Worker::check_extent(const Header& req, uint32_t limit) const {
  if (req.length == 0 || req.length > limit) return kBadRequest;
  if (req.offset % info.sector_size != 0 || req.length % info.sector_size != 0) return kBadRequest;
  if (req.offset > info.size || req.length > info.size - req.offset) return kOutOfRange;
  return kOk;
}

void Worker::start_read(Slot* s) {
  // Memory devices: send straight from the device's bytes.
  if (const uint8_t* bytes = device->mapped(s->request.offset, s->request.length)) {
    bump(counters.bytes_read, s->request.length);
    return answer_read(s, bytes);
  }
  start_device_io(s, storage::Op::kRead, s->payload);
}

void Worker::start_device_io(Slot* s, storage::Op op, uint8_t* buf) {
  storage::Request& io = s->io;
  io.op = op;
  io.fua = op == storage::Op::kWrite && (s->request.flags & kFlagFua);
  io.offset = op == storage::Op::kFlush ? 0 : s->request.offset;
  io.length = op == storage::Op::kFlush ? 0 : s->request.length;
  io.buf = buf;
  io.result = 0;
  io.on_complete = &Worker::io_done;
  io.user = s;
  submitted = true;
  queue->submit(&io);  // memory devices call io_done right here
}

void Worker::io_done(storage::Request* io) {
  Slot* s = static_cast<Slot*>(io->user);
  s->worker->complete(s);
}

void Worker::complete(Slot* s) {
  if (s->io.result != 0) {
    bump(counters.io_errors);
    return answer_bare(s, kIoError);
  }
  switch (s->request.op) {
    case kOpRead:
      bump(counters.bytes_read, s->request.length);
      return answer_read(s, s->payload);
    case kOpWrite:
      bump(counters.bytes_written, s->request.length);
      return answer_bare(s, kOk);
    default:
      return answer_bare(s, kOk);
  }
}

// ---- replies: built in the slot's own buffer, sent by flush_replies() ----

// The request's header, turned into the reply in place.
void Worker::answer_bare(Slot* s, uint16_t status) {
  if (status != kOk && status != kIoError) bump(counters.refused);
  Header h = s->request;
  h.op |= kReplyBit;
  h.status = status;
  encode_header(h, s->request_header());
  s->send_iov[0] = {s->request_header(), kHeaderSize};
  queue_datagram(&s->peer, s->peer_len, s->send_iov, 1);
  answered[answered_count++] = s;
}

void Worker::answer_info(Slot* s) {
  Header h = s->request;
  h.op |= kReplyBit;
  h.status = kOk;
  h.length = kInfoBodySize;
  encode_header(h, s->request_header());
  encode_info(info, s->payload);  // the body follows the header in the same buffer
  s->send_iov[0] = {s->request_header(), kHeaderSize + kInfoBodySize};
  queue_datagram(&s->peer, s->peer_len, s->send_iov, 1);
  answered[answered_count++] = s;
}

// One datagram per max_io bytes: [its header | its piece of `data`], no copy of the data.
void Worker::answer_read(Slot* s, const uint8_t* data) {
  const Header& req = s->request;
  for (uint32_t done = 0, piece = 0; done < req.length; done += info.max_io, ++piece) {
    Header h = req;
    h.op |= kReplyBit;
    h.status = kOk;
    h.offset = req.offset + done;
    h.length = std::min(info.max_io, req.length - done);
    uint8_t* header = s->base + piece * kReplyHeaderStride;
    encode_header(h, header);
    iovec* iov = &s->send_iov[2 * piece];
    iov[0] = {header, kHeaderSize};
    iov[1] = {const_cast<uint8_t*>(data + done), h.length};
    queue_datagram(&s->peer, s->peer_len, iov, 2);
  }
  answered[answered_count++] = s;
}

void Worker::queue_datagram(sockaddr_storage* peer, socklen_t peer_len, iovec* iov,
                            size_t iov_count) {
  msghdr& m = send_msgs[send_count++].msg_hdr;
  m.msg_name = peer;
  m.msg_namelen = peer_len;
  m.msg_iov = iov;
  m.msg_iovlen = iov_count;
  m.msg_control = nullptr;
  m.msg_controllen = 0;
  m.msg_flags = 0;
}

void Worker::flush_replies() {
  size_t sent = 0;
  while (sent < send_count) {
    int n = sendmmsg(fd, &send_msgs[sent], unsigned(send_count - sent), 0);
    if (n > 0) {
      sent += size_t(n);
      bump(counters.replies, uint64_t(n));
    } else if (errno != EINTR) {
      ++sent;  // this datagram cannot go (an unreachable peer): its client will ask again
    }
  }
  send_count = 0;
  for (size_t i = 0; i < answered_count; ++i) free_slots[free_count++] = answered[i];
  answered_count = 0;
}

void SocketHandler::on_event(uint32_t) {
  w_.on_socket();
}
void QueueHandler::on_event(uint32_t) {
  w_.on_queue();
}
void StopHandler::on_event(uint32_t) {
  w_.on_stop();
}

}  // namespace sens::netblk::detail
