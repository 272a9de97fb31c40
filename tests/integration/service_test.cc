// `sens target` as a systemd service: the sd_notify messages of a start, a SIGHUP reload and a
// SIGTERM stop.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// A datagram socket in the role of systemd's NOTIFY_SOCKET.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    path.copy(a.sun_path, sizeof(a.sun_path) - 1);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  // The next message, or "" after timeout_ms.
  std::string next(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) != 1) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, size_t(n)) : "";
  }
  // Messages until one contains `needle` (returned) or timeout_ms passes (""); all of them
  // go to *seen.
  std::string until(const std::string& needle, int timeout_ms, std::string* seen) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                         deadline - std::chrono::steady_clock::now())
                         .count());
      if (left <= 0) return "";
      std::string m = next(left);
      if (m.empty()) continue;
      *seen += "[" + m + "] ";
      if (contains(m, needle)) return m;
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

TEST(Service, NotifiesReadyReloadingAndStopping) {
  TempDir dir;
  NotifySocket notify(dir.file("notify"));
  ASSERT_TRUE(notify.ok());
  Child child;
  uint16_t port = 0;
  setenv("NOTIFY_SOCKET", dir.file("notify").c_str(), 1);
  for (int attempt = 0; attempt < 5 && !child.running(); ++attempt) {
    port = free_port();
    ASSERT_TRUE(write_file(dir.file("t.json"),
                           "{\"listen\": [\"127.0.0.1:" + std::to_string(port) +
                               "\"], \"discovery_port\": 0, \"subsystems\": [{\"nqn\": "
                               "\"nqn.2026-11.dev.sens:svc\", \"namespaces\": [\"ram:4M\"]}]}"));
    ASSERT_TRUE(child.start({SENS_BINARY, "target", "--config", dir.file("t.json")},
                            dir.file("out"), dir.file("err")));
    if (!child.wait_for_text(dir.file("out"), "listening on", 5000)) child.kill_now();
  }
  unsetenv("NOTIFY_SOCKET");
  ASSERT_TRUE(child.running()) << read_file(dir.file("err"));

  std::string seen;
  std::string ready = notify.until("READY=1", 10000, &seen);
  if (ready.empty() && contains(read_file(dir.file("err")), "without libsystemd"))
    GTEST_SKIP() << "this sens was built without libsystemd-dev: no notifications";
  ASSERT_NE(ready, "") << seen << read_file(dir.file("err"));
  EXPECT_TRUE(contains(ready, "STATUS=listening on 127.0.0.1:" + std::to_string(port))) << ready;
  EXPECT_TRUE(contains(ready, "1 namespace(s) in 1 subsystem(s)")) << ready;
  // Ready means accepting: a host connects and is answered at once.
  RawClient c;
  ASSERT_TRUE(c.connect(port)) << c.last_error();
  ASSERT_TRUE(c.ic()) << c.last_error();
  c.close();

  ASSERT_TRUE(child.signal(SIGHUP));
  seen.clear();
  std::string reloading = notify.until("RELOADING=1", 10000, &seen);
  ASSERT_NE(reloading, "") << seen;
  EXPECT_TRUE(contains(reloading, "MONOTONIC_USEC=")) << reloading;
  ASSERT_NE(notify.until("READY=1", 10000, &seen), "") << seen;

  ASSERT_TRUE(child.signal(SIGTERM));
  seen.clear();
  ASSERT_NE(notify.until("STOPPING=1", 10000, &seen), "") << seen;
  EXPECT_EQ(child.wait(20000), 0) << read_file(dir.file("err"));
}

}  // namespace
}  // namespace sens::testing
