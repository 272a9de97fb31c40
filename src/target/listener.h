#pragma once
// A listening socket on reactor 0: accepts, applies the connection limit and socket options,
// and hands each connection to a reactor (listener.cc). Private to the target's sources.
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "target/target.h"

namespace sens::target {

// "addr:port" (with_port) or "addr", numeric.
std::string address_text(const sockaddr_storage& ss, bool with_port);

class Target::Listener final : public EventHandler {
 public:
  Listener(Target& t, Reactor& reactor, int fd, std::string host, uint16_t port, bool discovery,
           bool tls = false, AnaPort* ana = nullptr)
      : ana_(ana),
        host_(std::move(host)),
        target_(t),
        reactor_(reactor),
        fd_(fd),
        port_(port),
        discovery_(discovery),
        tls_(tls),
        retry_([this] { resume(); }) {}
  ~Listener() override {
    reactor_.cancel(retry_);
    ::close(fd_);
  }
  int fd() const { return fd_; }
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }
  bool discovery() const { return discovery_; }
  const AnaPort* ana() const { return ana_; }

  void on_event(uint32_t) override;

 private:
  void resume() { reactor_.modify(fd_, EPOLLIN, this); }
  // At most one line per 5 s, with how many were suppressed: an attacker must not be able to
  // fill the disk with our log.
  void warn_limited(const char* fmt, const char* arg);

  AnaPort* ana_;
  std::string host_;
  Target& target_;
  Reactor& reactor_;
  int fd_;
  uint16_t port_;
  bool discovery_;
  bool tls_;
  Timer retry_;
  Nanos next_log_ = 0;
  uint64_t suppressed_ = 0, paused_ = 0, refused_ = 0;
};

}  // namespace sens::target
