#pragma once
// An RBD image's I/O queue (one per reactor): a fixed set of operations, at most the spec's qd
// of them in librbd at once, handed back by librbd's callback thread on a lock-free list whose
// first entry signals the queue's eventfd; librbd's refusals retried with backoff; writes
// fenced by the gateway's lease on the shared record. The device (rbd_device.cc) opens the
// image and makes the queues.
#if SENS_HAVE_RBD

#include <rbd/librbd.h>

#include <memory>
#include <string>

#include "storage/device.h"
#include "storage/record_lease.h"

namespace sens::storage {

struct RbdQueueParams {
  Device& device;  // size, block size, read-only: as the device says now
  rbd_image_t image;
  const RecordLease* write_lease;  // writes go to librbd only while it holds (null: always)
  unsigned max_depth;              // the spec's qd
  std::string name;                // "pool/image", for messages
};

// A queue of `depth` operations (clamped to 1..max_depth); a queue that fails every request
// with the error if its eventfd, timerfd or epoll set cannot be had.
std::unique_ptr<Queue> make_rbd_queue(const RbdQueueParams& params, unsigned depth);

}  // namespace sens::storage

#endif  // SENS_HAVE_RBD
