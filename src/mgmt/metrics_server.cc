#include "mgmt/metrics_server.h"

#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>

#include <httplib.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "mgmt/metrics.h"
#include "target/target.h"

namespace sens::mgmt {

bool parse_metrics_address(const std::string& text, std::string* host, uint16_t* port,
                           std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = "metrics address '" + text + "': " + why;
    return false;
  };
  std::string h, p;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return fail("expected [IPv6]:PORT");
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return fail("expected ADDR:PORT (e.g. 127.0.0.1:9100)");
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string::npos)
      return fail("an IPv6 address goes in brackets ([::1]:9100)");
  }
  if (h.empty()) return fail("no address before the port (0.0.0.0: every IPv4 interface)");
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(p) > 65535)
    return fail("the port must be a number 0..65535 (0: any free port)");
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (int rc = getaddrinfo(h.c_str(), nullptr, &hints, &res); rc != 0)
    return fail(std::string("cannot resolve '") + h + "': " + gai_strerror(rc));
  freeaddrinfo(res);
  *host = h;
  *port = uint16_t(std::stoul(p));
  return true;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer(target::Target& target) : target_(target) {}

MetricsServer::~MetricsServer() {
  stop();
}

std::string MetricsServer::url() const {
  bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_) + "/metrics";
}

std::string MetricsServer::start(const std::string& address) {
  std::string host, error;
  uint16_t port = 0;
  if (!parse_metrics_address(address, &host, &port, &error)) return error;
  impl_ = std::make_unique<Impl>();
  auto& s = impl_->server;
  // One worker: scrapes are rare and each one already waits on every reactor.
  s.new_task_queue = [] { return new httplib::ThreadPool(1); };
  // A scraper sends its whole request at once: a client that stalls mid-request holds the one
  // worker (and every scrape behind it) only this long.
  s.set_keep_alive_timeout(2);
  s.set_read_timeout(2);
  s.set_write_timeout(5);
  s.set_payload_max_length(64 * 1024);
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.path != "/metrics" || req.method == "GET" || req.method == "HEAD")
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("405 method not allowed: /metrics answers GET\n", "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(target_.metrics_snapshot()), kExpositionContentType);
  });
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404)
      res.set_content("404 not found: the metrics are at /metrics\n", "text/plain");
  });
  errno = 0;
  if (port == 0) {
    int bound = s.bind_to_any_port(host);
    if (bound > 0)
      port = uint16_t(bound);
    else
      error = "metrics: cannot listen on " + address + ": " +
              (errno ? std::strerror(errno) : "bind failed");
  } else if (!s.bind_to_port(host, port)) {
    error = "metrics: cannot listen on " + address + ": " +
            (errno ? std::strerror(errno) : "bind failed");
  }
  if (!error.empty()) {
    impl_.reset();
    return error;
  }
  host_ = host;
  port_ = port;
  impl_->thread = std::thread([this] {
    pthread_setname_np(pthread_self(), "sens-metrics");
    impl_->server.listen_after_bind();
  });
  // Running before stop() may be called: a stop() that came first would not end the loop.
  for (int i = 0; i < 1000 && !impl_->server.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return "";
}

void MetricsServer::stop() {
  if (!impl_) return;
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_.reset();
}

}  // namespace sens::mgmt
