#pragma once
// Time in nanoseconds since an arbitrary epoch (CLOCK_MONOTONIC).
#include <cstdint>
#include <ctime>

namespace sens {

using Nanos = int64_t;
inline constexpr Nanos kMicro = 1000;
inline constexpr Nanos kMilli = 1000 * kMicro;
inline constexpr Nanos kSecond = 1000 * kMilli;

inline Nanos monotonic_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return Nanos(ts.tv_sec) * kSecond + ts.tv_nsec;
}

// Injected into pure-logic components (the coalescing scheduler) so tests drive time exactly.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Nanos now() const = 0;
};

class MonotonicClock final : public Clock {
 public:
  Nanos now() const override { return monotonic_now(); }
};

// A clock that moves only when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Nanos start = 0) : now_(start) {}
  Nanos now() const override { return now_; }
  void advance(Nanos d) { now_ += d; }
  void set(Nanos t) { now_ = t; }

 private:
  Nanos now_;
};

}  // namespace sens
