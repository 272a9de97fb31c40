#include "child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace sens::testing {

using Clock = std::chrono::steady_clock;

TempDir::TempDir() {
  char tmpl[] = "/tmp/sens-itest-XXXXXX";
  char* p = mkdtemp(tmpl);
  path_ = p ? p : "/tmp";
}

TempDir::~TempDir() {
  if (path_ != "/tmp") {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return bool(out);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Child::~Child() {
  kill_now();
}

bool Child::start(const std::vector<std::string>& argv, const std::string& out_path,
                  const std::string& err_path) {
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    // The test binary may run with signals blocked or ignored; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    execv(args[0], args.data());
    _exit(127);
  }
  pid_ = pid;
  return true;
}

bool Child::signal(int sig) {
  if (pid_ <= 0 || ::kill(pid_, sig) != 0) return false;
  // kill() returns before a child running (or waiting to run) on another core has stopped: a
  // polling target would still take a command sent meanwhile. Wait until the whole group has.
  if (sig == SIGSTOP) {
    int status = 0;
    pid_t r;
    do r = waitpid(pid_, &status, WUNTRACED);
    while (r < 0 && errno == EINTR);
    return r == pid_ && WIFSTOPPED(status);
  }
  return true;
}

int Child::wait(int timeout_ms) {
  if (pid_ <= 0) return -1;
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (r < 0 && errno != EINTR) {
      pid_ = -1;
      return -1;
    }
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool Child::wait_for_text(const std::string& path, const std::string& needle, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (read_file(path).find(needle) != std::string::npos) return true;
    if (pid_ <= 0 || Clock::now() >= deadline) return false;
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return read_file(path).find(needle) != std::string::npos;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Child::kill_now() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

RunResult run_command(const std::vector<std::string>& argv, int timeout_ms) {
  TempDir dir;
  RunResult r;
  Child c;
  if (!c.start(argv, dir.file("out"), dir.file("err"))) return r;
  r.code = c.wait(timeout_ms);
  c.kill_now();
  r.out = read_file(dir.file("out"));
  r.err = read_file(dir.file("err"));
  return r;
}

}  // namespace sens::testing
