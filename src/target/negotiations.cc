#include "target/negotiations.h"

#include <algorithm>

namespace sens::target {

Negotiations::Negotiations(uint32_t limit, std::chrono::milliseconds timeout, uint32_t workers,
                           WorkerPlacement placement, auth::PeerCheck peer_check)
    : limit_(std::max(limit, 1u)), timeout_(timeout), peer_check_(peer_check) {
  for (uint32_t i = 0; i < std::max(workers, 1u); ++i)
    workers_.push_back(
        std::make_unique<WorkerThread>("sens-dhchap" + std::to_string(i), placement));
  timer_ = std::thread([this] { timer_loop(); });
}

Negotiations::~Negotiations() {
  stop_waiting();
  stop_workers();
}

Negotiations::Admit Negotiations::acquire(const std::shared_ptr<Ticket>& t,
                                          const std::function<Wake()>& park) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    ++refused_;
    return Admit::kRefused;
  }
  const auto now = Clock::now();
  if (held_.size() < limit_ && waiting_.empty()) {
    t->deadline = now + timeout_;
    t->state_.store(Ticket::kHeld, std::memory_order_release);
    held_.push_back(t);
    ++admitted_;
    cv_.notify_all();  // a new deadline for the timer
    return Admit::kNow;
  }
  if (waiting_.size() >= size_t(limit_) * kWaitingPerSlot) {
    ++refused_;
    return Admit::kRefused;
  }
  // The longest it waits: long enough for the whole line ahead to hold its slots to the end
  // (the line moves by `limit` slots per timeout at least), so a waiter is served, not
  // refused, behind holders that never finish.
  t->deadline = now + timeout_ * (kWaitingPerSlot + 1);
  t->state_.store(Ticket::kWaiting, std::memory_order_release);
  waiting_.push_back({t, park()});
  ++queued_;
  cv_.notify_all();
  return Admit::kQueued;
}

void Negotiations::release(Ticket& t) {
  std::vector<Wake> woken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (t.state()) {
      case Ticket::kHeld: {
        auto it = std::find_if(held_.begin(), held_.end(), [&](auto& h) { return h.get() == &t; });
        if (it != held_.end()) held_.erase(it);
        grant_locked(&woken, Clock::now());
        break;
      }
      case Ticket::kWaiting: {
        auto it = std::find_if(waiting_.begin(), waiting_.end(),
                               [&](auto& w) { return w.ticket.get() == &t; });
        if (it != waiting_.end()) {
          woken.push_back([wake = std::move(it->wake)](bool) { wake(false); });
          waiting_.erase(it);
        }
        break;
      }
      default:
        break;
    }
    t.state_.store(Ticket::kIdle, std::memory_order_release);
  }
  for (auto& w : woken) w(true);
}

// Hands free slots to the first in line; their Wakes go to `woken` (run outside the lock).
void Negotiations::grant_locked(std::vector<Wake>* woken, Clock::time_point now) {
  while (held_.size() < limit_ && !waiting_.empty()) {
    Waiter w = std::move(waiting_.front());
    waiting_.pop_front();
    w.ticket->deadline = now + timeout_;
    w.ticket->state_.store(Ticket::kHeld, std::memory_order_release);
    held_.push_back(w.ticket);
    ++admitted_;
    woken->push_back(std::move(w.wake));
  }
}

void Negotiations::timer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    auto next = Clock::time_point::max();
    for (auto& h : held_) next = std::min(next, h->deadline);
    for (auto& w : waiting_) next = std::min(next, w.ticket->deadline);
    if (next == Clock::time_point::max())
      cv_.wait(lock);
    else
      cv_.wait_until(lock, next);
    if (stopping_) break;
    const auto now = Clock::now();
    std::vector<Wake> granted, refused;
    // A holder past its deadline loses the slot; its session finds the ticket expired.
    for (auto it = held_.begin(); it != held_.end();) {
      if ((*it)->deadline <= now) {
        (*it)->state_.store(Ticket::kExpired, std::memory_order_release);
        ++timed_out_;
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->ticket->deadline <= now) {
        it->ticket->state_.store(Ticket::kIdle, std::memory_order_release);
        ++timed_out_;
        refused.push_back(std::move(it->wake));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    grant_locked(&granted, now);
    lock.unlock();
    for (auto& w : granted) w(true);
    for (auto& w : refused) w(false);
    lock.lock();
  }
}

void Negotiations::stop_waiting() {
  std::deque<Waiter> refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    refused.swap(waiting_);
    for (auto& w : refused) w.ticket->state_.store(Ticket::kIdle, std::memory_order_release);
  }
  cv_.notify_all();
  if (timer_.joinable()) timer_.join();
  for (auto& w : refused) w.wake(false);
}

void Negotiations::stop_workers() {
  for (auto& w : workers_) w->stop();
}

WorkerThread& Negotiations::worker() {
  return *workers_[next_worker_.fetch_add(1, std::memory_order_relaxed) % workers_.size()];
}

Negotiations::Stats Negotiations::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  s.active = uint32_t(held_.size());
  s.waiting = uint32_t(waiting_.size());
  s.admitted = admitted_;
  s.queued = queued_;
  s.refused = refused_;
  s.timed_out = timed_out_;
  return s;
}

}  // namespace sens::target
