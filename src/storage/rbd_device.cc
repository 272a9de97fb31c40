// rbd: a Ceph RBD image through librbd's asynchronous C API. One cluster handle and one open
// image per device, shared by every queue (librbd is thread-safe); the queues, one per reactor,
// are in rbd_queue.h. Here: connecting to the cluster, opening the image, its identity, size
// and cache, and the reservation record.
//
// The image's shared record (NVMe reservations, one state for every gateway) and this gateway's
// lease on it are in rbd_record.h. Writes are handed to librbd only while the lease holds.
#include "storage/backends.h"
#include "storage/rbd_queue.h"
#include "storage/rbd_record.h"

#if SENS_HAVE_RBD

#include <openssl/evp.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

#include <atomic>
#include <cstring>

#include "common/log.h"
#include "common/units.h"

namespace sens::storage {

bool rbd_supported() {
  return true;
}

namespace {

constexpr uint32_t kRbdBlockSize = 512;  // as the kernel's rbd driver: any 512-byte multiple

std::string errno_text(int negative_errno) {
  return rbd_errno_text(negative_errno);
}

// SHA-256 of `seed`, first 16 bytes: an identity any gateway computes the same way.
void digest16(const std::string& seed, uint8_t out[16]) {
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(seed.data(), seed.size(), md, &len, EVP_sha256(), nullptr);
  std::memcpy(out, md, 16);
}

class RbdDevice final : public Device {
 public:
  RbdDevice(RbdSpec spec, rados_t cluster, rados_ioctx_t io, rbd_image_t image, uint64_t size,
            bool read_only, bool volatile_cache, bool discard_zeroes, std::string identity)
      : spec_(std::move(spec)),
        cluster_(cluster),
        io_(io),
        image_(image),
        size_(size),
        read_only_(read_only),
        volatile_cache_(volatile_cache),
        discard_zeroes_(discard_zeroes),
        identity_(std::move(identity)) {
    digest16("sens-rbd-nguid:" + identity_, nguid_);
    digest16("sens-rbd-uuid:" + identity_, uuid_);
    uuid_[6] = uint8_t((uuid_[6] & 0x0F) | 0x80);  // RFC 9562 version 8 (name hashed, SHA-256)
    uuid_[8] = uint8_t((uuid_[8] & 0x3F) | 0x80);
  }
  ~RbdDevice() override {
    if (record_) record_->stop(cluster_);
    record_.reset();
    for (rados_ioctx_t io : record_io_)
      if (io) rados_ioctx_destroy(io);
    rbd_close(image_);  // waits for anything librbd still has in flight
    rados_ioctx_destroy(io_);
    rados_shutdown(cluster_);
  }

