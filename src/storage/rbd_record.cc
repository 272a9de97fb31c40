// The shared record of an RBD image and this gateway's lease on it (see rbd_record.h).
#include "storage/rbd_record.h"

#if SENS_HAVE_RBD

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace sens::storage {

std::string rbd_errno_text(int negative_errno) {
  return std::strerror(-negative_errno);
}

RbdSharedRecord::RbdSharedRecord(rados_ioctx_t rw, rados_ioctx_t notify, rados_ioctx_t reread,
                                 std::string pool, std::string object, Nanos in_flight_bound)
    : rw_(rw),
      notify_(notify),
      reread_(reread),
      pool_(std::move(pool)),
      object_(std::move(object)),
      in_flight_bound_(in_flight_bound) {}

int RbdSharedRecord::start(std::string* what) {
  int rc = watch_object(what);
  if (rc < 0) return rc;
  rereader_ = std::thread([this] { reread_loop(); });
  return 0;
}

void RbdSharedRecord::stop(rados_t cluster) {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (rereader_.joinable()) rereader_.join();
  if (watching_) rados_unwatch2(notify_, watch_cookie_);
  watching_ = false;
  rados_watch_flush(cluster);  // no callback runs after this
}

int RbdSharedRecord::read(std::string* bytes, uint64_t* version) {
  std::lock_guard<std::mutex> lock(io_mu_);
  return read_from(rw_, object_, read_buf_, bytes, version);
}

int RbdSharedRecord::write(const std::string& bytes, uint64_t version, uint64_t* new_version) {
  {
    std::lock_guard<std::mutex> lock(io_mu_);
    rados_write_op_t op = rados_create_write_op();
    if (version == 0)
      rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
    else
      rados_write_op_assert_version(op, version);
    rados_write_op_write_full(op, bytes.data(), bytes.size());
    int rc = rados_write_op_operate(op, rw_, object_.c_str(), nullptr, 0);
    rados_release_write_op(op);
    // The object moved on (or appeared) since it was read: another gateway won the race.
    if (rc == -ERANGE || rc == -EOVERFLOW || rc == -EEXIST) return -ECANCELED;
    if (rc < 0) return rc;
    *new_version = rados_get_last_version(rw_);
  }
  const Nanos committed_by = clock_.now();
  // The new value, behind its version, to every watcher; they acknowledge once applied.
  std::string payload(8, '\0');
  std::memcpy(payload.data(), new_version, 8);
  payload += bytes;
  char* reply = nullptr;
  size_t reply_len = 0;
  int rc = rados_notify2(notify_, object_.c_str(), payload.data(), int(payload.size()),
                         kNotifyTimeoutMs, &reply, &reply_len);
  if (reply) rados_buffer_free(reply);
  if (rc == 0) return 0;  // every gateway applied it
  // Some gateway did not acknowledge: it may still admit I/O under its old copy until its
  // lease lapses, and writes it handed to librbd before then may still land. Success only
  // once both are over.
  const Nanos fenced = lease_.fenced_at(committed_by, in_flight_bound_);
  LOG_WARN(
      "%s: written (version %llu), but not every gateway acknowledged it within %u ms (%s); "
      "waiting %.1f s more for their leases (%.0f s) and their writes in flight (op timeout "
      "%.0f s) to end",
      describe().c_str(), static_cast<unsigned long long>(*new_version), kNotifyTimeoutMs,
      rbd_errno_text(rc).c_str(), double(fenced - clock_.now()) / kSecond, double(kLease) / kSecond,
      double(in_flight_bound_) / kSecond);
  std::unique_lock<std::mutex> lock(stop_mu_);
  while (!stop_) {
    Nanos left = fenced - clock_.now();
    if (left <= 0) return 0;
    stop_cv_.wait_for(lock, std::chrono::nanoseconds(left));
  }
  return -ESHUTDOWN;  // written, but not fenced: the command must not report success
}

void RbdSharedRecord::watch(ChangeHandler on_change) {
  bool start_lease = false;
  {
    std::lock_guard<std::mutex> lock(handler_mu_);
    handler_ = std::move(on_change);
    start_lease = bool(handler_);
  }
  // The lease starts with this read, not a second later with the first periodic one.
  if (start_lease) reread_once();
}

void RbdSharedRecord::refresh_soon() {
  if (refresh_asked_.exchange(true, std::memory_order_acq_rel)) return;  // asked already
  std::lock_guard<std::mutex> lock(stop_mu_);
  stop_cv_.notify_all();
}

int RbdSharedRecord::read_from(rados_ioctx_t io, const std::string& object, std::vector<char>& buf,
                               std::string* bytes, uint64_t* version) {
  buf.resize(kMaxBytes + 1);
  int rc = rados_read(io, object.c_str(), buf.data(), buf.size(), 0);
  if (rc == -ENOENT) {  // removed by hand: empty, as never written
    bytes->clear();
    *version = 0;
    return 0;
  }
  if (rc < 0) return rc;
  bytes->assign(buf.data(), size_t(rc));
  *version = rados_get_last_version(io);
  return 0;
}

// Creates the object if it is not there (a watch needs one) and watches it.
int RbdSharedRecord::watch_object(std::string* what) {
  rados_write_op_t op = rados_create_write_op();
  rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, nullptr);
  int rc = rados_write_op_operate(op, notify_, object_.c_str(), nullptr, 0);
  rados_release_write_op(op);
  if (rc < 0) {
    *what = "cannot create the reservation record " + describe();
    return rc;
  }
  rc = rados_watch3(notify_, object_.c_str(), &watch_cookie_, &RbdSharedRecord::on_notify,
                    &RbdSharedRecord::on_watch_error, kWatchTimeoutS, this);
  if (rc < 0) {
    *what = "cannot watch the reservation record " + describe();
    return rc;
  }
  watching_ = true;
  return 0;
}

