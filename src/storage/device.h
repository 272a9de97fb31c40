#pragma once
// Namespace backends. A Device is shared by all reactor threads; each thread drives it through
// its own Queue (for files, its own io_uring), so the data path takes no lock.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace sens::storage {

class RecordLease;  // record_lease.h

enum class Op : uint8_t { kRead, kWrite, kFlush, kWriteZeroes, kDiscard };

// Reads and writes move at most this many bytes (through the caller's buffer); zeroing and
// discarding may cover any range of the device.
inline constexpr uint64_t kMaxTransfer = UINT32_MAX;

// One device I/O. Owned by the caller (preallocated per command slot); never allocated per I/O.
struct Request {
  Op op = Op::kRead;
  bool fua = false;     // kWrite, kWriteZeroes: durable (past any volatile cache) on completion
  uint64_t offset = 0;  // bytes; a multiple of block_size()
  uint64_t length = 0;  // bytes; a multiple of block_size() (0 for kFlush); at most
                        // kMaxTransfer for kRead and kWrite
  void* buf = nullptr;  // read destination / write source; aligned to 4096 for file devices
  int result = 0;       // set on completion: 0 or -errno
  void (*on_complete)(Request*) = nullptr;
  void* user = nullptr;     // the caller's context for on_complete
  Request* next = nullptr;  // the queue's own link while the request waits for room
};

// A per-thread submission path. Memory backends complete inside submit(); io_uring-backed ones
// complete later, from reap(), after kick() has handed the batch to the kernel.
class Queue {
 public:
  virtual ~Queue() = default;
  // Queues (or performs) `req`. The caller keeps `req` alive until on_complete runs. Never
  // refuses a request for lack of room: past the queue's depth, requests wait (in order) and
  // start as earlier ones complete.
  virtual void submit(Request* req) = 0;
  // Hands every request queued since the last kick() to the device in one system call.
  virtual void kick() {}
  // Runs on_complete for finished requests without blocking; returns how many.
  virtual int reap() { return 0; }
  // Readable when reap() has work (an eventfd registered with io_uring), or -1 if none.
  virtual int event_fd() const { return -1; }
  // Whether reap() would find a completion, checked without a system call (for pollers). A
  // poller must still call reap() when event_fd() is readable, since reap() also clears it.
  virtual bool ready() const { return false; }
  // Requests submitted and not yet completed (waiting ones included).
  virtual unsigned inflight() const { return 0; }
  // How many requests so far had to wait for room because the queue was at its depth.
  virtual uint64_t waited() const { return 0; }
  // How many times the kernel refused work for now (-EAGAIN, -EBUSY) and it was tried again.
  virtual uint64_t retried() const { return 0; }
  // Cache flushes this queue asked of the device: fdatasync (FLUSH, after a FUA Write Zeroes)
  // and writes with RWF_DSYNC (FUA writes, a FUA Write Zeroes done by writing zeroes).
  virtual uint64_t cache_flushes() const { return 0; }
};

// A small record that every gateway opening the same data sees, for state the target keeps
// about the data (NVMe reservations). Backends that can share one (RBD: a RADOS object beside
// the image) offer it through Device::shared_record(). The calls block, each for at most the
// backend's op timeout: they are for rare control commands, never the data path.
class SharedRecord {
 public:
  virtual ~SharedRecord() = default;
  // The record and its version (versions only grow, across every gateway). An empty record
  // (never written) reads as "". Returns 0 or -errno.
  virtual int read(std::string* bytes, uint64_t* version) = 0;
  // Compare-and-swap: replaces the record if it is still at `version` (what read() gave),
  // then hands the new value to every watcher (this gateway's and the others'), waiting for
  // their acknowledgement, or, where one does not acknowledge, until no gateway acts on an
  // older value any more (see lease()). Returns 0 (*new_version set), -ECANCELED when
  // another gateway wrote first (read again and retry), or another -errno.
  virtual int write(const std::string& bytes, uint64_t version, uint64_t* new_version) = 0;
  // `on_change(bytes, version)` runs on a backend thread whenever the record may have changed
  // (a write from any gateway, or a periodic re-read); the same version may come more than
  // once. It returns whether this gateway's copy now holds `version` or a newer one (false:
  // the value could not be used). An empty function stops the calls, waiting for one that is
  // running; a non-empty one is called once before watch() returns (the first lease).
  using ChangeHandler = std::function<bool(const std::string& bytes, uint64_t version)>;
  virtual void watch(ChangeHandler on_change) = 0;
  // How long this gateway may act on its copy (record_lease.h): I/O that the record governs
  // is admitted only while lease()->fresh(). Null: the backend needs none.
  virtual const RecordLease* lease() const { return nullptr; }
  // The lease lapsed and I/O waits for it: re-read the record now rather than at the next
  // period. Cheap to call often (any thread).
  virtual void refresh_soon() {}
  // Where the record lives, for log lines ("rados object rbd/sens_resv.<image id>").
  virtual std::string describe() const = 0;
};

