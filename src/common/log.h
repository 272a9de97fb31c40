#pragma once
// Minimal leveled logging to stderr. Not for the data path.
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "common/clock.h"

namespace sens {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };
extern std::atomic<LogLevel> g_log_level;  // set at start and live (log_set_level)

#define SENS_LOG(level, tag, ...)                                                \
  do {                                                                           \
    if (static_cast<int>(level) <=                                               \
        static_cast<int>(::sens::g_log_level.load(std::memory_order_relaxed))) { \
      std::fprintf(stderr, "[%s] ", tag);                                        \
      std::fprintf(stderr, __VA_ARGS__);                                         \
      std::fputc('\n', stderr);                                                  \
    }                                                                            \
  } while (0)
#define LOG_ERROR(...) SENS_LOG(::sens::LogLevel::kError, "error", __VA_ARGS__)
#define LOG_WARN(...) SENS_LOG(::sens::LogLevel::kWarn, "warn", __VA_ARGS__)
#define LOG_INFO(...) SENS_LOG(::sens::LogLevel::kInfo, "info", __VA_ARGS__)
#define LOG_DEBUG(...) SENS_LOG(::sens::LogLevel::kDebug, "debug", __VA_ARGS__)

// Lets one line through per `gap` and counts those it holds back, for a message that an I/O
// path can repeat at its own rate (a failing device at 100k IOPS would otherwise write 100k
// lines a second, each a system call on the thread that serves I/O). Not thread-safe: one per
// thread (thread_local) or per queue.
class LogThrottle {
 public:
  explicit LogThrottle(Nanos gap) : gap_(gap) {}
  // Whether to log at `now`; if so, *held is how many lines it held back since the last one.
  bool allow(Nanos now, uint64_t* held) {
    if (passed_any_ && now - last_ < gap_) {
      ++held_;
      return false;
    }
    *held = held_;
    held_ = 0;
    last_ = now;
    passed_any_ = true;
    return true;
  }

 private:
  const Nanos gap_;
  Nanos last_ = 0;
  bool passed_any_ = false;
  uint64_t held_ = 0;
};

}  // namespace sens
