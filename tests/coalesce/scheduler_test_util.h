#pragma once
// What the scheduler tests share: the SENS paper's parameters and a fixture on a ManualClock.
#include <gtest/gtest.h>

#include <cstdint>

#include "coalesce/scheduler.h"

namespace sens::coalesce::testing {

inline constexpr Nanos kUs = kMicro;
inline constexpr Nanos kT0 = 1000 * kUs;  // a non-zero epoch catches relative/absolute time mix-ups

inline Config paper_config(Policy policy) {
  Config c;
  c.policy = policy;
  c.pdus = 16;                // B
  c.ctrl_pdus = 4;            // c2
  c.timeout = 50 * kUs;       // T
  c.ctrl_timeout = 10 * kUs;  // Tc
  c.bytes = 1 << 30;          // out of the way unless a test is about it
  return c;
}

inline uint64_t flushes(const Scheduler& s, FlushReason r) {
  return s.stats().flushes[size_t(r)];
}

class SchedulerTest : public ::testing::Test {
 protected:
  ManualClock clock{kT0};
  void at(Nanos since_t0) { clock.set(kT0 + since_t0); }
};

}  // namespace sens::coalesce::testing
