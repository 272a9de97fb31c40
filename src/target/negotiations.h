#pragma once
// DH-HMAC-CHAP's cost, bounded per target: the DH steps (key generation, the peer's public
// value check, the shared secret) run on a few worker threads, never on a reactor, and only
// `limit` negotiations with a DH group may be in progress at once on the whole target. Beyond
// that a negotiation waits in arrival order (at most kWaitingPerSlot x limit of them), and
// beyond that it is refused. A negotiation holds its slot from NEGOTIATE to the end of the
// exchange, for at most `timeout`: a host that never finishes loses the slot (its next message
// fails), so half-finished negotiations delay the k-th in line by about k / limit timeouts at
// most. A wait itself ends (refused) after (kWaitingPerSlot + 1) timeouts, a safety net.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "auth/dhchap.h"
#include "common/worker_thread.h"

namespace sens::target {

class Negotiations {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint32_t kWaitingPerSlot = 8;
  // A session's claim on a slot. Its state changes under the Negotiations' lock only; the
  // session reads it with an atomic load.
  class Ticket {
   public:
    enum State : uint8_t { kIdle, kWaiting, kHeld, kExpired };
    State state() const { return state_.load(std::memory_order_acquire); }

   private:
    friend class Negotiations;
    std::atomic<State> state_{kIdle};
    Clock::time_point deadline;
  };
  // Called once, from any thread, when a waiting ticket is granted (true) or refused (false:
  // its wait timed out or the target is stopping).
  using Wake = std::function<void(bool granted)>;
  enum class Admit { kNow, kQueued, kRefused };

  // `limit` negotiations at once; `workers` threads for the DH work, placed as `placement`
  // says; hosts' DH values checked as `peer_check` says.
  Negotiations(uint32_t limit, std::chrono::milliseconds timeout, uint32_t workers,
               WorkerPlacement placement = {},
               auth::PeerCheck peer_check = auth::PeerCheck::kRange);
  ~Negotiations();
  Negotiations(const Negotiations&) = delete;
  Negotiations& operator=(const Negotiations&) = delete;

  // A slot for `t` (idle): at once, or later through the Wake `park()` returns (called under
  // the lock, only when the ticket has to wait), or refused (the waiting line is full).
  Admit acquire(const std::shared_ptr<Ticket>& t, const std::function<Wake()>& park);
  // The exchange ended: a held slot goes to the next in line; an expired ticket becomes idle.
  void release(Ticket& t);
  // The worker for the next DH step (round robin).
  WorkerThread& worker();
  auth::PeerCheck peer_check() const { return peer_check_; }
  // Refuses every waiting ticket and stops the timer thread; then the workers (jobs already
  // running finish). The reactors must still run (a refusal is answered there).
  void stop_waiting();
  void stop_workers();

  uint32_t limit() const { return limit_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  struct Stats {
    uint32_t active = 0, waiting = 0;
    uint64_t admitted = 0, queued = 0, refused = 0, timed_out = 0;
  };
  Stats stats() const;

 private:
  struct Waiter {
    std::shared_ptr<Ticket> ticket;
    Wake wake;
  };
  void grant_locked(std::vector<Wake>* woken, Clock::time_point now);
  void timer_loop();

  const uint32_t limit_;
  const std::chrono::milliseconds timeout_;
  const auth::PeerCheck peer_check_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Ticket>> held_;  // at most limit_
  std::deque<Waiter> waiting_;
  bool stopping_ = false;
  uint64_t admitted_ = 0, queued_ = 0, refused_ = 0, timed_out_ = 0;
  std::vector<std::unique_ptr<WorkerThread>> workers_;
  std::atomic<uint32_t> next_worker_{0};
  std::thread timer_;
};

}  // namespace sens::target
