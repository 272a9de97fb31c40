// systemd notifications of `sens target` (service.h).
#include "tools/service.h"

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>

#include "common/log.h"
#include "target/target.h"

#if SENS_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace sens::tools::service {
namespace {

void send(const std::string& state) {
  if (!notifying()) return;
#if SENS_HAVE_SYSTEMD
  int rc = sd_notify(0, state.c_str());
  if (rc < 0) LOG_WARN("sd_notify(%s): error %d", state.c_str(), -rc);
#endif
}

// STATUS= is one line: no newline may end it early.
std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

bool notifying() {
  static const bool on = [] {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    if (!socket || !*socket) return false;
#if SENS_HAVE_SYSTEMD
    return true;
#else
    LOG_WARN(
        "NOTIFY_SOCKET is set, but this sens was built without libsystemd: systemd will "
        "not hear READY=1 (install libsystemd-dev and rebuild, or use Type=simple)");
    return false;
#endif
  }();
  return on;
}

bool reactors_running(target::Target& t, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (size_t i = 0; i < t.contexts(); ++i) {
    auto ran = std::make_shared<std::promise<void>>();
    auto f = ran->get_future();
    t.context(i).reactor.post([ran] { ran->set_value(); });
    if (f.wait_until(deadline) != std::future_status::ready) return false;
  }
  return true;
}

std::string status_line(target::Target& t) {
  std::string s = "listening on";
  const char* sep = " ";
  for (auto& b : t.bound()) {
    s += sep + b.host + ":" + std::to_string(b.port) +
         (b.discovery ? " (discovery)"
          : b.tls     ? " (TLS)"
                      : "");
    sep = ", ";
  }
  size_t subsystems = 0, namespaces = 0;
  for (auto& sub : t.registry().subsystems()) {
    ++subsystems;
    namespaces += sub->namespace_count();
  }
  s += "; " + std::to_string(namespaces) + " namespace(s) in " + std::to_string(subsystems) +
       " subsystem(s)";
  return s;
}

void ready(const std::string& status) {
  send("READY=1\nSTATUS=" + one_line(status));
}

void reloading() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  unsigned long long usec = static_cast<unsigned long long>(now.tv_sec) * 1000000ull +
                            static_cast<unsigned long long>(now.tv_nsec) / 1000;
  send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) +
       "\nSTATUS=reloading the configuration");
}

void stopping(const std::string& status) {
  send("STOPPING=1\nSTATUS=" + one_line(status));
}

}  // namespace sens::tools::service
