#pragma once
// NVMe reservations of one namespace (NVMe Base 2.0 8.19): registrants (host identifier +
// key), the reservation type and holder, the generation. Hosts are told apart by the Host
// Identifier of their Connect (Get Features 81h reads it back). The state lives in this
// target process: two gateways serving the same backing store keep their own (README,
// "Scaling out").
//
// Reservation commands run on the I/O thread that received them, under the lock; the I/O
// path asks held() (one atomic load) and, only while a reservation is held, access() through
// a per-queue cache keyed by version() (see CommandQueue::reservation_access).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

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

class Reservations {
 public:
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
  // entries) into `out`, at most `room` bytes of it; returns its whole length.
  size_t report(uint8_t* out, size_t room);

 private:
  struct Registrant {
    uint8_t hostid[16];
    uint64_t key;
  };
  Registrant* find(const uint8_t hostid[16]);
  bool holds(const Registrant* r) const;  // under mu_
  bool all_registrants() const {
    return rtype_ == resv::kWriteExclusiveAllRegs || rtype_ == resv::kExclusiveAccessAllRegs;
  }
  void drop_reservation() { rtype_ = 0; }
  void changed();  // after every change, under mu_

  std::mutex mu_;
  std::vector<Registrant> regs_;
  uint8_t rtype_ = 0;     // 0: no reservation
  uint8_t holder_[16]{};  // the holder's host ID (not for the all-registrants types)
  uint32_t gen_ = 0;      // PRGEN
  std::atomic<bool> held_{false};
  std::atomic<uint64_t> version_{1};
};

}  // namespace sens::target
