#pragma once
// The lease a gateway holds on its copy of a shared record (storage::SharedRecord): the fence
// that keeps a slow or stopped gateway from acting on a state another gateway has replaced.
//
// A gateway's copy is "confirmed" at time T when a read of the record that started at T found
// the version the copy holds (or an older one): no change committed before T is missing from
// it. The gateway admits I/O under that copy only until T + length(). A gateway that changes
// the record returns success once every watcher has acknowledged the change, or else only
// after waiting out fenced_at(): by then every gateway that did not acknowledge has let its
// lease lapse (its last confirmation started before the change committed) and the writes it
// had already handed to the cluster have finished or timed out.
//
// A notification alone confirms nothing (a newer change may already be on its way), and a
// lost watch lapses the lease at once (notifications may have been missed). Times are
// CLOCK_MONOTONIC nanoseconds, which run on while a process is stopped: a gateway resumed
// after SIGSTOP finds its lease lapsed.
#include <atomic>
#include <mutex>

#include "common/clock.h"

namespace sens::storage {

class RecordLease {
 public:
  RecordLease(const Clock& clock, Nanos length) : clock_(clock), length_(length) {}

  Nanos length() const { return length_; }
  Nanos now() const { return clock_.now(); }

  // Whether the copy may be acted upon at `now` (the reactor's pass clock on the I/O path:
  // one relaxed load and a compare, no lock, no system call).
  bool fresh(Nanos now) const { return now < deadline_.load(std::memory_order_acquire); }
  bool fresh() const { return fresh(clock_.now()); }
  Nanos deadline() const { return deadline_.load(std::memory_order_acquire); }

  // A read that started at `read_started` found what the copy holds: the lease runs to
  // read_started + length() (never shortened by an older read). A read that started before
  // the last lapse() confirms nothing: it may predate what the lapse stands for.
  void confirm(Nanos read_started) {
    std::lock_guard<std::mutex> lock(mu_);
    if (read_started <= lapsed_at_) return;
    Nanos until = read_started + length_;
    if (until > deadline_.load(std::memory_order_relaxed))
      deadline_.store(until, std::memory_order_release);
  }

  // The copy can no longer be trusted (the watch was lost): nothing is admitted until a read
  // that starts after now confirms it again.
  void lapse() {
    std::lock_guard<std::mutex> lock(mu_);
    lapsed_at_ = clock_.now();
    deadline_.store(0, std::memory_order_release);
  }

  // For the gateway that committed a change by `committed_by` (a time after the commit) and
  // did not hear every watcher acknowledge it: when every other gateway's lease on an older
  // copy has lapsed and the writes it handed to the cluster before that (each bounded by
  // `in_flight_bound`, the cluster client's op timeout) are done.
  Nanos fenced_at(Nanos committed_by, Nanos in_flight_bound) const {
    return committed_by + length_ + in_flight_bound;
  }

 private:
  const Clock& clock_;
  const Nanos length_;
  std::mutex mu_;        // confirm() and lapse() (a re-read thread, a watch callback)
  Nanos lapsed_at_ = 0;  // under mu_
  std::atomic<Nanos> deadline_{0};
};

}  // namespace sens::storage
