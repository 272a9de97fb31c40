// The library's threads: ReactorThread (a reactor on a thread of its own, with jobs) and
// OwnerThread (the thread driving shared connections, asleep only when no send-list has work).
#include <openssl/crypto.h>
#include <sys/prctl.h>

#include <algorithm>

#include "host/library.h"

namespace sens::host {

// ---- ReactorThread ----

ReactorThread::ReactorThread(const char* name, PollMode mode, Nanos max_spin) {
  thread_ = std::thread([this, name, mode, max_spin] { loop(name, mode, max_spin); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return ready_; });
}

ReactorThread::~ReactorThread() {
  {
    // The thread frees its reactor under mu_ once it sees stop_: not while this wakes it.
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    if (reactor_) reactor_->wake();
  }
  thread_.join();
}

namespace {
thread_local bool t_library_thread = false;
}  // namespace

bool on_library_thread() {
  return t_library_thread;
}

void ReactorThread::loop(const char* name, PollMode mode, Nanos max_spin) {
  t_library_thread = true;
  prctl(PR_SET_NAME, name, 0, 0, 0);
  reactor_ = std::make_unique<Reactor>();
  reactor_->set_poll(mode, max_spin);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  cv_.notify_all();
  std::vector<std::function<void()>> running;
  while (!stop_.load(std::memory_order_relaxed)) {
    reactor_->run_once(100 * kMilli);
    if (has_jobs_.load(std::memory_order_acquire)) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        running.swap(jobs_);
        has_jobs_.store(false, std::memory_order_relaxed);
      }
      for (auto& fn : running) fn();
      running.clear();
    }
  }
  // Jobs queued during the stop still run (they may hold a caller waiting in call()).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& fn : jobs_) fn();
  jobs_.clear();
  reactor_.reset();
  // OpenSSL keeps per-thread random generators (TLS, DH-HMAC-CHAP); free them with the thread.
  OPENSSL_thread_stop();
}

void ReactorThread::run_job(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    has_jobs_.store(true, std::memory_order_release);
  }
  reactor_->wake();
}

void ReactorThread::call(const std::function<void()>& fn) {
  if (on_thread()) {
    fn();
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  run_job([&] {
    fn();
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
}

// ---- OwnerThread ----

OwnerThread::OwnerThread(PollMode mode, Nanos max_spin) : thread_("sens-owner", mode, max_spin) {
  thread_.call([this] { reactor().set_sleep_guard(this); });
}

OwnerThread::~OwnerThread() {
  thread_.call([this] { reactor().set_sleep_guard(nullptr); });
}

void OwnerThread::remove(SharedConnection* c) {
  conns_.erase(std::remove(conns_.begin(), conns_.end(), c), conns_.end());
}

bool OwnerThread::before_sleep() {
  sleeping_.store(true, std::memory_order_relaxed);
  // A submitter pushes, then fences and reads sleeping_; we store, fence, then look: one of
  // the two sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (SharedConnection* c : conns_) {
    if (c->has_queued()) {
      sleeping_.store(false, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

}  // namespace sens::host
