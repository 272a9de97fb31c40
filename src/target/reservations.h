#pragma once
// NVMe reservations of one namespace (NVMe Base 2.0 8.19): registrants (host identifier +
// key), the reservation type and holder, the generation. Hosts are told apart by the Host
// Identifier of their Connect (Get Features 81h reads it back), which is the same through
// every gateway.
//
// Where the backend shares a record between gateways (storage::SharedRecord: an RBD image),
// the state lives there: each command reads it, applies itself and writes it back by
// compare-and-swap (retrying when another gateway won), and every gateway's copy here is
// refreshed from the record's notifications. Elsewhere (file, ram, null) the state lives in
// this process only, per gateway (README, "Scaling out").
//
// Reservation commands on a local state run on the I/O thread that received them; against a
// shared record they run on worker() (each step bounded by the backend's timeouts), so the
// reactor keeps serving while the cluster answers. The I/O path asks held() (one atomic load)
// and, only while a reservation is held, access() through a per-queue cache keyed by
// version() (see CommandQueue::reservation_access). Before that, on a shared state, it asks
// lease_fresh(): this gateway acts on its copy only while its lease on the record holds
// (storage/record_lease.h), else the command gets Namespace Not Ready and a re-read is asked.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/worker_thread.h"
#include "storage/device.h"
#include "storage/record_lease.h"

namespace sens::target {

namespace resv {
// RTYPE
inline constexpr uint8_t kWriteExclusive = 1, kExclusiveAccess = 2, kWriteExclusiveRegOnly = 3,
                         kExclusiveAccessRegOnly = 4, kWriteExclusiveAllRegs = 5,
                         kExclusiveAccessAllRegs = 6;
// Identify Namespace RESCAP: types 1..6 (bits 1..6); no persistence through power loss.
inline constexpr uint8_t kRescap = 0x7E;
// I/O opcodes
inline constexpr uint8_t kRegister = 0x0D, kReport = 0x0E, kAcquire = 0x11, kRelease = 0x15;
// Status codes (generic)
inline constexpr uint16_t kConflict = 0x083, kHostIdInconsistent = 0x018;
// Registrants one namespace keeps at most (a host registers once, under its host ID).
inline constexpr size_t kMaxRegistrants = 256;
// access() bits
inline constexpr uint8_t kMayRead = 1, kMayWrite = 2;
}  // namespace resv

// The state itself, and its compact, versioned form in a shared record (little-endian):
//   0 "SNRV"  4 format (1)  5 RTYPE  6 registrants N (u16)  8 PRGEN (u32)  12 holder host ID
//   28 N x (host ID 16, key 8)
// An empty record is the empty state.
struct ReservationState {
  struct Registrant {
    uint8_t hostid[16];
    uint64_t key;
  };
  std::vector<Registrant> regs;
  uint8_t rtype = 0;     // 0: no reservation
  uint8_t holder[16]{};  // the holder's host ID (not for the all-registrants types)
  uint32_t gen = 0;      // PRGEN

  std::string serialize() const;
  // False, and *error says precisely what is wrong, for anything but a well-formed record.
  static bool parse(const std::string& bytes, ReservationState* out, std::string* error);
};

class Reservations {
 public:
  ~Reservations();
  // Shares the state through `record` (null: stays in this process). Reads it once now;
  // `label` names the namespace in log lines. Before any command.
  void share(storage::SharedRecord* record, std::string label);
  bool shared() const { return record_ != nullptr; }
  // Where the commands of a shared state run: each is a cluster round trip and a notify that
  // waits for every gateway (for one that does not answer, until its lease and its writes in
  // flight have run out: seconds), which must not stall a reactor. Commands on one namespace
  // run in order, one at a time.
  WorkerThread& worker() { return worker_; }

  // Whether this gateway may act on its copy at `now` (the reactor's pass clock): always for
  // a state of this process; for a shared one, while the lease holds (a load and a compare).
  bool lease_fresh(Nanos now) const { return lease_ == nullptr || lease_->fresh(now); }
  // The lease lapsed: re-read the shared record soon.
  void refresh_lease() const {
    if (record_) record_->refresh_soon();
  }

  bool held() const { return held_.load(std::memory_order_acquire); }
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // What `hostid` may do now (kMayRead | kMayWrite); `version` gets the state's version.
  uint8_t access(const uint8_t hostid[16], uint64_t* version);

  // The commands; each returns an NVMe status. Actions and fields as in the command's CDW10.
  uint16_t reg(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t cptpl, uint64_t crkey,
               uint64_t nrkey);
  uint16_t acquire(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                   uint64_t crkey, uint64_t prkey);
  uint16_t release(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                   uint64_t crkey);
  // The Reservation Status extended data structure (64-byte header, 64-byte registrant
  // entries) into `out`, at most `room` bytes of it; returns its whole length, or 0 with
  // *status set when the shared state cannot be read.
  size_t report(uint8_t* out, size_t room, uint16_t* status);

 private:
  template <typename Change>
  uint16_t run(const char* what, Change&& change);
  // A shared record's value (from a notification, a re-read or a command): replaces the copy
  // here if it is newer. False (logged once per version) when it does not parse.
  bool install(const std::string& bytes, uint64_t version, std::string* error = nullptr);
  void changed();  // after every change, under mu_

  WorkerThread worker_{"sens-resv"};
  std::mutex mu_;
  ReservationState state_;
  std::atomic<bool> held_{false};
  std::atomic<uint64_t> version_{1};
  storage::SharedRecord* record_ = nullptr;
  const storage::RecordLease* lease_ = nullptr;  // record_'s, if it keeps one
  std::string label_;
  uint64_t record_version_ = 0;      // of state_, under mu_
  uint64_t bad_record_version_ = 0;  // the last unreadable version logged, under mu_
  bool record_was_read_ = false;     // under mu_
};

}  // namespace sens::target
