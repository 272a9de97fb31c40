// The NVM I/O command set: Read, Write, Flush, Write Zeroes, Dataset Management.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "target/command_queue.h"
#include "target/target.h"
#include "wire/nvme_build.h"

namespace sens::target::nvm {

namespace st = nvme::status;

namespace {

constexpr uint16_t kNsWriteProtected = 0x020;  // generic status 20h
constexpr uint32_t kBroadcastNsid = 0xFFFFFFFF;
constexpr uint32_t kDsmDeallocate = 1u << 2;
// The Dataset Management buffer may be longer than NR ranges: the Linux host always sends room
// for all 256 (4 KiB) and says in NR how many are used. Only the first NR ranges count.
constexpr uint32_t kDsmMaxBytes = 256 * sizeof(nvme::DsmRange);

bool modifies(const nvme::Sqe& s) {
  return s.opcode == nvme::io_op::kWrite || s.opcode == nvme::io_op::kWriteZeroes ||
         (s.opcode == nvme::io_op::kDatasetMgmt && (s.cdw11 & kDsmDeallocate));
}

Plan fail(uint16_t status) {
  Plan p;
  p.status = status;
  return p;
}

Plan plan_dsm(Request& r) {
  const nvme::Sqe& s = r.sqe;
  uint32_t bytes = ((s.cdw10 & 0xFF) + 1) * uint32_t(sizeof(nvme::DsmRange));
  Plan p;
  if (r.in_capsule) {
    if (r.xfer_len < bytes || r.xfer_len > kDsmMaxBytes) return fail(st::kSglInvalidDataLength);
    return p;
  }
  if (s.sgl.type != nvme::kSglTransportDataBlock) return fail(st::kSglInvalidType);
  if (s.sgl.length < bytes || s.sgl.length > kDsmMaxBytes) return fail(st::kSglInvalidDataLength);
  r.xfer_len = s.sgl.length;
  p.buffer_bytes = r.xfer_len;
  p.fetch = true;
  return p;
}

// Deallocates the next range; completes after the last.
void dsm_step(CommandQueue& q, Request& r) {
  auto* ranges = reinterpret_cast<const nvme::DsmRange*>(r.buf);
  while (r.walk_next < r.walk_count) {
    const auto& range = ranges[r.walk_next++];
    if (range.nlb == 0) continue;
    if (range.slba >= r.ns->blocks || range.nlb > r.ns->blocks - range.slba)
      return q.complete(r, st::kLbaOutOfRange);
    return q.submit(r, storage::Op::kDiscard, range.slba << r.ns->block_shift,
                    uint64_t(range.nlb) << r.ns->block_shift, nullptr);
  }
  q.complete(r, st::kSuccess);
}

uint16_t ana_status(uint8_t state);

// Flush to every namespace (NSID FFFFFFFFh), one after the other. A namespace this host may
// not write through this path (its ANA group not accessible here, another host's
// reservation: Flush is a write to reservations) is not flushed, and the command ends with the
// first such status once the others are: the host learns that not everything was flushed.
void flush_step(CommandQueue& q, Request& r) {
  // (walk_next: the last nsid flushed; namespaces removed meanwhile are skipped;
  // walk_count: the status of the first namespace skipped, 0: none)
  while (r.walk_next < kMaxNsid) {
    Namespace* ns = q.subsystem()->ns(++r.walk_next);
    if (!ns) continue;
    uint16_t refused = 0;
    if (uint8_t state = q.controller()->ana->state(ns->anagrpid);
        state != ana::kOptimized && state != ana::kNonOptimized)
      refused = ana_status(state);
    else if (!(q.reservation_access(*ns) & resv::kMayWrite))
      refused = resv::kConflict;
    if (refused) {
      if (!r.walk_count) r.walk_count = refused;
      continue;
    }
    q.bind_ns(r, ns);
    return q.submit(r, storage::Op::kFlush, 0, 0, nullptr);
  }
  q.complete(r, uint16_t(r.walk_count));
}

// A device error as the host should see it: conditions that pass (no memory, busy) may be
// retried; media errors may not.
uint16_t device_status(const Request& r, bool* transient) {
  int err = -r.io.result;
  // ETIMEDOUT: a network backend (RBD) gave up on an unreachable cluster for now; ESTALE: it
  // would not hand a write on while its lease on the shared reservations had lapsed.
  *transient = err == EAGAIN || err == EBUSY || err == ENOMEM || err == EINTR || err == ETIMEDOUT ||
               err == ESTALE;
  if (*transient) return st::kNsNotReady;
  switch (r.io.op) {
    case storage::Op::kRead:
      return st::kUnrecoveredReadError;
    case storage::Op::kWrite:
    case storage::Op::kWriteZeroes:
      return st::kWriteFault;
    default:
      return st::kInternalError;
  }
}

// Path status (SCT 3) of a command to a namespace whose ANA group is not accessible here.
uint16_t ana_status(uint8_t state) {
  switch (state) {
    case ana::kPersistentLoss:
      return 0x301;  // Asymmetric Access Persistent Loss
    case ana::kChange:
      return 0x303;  // Asymmetric Access Transition
    default:
      return 0x302;  // Asymmetric Access Inaccessible
  }
}

// Register and Acquire carry 16 bytes, Release 8; Report returns NUMD dwords.
constexpr uint32_t kReportMax = 64 * 1024;
Plan plan_reservation(Request& r) {
  const nvme::Sqe& s = r.sqe;
  Plan p;
  if (s.opcode == resv::kReport) {
    uint64_t len = (uint64_t(s.cdw10) + 1) * 4;
    if (s.sgl.type != nvme::kSglTransportDataBlock) return fail(st::kSglInvalidType);
    if (s.sgl.length != len) return fail(st::kSglInvalidDataLength);
    if (len > kReportMax) return fail(st::kInvalidField);
    r.xfer_len = uint32_t(len);
    p.buffer_bytes = std::max<uint32_t>(r.xfer_len, 64);
    return p;
  }
  uint32_t need = s.opcode == resv::kRelease ? 8 : 16;
  if (r.in_capsule) {
    if (r.xfer_len < need || r.xfer_len > 4096) return fail(st::kSglInvalidDataLength);
    return p;
  }
  if (s.sgl.type != nvme::kSglTransportDataBlock) return fail(st::kSglInvalidType);
  if (s.sgl.length < need || s.sgl.length > 4096) return fail(st::kSglInvalidDataLength);
  r.xfer_len = s.sgl.length;
  p.buffer_bytes = r.xfer_len;
  p.fetch = true;
  return p;
}

// The command itself, against the namespace's state; Report fills r.buf. Returns the status.
// Runs on the reactor (a local state) or the namespace's worker (a shared record), so it
// touches only the request's own fields and buffer and the thread-safe Reservations.
uint16_t run_reservation(Reservations& rs, const uint8_t* hostid, Request& r) {
  const nvme::Sqe& s = r.sqe;
  uint8_t action = uint8_t(s.cdw10 & 7);
  bool iekey = s.cdw10 & (1u << 3);
  uint8_t rtype = uint8_t((s.cdw10 >> 8) & 0xFF);
  uint64_t k1 = 0, k2 = 0;
  if (s.opcode != resv::kReport) {
    std::memcpy(&k1, r.buf, 8);
    if (s.opcode != resv::kRelease) std::memcpy(&k2, r.buf + 8, 8);
  }
  switch (s.opcode) {
    case resv::kRegister:
      return rs.reg(hostid, action, iekey, uint8_t(s.cdw10 >> 30), k1, k2);
    case resv::kAcquire:
      return rs.acquire(hostid, action, iekey, rtype, k1, k2);
    case resv::kRelease:
      return rs.release(hostid, action, iekey, rtype, k1);
    default: {
      std::memset(r.buf, 0, r.xfer_len);
      uint16_t status = st::kSuccess;
      rs.report(r.buf, r.xfer_len, &status);
      return status;
    }
  }
}

void finish_reservation(CommandQueue& q, Request& r, uint16_t status) {
  if (r.sqe.opcode == resv::kReport && status == st::kSuccess)
    return q.send_data(r, r.buf, r.xfer_len);
  q.complete(r, status);
}

void execute_reservation(CommandQueue& q, Request& r) {
  // Host identifiers over Fabrics are 128-bit: only the extended structure can hold them.
  if (r.sqe.opcode == resv::kReport && !(r.sqe.cdw11 & 1))
    return q.complete(r, resv::kHostIdInconsistent);
  Reservations& rs = r.ns->reservations;
  std::array<uint8_t, 16> hostid;
  std::memcpy(hostid.data(), q.controller()->hostid, 16);
  if (!rs.shared()) return finish_reservation(q, r, run_reservation(rs, hostid.data(), r));
  // Against the shared record: off the reactor. The job takes a copy of the host ID and
  // nothing else of the queue; the request stays until it is back (see offload()).
  q.offload(
      r, rs.worker(), [&rs, &r, hostid] { return run_reservation(rs, hostid.data(), r); },
      finish_reservation);
}

}  // namespace

Plan plan(CommandQueue& q, Request& r) {
  const nvme::Sqe& s = r.sqe;
  uint8_t op = s.opcode;
  // An I/O queue runs nothing while its controller is disabled (CC.EN = 0).
  if (!(q.controller()->cc & 1)) return fail(st::kCmdSeqError);
  bool reservation_op =
      op == resv::kRegister || op == resv::kReport || op == resv::kAcquire || op == resv::kRelease;
  if (op != nvme::io_op::kRead && op != nvme::io_op::kWrite && op != nvme::io_op::kFlush &&
      op != nvme::io_op::kWriteZeroes && op != nvme::io_op::kDatasetMgmt && !reservation_op)
    return fail(st::kInvalidOpcode);
  if (op == nvme::io_op::kFlush && s.nsid == kBroadcastNsid) return Plan{};
  Namespace* ns = q.subsystem()->ns(s.nsid);
  if (!ns) return fail(st::kInvalidNamespace);
  q.bind_ns(r, ns);
  // ANA: the namespace's group as the listener this host came in through has it.
  if (uint8_t state = q.controller()->ana->state(ns->anagrpid);
      state != ana::kOptimized && state != ana::kNonOptimized && op != resv::kReport)
    return fail(ana_status(state));
  if (reservation_op) return plan_reservation(r);
  // A state shared with other gateways is acted on only while this gateway's lease on its
  // copy holds (storage/record_lease.h): a gateway that stopped hearing from the cluster
  // (stopped, partitioned) might otherwise admit a host another gateway has preempted.
  if (!ns->reservations.lease_fresh(q.ctx().reactor.pass_start())) {
    ns->reservations.refresh_lease();
    return fail(st::kNsNotReady);
  }
  // Reservations: Read is a read; everything else here (Flush too) a write.
  if (uint8_t allowed = q.reservation_access(*ns);
      !(allowed & (op == nvme::io_op::kRead ? resv::kMayRead : resv::kMayWrite)))
    return fail(resv::kConflict);
  if (op == nvme::io_op::kFlush) return Plan{};
  if (modifies(s) && ns->device->read_only()) return fail(kNsWriteProtected);
  if (op == nvme::io_op::kDatasetMgmt) return plan_dsm(r);
  uint64_t slba = s.slba(), nlb = s.nlb();
  if (slba >= ns->blocks || nlb > ns->blocks - slba) return fail(st::kLbaOutOfRange);
  r.offset = slba << ns->block_shift;
  uint64_t len = nlb << ns->block_shift;
  if (op == nvme::io_op::kWriteZeroes) return Plan{};
  if (len > q.ctx().config.max_io) return fail(st::kInvalidField);
  Plan p;
  p.buffer_bytes = uint32_t(len);
  if (op == nvme::io_op::kWrite && r.in_capsule) {
    if (r.xfer_len != len) return fail(st::kSglInvalidDataLength);
    return p;
  }
  if (s.sgl.type != nvme::kSglTransportDataBlock) return fail(st::kSglInvalidType);
  if (s.sgl.length != len) return fail(st::kSglInvalidDataLength);
  r.xfer_len = uint32_t(len);
  p.fetch = op == nvme::io_op::kWrite;
  return p;
}

void execute(CommandQueue& q, Request& r) {
  const nvme::Sqe& s = r.sqe;
  auto& counters = q.counters();
  switch (s.opcode) {
    case nvme::io_op::kRead:
      if (q.zero_copy_reads()) {
        if (const uint8_t* mem = r.ns->device->mapped(r.offset, r.xfer_len)) {
          counters.reads.fetch_add(1, std::memory_order_relaxed);
          counters.read_bytes.fetch_add(r.xfer_len, std::memory_order_relaxed);
          return q.send_data(r, mem, r.xfer_len, r.buf);  // r.buf: the copy if it must wait
        }
      }
      // Into the request's own buffer: with several reactors the device copies each block
      // under its stripe lock, so the PDU carries blocks no other thread is half-way through.
      return q.submit(r, storage::Op::kRead, r.offset, r.xfer_len, r.buf);
    case nvme::io_op::kWrite:
      counters.writes.fetch_add(1, std::memory_order_relaxed);
      counters.write_bytes.fetch_add(r.xfer_len, std::memory_order_relaxed);
      r.io.fua = s.fua();
      return q.submit(r, storage::Op::kWrite, r.offset, r.xfer_len, r.buf);
    case nvme::io_op::kWriteZeroes:
      r.io.fua = s.fua();
      return q.submit(r, storage::Op::kWriteZeroes, r.offset, s.nlb() << r.ns->block_shift,
                      nullptr);
    case nvme::io_op::kFlush:
      if (s.nsid == kBroadcastNsid) {
        r.walk_next = 0;
        r.walk_count = 0;
        return flush_step(q, r);
      }
      return q.submit(r, storage::Op::kFlush, 0, 0, nullptr);
    case resv::kRegister:
    case resv::kReport:
    case resv::kAcquire:
    case resv::kRelease:
      return execute_reservation(q, r);
    case nvme::io_op::kDatasetMgmt:
      r.walk_next = 0;
      r.walk_count = (s.cdw11 & kDsmDeallocate) ? (s.cdw10 & 0xFF) + 1 : 0;  // only AD acts
      return dsm_step(q, r);
    default:
      return q.complete(r, st::kInvalidOpcode);
  }
}

void device_done(CommandQueue& q, Request& r) {
  if (r.io.result != 0) {
    bool transient;
    uint16_t status = device_status(r, &transient);
    // Every failure gets its status; the log gets one line a second per reactor.
    thread_local LogThrottle throttle(kSecond);
    if (uint64_t held = 0; throttle.allow(monotonic_now(), &held)) {
      const std::string more =
          held ? " (" + std::to_string(held) + " more failures since the last line)" : "";
      LOG_WARN("namespace %u: device %s at %llu failed: %s%s%s", r.ns ? r.ns->nsid : 0,
               r.io.op == storage::Op::kRead ? "read" : "I/O",
               static_cast<unsigned long long>(r.io.offset), std::strerror(-r.io.result),
               transient ? " (the host may retry)" : "", more.c_str());
    }
    return q.complete(r, status);
  }
  switch (r.io.op) {
    case storage::Op::kRead: {
      auto& counters = q.counters();
      counters.reads.fetch_add(1, std::memory_order_relaxed);
      counters.read_bytes.fetch_add(r.xfer_len, std::memory_order_relaxed);
      return q.send_data(r, r.buf, r.xfer_len);
    }
    case storage::Op::kDiscard:
      return dsm_step(q, r);
    case storage::Op::kFlush:
      if (r.sqe.nsid == kBroadcastNsid) return flush_step(q, r);
      return q.complete(r, st::kSuccess);
    default:
      return q.complete(r, st::kSuccess);
  }
}

}  // namespace sens::target::nvm
