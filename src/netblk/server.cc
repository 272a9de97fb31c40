#include "netblk/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include "common/clock.h"
#include "common/log.h"
#include "common/units.h"
#include "netblk/address_filter.h"
#include "reactor/reactor.h"

namespace sens::netblk {

namespace {

// Each slot buffer: this much room for headers, then the payload on a 4096 boundary (O_DIRECT).
// The request header is received right before the payload; READ reply headers sit at the start.
constexpr uint32_t kHeaderRoom = 4096;
constexpr uint32_t kReplyHeaderStride = 32;
constexpr unsigned kRecvBatch = 64;
constexpr unsigned kBusyBatch = 32;
constexpr uint32_t kMaxSlots = 16384;
constexpr uint32_t kMaxMtu = 65535;
constexpr size_t kPrefaultLimit = 64u << 20;
constexpr int kSocketBuffer = 8 << 20;

uint64_t round_up(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

// Single-writer counter: a plain load and store, no locked instruction on the data path.
void bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

struct Slot {
  uint8_t* base = nullptr;     // kHeaderRoom bytes of headers, then the payload
  uint8_t* payload = nullptr;  // base + kHeaderRoom: 4096-aligned
  sockaddr_storage peer{};
  socklen_t peer_len = 0;
  Header request;
  storage::Request io;
  iovec recv_iov[2];
  iovec send_iov[2 * kMaxReadPieces];
  struct Worker* worker = nullptr;

  uint8_t* request_header() { return payload - kHeaderSize; }
};

// A datagram answered busy, received when no slot is free: its header only.
struct BusyBuffer {
  uint8_t header[kHeaderSize];
  sockaddr_storage peer;
  iovec iov;
};

struct Counters {
  std::atomic<uint64_t> requests{0}, replies{0}, dropped{0}, filtered{0}, refused{0}, busy{0},
      io_errors{0}, bytes_read{0}, bytes_written{0}, wakeups{0};
};

struct Worker;

// The worker's file descriptors on the reactor: each forwards its readiness to the worker.
class SocketHandler final : public EventHandler {
 public:
  explicit SocketHandler(Worker& w) : w_(w) {}
  void on_event(uint32_t events) override;

 private:
  Worker& w_;
};

class QueueHandler final : public EventHandler {
 public:
  explicit QueueHandler(Worker& w) : w_(w) {}
  void on_event(uint32_t events) override;

 private:
  Worker& w_;
};

class StopHandler final : public EventHandler {
 public:
  explicit StopHandler(Worker& w) : w_(w) {}
  void on_event(uint32_t events) override;

 private:
  Worker& w_;
};

// Serves one socket and one device queue on a Reactor. Per loop iteration: the socket's handler
// takes one recvmmsg batch and queues its device I/O, the queue's handler reaps completions,
// and one deferred round at the end of the iteration kicks the device once for the whole batch,
// reaps what is ready and sends every reply with sendmmsg.
struct Worker {
  explicit Worker(Reactor& r) : reactor(r), poll_timer([this] { poll(); }) {}

  // Set up once.
  Reactor& reactor;
  int fd = -1;
  int stop_fd = -1;
  int queue_fd = -1;
  storage::Device* device = nullptr;
  std::unique_ptr<storage::Queue> queue;
  AddressFilter filter;
  Info info;
  bool read_only = false;
  Nanos poll_ns = 0;
  uint8_t* region = nullptr;
  size_t region_size = 0;
  std::vector<Slot> slots;
  std::vector<Slot*> free_slots;  // a stack
  size_t free_count = 0;
  mmsghdr recv_msgs[kRecvBatch];
  BusyBuffer busy[kBusyBatch];
  mmsghdr busy_msgs[kBusyBatch];
  std::vector<mmsghdr> send_msgs;  // every datagram of one round
  size_t send_count = 0;
  std::vector<Slot*> answered;  // slots whose replies are in send_msgs
  size_t answered_count = 0;
  SocketHandler socket_handler{*this};
  QueueHandler queue_handler{*this};
  StopHandler stop_handler{*this};
  Timer poll_timer;  // armed to now while polling for owed completions

  // The loop's state (the reactor's thread only).
  bool submitted = false;        // device I/O queued since the last kick
  bool round_scheduled = false;  // end_round() is deferred for this iteration
  bool stopping = false;
  bool done = false;  // stopped and every owed reply sent
  int work = 0;       // datagrams taken and completions reaped this iteration
  Nanos poll_deadline = 0;
  Counters counters;

  ~Worker() {
    queue.reset();  // waits for owed I/O before the slots go away
    if (region) munmap(region, region_size);
    if (fd >= 0) ::close(fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }

  // Registers the descriptors; throws (from the reactor) if epoll refuses one.
  void attach() {
    reactor.add(fd, EPOLLIN, &socket_handler);
    reactor.add(stop_fd, EPOLLIN, &stop_handler);
    if (queue_fd >= 0) reactor.add(queue_fd, EPOLLIN, &queue_handler);
  }

  // ---- the loop: handlers, then one round at the end of the iteration ----

  // Every handler and the poll timer come here first: one end_round() per loop iteration.
  void begin_round() {
    if (round_scheduled) return;
    round_scheduled = true;
    // Woken from a blocking wait (not a poll while completions are owed).
    if (!poll_timer.armed()) bump(counters.wakeups);
    reactor.defer([this] { end_round(); });
  }

  void on_socket() {
    begin_round();
    if (stopping) return;
    work += receive();
  }

  void on_queue() {
    begin_round();
    work += queue->reap();  // also clears the eventfd
  }

  void on_stop() {
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
  void poll() { begin_round(); }

  void end_round() {
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
  int receive() {
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

  int receive_busy() {
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
      if (!accept_datagram(reinterpret_cast<sockaddr*>(&b.peer), b.header, busy_msgs[i].msg_len,
                           &h))
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
  bool accept_datagram(const sockaddr* peer, const uint8_t* bytes, uint32_t len, Header* h) {
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

  void dispatch(Slot* s, uint32_t len) {
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

  uint16_t check_extent(const Header& req, uint32_t limit) const {
    if (req.length == 0 || req.length > limit) return kBadRequest;
    if (req.offset % info.sector_size != 0 || req.length % info.sector_size != 0)
      return kBadRequest;
    if (req.offset > info.size || req.length > info.size - req.offset) return kOutOfRange;
    return kOk;
  }

  void start_read(Slot* s) {
    // Memory devices: send straight from the device's bytes.
    if (const uint8_t* bytes = device->mapped(s->request.offset, s->request.length)) {
      bump(counters.bytes_read, s->request.length);
      return answer_read(s, bytes);
    }
    start_device_io(s, storage::Op::kRead, s->payload);
  }

  void start_device_io(Slot* s, storage::Op op, uint8_t* buf) {
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

  static void io_done(storage::Request* io) {
    Slot* s = static_cast<Slot*>(io->user);
    s->worker->complete(s);
  }

  void complete(Slot* s) {
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
  void answer_bare(Slot* s, uint16_t status) {
    if (status != kOk && status != kIoError) bump(counters.refused);
    Header h = s->request;
    h.op |= kReplyBit;
    h.status = status;
    encode_header(h, s->request_header());
    s->send_iov[0] = {s->request_header(), kHeaderSize};
    queue_datagram(&s->peer, s->peer_len, s->send_iov, 1);
    answered[answered_count++] = s;
  }

  void answer_info(Slot* s) {
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
  void answer_read(Slot* s, const uint8_t* data) {
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

  void queue_datagram(sockaddr_storage* peer, socklen_t peer_len, iovec* iov, size_t iov_count) {
    msghdr& m = send_msgs[send_count++].msg_hdr;
    m.msg_name = peer;
    m.msg_namelen = peer_len;
    m.msg_iov = iov;
    m.msg_iovlen = iov_count;
    m.msg_control = nullptr;
    m.msg_controllen = 0;
    m.msg_flags = 0;
  }

  void flush_replies() {
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
};

void SocketHandler::on_event(uint32_t) {
  w_.on_socket();
}
void QueueHandler::on_event(uint32_t) {
  w_.on_queue();
}
void StopHandler::on_event(uint32_t) {
  w_.on_stop();
}

std::string address_text(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (address->sa_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
    return std::string(text) + ":" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(address);
  inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
  port = ntohs(a->sin6_port);
  return "[" + std::string(text) + "]:" + std::to_string(port);
}

}  // namespace

struct Server::Impl {
  std::unique_ptr<storage::Device> device;  // outlives the worker's queue
  Reactor reactor;
  Worker worker{reactor};
  uint16_t port = 0;
  std::string bound;
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

std::unique_ptr<Server> Server::create(const ServerOptions& options, const std::string& ns,
                                       std::string* error) {
  auto device = storage::Device::open(ns, error, options.read_only);
  if (!device) return nullptr;
  return create(options, std::move(device), error);
}

std::unique_ptr<Server> Server::create(const ServerOptions& options,
                                       std::unique_ptr<storage::Device> device,
                                       std::string* error) {
  std::string scratch;
  if (!error) error = &scratch;
  if (!device) {
    *error = "no device";
    return nullptr;
  }
  if (options.slots < 1 || options.slots > kMaxSlots) {
    *error = "--slots must be 1.." + std::to_string(kMaxSlots);
    return nullptr;
  }
  if (options.mtu > kMaxMtu) {
    *error = "--mtu must be at most " + std::to_string(kMaxMtu);
    return nullptr;
  }
  const uint32_t sector = device->block_size();
  const uint32_t max_io = max_io_for(options.mtu, sector);
  if (max_io == 0) {
    uint32_t overhead = kIpUdpOverhead + kHeaderSize;
    *error = device->describe() + ": its " + std::to_string(sector) +
             "-byte sectors do not fit in one datagram at MTU " + std::to_string(options.mtu) +
             " (" + std::to_string(overhead) +
             " bytes go to the IP, UDP and NBLK headers); use --mtu " +
             std::to_string(sector + overhead) +
             " or more (e.g. --mtu 9000 on a jumbo-frame link; loopback takes 65536)";
    return nullptr;
  }

  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>();  // the reactor throws if it gets no epoll or eventfd
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  Worker& w = impl->worker;
  for (const std::string& network : options.allow)
    if (!w.filter.add(network, error)) return nullptr;

  w.device = device.get();
  w.read_only = options.read_only || device->read_only();
  w.poll_ns = Nanos(options.poll_us) * kMicro;
  w.info.size = device->size();
  w.info.sector_size = sector;
  w.info.max_io = max_io;
  w.info.max_read = kMaxReadPieces * max_io;
  w.info.flags = w.read_only ? kInfoFlagReadOnly : 0;
  w.info.slots = options.slots;

  // The socket.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(options.port);
  int gai = getaddrinfo(options.listen.empty() ? nullptr : options.listen.c_str(),
                        port_text.c_str(), &hints, &found);
  if (gai != 0) {
    *error = "--listen " + options.listen + ": " + gai_strerror(gai);
    return nullptr;
  }
  w.fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (w.fd >= 0 && found->ai_family == AF_INET6) {
    int off = 0;  // "::" also takes IPv4 clients
    setsockopt(w.fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  if (w.fd < 0 || bind(w.fd, found->ai_addr, found->ai_addrlen) != 0) {
    *error = "cannot bind UDP " + address_text(found->ai_addr) + ": " + std::strerror(errno);
    freeaddrinfo(found);
    return nullptr;
  }
  freeaddrinfo(found);
  int buffer = kSocketBuffer;  // bursts of a whole window; the kernel caps it at rmem_max
  setsockopt(w.fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  setsockopt(w.fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  getsockname(w.fd, reinterpret_cast<sockaddr*>(&local), &local_len);
  impl->bound = address_text(reinterpret_cast<sockaddr*>(&local));
  impl->port = local.ss_family == AF_INET
                   ? ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port)
                   : ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);

  // Every slot, allocated now and never again.
  const size_t stride = kHeaderRoom + round_up(w.info.max_read, 4096);
  w.region_size = stride * options.slots;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (w.region_size <= kPrefaultLimit) flags |= MAP_POPULATE;
  void* region = mmap(nullptr, w.region_size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (region == MAP_FAILED) {
    *error =
        "cannot map " + format_size(w.region_size) + " of slot buffers: " + std::strerror(errno);
    return nullptr;
  }
  w.region = static_cast<uint8_t*>(region);
  w.slots.resize(options.slots);
  w.free_slots.resize(options.slots);
  for (uint32_t i = 0; i < options.slots; ++i) {
    Slot& s = w.slots[i];
    s.base = w.region + i * stride;
    s.payload = s.base + kHeaderRoom;
    s.worker = &w;
    // A WRITE's payload lands on the 4096 boundary, its header just before.
    s.recv_iov[0] = {s.request_header(), kHeaderSize};
    s.recv_iov[1] = {s.payload, stride - kHeaderRoom};
    w.free_slots[options.slots - 1 - i] = &s;  // slot 0 is used first
  }
  w.free_count = options.slots;
  w.send_msgs.resize(size_t(options.slots) * kMaxReadPieces + kBusyBatch);
  w.answered.resize(options.slots);
  w.queue = device->make_queue(options.slots);

  w.queue_fd = w.queue->event_fd();
  w.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w.stop_fd < 0) {
    *error = std::string("eventfd: ") + std::strerror(errno);
    return nullptr;
  }
  try {
    w.attach();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  impl->device = std::move(device);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

uint16_t Server::port() const {
  return impl_->port;
}
const Info& Server::info() const {
  return impl_->worker.info;
}
storage::Device& Server::device() {
  return *impl_->device;
}

std::string Server::describe() const {
  const Info& i = impl_->worker.info;
  return "netblk serving " + impl_->device->describe() + " on udp " + impl_->bound + ": sector " +
         std::to_string(i.sector_size) + " B, max_io " + std::to_string(i.max_io) +
         " B, max_read " + std::to_string(i.max_read) + " B, " + std::to_string(i.slots) +
         " slots" + (i.read_only() ? ", read-only" : "");
}

int Server::run() {
  Worker& w = impl_->worker;
  // Until the stop handler finds nothing owed. Each wait is untimed unless a timer is armed:
  // an idle server sleeps until a datagram, a completion or stop().
  while (!w.done) impl_->reactor.run_once(-1);
  return w.device->sync();
}

void Server::stop() {
  // Signal-safe: the stop handler does the rest on the reactor's thread.
  uint64_t one = 1;
  (void)!::write(impl_->worker.stop_fd, &one, sizeof one);
}

ServerStats Server::stats() const {
  const Counters& c = impl_->worker.counters;
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  ServerStats s;
  s.requests = get(c.requests);
  s.replies = get(c.replies);
  s.dropped = get(c.dropped);
  s.filtered = get(c.filtered);
  s.refused = get(c.refused);
  s.busy = get(c.busy);
  s.io_errors = get(c.io_errors);
  s.bytes_read = get(c.bytes_read);
  s.bytes_written = get(c.bytes_written);
  s.wakeups = get(c.wakeups);
  return s;
}

}  // namespace sens::netblk
