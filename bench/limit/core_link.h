#pragma once
// How far apart two cores are: the round trip of one cache line bounced between a thread on
// each (a store seen by the other, and its answer). On a virtual machine the hypervisor may
// place two vCPUs on cores that share a last-level cache (tens of ns) or on two chiplets
// (hundreds), and may move them while a benchmark runs; loopback TCP between the cores then
// changes speed by about 2x. A benchmark records this next to each run, so that it compares
// only runs made under the same placement.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "common/clock.h"

namespace sens::limit {

struct CoreRoundTrip {
  double ns = 0;      // the mean over all rounds (a run takes about 5-35 ms)
  std::string error;  // a core that cannot be pinned, or a side that never answered
};

// `rounds` round trips between `core_a` (the calling thread's side) and `core_b`; -1 leaves
// a side unpinned. Gives up after `timeout` (a core taken away mid-way).
inline CoreRoundTrip measure_core_round_trip(int core_a, int core_b, int rounds = 100000,
                                             Nanos timeout = 2 * kSecond) {
  CoreRoundTrip out;
  alignas(64) std::atomic<int> line{0};  // odd: a's turn done; even: b's
  std::atomic<bool> give_up{false};
  auto pin = [](int core) -> int {
    if (core < 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  };
  std::atomic<int> b_pin_error{-1};
  std::thread b([&] {
    b_pin_error.store(pin(core_b));
    for (int i = 0; i < rounds && !give_up.load(std::memory_order_relaxed); ++i) {
      while (line.load(std::memory_order_acquire) != 2 * i + 1)
        if (give_up.load(std::memory_order_relaxed)) return;
      line.store(2 * i + 2, std::memory_order_release);
    }
  });
  cpu_set_t before;
  const bool had_mask = sched_getaffinity(0, sizeof before, &before) == 0;
  int a_pin_error = pin(core_a);
  while (b_pin_error.load() < 0) std::this_thread::yield();
  if (a_pin_error != 0 || b_pin_error.load() != 0) {
    give_up.store(true);
    b.join();
    out.error = "cannot pin to core " + std::to_string(a_pin_error ? core_a : core_b) + ": " +
                std::strerror(a_pin_error ? a_pin_error : b_pin_error.load());
  } else {
    const Nanos start = monotonic_now(), deadline = start + timeout;
    int i = 0;
    bool late = false;
    for (; i < rounds && !late; ++i) {
      line.store(2 * i + 1, std::memory_order_release);
      for (uint32_t spins = 0; line.load(std::memory_order_acquire) != 2 * i + 2;)
        if ((++spins & 0xffff) == 0 && monotonic_now() > deadline) {
          late = true;
          break;
        }
    }
    if (late) --i;
    const Nanos took = monotonic_now() - start;
    give_up.store(true);
    b.join();
    if (i < rounds)
      out.error =
          "the other core did not answer within " + std::to_string(timeout / kMilli) + " ms";
    else
      out.ns = double(took) / double(rounds);
  }
  if (had_mask) sched_setaffinity(0, sizeof before, &before);  // the caller's pinning again
  return out;
}

}  // namespace sens::limit
