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
#include "netblk/server_worker.h"

namespace sens::netblk {

namespace {

using detail::Counters;
using detail::kBusyBatch;
using detail::kHeaderRoom;
using detail::Slot;
using detail::Worker;

constexpr uint32_t kMaxSlots = 16384;
constexpr uint32_t kMaxMtu = 65535;
constexpr size_t kPrefaultLimit = 64u << 20;
constexpr int kSocketBuffer = 8 << 20;

uint64_t round_up(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
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
