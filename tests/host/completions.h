#pragma once
// What the host tests that keep I/O in flight across a target's loss share: a clock in
// seconds, one I/O that records its completion, and polling until a set of them is done.
#include <sens/host.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace sens::host::testing {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One I/O's buffer and its completion, recorded by on().
struct Io {
  std::vector<uint8_t> buf;
  iovec iov{};
  bool done = false;
  Completion c;
  static void on(void* ctx, const Completion& c) {
    auto* io = static_cast<Io*>(ctx);
    io->done = true;
    io->c = c;
  }
};

inline int count_done(const std::vector<Io>& ios) {
  int n = 0;
  for (auto& io : ios) n += io.done;
  return n;
}

// Polls `poller` until every I/O of `ios` is done or `seconds` pass.
inline bool poll_all(Poller& poller, std::vector<Io>& ios, double seconds) {
  const auto t0 = Clock::now();
  while (count_done(ios) < int(ios.size()) && since(t0) < seconds)
    poller.process_completions(0, 10'000'000);
  return count_done(ios) == int(ios.size());
}

}  // namespace sens::host::testing
