// `sens netblk` as a user runs it: serve in a child process, the client subcommands against
// it, and a graceful SIGTERM. Needs the sens binary (built by `make build`); skipped without it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

bool have_binary() {
  return ::access(SENS_BINARY, X_OK) == 0;
}

// A child process with its stdout and stderr on pipes.
class Child {
 public:
  explicit Child(std::vector<std::string> args, const std::string& stdin_path = "") {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (!stdin_path.empty()) {
        int in = ::open(stdin_path.c_str(), O_RDONLY);
        dup2(in, 0);
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(SENS_BINARY));
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(SENS_BINARY, argv.data());
      _exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (out_ >= 0) ::close(out_);
    if (err_ >= 0) ::close(err_);
  }

  // Reads stdout until `text` shows up (bounded); returns the line holding it.
  std::string wait_for_line(const std::string& text, int timeout_ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      auto at = out_text_.find(text);
      auto end = at == std::string::npos ? at : out_text_.find('\n', at);
      if (end != std::string::npos) return out_text_.substr(at, end - at);
      pollfd pfd{out_, POLLIN, 0};
      if (::poll(&pfd, 1, 50) == 1) {
        char buf[4096];
        ssize_t n = ::read(out_, buf, sizeof buf);
        if (n <= 0) break;
        out_text_.append(buf, size_t(n));
      }
    }
    return "";
  }

  // Waits (bounded) for the exit; returns the exit code, or -1.
  int wait(int timeout_ms = 20000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (status_ < 0 && std::chrono::steady_clock::now() < deadline) {
      drain(out_, &out_text_);
      drain(err_, &err_text_);
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    drain(out_, &out_text_);
    drain(err_, &err_text_);
    return status_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  const std::string& out() const { return out_text_; }
  const std::string& err() const { return err_text_; }

 private:
  static void drain(int fd, std::string* text) {
    pollfd pfd{fd, POLLIN, 0};
    while (::poll(&pfd, 1, 5) == 1) {
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) return;
      text->append(buf, size_t(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  int status_ = -1;
  std::string out_text_, err_text_;
};

std::string serve_port(Child& server) {
  std::string line = server.wait_for_line("listening on udp port ");
  if (line.empty()) return "";
  return line.substr(std::string("listening on udp port ").size());
}

TEST(NetblkCli, ServeVerifyInfoAndStopOnSigterm) {
  if (!have_binary()) GTEST_SKIP() << SENS_BINARY << " not built";
  Child server({"netblk", "serve", "--ns", "ram:16M", "--port", "0", "--listen", "127.0.0.1"});
  std::string port = serve_port(server);
  ASSERT_FALSE(port.empty()) << server.err();

  Child verify({"netblk", "verify", "127.0.0.1", port, "--size", "4M", "--window", "32"});
  EXPECT_EQ(verify.wait(), 0) << verify.err();
  EXPECT_NE(verify.out().find("verify OK: all 4194304 bytes match"), std::string::npos)
      << verify.out();

  Child info({"netblk", "info", "127.0.0.1", port, "--json"});
  EXPECT_EQ(info.wait(), 0);
  EXPECT_NE(info.out().find("\"max_io\": 1024"), std::string::npos) << info.out();

  Child bench({"netblk", "bench", "127.0.0.1", port, "--secs", "0.3", "--mode", "randwrite"});
  EXPECT_EQ(bench.wait(), 0) << bench.err();
  EXPECT_NE(bench.out().find("IOPS"), std::string::npos);
  EXPECT_NE(bench.out().find("p99"), std::string::npos);

  Child misaligned({"netblk", "read", "127.0.0.1", port, "--offset", "100", "--length", "512"});
  EXPECT_EQ(misaligned.wait(), 2);
  EXPECT_NE(misaligned.err().find("whole 512-byte sectors"), std::string::npos);

  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(), 0) << server.err();
  EXPECT_NE(server.err().find("stopped:"), std::string::npos) << server.err();
}

TEST(NetblkCli, FileWrittenThroughTheCliSurvivesSigint) {
  if (!have_binary()) GTEST_SKIP() << SENS_BINARY << " not built";
  std::string path = "/tmp/sens-netblk-cli-XXXXXX", input = "/tmp/sens-netblk-in-XXXXXX";
  int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 << 20), 0);
  ::close(fd);
  fd = mkstemp(input.data());
  std::vector<uint8_t> data(64 * 1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + 5);
  ASSERT_EQ(::write(fd, data.data(), data.size()), ssize_t(data.size()));
  ::close(fd);

  Child server({"netblk", "serve", "--ns", "file:" + path, "--port", "0", "--listen", "127.0.0.1",
                "--mtu", "9000"});
  std::string port = serve_port(server);
  ASSERT_FALSE(port.empty()) << server.err();
  Child writer({"netblk", "write", "127.0.0.1", port, "--offset", "1M"}, input);
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  server.signal(SIGINT);
  EXPECT_EQ(server.wait(), 0) << server.err();

  std::vector<uint8_t> back(data.size());
  fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, back.data(), back.size(), 1 << 20), ssize_t(back.size()));
  ::close(fd);
  EXPECT_EQ(back, data);

  Child refused({"netblk", "serve", "--ns", "file:" + path, "--port", "0"});
  EXPECT_EQ(refused.wait(), 1);
  EXPECT_NE(refused.err().find("do not fit in one datagram at MTU 1500"), std::string::npos)
      << refused.err();
  ::unlink(path.c_str());
  ::unlink(input.c_str());
}

}  // namespace
