// What a remote host can make the target hold is bounded: idle connections cost little memory,
// a connection limit refuses the excess cleanly, and running out of file descriptors pauses
// accepting instead of spinning and flooding the log.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";

struct Target {
  TempDir dir;
  Child child;
  uint16_t port = 0;
  std::string start(std::vector<std::string> prefix, const std::vector<std::string>& extra) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      std::vector<std::string> argv = prefix;
      for (std::string a :
           {std::string(SENS_BINARY), std::string("target"), std::string("--listen"),
            "127.0.0.1:" + std::to_string(port), std::string("--discovery-port"), std::string("0"),
            std::string("--ns"), std::string("ram:64M")})
        argv.push_back(a);
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "listening on", 5000)) return "";
      child.kill_now();
      if (read_file(dir.file("err")).find("cannot listen") == std::string::npos)
        return "target did not start: " + read_file(dir.file("err"));
    }
    return "no free port";
  }
  uint64_t rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(child.pid()) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
    return 0;
  }
  double cpu_seconds() const {
    std::ifstream f("/proc/" + std::to_string(child.pid()) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), {});
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
  }
};

// A TCP connection that sends ICReq and waits for the ICResp, then stays idle.
int idle_connection(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  auto ic = RawClient::icreq_bytes(0);
  if (send(fd, ic.data(), ic.size(), MSG_NOSIGNAL) != ssize_t(ic.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void raise_fd_limit() {
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SENS_TEST_SANITIZED 1
#endif
#endif

// 5,000 idle connections (each past ICReq) cost the target at most 64 KiB each; at the limit
// the next one is refused and a host already connected keeps doing I/O.
TEST(Resources, FiveThousandIdleConnections) {
  raise_fd_limit();
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < 12000) GTEST_SKIP() << "needs 12000 descriptors, has " << r.rlim_cur;
  constexpr int kIdle = 5000;
  Target t;
  ASSERT_EQ(t.start({}, {"--max-connections", std::to_string(kIdle + 2)}), "");
  Session s;
  ASSERT_EQ(s.open(t.port, kNqn), "");
  ASSERT_EQ(write_read(s.io, 0, 65536, 1, false), "");
  uint64_t before = t.rss_kib();
  std::vector<int> fds;
  for (int i = 0; i < kIdle; ++i) {
    int fd = idle_connection(t.port);
    ASSERT_GE(fd, 0) << "connection " << i;
    fds.push_back(fd);
  }
  // Every ICResp arrived: the target has taken each connection in.
  for (int fd : fds) {
    uint8_t resp[128];
    ASSERT_EQ(recv(fd, resp, sizeof(resp), MSG_WAITALL), 128) << "no ICResp";
  }
  uint64_t after = t.rss_kib();
  double per = double(after - before) / kIdle;
  RecordProperty("rss_growth_kib", std::to_string(after - before));
  std::printf("5000 idle connections: target RSS %llu -> %llu KiB (%.1f KiB each)\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(after), per);
#ifdef SENS_TEST_SANITIZED
  // ASan's shadow memory (1/8 of what is touched), redzones and quarantined frees grow the
  // RSS by ~25 % (56 KiB per connection in `make test`, 70 KiB under ASan).
  constexpr uint64_t kBoundKib = 400u * 1024;
#else
  constexpr uint64_t kBoundKib = 320u * 1024;
#endif
  EXPECT_LE(after - before, kBoundKib) << per << " KiB per idle connection";
  // The limit: one more is closed at once; the working host still works.
  RawClient extra;
  ASSERT_TRUE(extra.connect(t.port));
  EXPECT_TRUE(extra.wait_closed(3000));
  ASSERT_EQ(write_read(s.io, 128, 65536, 2, false), "");
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(t.child.signal(SIGTERM));
  EXPECT_EQ(t.child.wait(10000), 0);
}

// With 64 descriptors the target runs out while 100 hosts connect. It must not spin on the
// readable listener nor flood its log, and must accept again once descriptors are free.
TEST(Resources, OutOfDescriptorsPausesAccepting) {
#ifdef SENS_TEST_SANITIZED
  // UBSan checks a dynamic type it has not met yet by writing the object into a pipe(); in a
  // process out of descriptors the pipe fails, so it reports every such virtual call as "not
  // an object of type ..." and aborts. A limit of the tool, not of the target: the test runs
  // in `make test`.
  GTEST_SKIP() << "UBSan's vptr check needs free descriptors (it probes memory with pipe())";
#endif
  Target t;
  ASSERT_EQ(t.start({"/usr/bin/prlimit", "--nofile=64:64"}, {}), "");
  std::vector<int> fds;
  for (int i = 0; i < 100; ++i) {
    int fd = idle_connection(t.port);  // the backlog takes them even when accept() cannot
    if (fd >= 0) fds.push_back(fd);
  }
  ASSERT_TRUE(t.child.wait_for_text(t.dir.file("err"), "Too many open files", 5000))
      << read_file(t.dir.file("err"));
  double cpu0 = t.cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the window we measure
  double cpu = t.cpu_seconds() - cpu0;
  EXPECT_LT(cpu, 0.5) << "the target spins while out of descriptors";
  std::string err = read_file(t.dir.file("err"));
  size_t lines = size_t(std::count(err.begin(), err.end(), '\n'));
  EXPECT_LE(lines, 10u) << err.substr(0, 2000);
  EXPECT_NE(err.find("Too many open files"), std::string::npos) << err.substr(0, 2000);
  for (int fd : fds) ::close(fd);
  // Descriptors free again: a host gets in and does I/O.
  bool in = false;
  for (int i = 0; i < 50 && !in; ++i) {
    Session s;
    in = s.open(t.port, kNqn) == "" && write_read(s.io, 0, 4096, 3, true) == "";
    if (!in) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(in) << read_file(t.dir.file("err")).substr(0, 3000);
}

}  // namespace
}  // namespace sens::testing