// Checks the syntax of a namespace spec without opening anything: "" or the precise error
// (an unknown kind, a bad size, a missing path). Device::open() may still fail on the file.
std::string check_spec(std::string_view spec);

class Device {
 public:
  virtual ~Device() = default;

  // "ram:SIZE", "null:SIZE", "file:PATH" (a regular file or a block device) or
  // "rbd:POOL/IMAGE[,conf=PATH][,id=NAME][,timeout=S][,op_timeout=S][,qd=N]" (a Ceph RBD image
  // through librbd). Returns nullptr and sets *error on a bad spec or an unusable file, an
  // unreachable cluster, a missing pool or image.
  static std::unique_ptr<Device> open(std::string_view spec, std::string* error,
                                      bool read_only = false);

  virtual uint64_t size() const = 0;        // bytes
  virtual uint32_t block_size() const = 0;  // the logical block (LBA) size
  virtual bool read_only() const { return false; }
  virtual std::string describe() const = 0;  // "ram 1 GiB", "file /dev/sdb (512 B blocks)"
  // Whether the device has a volatile write cache (so FLUSH/FUA matter).
  virtual bool volatile_cache() const { return false; }
  // Whether a block reads as zeroes after kDiscard, always (what NVMe's DLFEAT reports). When
  // false, a discarded block may read as its old data or anything else.
  virtual bool discard_zeroes() const { return false; }

  // An identity of the data itself, the same from every machine that opens it (an RBD image:
  // derived from the cluster fsid, pool id and image id), as the namespace's NGUID and UUID.
  // False when the device has none (the target then derives them from the NQN and NSID).
  virtual bool stable_identity(uint8_t nguid[16], uint8_t uuid[16]) const {
    (void)nguid;
    (void)uuid;
    return false;
  }

  // The record shared by every gateway serving this data (see SharedRecord), or nullptr when
  // the backend has none and the target's state about it stays in this process.
  virtual SharedRecord* shared_record() { return nullptr; }

  // A queue for one thread, with up to `depth` requests in the device at once (more wait).
  virtual std::unique_ptr<Queue> make_queue(unsigned depth) = 0;

  // For memory-resident devices: the bytes [offset, offset + len) themselves, so that a read
  // can be sent straight from them (zero copy). nullptr when reads must go through a Queue.
  virtual const uint8_t* mapped(uint64_t offset, uint32_t len) const {
    (void)offset;
    (void)len;
    return nullptr;
  }
  // For memory-resident devices that keep the CRC32C of their blocks: the data digest of
  // `len` bytes at `bytes` (a pointer mapped() gave) from those CRCs, without reading the
  // bytes. False (nothing set) when the range is not made of whole kept blocks: digest the data.
  // Same thread rules as the bytes: only where no other thread writes them meanwhile.
  // Answers only once keep_block_crcs() has been called.
  virtual bool mapped_digest(const uint8_t* bytes, uint64_t len, uint32_t* crc) const {
    (void)bytes;
    (void)len;
    (void)crc;
    return false;
  }

  // Someone will want mapped_digest() (a connection with data digests reads the device): a
  // device that can keep block CRCs starts now (computing them all at once, the first time,
  // on the calling thread). Before that, writes pay nothing for a table nobody reads.
  virtual void keep_block_crcs() {}

  // A live resize (the management path, never a reactor): `bytes` > 0 sets the size (a file
  // is truncated to it, an RBD image resized); 0 takes the size the backing store has now
  // (grown by the operator). Returns "" (size() then gives the new size) or why not. I/O
  // already in flight is checked against the size it was submitted under.
  virtual std::string resize(uint64_t bytes) {
    (void)bytes;
    return "this backend has a fixed size";
  }

  // Makes every completed write, zeroing and discard durable (at shutdown, CC.SHN): fdatasync
  // for files. Returns 0 or -errno.
  virtual int sync() { return 0; }
  // Successful sync() calls so far (the target's stats; tests check CC.SHN with it).
  virtual uint64_t syncs() const { return 0; }
};

}  // namespace sens::storage
