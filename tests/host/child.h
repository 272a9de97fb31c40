#pragma once
// Child processes for the integration tests: `sens target` on free loopback ports, and `sens`
// commands run to completion with a bound on their time.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sens::host::testing {

inline std::string temp_dir() {
  // A plain array outlives the std::string statics the exit handler would otherwise race.
  static char path[] = "/tmp/sens-host-test-XXXXXX";
  static std::string dir = [] {
    if (!mkdtemp(path)) return std::string("/tmp");
    // Logs stay while the tests run (failures print them), and go with the test binary.
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    });
    return std::string(path);
  }();
  return dir;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A port nothing listens on right now (the kernel's pick; a small race we retry around).
inline uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

inline pid_t spawn(const std::vector<std::string>& args, const std::string& out_path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

struct RunResult {
  int exit_code = -1;  // -1: killed on timeout or by a signal
  bool timed_out = false;
  double seconds = 0;
  std::string output;  // stdout and stderr, interleaved
};

// Runs `sens ARGS...` and waits at most `timeout_s`.
inline RunResult run_sens(std::vector<std::string> args, double timeout_s = 60) {
  static int serial = 0;
  const std::string out =
      temp_dir() + "/run-" + std::to_string(getpid()) + "-" + std::to_string(serial++) + ".log";
  args.insert(args.begin(), SENS_BINARY);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = spawn(args, out);
  RunResult r;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid) break;
    if (r.seconds > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.output = read_file(out);
  return r;
}

// `sens target` serving one RAM namespace on 127.0.0.1, with a discovery port.
class TargetProcess {
 public:
  // `size` is a RAM namespace's size, or a whole --ns spec ("file:PATH"). Nonzero ports: those
  // (a target restarted where the last one listened), else free ones.
  explicit TargetProcess(std::vector<std::string> extra = {}, std::string size = "64M",
                         uint16_t want_port = 0, uint16_t want_disc_port = 0) {
    for (int attempt = 0; attempt < (want_port ? 50 : 3) && !ready_; ++attempt) {
      if (want_port && attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      port = want_port ? want_port : free_port();
      disc_port = want_disc_port ? want_disc_port : free_port();
      if (disc_port == port) continue;
      log_path_ = temp_dir() + "/target-" + std::to_string(port) + ".log";
      std::vector<std::string> args = {SENS_BINARY,
                                       "target",
                                       "--listen",
                                       "127.0.0.1:" + std::to_string(port),
                                       "--discovery-port",
                                       std::to_string(disc_port),
                                       "--nqn",
                                       nqn,
                                       "--ns",
                                       size.find(':') != std::string::npos ? size : "ram:" + size};
      args.insert(args.end(), extra.begin(), extra.end());
      pid_ = spawn(args, log_path_);
      // Ready once both listeners are up (the discovery one is announced last).
      for (int i = 0; i < 1000 && !ready_; ++i) {
        std::string log = read_file(log_path_);
        if (log.find("listening") != std::string::npos &&
            log.find(":" + std::to_string(disc_port)) != std::string::npos)
          ready_ = true;
        int status;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          break;  // it exited (port taken?): try other ports
        }
        if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!ready_) stop();
    }
  }
  ~TargetProcess() { stop(); }
  TargetProcess(const TargetProcess&) = delete;
  TargetProcess& operator=(const TargetProcess&) = delete;

  bool ready() const { return ready_; }
  std::string log() const { return read_file(log_path_); }
  // Bytes the target has read and written with syscalls, its sockets' included (rchar +
  // wchar of /proc/PID/io): it grows while a host's I/O flows.
  uint64_t io_bytes() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/io");
    uint64_t total = 0, value = 0;
    for (std::string key; f >> key >> value;)
      if (key == "rchar:" || key == "wchar:") total += value;
    return total;
  }
  std::string trid() const {
    return "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) + " subnqn:" + nqn;
  }
  void signal(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    // kill() returns before a target running on another core has stopped (a polling one
    // would still answer a command sent meanwhile): wait until it has.
    if (sig == SIGSTOP) {
      int status = 0;
      waitpid(pid_, &status, WUNTRACED);
    }
  }
  // SIGKILL without a SIGCONT first: a stopped target dies without answering anything.
  void kill_hard() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string nqn = "nqn.2026-11.dev.sens:hosttest";
  uint16_t port = 0, disc_port = 0;

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
  std::string log_path_;
};

}  // namespace sens::host::testing
