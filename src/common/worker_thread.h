#pragma once
// A thread for work that blocks (a round trip to a cluster that may not answer for seconds),
// so that a reactor can hand it off and keep serving its other connections. Jobs run one at a
// time, in the order posted. The thread starts with the first job.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sens {

// Where and how a worker runs.
struct WorkerPlacement {
  // Added to the nice value the thread starts with (at most 19): its work can wait, the I/O
  // the reactors serve cannot.
  int nice = 0;
  // The cores it may run on (empty: those of the thread that starts it). A thread started from
  // a pinned reactor would otherwise share that reactor's one core while others idle.
  std::vector<int> cpus;
};

class WorkerThread {
 public:
  explicit WorkerThread(std::string name, WorkerPlacement placement = {})
      : name_(std::move(name)), placement_(std::move(placement)) {}
  ~WorkerThread() { stop(); }
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Thread-safe. False while stop() runs: the job is dropped.
  bool post(std::function<void()> job);
  // Waits for the running job (if any) and drops the ones not started; a post() after it
  // starts the thread again.
  void stop();
  // Jobs posted and not yet finished.
  size_t pending() const;

 private:
  void loop();

  std::string name_;  // the thread's name (15 characters at most are kept)
  const WorkerPlacement placement_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace sens
