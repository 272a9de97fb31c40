#pragma once
// The NBLK server's worker: one socket and one device queue on a Reactor, the data path of
// netblk::Server (server.cc sets it up: socket, slots, queue; server_worker.cc runs it).
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "netblk/address_filter.h"
#include "netblk/protocol.h"
#include "reactor/reactor.h"
#include "storage/device.h"

namespace sens::netblk::detail {

// Each slot buffer: this much room for headers, then the payload on a 4096 boundary (O_DIRECT).
// The request header is received right before the payload; READ reply headers sit at the start.
constexpr uint32_t kHeaderRoom = 4096;
constexpr uint32_t kReplyHeaderStride = 32;
constexpr unsigned kRecvBatch = 64;
constexpr unsigned kBusyBatch = 32;

// Single-writer counter: a plain load and store, no locked instruction on the data path.
inline void bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
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

  ~Worker();  // waits for owed I/O, then unmaps the slots and closes the sockets

  // Registers the descriptors; throws (from the reactor) if epoll refuses one.
  void attach();

  // The loop: handlers, then one round at the end of the iteration.
  void begin_round();
  void on_socket();
  void on_queue();
  void on_stop();
  void poll();
  void end_round();

  // Receiving.
  int receive();
  int receive_busy();
  bool accept_datagram(const sockaddr* peer, const uint8_t* bytes, uint32_t len, Header* h);

  // Requests.
  void dispatch(Slot* s, uint32_t len);
  uint16_t check_extent(const Header& req, uint32_t limit) const;
  void start_read(Slot* s);
  void start_device_io(Slot* s, storage::Op op, uint8_t* buf);
  static void io_done(storage::Request* io);
  void complete(Slot* s);

  // Replies: built in the slot's own buffer, sent by flush_replies().
  void answer_bare(Slot* s, uint16_t status);
  void answer_info(Slot* s);
  void answer_read(Slot* s, const uint8_t* data);
  void queue_datagram(sockaddr_storage* peer, socklen_t peer_len, iovec* iov, size_t iov_count);
  void flush_replies();
};

}  // namespace sens::netblk::detail
