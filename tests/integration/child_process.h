#pragma once
// Runs `sens` (or tshark) as a child process with stdout/stderr captured in files, and waits
// for it with bounded timeouts. The destructor kills (by pid) and reaps a child still alive.
#include <sys/types.h>

#include <string>
#include <vector>

namespace sens::testing {

// A private temporary directory, removed (with its files) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path);
bool write_file(const std::string& path, const std::string& text);
bool file_exists(const std::string& path);

class Child {
 public:
  Child() = default;
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Starts argv[0] (a path) with stdout and stderr redirected to the given files.
  bool start(const std::vector<std::string>& argv, const std::string& out_path,
             const std::string& err_path);
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // SIGSTOP returns once the child has stopped (every thread), not when the signal is sent.
  bool signal(int sig);
  // Waits for the exit; returns the exit code, 128 + signal if killed, or -1 on timeout.
  int wait(int timeout_ms);
  // Polls `path` until it contains `needle` or the child exits; false on timeout.
  bool wait_for_text(const std::string& path, const std::string& needle, int timeout_ms);
  // Kills (SIGKILL) and reaps.
  void kill_now();

 private:
  pid_t pid_ = -1;
};

// Runs to completion (killed after timeout_ms): exit code (-1 on timeout), stdout, stderr.
struct RunResult {
  int code = -1;
  std::string out, err;
};
RunResult run_command(const std::vector<std::string>& argv, int timeout_ms = 5000);

}  // namespace sens::testing