  uint64_t size() const override { return size_.load(std::memory_order_relaxed); }
  uint32_t block_size() const override { return kRbdBlockSize; }
  // rbd_resize with a size; without one, the size the image has now (`rbd resize` elsewhere).
  std::string resize(uint64_t bytes) override {
    if (bytes % kRbdBlockSize) return "the size must be a multiple of 512 bytes";
    if (bytes) {
      if (read_only_) return "the namespace is read-only";
      if (int rc = rbd_resize(image_, bytes); rc < 0)
        return std::string("rbd_resize: ") + std::strerror(-rc);
    }
    uint64_t now = 0;
    if (int rc = rbd_get_size(image_, &now); rc < 0)
      return std::string("rbd_get_size: ") + std::strerror(-rc);
    size_ = now - now % kRbdBlockSize;
    return "";
  }
  bool read_only() const override { return read_only_; }
  bool volatile_cache() const override { return volatile_cache_; }
  bool discard_zeroes() const override { return discard_zeroes_; }
  std::string describe() const override {
    std::string text = "rbd " + spec_.pool + "/" + spec_.image + " (" + format_size(size()) +
                       ", image id " + identity_.substr(identity_.rfind('/') + 1);
    if (volatile_cache_) text += ", rbd_cache on";
    if (read_only_) text += ", read-only";
    if (record_) text += ", reservations shared in " + record_->describe();
    return text + ")";
  }
  bool stable_identity(uint8_t nguid[16], uint8_t uuid[16]) const override {
    std::memcpy(nguid, nguid_, 16);
    std::memcpy(uuid, uuid_, 16);
    return true;
  }
  std::unique_ptr<Queue> make_queue(unsigned depth) override {
    return make_rbd_queue({*this, image_, write_lease(), spec_.qd, spec_.pool + "/" + spec_.image},
                          depth);
  }
  int sync() override {
    int rc = rbd_flush(image_);
    if (rc < 0) return rc;
    syncs_.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  uint64_t syncs() const override { return syncs_.load(std::memory_order_relaxed); }
  SharedRecord* shared_record() override { return record_.get(); }
  // Writes go to librbd only while this holds (null: no record, never the case once open).
  const RecordLease* write_lease() const { return record_ ? record_->lease() : nullptr; }

  // The reservation record (see RbdSharedRecord); "" or why it cannot be had.
  std::string open_record(const std::string& image_id) {
    std::string what;
    for (rados_ioctx_t& io : record_io_) {
      int rc = rados_ioctx_create(cluster_, spec_.pool.c_str(), &io);
      if (rc < 0) return "cannot open pool '" + spec_.pool + "' again: " + errno_text(rc);
    }
    record_ = std::make_unique<RbdSharedRecord>(record_io_[0], record_io_[1], record_io_[2],
                                                spec_.pool, "sens_resv." + image_id,
                                                Nanos(spec_.op_timeout_s) * kSecond);
    int rc = record_->start(&what);
    if (rc < 0) {
      record_->stop(cluster_);
      record_.reset();
      return what + ": " + errno_text(rc);
    }
    return "";
  }

 private:
  RbdSpec spec_;
  rados_t cluster_;
  rados_ioctx_t io_;
  rbd_image_t image_;
  std::atomic<uint64_t> size_;  // changes with resize()
  bool read_only_;
  bool volatile_cache_;
  bool discard_zeroes_;
  std::string identity_;  // "FSID/POOL_ID/IMAGE_ID"
  uint8_t nguid_[16]{}, uuid_[16]{};
  std::atomic<uint64_t> syncs_{0};
  rados_ioctx_t record_io_[3] = {nullptr, nullptr, nullptr};  // see RbdSharedRecord
  std::unique_ptr<RbdSharedRecord> record_;
};

std::string conf_get(rados_t cluster, const char* key) {
  char buf[512];
  if (rados_conf_get(cluster, key, buf, sizeof buf) != 0) return "";
  return buf;
}

}  // namespace

std::unique_ptr<Device> open_rbd(const RbdSpec& s, bool read_only, std::string* error) {
  const std::string name = "rbd:" + s.pool + "/" + s.image;
  rados_t cluster = nullptr;
  int rc = rados_create(&cluster, s.id.empty() ? nullptr : s.id.c_str());
  if (rc < 0) {
    *error = name + ": cannot create a cluster handle: " + errno_text(rc);
    return nullptr;
  }
  auto fail = [&](std::string why) -> std::unique_ptr<Device> {
    rados_shutdown(cluster);
    *error = name + ": " + why;
    return nullptr;
  };
  rc = rados_conf_read_file(cluster, s.conf.empty() ? nullptr : s.conf.c_str());
  if (rc < 0) {
    if (s.conf.empty())
      return fail("no Ceph configuration found (" + errno_text(rc) +
                  "): give conf=PATH or set CEPH_CONF (librados looks at $CEPH_CONF, "
                  "/etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf)");
    return fail("cannot read the Ceph configuration '" + s.conf + "': " + errno_text(rc));
  }
  rados_conf_parse_env(cluster, nullptr);  // CEPH_ARGS, as the ceph tools take it
  // A gateway must not wait 300 s for a dead monitor (client_mount_timeout), nor forever for
  // a dead OSD (rados_osd_op_timeout 0): the spec's timeouts, which override the file's.
  const std::string mon_timeout = std::to_string(s.timeout_s);
  const std::string osd_timeout = std::to_string(s.op_timeout_s);
  for (auto [key, value] : {std::pair{"client_mount_timeout", mon_timeout.c_str()},
                            std::pair{"rados_mon_op_timeout", mon_timeout.c_str()},
                            std::pair{"rados_osd_op_timeout", osd_timeout.c_str()}}) {
    rc = rados_conf_set(cluster, key, value);
    if (rc < 0) return fail(std::string("cannot set ") + key + ": " + errno_text(rc));
  }
  std::string mon_host = conf_get(cluster, "mon_host");
  std::string user = "client." + (s.id.empty() ? std::string("admin") : s.id);
  rc = rados_connect(cluster);
  if (rc < 0) {
    if (rc == -ETIMEDOUT || rc == -ENOTCONN)
      return fail("cannot reach the cluster's monitors (mon_host " +
                  (mon_host.empty() ? std::string("unset") : mon_host) + ") within " +
                  std::to_string(s.timeout_s) + " s: " + errno_text(rc) +
                  " (is the cluster up? timeout=S sets the wait)");
    if (rc == -EACCES || rc == -EPERM)
      return fail("the cluster refused " + user + ": " + errno_text(rc) +
                  " (wrong key or keyring?)");
    if (rc == -ENOENT)
      return fail("cannot connect as " + user + ": " + errno_text(rc) +
                  " (no keyring for it? set keyring in the configuration)");
    return fail("cannot connect to the cluster (mon_host " + mon_host + ") as " + user + ": " +
                errno_text(rc));
  }
  rados_ioctx_t io = nullptr;
  rc = rados_ioctx_create(cluster, s.pool.c_str(), &io);
  if (rc < 0) {
    if (rc == -ENOENT) return fail("pool '" + s.pool + "' does not exist");
    return fail("cannot open pool '" + s.pool + "': " + errno_text(rc));
  }
  auto fail_io = [&](std::string why) {
    rados_ioctx_destroy(io);
    return fail(std::move(why));
  };
  rbd_image_t image = nullptr;
  rc = read_only ? rbd_open_read_only(io, s.image.c_str(), &image, nullptr)
                 : rbd_open(io, s.image.c_str(), &image, nullptr);
  if (rc < 0) {
    if (rc == -ENOENT)
      return fail_io("image '" + s.image + "' does not exist in pool '" + s.pool +
                     "' (rbd create --size 10G " + s.pool + "/" + s.image + ")");
    return fail_io("cannot open image '" + s.image + "': " + errno_text(rc));
  }
  auto fail_image = [&](std::string why) {
    rbd_close(image);
    return fail_io(std::move(why));
  };
  uint64_t size = 0;
  rc = rbd_get_size(image, &size);
  if (rc < 0) return fail_image("cannot read the image size: " + errno_text(rc));
  size -= size % kRbdBlockSize;
  if (size == 0) return fail_image("the image is smaller than one 512-byte block");
  char id[128] = {};
  rc = rbd_get_id(image, id, sizeof id);
  if (rc < 0) return fail_image("cannot read the image id: " + errno_text(rc));
  char fsid[64] = {};
  rc = rados_cluster_fsid(cluster, fsid, sizeof fsid);
  if (rc < 0) return fail_image("cannot read the cluster fsid: " + errno_text(rc));
  std::string identity =
      std::string(fsid) + "/" + std::to_string(rados_ioctx_get_id(io)) + "/" + id;
  // What the image's client configuration says (the file, CEPH_ARGS): a write-back cache
  // makes FLUSH matter; discards skipped within objects leave old data.
  bool cache = conf_get(cluster, "rbd_cache") == "true";
  bool discard_zeroes = conf_get(cluster, "rbd_skip_partial_discard") == "false";
  auto device = std::make_unique<RbdDevice>(s, cluster, io, image, size, read_only, cache,
                                            discard_zeroes, identity);
  // Reservations are shared by every gateway of this image: without the record, refuse rather
  // than serve with reservations the other gateways would not see.
  if (std::string why = device->open_record(id); !why.empty()) {
    *error = name + ": " + why;
    return nullptr;  // the device's destructor closes the image and the cluster handle
  }
  return device;
}

}  // namespace sens::storage

#else  // no librbd in this build

namespace sens::storage {

bool rbd_supported() {
  return false;
}

std::unique_ptr<Device> open_rbd(const RbdSpec&, bool, std::string* error) {
  *error = "this sens was built without librbd";
  return nullptr;
}

}  // namespace sens::storage

#endif
