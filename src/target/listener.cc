// Listeners: the sockets hosts connect to (I/O, TLS, discovery), opened at start or live, and
// the hand-over of each accepted connection to a reactor.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "target/listener.h"

namespace sens::target {

// "addr:port" (with_port) or "addr", numeric.
std::string address_text(const sockaddr_storage& ss, bool with_port) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return with_port ? std::string(host) + ":" + std::to_string(port) : std::string(host);
}

static int open_listener(const std::string& host, uint16_t port, uint16_t* bound_port,
                         std::string* error) {
  sockaddr_storage ss{};
  socklen_t len;
  int family;
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    inet_pton(AF_INET6, host.c_str(), &a->sin6_addr);
    len = sizeof(*a);
    family = AF_INET6;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &a->sin_addr);
    len = sizeof(*a);
    family = AF_INET;
  }
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 1024) != 0) {
    *error = "cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                        : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

void Target::Listener::on_event(uint32_t) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the listener stays readable, so stop watching it for
      // a while instead of spinning (the hosts wait in the backlog meanwhile).
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        ++paused_;
        warn_limited("accept on port %u: %s; accepting again in 100 ms", std::strerror(errno));
        reactor_.modify(fd_, 0, this);
        reactor_.arm(retry_, reactor_.now() + 100 * kMilli);
        return;
      }
      warn_limited("accept on port %u: %s", std::strerror(errno));
      return;
    }
    if (target_.open_connections() >= target_.config().max_connections) {
      ++refused_;
      warn_limited(
          "port %u: refusing a connection: %s open connections is the limit "
          "(--max-connections)",
          std::to_string(target_.config().max_connections).c_str());
      ::close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (int buf = int(target_.config().sock_buf)) {  // tests: force partial sends
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    }
    target_.dispatch_accepted(fd, address_text(ss, true), port_, discovery_, tls_, ana_);
  }
}

void Target::Listener::warn_limited(const char* fmt, const char* arg) {
  Nanos now = reactor_.now();
  if (now < next_log_) {
    ++suppressed_;
    return;
  }
  next_log_ = now + 5 * kSecond;
  char line[256];
  std::snprintf(line, sizeof(line), fmt, port_, arg);
  if (suppressed_)
    LOG_WARN("%s (%llu similar messages suppressed)", line,
             static_cast<unsigned long long>(suppressed_));
  else
    LOG_WARN("%s", line);
  suppressed_ = 0;
}

std::string Target::open_listeners() {
  std::string error;
  std::vector<std::pair<ListenAddress, bool>> wanted;
  for (auto& l : config_.listen) wanted.push_back({l, false});
  if (config_.discovery_port) {
    std::vector<std::string> hosts;
    for (auto& l : config_.listen)
      if (std::find(hosts.begin(), hosts.end(), l.host) == hosts.end()) hosts.push_back(l.host);
    for (auto& h : hosts) wanted.push_back({{h, config_.discovery_port}, true});
  }
  const auto& ana_ports = registry_.ana_ports();  // listen, then tls_listen
  size_t io_index = 0;
  for (auto& [addr, discovery] : wanted) {
    uint16_t port = 0;
    int fd = open_listener(addr.host, addr.port, &port, &error);
    if (fd < 0) {
      listeners_.clear();
      return error;
    }
    AnaPort* ana = discovery ? nullptr : ana_ports[io_index++].get();
    if (ana) ana->port = port;  // (port 0 asked: the one the kernel gave)
    listeners_.push_back(std::make_unique<Listener>(*this, ctxs_[0]->reactor, fd, addr.host, port,
                                                    discovery, false, ana));
    std::lock_guard<std::mutex> lock(bound_mu_);
    bound_.push_back({addr.host, port, discovery});
  }
  for (auto& addr : config_.tls_listen) {
    uint16_t port = 0;
    int fd = open_listener(addr.host, addr.port, &port, &error);
    if (fd < 0) {
      listeners_.clear();
      return error;
    }
    AnaPort* ana = ana_ports[io_index++].get();
    ana->port = port;
    listeners_.push_back(std::make_unique<Listener>(*this, ctxs_[0]->reactor, fd, addr.host, port,
                                                    false, true, ana));
    std::lock_guard<std::mutex> lock(bound_mu_);
    bound_.push_back({addr.host, port, false, true});
  }
  for (auto& l : listeners_) ctxs_[0]->reactor.add(l->fd(), EPOLLIN, l.get());
  return "";
}

std::string Target::open_live_listener(const ListenAddress& addr, bool discovery, bool tls,
                                       AnaPort* ana, Bound* out) {
  uint16_t port = 0;
  std::string error;
  int fd = open_listener(addr.host, addr.port, &port, &error);
  if (fd < 0) return error;
  if (ana) ana->port = port;
  auto l = std::make_unique<Listener>(*this, ctxs_[0]->reactor, fd, addr.host, port, discovery, tls,
                                      ana);
  Listener* raw = l.release();
  // listeners_ belongs to reactor 0 (its handlers, close_listeners()).
  auto add = [this, raw, fd] {
    listeners_.emplace_back(raw);
    ctxs_[0]->reactor.add(fd, EPOLLIN, raw);
  };
  if (threads_.empty())
    add();
  else
    run_on(0, add, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  *out = {addr.host, port, discovery, tls};
  std::lock_guard<std::mutex> lock(bound_mu_);
  bound_.push_back(*out);
  return "";
}

bool Target::close_live_listener(const std::string& host, uint16_t port, bool discovery) {
  {
    std::lock_guard<std::mutex> lock(bound_mu_);
    auto it = std::find_if(bound_.begin(), bound_.end(), [&](const Bound& b) {
      return b.discovery == discovery && b.host == host && b.port == port;
    });
    if (it == bound_.end()) return false;
    bound_.erase(it);
  }
  auto close = [this, host, port, discovery] {
    for (auto it = listeners_.begin(); it != listeners_.end(); ++it)
      if ((*it)->port() == port && (*it)->discovery() == discovery && (*it)->host() == host) {
        ctxs_[0]->reactor.remove((*it)->fd(), it->get());
        listeners_.erase(it);  // (closes the socket)
        return;
      }
  };
  if (threads_.empty())
    close();
  else
    run_on(0, close, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  return true;
}

void Target::dispatch_accepted(int fd, std::string peer, uint16_t local_port,
                               bool discovery_listener, bool tls, AnaPort* ana) {
  open_connections_.fetch_add(1);
  ConnectionEndpoint ep;
  ep.ana = ana;
  ep.tls = tls;
  ep.peer = std::move(peer);
  ep.local_port = local_port;
  ep.discovery_listener = discovery_listener;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    ep.local_address = address_text(ss, false);
  size_t i = next_reactor_.fetch_add(1) % ctxs_.size();
  ReactorContext* ctx = ctxs_[i].get();
  if (Reactor::current() == &ctx->reactor) {
    ctx->adopt(fd, std::move(ep));
    return;
  }
  ctx->reactor.post([ctx, fd, ep = std::move(ep)]() mutable { ctx->adopt(fd, std::move(ep)); });
}

void Target::close_listeners() {
  auto close = [this] {
    for (auto& l : listeners_) ctxs_[0]->reactor.remove(l->fd(), l.get());
    listeners_.clear();
  };
  // While the reactors run, on the one that watches them; once they are joined, here.
  if (threads_.empty())
    close();
  else
    run_on(0, close, std::chrono::steady_clock::now() + std::chrono::seconds(5));
}
}  // namespace sens::target
