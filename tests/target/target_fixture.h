#pragma once
// An in-process target on 127.0.0.1 (port 0: the kernel picks a free one) for each test, and
// the checks the target tests share.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "../integration/raw_client.h"
#include "buffers/buffer_pool.h"
#include "common/log.h"
#include "target/target.h"

namespace sens::testing {

inline constexpr const char* kNqn = "nqn.2026-11.dev.sens:test";
inline constexpr uint64_t kNsBytes = 16ull << 20;  // ram:16M
inline constexpr uint32_t kMaxH2C = 16384;         // small, so 64 KiB writes need 4+ H2CData
inline constexpr uint32_t kInline = 8192;
inline constexpr uint32_t kMaxIo = 128 * 1024;
inline constexpr uint32_t kQueueSize = 128;

inline target::TargetConfig test_config() {
  target::TargetConfig c;
  c.listen = {{"127.0.0.1", 0}};
  c.discovery_port = 0;
  c.subsystems = {{kNqn, {"ram:16M"}, {}}};
  c.max_h2c_data = kMaxH2C;
  c.inline_data = kInline;
  c.max_io = kMaxIo;
  c.queue_size = kQueueSize;
  // As `sens target` does: SENS_BUFFERS=tyche runs the suite with cache-aware buffers (ctest
  // runs it both ways).
  if (const char* layout = std::getenv("SENS_BUFFERS")) buffers::parse_layout(layout, &c.buffers);
  return c;
}

class TargetFixture : public ::testing::Test {
 protected:
  virtual target::TargetConfig config() { return test_config(); }

  void SetUp() override {
    g_log_level = LogLevel::kError;  // the malformed-PDU tests would flood the log
    auto cfg = config();
    ASSERT_EQ(target::validate(cfg), "");
    target_ = std::make_unique<target::Target>(cfg);
    ASSERT_EQ(target_->start(), "");
    for (auto& b : target_->bound())
      if (!b.discovery) {
        port_ = b.port;
        break;
      }
    ASSERT_NE(port_, 0);
  }
  void TearDown() override {
    if (target_) target_->stop();
    target_.reset();
  }

  std::unique_ptr<target::Target> target_;
  uint16_t port_ = 0;
};

// A TargetFixture with a 16 MiB file for a file namespace: config() calls make_file(), the
// file goes at TearDown.
class FileNsFixture : public TargetFixture {
 protected:
  // Makes file_ ("/var/tmp/PREFIX-XXXXXX") and returns it.
  const std::string& make_file(const std::string& prefix) {
    std::string name = "/var/tmp/" + prefix + "-XXXXXX";
    const int fd = mkstemp(name.data());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, 16 << 20), 0);
    ::close(fd);
    file_ = name;
    return file_;
  }
  void TearDown() override {
    TargetFixture::TearDown();
    if (!file_.empty()) ::unlink(file_.c_str());
  }

  std::string file_;
};

}  // namespace sens::testing
