#pragma once
// Test helpers: a server on a thread, a raw UDP peer for hand-made datagrams, and a device
// whose completions the test holds back or fails.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "netblk/client.h"
#include "netblk/protocol.h"
#include "netblk/server.h"
#include "storage/device.h"

namespace sens::netblk::testing {

// Runs a Server on its own thread; stop() joins it and keeps run()'s result.
class ServerThread {
 public:
  bool start(const ServerOptions& options, std::unique_ptr<storage::Device> device,
             std::string* error) {
    server_ = Server::create(options, std::move(device), error);
    if (!server_) return false;
    thread_ = std::thread([this] { result_ = server_->run(); });
    return true;
  }
  bool start(const ServerOptions& options, const std::string& ns, std::string* error) {
    server_ = Server::create(options, ns, error);
    if (!server_) return false;
    thread_ = std::thread([this] { result_ = server_->run(); });
    return true;
  }
  int stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
    return result_;
  }
  ~ServerThread() { stop(); }
  Server& server() { return *server_; }
  uint16_t port() const { return server_->port(); }
  std::string port_text() const { return std::to_string(server_->port()); }
  std::thread& thread() { return thread_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  int result_ = -1;
};

// A UDP socket connected to 127.0.0.1:port, for datagrams no well-behaved client sends.
class RawPeer {
 public:
  explicit RawPeer(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  ~RawPeer() { ::close(fd_); }

  static std::vector<uint8_t> request(uint8_t op, uint64_t offset, uint32_t length, uint64_t cookie,
                                      uint16_t flags = 0, uint32_t payload = 0) {
    std::vector<uint8_t> bytes(kHeaderSize + payload);
    Header h;
    h.op = op;
    h.flags = flags;
    h.cookie = cookie;
    h.offset = offset;
    h.length = length;
    encode_header(h, bytes.data());
    for (uint32_t i = 0; i < payload; ++i) bytes[kHeaderSize + i] = uint8_t(i * 7 + 1);
    return bytes;
  }

  void send(const std::vector<uint8_t>& bytes) {
    (void)!::send(fd_, bytes.data(), bytes.size(), 0);
  }

  // The next datagram within `timeout_ms`, or nullopt.
  std::optional<std::vector<uint8_t>> receive(int timeout_ms = 2000) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) != 1) return std::nullopt;
    std::vector<uint8_t> buf(65536);
    ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    buf.resize(size_t(n));
    return buf;
  }

  // Sends one request and decodes the first reply's header (nullopt if none).
  std::optional<Header> ask(const std::vector<uint8_t>& bytes, int timeout_ms = 2000) {
    send(bytes);
    auto reply = receive(timeout_ms);
    if (!reply || reply->size() < kHeaderSize) return std::nullopt;
    return decode_header(reply->data());
  }

 private:
  int fd_ = -1;
};

// A ram-backed device whose queue completes asynchronously, through an eventfd, only while the
// test keeps its gate open; it can also fail every request, and counts sync() calls.
class GatedDevice final : public storage::Device {
 public:
  struct Control {
    std::atomic<bool> open{true};
    std::atomic<int> fail_with{0};  // -errno for every request, or 0
    std::atomic<int> syncs{0};
    std::atomic<int> submitted{0};
    std::atomic<int> kicks{0};
    int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ~Control() { ::close(event_fd); }
    void set_open(bool value) {
      open.store(value);
      uint64_t one = 1;
      (void)!::write(event_fd, &one, sizeof one);
    }
  };

  GatedDevice(std::unique_ptr<storage::Device> inner, std::shared_ptr<Control> control)
      : inner_(std::move(inner)), control_(std::move(control)) {}
  uint64_t size() const override { return inner_->size(); }
  uint32_t block_size() const override { return inner_->block_size(); }
  std::string describe() const override { return "gated " + inner_->describe(); }
  bool volatile_cache() const override { return true; }
  int sync() override {
    control_->syncs.fetch_add(1);
    return 0;
  }
  std::unique_ptr<storage::Queue> make_queue(unsigned depth) override {
    return std::make_unique<GatedQueue>(*inner_, control_, depth);
  }

 private:
  class GatedQueue final : public storage::Queue {
   public:
    GatedQueue(storage::Device& inner, std::shared_ptr<Control> control, unsigned depth)
        : inner_(inner.make_queue(depth)), control_(std::move(control)) {
      pending_.reserve(depth);
    }
    void submit(storage::Request* req) override {
      pending_.push_back(req);
      control_->submitted.fetch_add(1);
    }
    void kick() override {
      control_->kicks.fetch_add(1);
      uint64_t one = 1;
      if (control_->open.load()) (void)!::write(control_->event_fd, &one, sizeof one);
    }
    int reap() override {
      uint64_t value;
      (void)!::read(control_->event_fd, &value, sizeof value);
      if (!control_->open.load()) return 0;
      std::vector<storage::Request*> done;
      done.swap(pending_);
      for (storage::Request* req : done) {
        auto on_complete = req->on_complete;
        req->on_complete = nullptr;
        inner_->submit(req);  // the ram queue does the work at once
        if (int error = control_->fail_with.load()) req->result = error;
        req->on_complete = on_complete;
        on_complete(req);
      }
      return int(done.size());
    }
    int event_fd() const override { return control_->event_fd; }
    bool ready() const override { return control_->open.load() && !pending_.empty(); }
    unsigned inflight() const override { return unsigned(pending_.size()); }

   private:
    std::unique_ptr<storage::Queue> inner_;
    std::shared_ptr<Control> control_;
    std::vector<storage::Request*> pending_;
  };

  std::unique_ptr<storage::Device> inner_;
  std::shared_ptr<Control> control_;
};

// Waits (bounded) until `condition` holds.
template <typename F>
bool eventually(F condition, int timeout_ms = 3000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A server on 127.0.0.1, an ephemeral port.
inline ServerOptions loopback(uint32_t slots = 64) {
  ServerOptions o;
  o.listen = "127.0.0.1";
  o.port = 0;
  o.slots = slots;
  return o;
}

// A client of `st`'s server that gives up after 5 s.
inline std::unique_ptr<Client> connect_to(const ServerThread& st, uint32_t window = 16) {
  ClientOptions options;
  options.window = window;
  options.give_up_after = 5 * kSecond;
  std::string error;
  auto client = Client::connect("127.0.0.1", st.port_text(), options, &error);
  EXPECT_NE(client, nullptr) << error;
  return client;
}

inline std::unique_ptr<storage::Device> ram(const std::string& size = "64M") {
  std::string error;
  return storage::Device::open("ram:" + size, &error);
}

// A file of `size` bytes in /tmp, removed at scope exit.
struct TempFile {
  explicit TempFile(uint64_t size) {
    path = "/tmp/sens-netblk-test-XXXXXX";
    int fd = mkstemp(path.data());
    if (fd >= 0) {
      if (ftruncate(fd, off_t(size)) != 0) path.clear();
      ::close(fd);
    }
  }
  ~TempFile() { ::unlink(path.c_str()); }
  std::string path;
};

}  // namespace sens::netblk::testing
