#pragma once
// An NBLK client: keeps up to `window` requests in flight on one UDP socket, retries a request
// that hears nothing after a timeout (every request is idempotent) and one answered busy after a
// short pause, and reassembles READ replies by offset.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "netblk/protocol.h"

namespace sens::netblk {

struct ClientOptions {
  uint32_t window = 16;                 // requests in flight (1..65535)
  Nanos retry_after = 250 * kMilli;     // resend a request that heard nothing
  Nanos busy_retry_after = 2 * kMilli;  // resend a request answered busy
  Nanos give_up_after = 10 * kSecond;   // then the request fails with kNoReply
  Nanos poll = 0;  // spin this long for replies before sleeping (for a client with a spare core)
};

// One request. The caller fills op..buf; the client sets the rest on completion.
struct Io {
  uint8_t op = kOpRead;
  bool fua = false;
  uint64_t offset = 0;
  uint32_t length = 0;
  uint8_t* buf = nullptr;  // READ: destination (nullptr: data dropped); WRITE: source
  uint64_t tag = 0;        // the caller's
  int status = kOk;        // a Status
  Nanos latency = 0;       // first send to last reply
  uint32_t sends = 0;      // 1 + retries
};

struct ClientStats {
  uint64_t sent = 0;      // request datagrams
  uint64_t timeouts = 0;  // resent after hearing nothing
  uint64_t busy = 0;      // busy answers (resent after busy_retry_after)
  uint64_t stray = 0;     // replies ignored: late duplicates, garbage
  uint64_t failed = 0;    // requests that finished with a status other than ok
};

class Client {
 public:
  // Resolves host:port, and asks INFO. nullptr and *error when the server does not answer.
  static std::unique_ptr<Client> connect(const std::string& host, const std::string& port,
                                         const ClientOptions& options, std::string* error);
  ~Client();

  const Info& info() const { return info_; }
  const ClientStats& stats() const { return stats_; }
  const ClientOptions& options() const { return options_; }
  void set_window(uint32_t window);

  using NextFn = std::function<bool(Io&)>;
  using DoneFn = std::function<void(const Io&)>;
  // Keeps up to `window` requests in flight: next() fills in the next one (false: no more),
  // done() sees each as it finishes. Returns once every started request has finished.
  void run(const NextFn& next, const DoneFn& done);

  // Whole ranges, split in max_read (READ) or max_io (WRITE) pieces and pipelined. Return the
  // first status other than ok, or kOk.
  int read(uint64_t offset, void* buf, uint64_t length);
  int write(uint64_t offset, const void* buf, uint64_t length, bool fua = false);
  int flush();
  int query_info(Info* info);

 private:
  struct Entry;
  Client(int fd, const ClientOptions& options);
  void start(Entry& e, uint32_t index, Nanos now);
  void queue_send(Entry& e);
  void flush_sends();
  int receive(Nanos now);
  void handle_reply(const uint8_t* datagram, uint32_t len, Nanos now);
  void finish(Entry& e, int status, Nanos now);
  void check_deadlines(Nanos now);

  int fd_;
  ClientOptions options_;
  Info info_;
  ClientStats stats_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_entries_;
  uint64_t generation_;
  size_t active_ = 0;
  Nanos next_deadline_ = 0;
  const DoneFn* done_ = nullptr;
  std::vector<mmsghdr> send_msgs_;
  size_t send_count_ = 0;
  std::vector<uint8_t> recv_space_;
  std::vector<mmsghdr> recv_msgs_;
  std::vector<iovec> recv_iovs_;
};

}  // namespace sens::netblk
