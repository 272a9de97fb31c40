#pragma once
// `sens target --metrics ADDR:PORT`: an HTTP server on its own threads (never a reactor's) that
// answers GET /metrics with the target's metrics in the Prometheus text format (metrics.h).
// A scrape gathers each reactor's counters on that reactor's thread (Target::metrics_snapshot),
// so the data path takes no lock for it. Other paths get 404, other methods on /metrics 405.
#include <cstdint>
#include <memory>
#include <string>

namespace sens::target {
class Target;
}

namespace sens::mgmt {

// "ADDR:PORT" (an IPv4 address or host name, or [IPv6]:PORT; port 0: any free port). Returns
// false with `error` saying what is wrong.
bool parse_metrics_address(const std::string& text, std::string* host, uint16_t* port,
                           std::string* error);

class MetricsServer {
 public:
  explicit MetricsServer(target::Target& target);
  ~MetricsServer();  // stops
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds `address` (parse_metrics_address) and starts serving; returns "" or an error.
  std::string start(const std::string& address);
  void stop();
  // As bound (the port resolved when 0 was asked).
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  std::string url() const;  // http://HOST:PORT/metrics

 private:
  struct Impl;
  target::Target& target_;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace sens::mgmt
