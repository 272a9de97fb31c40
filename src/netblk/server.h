#pragma once
// An NBLK server: one worker that serves a storage::Device over UDP with no payload copy in
// user space, on a sens::Reactor of its own. Requests come in batches (recvmmsg) into a fixed
// set of slots, device I/O goes to the device as one batch (one kick) per loop iteration,
// replies leave in batches (sendmmsg) from the same slot buffers. While device completions are
// owed the worker polls up to poll_us, then blocks.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "netblk/protocol.h"
#include "storage/device.h"

namespace sens::netblk {

struct ServerOptions {
  std::string listen = "0.0.0.0";  // an IPv4 or IPv6 address (or name) to bind
  uint16_t port = 0;               // 0: an ephemeral port, see Server::port()
  bool read_only = false;          // refuse WRITE even where the device would take it
  uint32_t mtu = 1500;             // sizes max_io: one reply datagram fits this link MTU
  uint32_t slots = 256;            // requests held at once; more are answered busy
  uint32_t poll_us = 50;           // how long to poll for owed completions before blocking
  std::vector<std::string> allow;  // ADDR/PREFIX sources to answer; empty: everybody
};

// Counters since start. Written by the worker only, readable from any thread.
struct ServerStats {
  uint64_t requests = 0;   // NBLK requests taken (answered or refused)
  uint64_t replies = 0;    // datagrams sent
  uint64_t dropped = 0;    // not requests: short, wrong magic, reply bit set
  uint64_t filtered = 0;   // from sources outside --allow
  uint64_t refused = 0;    // answered with bad request, out of range or read-only
  uint64_t busy = 0;       // answered busy: no free slot
  uint64_t io_errors = 0;  // answered I/O error
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t wakeups = 0;  // loop iterations woken from a blocking wait by an event
};

class Server {
 public:
  // Binds the socket and allocates every slot; nullptr and *error on failure (e.g. a sector
  // size that does not fit one datagram at the MTU).
  static std::unique_ptr<Server> create(const ServerOptions& options,
                                        std::unique_ptr<storage::Device> device,
                                        std::string* error);
  // Opens the namespace spec ("ram:1G", "file:/dev/nvme0n1", ...) first.
  static std::unique_ptr<Server> create(const ServerOptions& options, const std::string& ns,
                                        std::string* error);
  ~Server();

  uint16_t port() const;
  const Info& info() const;  // what INFO answers
  storage::Device& device();
  std::string describe() const;  // one line for a log

  // Runs the server's reactor on the calling thread until stop(); then finishes the I/O owed,
  // answers it, and makes every write durable (device sync). Returns 0, or -errno of that sync.
  int run();
  // From any thread or a signal handler (one eventfd write; the reactor does the rest).
  void stop();
  ServerStats stats() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sens::netblk
