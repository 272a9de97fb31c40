#include "target/reservations.h"

#include <algorithm>
#include <cstring>

#include "wire/nvme.h"

namespace sens::target {

namespace st = nvme::status;

Reservations::Registrant* Reservations::find(const uint8_t hostid[16]) {
  for (auto& r : regs_)
    if (std::memcmp(r.hostid, hostid, 16) == 0) return &r;
  return nullptr;
}

bool Reservations::holds(const Registrant* r) const {
  if (!r || rtype_ == 0) return false;
  return all_registrants() || std::memcmp(r->hostid, holder_, 16) == 0;
}

void Reservations::changed() {
  held_.store(rtype_ != 0, std::memory_order_release);
  version_.fetch_add(1, std::memory_order_acq_rel);
}

uint8_t Reservations::access(const uint8_t hostid[16], uint64_t* version) {
  std::lock_guard<std::mutex> lock(mu_);
  *version = version_.load(std::memory_order_acquire);
  const uint8_t rw = resv::kMayRead | resv::kMayWrite;
  Registrant* r = find(hostid);
  if (rtype_ == 0 || holds(r)) return rw;
  switch (rtype_) {
    case resv::kWriteExclusive:
      return resv::kMayRead;
    case resv::kExclusiveAccess:
      return 0;
    case resv::kWriteExclusiveRegOnly:
    case resv::kWriteExclusiveAllRegs:
      return r ? rw : resv::kMayRead;
    default:  // the exclusive-access registrants-only types
      return r ? rw : 0;
  }
}

uint16_t Reservations::reg(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t cptpl,
                           uint64_t crkey, uint64_t nrkey) {
  // Change Persist Through Power Loss: this target keeps no state across a power loss, so
  // only "no change" (0) and "clear" (2) are accepted.
  if (cptpl == 1 || cptpl == 3) return st::kInvalidField;
  std::lock_guard<std::mutex> lock(mu_);
  Registrant* r = find(hostid);
  switch (action) {
    case 0:  // register
      if (r) return r->key == nrkey ? st::kSuccess : resv::kConflict;
      if (regs_.size() >= resv::kMaxRegistrants) return st::kCapacityExceeded;
      regs_.push_back({});
      std::memcpy(regs_.back().hostid, hostid, 16);
      regs_.back().key = nrkey;
      break;
    case 1: {  // unregister
      if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
      bool held = holds(r);
      regs_.erase(regs_.begin() + (r - regs_.data()));
      // The holder leaving ends the reservation, except where every registrant holds it and
      // some are left.
      if (held && (!all_registrants() || regs_.empty())) drop_reservation();
      if (regs_.empty()) drop_reservation();
      break;
    }
    case 2:  // replace
      if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
      r->key = nrkey;
      break;
    default:
      return st::kInvalidField;
  }
  ++gen_;
  changed();
  return st::kSuccess;
}

uint16_t Reservations::acquire(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                               uint64_t crkey, uint64_t prkey) {
  if (rtype < resv::kWriteExclusive || rtype > resv::kExclusiveAccessAllRegs || action > 2)
    return st::kInvalidField;
  std::lock_guard<std::mutex> lock(mu_);
  Registrant* r = find(hostid);
  if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
  if (action == 0) {  // acquire
    if (rtype_ == 0) {
      rtype_ = rtype;
      std::memcpy(holder_, hostid, 16);
      changed();
      return st::kSuccess;
    }
    return holds(r) && rtype_ == rtype ? st::kSuccess : resv::kConflict;
  }
  // Preempt (1) and preempt-and-abort (2; commands already running complete): unregisters
  // the other hosts registered with PRKEY and, where that takes the reservation away from its
  // holder, gives it to this host with the new type.
  auto remove_key = [&](uint64_t key, bool all_others) {
    size_t before = regs_.size();
    regs_.erase(std::remove_if(regs_.begin(), regs_.end(),
                               [&](const Registrant& x) {
                                 return std::memcmp(x.hostid, hostid, 16) != 0 &&
                                        (all_others || x.key == key);
                               }),
                regs_.end());
    return regs_.size() != before;
  };
  bool take = false, removed = false;
  if (rtype_ == 0) {
    removed = remove_key(prkey, false);
  } else if (all_registrants()) {
    if (prkey == 0) {
      removed = remove_key(0, true);
      take = true;
    } else {
      removed = remove_key(prkey, false);
    }
  } else {
    Registrant* h = find(holder_);
    if (h && h->key == prkey) {
      removed = remove_key(prkey, false);
      take = true;
    } else {
      if (prkey == 0) return st::kInvalidField;
      removed = remove_key(prkey, false);
    }
  }
  if (!removed && !take) return resv::kConflict;  // PRKEY names no other registrant
  if (take) {
    rtype_ = rtype;
    std::memcpy(holder_, hostid, 16);
  }
  if (removed) ++gen_;
  changed();
  return st::kSuccess;
}

uint16_t Reservations::release(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                               uint64_t crkey) {
  if (action > 1) return st::kInvalidField;
  std::lock_guard<std::mutex> lock(mu_);
  Registrant* r = find(hostid);
  if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
  if (action == 1) {  // clear: no reservation, no registrant
    drop_reservation();
    regs_.clear();
    ++gen_;
    changed();
    return st::kSuccess;
  }
  if (rtype_ == 0 || !holds(r)) return st::kSuccess;  // nothing of this host's to release
  if (rtype != rtype_) return st::kInvalidField;
  drop_reservation();
  changed();
  return st::kSuccess;
}

size_t Reservations::report(uint8_t* out, size_t room) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 64 + 64 * regs_.size();
  auto put = [&](size_t at, const void* v, size_t n) {
    if (at + n <= room) std::memcpy(out + at, v, n);
  };
  uint16_t regctl = uint16_t(regs_.size());
  put(0, &gen_, 4);
  put(4, &rtype_, 1);
  put(5, &regctl, 2);
  // PTPLS (byte 9) stays 0: not persisted through a power loss.
  for (size_t i = 0; i < regs_.size(); ++i) {
    size_t at = 64 + 64 * i;
    uint16_t cntlid = 0xFFFF;  // dynamic controller model: no single controller
    uint8_t rcsts = holds(&regs_[i]) ? 1 : 0;
    put(at, &cntlid, 2);
    put(at + 2, &rcsts, 1);
    put(at + 8, &regs_[i].key, 8);
    put(at + 16, regs_[i].hostid, 16);
  }
  return total;
}

}  // namespace sens::target