bool RbdSharedRecord::deliver(const std::string& bytes, uint64_t version) {
  std::lock_guard<std::mutex> lock(handler_mu_);  // watch() waits for a running call
  return handler_ && handler_(bytes, version);
}

void RbdSharedRecord::on_notify(void* arg, uint64_t notify_id, uint64_t cookie, uint64_t,
                                void* data, size_t len) {
  auto* self = static_cast<RbdSharedRecord*>(arg);
  if (len >= 8) {
    uint64_t version;
    std::memcpy(&version, data, 8);
    // Applied, but it renews no lease: a newer change may already be on its way.
    self->deliver(std::string(static_cast<const char*>(data) + 8, len - 8), version);
  }
  rados_notify_ack(self->notify_, self->object_.c_str(), notify_id, cookie, nullptr, 0);
}

void RbdSharedRecord::on_watch_error(void* arg, uint64_t, int err) {
  auto* self = static_cast<RbdSharedRecord*>(arg);
  // Notifications may have been missed: nothing is admitted until a re-read after the watch
  // is back.
  self->lease_.lapse();
  LOG_WARN("%s: the watch failed (%s); watching again", self->describe().c_str(),
           rbd_errno_text(err).c_str());
  self->watch_lost_.store(true, std::memory_order_release);
  self->refresh_soon();
}

void RbdSharedRecord::reread_once() {
  std::lock_guard<std::mutex> lock(reread_mu_);
  // Before the read: a watch lost while it runs makes the result no confirmation.
  bool watch_sound = watching_.load() && !watch_lost_.load(std::memory_order_acquire);
  const Nanos started = clock_.now();
  std::string bytes;
  uint64_t version = 0;
  if (read_from(reread_, object_, reread_buf_, &bytes, &version) != 0) return;
  // Removed by hand: its watch is gone with it (watch_object() makes both again).
  if (version == 0) {
    watch_lost_.store(true, std::memory_order_release);
    watch_sound = false;
  }
  if (deliver(bytes, version) && watch_sound) lease_.confirm(started);
}

void RbdSharedRecord::reread_loop() {
  std::unique_lock<std::mutex> lock(stop_mu_);
  for (;;) {
    stop_cv_.wait_for(lock, kRereadEvery,
                      [this] { return stop_ || refresh_asked_.load(std::memory_order_acquire); });
    if (stop_) return;
    refresh_asked_.store(false, std::memory_order_release);
    lock.unlock();
    if (watch_lost_.exchange(false, std::memory_order_acq_rel)) {
      if (watching_) rados_unwatch2(notify_, watch_cookie_);
      watching_ = false;
      std::string what;
      if (int rc = watch_object(&what); rc < 0) {
        LOG_WARN("%s: %s; trying again in %lld s", describe().c_str(), rbd_errno_text(rc).c_str(),
                 static_cast<long long>(kRereadEvery.count()));
        watch_lost_.store(true, std::memory_order_release);
      }
    }
    reread_once();
    lock.lock();
    // I/O asks for a re-read whenever it finds the lease lapsed: at most one per kRereadGap,
    // not a loop of cluster reads while the lease cannot be renewed.
    stop_cv_.wait_for(lock, kRereadGap, [this] { return stop_; });
  }
}

}  // namespace sens::storage

#endif  // SENS_HAVE_RBD
