#pragma once
// Minimal leveled logging to stderr. Not for the data path.
#include <atomic>
#include <cstdio>

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

}  // namespace sens
