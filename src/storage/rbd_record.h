#pragma once
// The shared record of one RBD image (NVMe reservations, one state for every gateway): a
// RADOS object beside the image, `sens_resv.<image id>` in its pool, written by compare-and-
// swap on the object's version (no lock, so a gateway that dies mid-update wedges nobody) and
// watched by every gateway. Each write is followed by a notify that carries the new value;
// every watcher applies it before it acknowledges. A re-read every second catches what a lost
// watch missed and renews this gateway's lease on its copy (record_lease.h): the fence that
// keeps a gateway that stopped hearing from the cluster from acting on an old state.
//
// What a write guarantees: it returns once every watcher acknowledged the change, or, when
// one did not within kNotifyTimeoutMs (stopped, partitioned, dead but still watching), only
// after RecordLease::fenced_at(): the lease (kLease) plus the op timeout, by which time every
// gateway that missed the change stopped admitting I/O under its old copy and the writes it
// had handed to librbd before that ended.
#if SENS_HAVE_RBD

#include <rados/librados.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "storage/device.h"
#include "storage/record_lease.h"

namespace sens::storage {

std::string rbd_errno_text(int negative_errno);

// Three ioctxs, since rados_get_last_version is per ioctx: the commands' reads and writes
// (under a mutex: several reactors), the re-reads (so that one stuck on a dead cluster holds
// no command up), and the watch with its acknowledgements (which must never wait behind a
// write that waits for them).
class RbdSharedRecord final : public SharedRecord {
 public:
  // Every gateway acknowledges a write within this, or the writer waits out the lease.
  static constexpr unsigned kNotifyTimeoutMs = 3000;
  static constexpr unsigned kWatchTimeoutS = 10;
  // A gateway acts on its copy for kLease after a re-read confirmed it; it re-reads every
  // kRereadEvery, so a healthy gateway's lease never lapses (three re-reads may be slow).
  static constexpr Nanos kLease = 4 * kSecond;
  static constexpr auto kRereadEvery = std::chrono::seconds(1);
  static constexpr auto kRereadGap = std::chrono::milliseconds(100);  // re-reads asked for
  // Larger than any valid record (the parser refuses what is longer than its registrants).
  static constexpr size_t kMaxBytes = 64 * 1024;

  // `in_flight_bound`: how long a write librbd was handed may take at most (the image's
  // op_timeout, rados_osd_op_timeout), which an unacknowledged change waits out too.
  RbdSharedRecord(rados_ioctx_t rw, rados_ioctx_t notify, rados_ioctx_t reread, std::string pool,
                  std::string object, Nanos in_flight_bound);

  // Creates the object if no gateway has yet, watches it and starts the re-reads. Returns 0
  // or -errno (*what: the step that failed).
  int start(std::string* what);
  // Before the ioctxs and the cluster handle go (RbdDevice's destructor).
  void stop(rados_t cluster);

  int read(std::string* bytes, uint64_t* version) override;
  int write(const std::string& bytes, uint64_t version, uint64_t* new_version) override;
  void watch(ChangeHandler on_change) override;
  const RecordLease* lease() const override { return &lease_; }
  void refresh_soon() override;
  std::string describe() const override { return "rados object " + pool_ + "/" + object_; }

 private:
  static int read_from(rados_ioctx_t io, const std::string& object, std::vector<char>& buf,
                       std::string* bytes, uint64_t* version);
  int watch_object(std::string* what);
  bool deliver(const std::string& bytes, uint64_t version);
  // One re-read: delivers the value and, if the watch is sound and the copy holds it, renews
  // the lease from when the read started.
  void reread_once();
  void reread_loop();
  static void on_notify(void* arg, uint64_t notify_id, uint64_t cookie, uint64_t, void* data,
                        size_t len);
  static void on_watch_error(void* arg, uint64_t, int err);

  rados_ioctx_t rw_, notify_, reread_;
  std::string pool_, object_;
  const Nanos in_flight_bound_;
  MonotonicClock clock_;
  RecordLease lease_{clock_, kLease};
  std::mutex io_mu_;  // rw_
  std::vector<char> read_buf_;
  std::mutex reread_mu_;  // reread_ (the re-read thread, and watch() once)
  std::vector<char> reread_buf_;
  std::mutex handler_mu_;
  ChangeHandler handler_;
  uint64_t watch_cookie_ = 0;
  std::atomic<bool> watching_{false};
  std::atomic<bool> watch_lost_{false};
  std::atomic<bool> refresh_asked_{false};
  std::thread rereader_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

}  // namespace sens::storage

#endif  // SENS_HAVE_RBD
