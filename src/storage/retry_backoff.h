#pragma once
// How long a device queue waits before it hands an operation the backend refused for now
// (librbd's -EAGAIN / -EBUSY) to it again: 100 us, doubling up to 10 ms a try, and no more
// tries once the waits add up to a second (the request then fails with the backend's error,
// which the target reports as a retryable status). Retrying at once, as before, spun the
// reactor against a backend that had said it had no room.
#include <cstdint>

#include "common/clock.h"

namespace sens::storage {

class RetryBackoff {
 public:
  static constexpr Nanos kFirstDelay = 100 * kMicro;
  static constexpr Nanos kMaxDelay = 10 * kMilli;
  static constexpr Nanos kGiveUpAfter = 1 * kSecond;

  // The wait before retry number `tries` (0: the first retry).
  static constexpr Nanos delay(uint32_t tries) {
    Nanos d = kFirstDelay;
    for (uint32_t i = 0; i < tries && d < kMaxDelay; ++i) d *= 2;
    return d < kMaxDelay ? d : kMaxDelay;
  }

  // One refusal more: false when the waits so far reached kGiveUpAfter (give up); else true
  // and *wait is how long to wait before trying again.
  bool next(Nanos* wait) {
    if (waited_ >= kGiveUpAfter) return false;
    *wait = delay(tries_++);
    waited_ += *wait;
    return true;
  }
  void reset() { tries_ = 0, waited_ = 0; }
  uint32_t tries() const { return tries_; }

 private:
  uint32_t tries_ = 0;
  Nanos waited_ = 0;
};

}  // namespace sens::storage
