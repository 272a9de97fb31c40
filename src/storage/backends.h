#pragma once
// The backends behind Device::open(), and what they share. Internal to src/storage.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "storage/device.h"

namespace sens::storage {

// A read-only region of zeroes shared by the whole process: the null device serves reads from
// it, and file queues write it where a filesystem cannot zero a range by itself. Its pages are
// real (not the shared zero page), so O_DIRECT can pin them.
inline constexpr size_t kZeroRegionSize = 2u << 20;
const uint8_t* zero_region();

std::unique_ptr<Device> open_ram(uint64_t size, bool read_only, std::string* error);
std::unique_ptr<Device> open_null(uint64_t size, bool read_only);
std::unique_ptr<Device> open_file(const std::string& path, bool read_only, std::string* error);

// "rbd:POOL/IMAGE[,conf=PATH][,id=NAME][,timeout=S][,op_timeout=S][,qd=N]", parsed.
struct RbdSpec {
  std::string pool, image;
  std::string conf;  // ceph.conf; empty: librados' search ($CEPH_CONF, /etc/ceph/ceph.conf, ...)
  std::string id;    // the cephx user without "client."; empty: librados' default (admin)
  unsigned timeout_s = 10;     // client_mount_timeout and rados_mon_op_timeout (Ceph: 300, 0)
  unsigned op_timeout_s = 30;  // rados_osd_op_timeout (Ceph: 0, wait forever)
  unsigned qd = 128;           // librbd requests in flight per queue (reactor); more wait
};
// `rest` is what follows "rbd:". False and *error (naming the spec) when it is malformed.
bool parse_rbd_spec(std::string_view rest, RbdSpec* out, std::string* error);
// Whether this build has the RBD backend (librbd was found when it was configured).
bool rbd_supported();
std::unique_ptr<Device> open_rbd(const RbdSpec& spec, bool read_only, std::string* error);

// Checks a request's range and alignment against a device; returns 0 or -errno.
int check_request(const Request& req, uint64_t device_size, uint32_t block_size, bool read_only);

// Stands in when a queue's kernel resources cannot be had (an io_uring ring, an eventfd):
// fails every request with the reason, so callers get an error instead of a null queue.
class FailedQueue final : public Queue {
 public:
  explicit FailedQueue(int error) : error_(error) {}
  void submit(Request* req) override {
    req->result = error_;
    if (req->on_complete) req->on_complete(req);
  }

 private:
  int error_;
};

}  // namespace sens::storage
