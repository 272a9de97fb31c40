#include "common/worker_thread.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace sens {

bool WorkerThread::post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return false;
  jobs_.push_back(std::move(job));
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { loop(); });
    pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
  }
  cv_.notify_one();
  return true;
}

void WorkerThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = false;
}

size_t WorkerThread::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size() + running_;
}

void WorkerThread::loop() {
  // Linux applies a nice value to the one thread whose id is given.
  if (placement_.nice != 0) {
    const id_t self = static_cast<id_t>(gettid());
    const int want = std::min(19, getpriority(PRIO_PROCESS, self) + placement_.nice);
    if (setpriority(PRIO_PROCESS, self, want) != 0)
      LOG_WARN("%s: cannot set nice %d: %s", name_.c_str(), want, std::strerror(errno));
  }
  if (!placement_.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : placement_.cpus)
      if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    if (int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
      LOG_WARN("%s: cannot set its cores: %s", name_.c_str(), std::strerror(rc));
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (stopping_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = 1;
    lock.unlock();
    job();
    job = nullptr;  // what it captured goes before the count says it is done
    lock.lock();
    running_ = 0;
  }
}

}  // namespace sens
