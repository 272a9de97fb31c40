// `sens target` as a systemd service: what `cmake --install` puts under a prefix (and that an
// application builds against it with pkg-config alone), the sd_notify messages of a start, a
// SIGHUP reload and a SIGTERM stop, and the unit as systemd-analyze sees it.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The file called `name` anywhere under `dir` ("" if none).
std::string find_under(const std::string& dir, const std::string& name) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec))
    if (it->path().filename() == name) return it->path().string();
  return "";
}

// One `cmake --install` of this build tree into a temporary prefix, shared by the tests.
class Installed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    result_ = new RunResult(run_command(
        {SENS_CMAKE_COMMAND, "--install", SENS_BUILD_DIR, "--prefix", prefix()}, 120000));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete dir_;
  }
  static std::string prefix() { return dir_->file("prefix"); }
  static inline TempDir* dir_ = nullptr;
  static inline RunResult* result_ = nullptr;
};

TEST_F(Installed, PutsBinaryLibraryHeaderPkgConfigUnitAndExample) {
  ASSERT_EQ(result_->code, 0) << result_->out << result_->err;
  const std::string p = prefix();
  EXPECT_EQ(::access((p + "/bin/sens").c_str(), X_OK), 0);
  EXPECT_TRUE(file_exists(p + "/include/sens/host.h"));
  std::string lib = find_under(p, "libsens_host.so");
  ASSERT_NE(lib, "") << "no libsens_host.so under " << p;
  // The development symlink, the SONAME one and the real file, side by side.
  std::string libdir = fs::path(lib).parent_path().string();
  EXPECT_TRUE(fs::is_symlink(libdir + "/libsens_host.so"));
  EXPECT_TRUE(fs::is_symlink(libdir + "/libsens_host.so.0"));
  RunResult objdump = run_command({"/bin/sh", "-c", "objdump -p '" + lib + "' | grep SONAME"});
  EXPECT_TRUE(contains(objdump.out, "libsens_host.so.0")) << objdump.out << objdump.err;

  std::string pc = read_file(libdir + "/pkgconfig/sens-host.pc");
  EXPECT_TRUE(contains(pc, "prefix=" + p + "\n")) << pc;
  EXPECT_TRUE(contains(pc, "-lsens_host")) << pc;

  std::string unit = read_file(p + "/lib/systemd/system/sens-target.service");
  EXPECT_TRUE(contains(unit, "ExecStart=" + p + "/bin/sens target --config /etc/sens/target.json"))
      << unit;
  for (const char* line :
       {"Type=notify\n", "ExecReload=/bin/kill -HUP $MAINPID\n", "Restart=on-failure\n",
        "TimeoutStopSec=", "LimitNOFILE=", "LimitMEMLOCK=", "WantedBy=multi-user.target\n"})
    EXPECT_TRUE(contains(unit, line)) << line;
  EXPECT_FALSE(contains(unit, "@")) << "an unreplaced @VARIABLE@ in the unit:\n" << unit;

  // The example config is one `sens target` takes; nothing is written to an etc/.
  std::string example = p + "/share/doc/sens/target.json";
  ASSERT_TRUE(file_exists(example));
  RunResult dump =
      run_command({p + "/bin/sens", "target", "--config", example, "--dump-config"}, 20000);
  EXPECT_EQ(dump.code, 0) << dump.out << dump.err;
  EXPECT_FALSE(fs::exists(p + "/etc"));
}

TEST_F(Installed, ExampleBuildsWithPkgConfigAndRunsAgainstATarget) {
  ASSERT_EQ(result_->code, 0) << result_->out << result_->err;
  const std::string p = prefix();
  std::string pc = find_under(p, "sens-host.pc");
  ASSERT_NE(pc, "");
  std::string pcdir = fs::path(pc).parent_path().string();
  std::string exe = dir_->file("hello_host");
  // The compiler of this build, and the sanitizers when this build has them (the installed
  // library then needs their runtime).
  std::string flags = "-std=c++20";
#if defined(__SANITIZE_ADDRESS__)
  flags += " -fsanitize=address,undefined";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  flags += " -fsanitize=address,undefined";
#endif
#endif
  std::string cmd = "PKG_CONFIG_PATH='" + pcdir + "' && export PKG_CONFIG_PATH && '" +
                    std::string(SENS_CXX_COMPILER) + "' " + flags + " '" + SENS_SOURCE_DIR +
                    "/examples/hello_host.cc' -o '" + exe +
                    "' $(pkg-config --cflags --libs sens-host)";
  RunResult cc = run_command({"/bin/sh", "-c", cmd}, 180000);
  ASSERT_EQ(cc.code, 0) << cmd << "\n" << cc.out << cc.err;
  // Nothing of the source tree leaks in: the flags name the prefix only.
  RunResult flags_out = run_command(
      {"/bin/sh", "-c", "PKG_CONFIG_PATH='" + pcdir + "' pkg-config --cflags --libs sens-host"});
  EXPECT_TRUE(contains(flags_out.out, "-I" + p + "/include")) << flags_out.out;
  EXPECT_FALSE(contains(flags_out.out, SENS_SOURCE_DIR)) << flags_out.out;

  TempDir run;
  Child target;
  uint16_t port = 0;
  for (int attempt = 0; attempt < 5 && !target.running(); ++attempt) {
    port = free_port();
    ASSERT_TRUE(target.start(
        {p + "/bin/sens", "target", "--listen", "127.0.0.1:" + std::to_string(port),
         "--discovery-port", "0", "--ns", "ram:16M", "--nqn", "nqn.2026-11.dev.sens:installed"},
        run.file("out"), run.file("err")));
    if (!target.wait_for_text(run.file("out"), "listening on", 5000)) target.kill_now();
  }
  ASSERT_TRUE(target.running()) << read_file(run.file("err"));
  std::string trid = "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(port) +
                     " subnqn:nqn.2026-11.dev.sens:installed";
  RunResult hello =
      run_command({"/bin/sh", "-c",
                   "LD_LIBRARY_PATH='" + fs::path(pc).parent_path().parent_path().string() +
                       "' exec '" + exe + "' '" + trid + "'"},
                  60000);
  EXPECT_EQ(hello.code, 0) << hello.out << hello.err;
  EXPECT_TRUE(contains(hello.out, "hello from namespace 1")) << hello.out << hello.err;
  ASSERT_TRUE(target.signal(SIGTERM));
  EXPECT_EQ(target.wait(20000), 0);
}

TEST_F(Installed, SystemdAnalyzeVerifiesTheUnit) {
  ASSERT_EQ(result_->code, 0) << result_->out << result_->err;
  const char* analyze = "/usr/bin/systemd-analyze";
  if (::access(analyze, X_OK) != 0)
    GTEST_SKIP() << "systemd-analyze is not installed here (Debian package systemd): the unit "
                    "is not verified";
  std::string unit = prefix() + "/lib/systemd/system/sens-target.service";
  RunResult r = run_command({analyze, "verify", unit}, 60000);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  // verify prints what it finds wrong but exits 0 for some of it: no line may name the unit.
  EXPECT_FALSE(contains(r.out + r.err, "sens-target.service")) << r.out << r.err;
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
