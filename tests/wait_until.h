#pragma once
// For tests that wait for something to happen (a listener, a file, a closed connection, a
// counter): poll the condition itself, up to a deadline, rather than sleep a guessed time
// that is too short on a loaded machine or under a sanitizer and too long everywhere else.
#include <chrono>
#include <thread>

namespace sens {

// Polls `condition` every `every` until it holds (true) or `timeout` passes (its last value).
template <typename Condition>
bool wait_until(Condition condition, std::chrono::milliseconds timeout,
                std::chrono::milliseconds every = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(every);
  }
  return true;
}

}  // namespace sens
