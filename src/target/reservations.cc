#include "target/reservations.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "wire/nvme.h"

namespace sens::target {

namespace st = nvme::status;

namespace {

using Registrant = ReservationState::Registrant;

constexpr char kMagic[4] = {'S', 'N', 'R', 'V'};
constexpr uint8_t kFormat = 1;
constexpr size_t kHeaderBytes = 28, kEntryBytes = 24;
// Compare-and-swap rounds a command tries before it gives up (another gateway kept winning).
constexpr int kAttempts = 8;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}
uint64_t get_le(const std::string& in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return v;
}

Registrant* find(ReservationState& s, const uint8_t hostid[16]) {
  for (auto& r : s.regs)
    if (std::memcmp(r.hostid, hostid, 16) == 0) return &r;
  return nullptr;
}
bool all_registrants(const ReservationState& s) {
  return s.rtype == resv::kWriteExclusiveAllRegs || s.rtype == resv::kExclusiveAccessAllRegs;
}
bool holds(const ReservationState& s, const Registrant* r) {
  if (!r || s.rtype == 0) return false;
  return all_registrants(s) || std::memcmp(r->hostid, s.holder, 16) == 0;
}
void drop_reservation(ReservationState& s) {
  s.rtype = 0;
  std::memset(s.holder, 0, 16);
}

uint16_t do_register(ReservationState& s, const uint8_t hostid[16], uint8_t action, bool iekey,
                     uint64_t crkey, uint64_t nrkey) {
  Registrant* r = find(s, hostid);
  switch (action) {
    case 0:  // register
      if (r) return r->key == nrkey ? st::kSuccess : resv::kConflict;
      if (s.regs.size() >= resv::kMaxRegistrants) return st::kCapacityExceeded;
      s.regs.push_back({});
      std::memcpy(s.regs.back().hostid, hostid, 16);
      s.regs.back().key = nrkey;
      break;
    case 1: {  // unregister
      if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
      bool held = holds(s, r);
      s.regs.erase(s.regs.begin() + (r - s.regs.data()));
      // The holder leaving ends the reservation, except where every registrant holds it and
      // some are left.
      if (held && (!all_registrants(s) || s.regs.empty())) drop_reservation(s);
      if (s.regs.empty()) drop_reservation(s);
      break;
    }
    case 2:  // replace
      if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
      r->key = nrkey;
      break;
    default:
      return st::kInvalidField;
  }
  ++s.gen;
  return st::kSuccess;
}

uint16_t do_acquire(ReservationState& s, const uint8_t hostid[16], uint8_t action, bool iekey,
                    uint8_t rtype, uint64_t crkey, uint64_t prkey) {
  Registrant* r = find(s, hostid);
  if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
  if (action == 0) {  // acquire
    if (s.rtype == 0) {
      s.rtype = rtype;
      std::memcpy(s.holder, hostid, 16);
      return st::kSuccess;
    }
    return holds(s, r) && s.rtype == rtype ? st::kSuccess : resv::kConflict;
  }
  // Preempt (1) and preempt-and-abort (2; commands already running complete): unregisters
  // the other hosts registered with PRKEY and, where that takes the reservation away from its
  // holder, gives it to this host with the new type.
  auto remove_key = [&](uint64_t key, bool all_others) {
    size_t before = s.regs.size();
    s.regs.erase(std::remove_if(s.regs.begin(), s.regs.end(),
                                [&](const Registrant& x) {
                                  return std::memcmp(x.hostid, hostid, 16) != 0 &&
                                         (all_others || x.key == key);
                                }),
                 s.regs.end());
    return s.regs.size() != before;
  };
  bool take = false, removed = false;
  if (s.rtype == 0) {
    removed = remove_key(prkey, false);
  } else if (all_registrants(s)) {
    if (prkey == 0) {
      removed = remove_key(0, true);
      take = true;
    } else {
      removed = remove_key(prkey, false);
    }
  } else {
    Registrant* h = find(s, s.holder);
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
    s.rtype = rtype;
    std::memcpy(s.holder, hostid, 16);
  }
  if (removed) ++s.gen;
  return st::kSuccess;
}

uint16_t do_release(ReservationState& s, const uint8_t hostid[16], uint8_t action, bool iekey,
                    uint8_t rtype, uint64_t crkey) {
  Registrant* r = find(s, hostid);
  if (!r || (!iekey && r->key != crkey)) return resv::kConflict;
  if (action == 1) {  // clear: no reservation, no registrant
    drop_reservation(s);
    s.regs.clear();
    ++s.gen;
    return st::kSuccess;
  }
  if (s.rtype == 0 || !holds(s, r)) return st::kSuccess;  // nothing of this host's to release
  if (rtype != s.rtype) return st::kInvalidField;
  drop_reservation(s);
  return st::kSuccess;
}

// A cluster that does not answer now may later: Namespace Not Ready lets the host retry.
bool transient(int negative_errno) {
  int e = -negative_errno;
  return e == ETIMEDOUT || e == ENOTCONN || e == EAGAIN || e == EBUSY || e == ESHUTDOWN ||
         e == EINTR || e == ECANCELED;
}

}  // namespace

std::string ReservationState::serialize() const {
  std::string out(kMagic, 4);
  put_le(out, kFormat, 1);
  put_le(out, rtype, 1);
  put_le(out, regs.size(), 2);
  put_le(out, gen, 4);
  out.append(reinterpret_cast<const char*>(holder), 16);
  for (const auto& r : regs) {
    out.append(reinterpret_cast<const char*>(r.hostid), 16);
    put_le(out, r.key, 8);
  }
  return out;
}

bool ReservationState::parse(const std::string& bytes, ReservationState* out, std::string* error) {
  *out = ReservationState{};
  if (bytes.empty()) return true;  // never written
  auto bad = [&](std::string why) {
    *error = std::move(why);
    *out = ReservationState{};
    return false;
  };
  if (bytes.size() < kHeaderBytes)
    return bad(std::to_string(bytes.size()) + " bytes, shorter than the " +
               std::to_string(kHeaderBytes) + "-byte header");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) return bad("no SNRV magic: not a sens record");
  if (uint8_t format = uint8_t(bytes[4]); format != kFormat)
    return bad("format " + std::to_string(format) + ", this sens reads format " +
               std::to_string(kFormat));
  out->rtype = uint8_t(bytes[5]);
  size_t count = get_le(bytes, 6, 2);
  out->gen = uint32_t(get_le(bytes, 8, 4));
  std::memcpy(out->holder, bytes.data() + 12, 16);
  if (out->rtype > resv::kExclusiveAccessAllRegs)
    return bad("reservation type " + std::to_string(out->rtype) + " (valid: 0..6)");
  if (count > resv::kMaxRegistrants)
    return bad(std::to_string(count) + " registrants (at most " +
               std::to_string(resv::kMaxRegistrants) + ")");
  if (bytes.size() != kHeaderBytes + kEntryBytes * count)
    return bad(std::to_string(bytes.size()) + " bytes for " + std::to_string(count) +
               " registrants, which take " + std::to_string(kHeaderBytes + kEntryBytes * count));
  out->regs.resize(count);
  for (size_t i = 0; i < count; ++i) {
    size_t at = kHeaderBytes + kEntryBytes * i;
    std::memcpy(out->regs[i].hostid, bytes.data() + at, 16);
    out->regs[i].key = get_le(bytes, at + 16, 8);
    for (size_t j = 0; j < i; ++j)
      if (std::memcmp(out->regs[j].hostid, out->regs[i].hostid, 16) == 0)
        return bad("registrant " + std::to_string(i) + " repeats the host ID of registrant " +
                   std::to_string(j));
  }
  if (out->rtype != 0 && count == 0) return bad("a reservation with no registrant");
  if (out->rtype != 0 && !all_registrants(*out) && !find(*out, out->holder))
    return bad("the reservation's holder is not a registrant");
  return true;
}

Reservations::~Reservations() {
  worker_.stop();                   // a command running there uses the state below
  if (record_) record_->watch({});  // waits for a notification being applied
}

void Reservations::share(storage::SharedRecord* record, std::string label) {
  record_ = record;
  label_ = std::move(label);
  if (!record_) return;
  lease_ = record_->lease();
  std::string bytes;
  uint64_t version = 0;
  if (int rc = record_->read(&bytes, &version); rc < 0)
    LOG_WARN("%s: cannot read the shared reservations in %s yet (%s): none until it can",
             label_.c_str(), record_->describe().c_str(), std::strerror(-rc));
  else
    install(bytes, version);
  // An unreadable value counts as held too: no sens gateway writes one, nor changes the record
  // while it is unreadable, so the last good copy stays what every gateway enforces (and the
  // lease on it runs on).
  record_->watch([this](const std::string& b, uint64_t v) {
    install(b, v);
    return true;
  });
}

void Reservations::changed() {
  held_.store(state_.rtype != 0, std::memory_order_release);
  version_.fetch_add(1, std::memory_order_acq_rel);
}

bool Reservations::install(const std::string& bytes, uint64_t version, std::string* error) {
  ReservationState s;
  std::string why;
  bool ok = ReservationState::parse(bytes, &s, &why);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    // Never trusted: the copy here (what the I/O path enforces) stays the last good one.
    if (error) {  // a command's read: the command logs it, each time
      *error = why;
      return false;
    }
    if (version != bad_record_version_) {
      LOG_ERROR(
          "%s: the shared reservations in %s (version %llu) are unreadable: %s; keeping "
          "the last good state, reservation commands fail until it is fixed",
          label_.c_str(), record_->describe().c_str(), static_cast<unsigned long long>(version),
          why.c_str());
    }
    bad_record_version_ = version;
    return false;
  }
  // Notifications and re-reads may come out of order: only a newer version replaces this one
  // (0: the object was removed, which empties the state).
  if (record_was_read_ && version <= record_version_ && !(version == 0 && record_version_ != 0))
    return true;
  state_ = std::move(s);
  record_version_ = version;
  record_was_read_ = true;
  changed();
  return true;
}

template <typename Change>
uint16_t Reservations::run(const char* what, Change&& change) {
  if (!record_) {
    std::lock_guard<std::mutex> lock(mu_);
    uint16_t status = change(state_);
    if (status == st::kSuccess) changed();
    return status;
  }
  auto failed = [&](const char* step, int rc) {
    LOG_ERROR("%s: %s failed: cannot %s the shared reservations in %s: %s", label_.c_str(), what,
              step, record_->describe().c_str(), std::strerror(-rc));
    return transient(rc) ? st::kNsNotReady : st::kInternalError;
  };
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string bytes;
    uint64_t version = 0;
    if (int rc = record_->read(&bytes, &version); rc < 0) return failed("read", rc);
    std::string why;
    if (!install(bytes, version, &why)) {
      LOG_ERROR(
          "%s: %s refused: the shared reservations in %s are unreadable: %s (removing the "
          "object starts over with none)",
          label_.c_str(), what, record_->describe().c_str(), why.c_str());
      return st::kInternalError;
    }
    ReservationState s;
    ReservationState::parse(bytes, &s, &why);  // parsed by install() just now
    std::string before = s.serialize();
    uint16_t status = change(s);
    if (status != st::kSuccess) return status;
    std::string after = s.serialize();
    if (after == before) return status;  // nothing to write
    uint64_t new_version = 0;
    int rc = record_->write(after, version, &new_version);
    if (rc == -ECANCELED) {  // another gateway wrote first: read it again, after a moment
      std::this_thread::sleep_for(std::chrono::milliseconds(1 << attempt));
      continue;
    }
    if (rc < 0) return failed("write", rc);
    install(after, new_version);
    return st::kSuccess;
  }
  return failed("update", -ECANCELED);
}

uint8_t Reservations::access(const uint8_t hostid[16], uint64_t* version) {
  std::lock_guard<std::mutex> lock(mu_);
  *version = version_.load(std::memory_order_acquire);
  const uint8_t rw = resv::kMayRead | resv::kMayWrite;
  Registrant* r = find(state_, hostid);
  if (state_.rtype == 0 || holds(state_, r)) return rw;
  switch (state_.rtype) {
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
  if (action > 2) return st::kInvalidField;
  return run("Reservation Register", [&](ReservationState& s) {
    return do_register(s, hostid, action, iekey, crkey, nrkey);
  });
}

uint16_t Reservations::acquire(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                               uint64_t crkey, uint64_t prkey) {
  if (rtype < resv::kWriteExclusive || rtype > resv::kExclusiveAccessAllRegs || action > 2)
    return st::kInvalidField;
  return run("Reservation Acquire", [&](ReservationState& s) {
    return do_acquire(s, hostid, action, iekey, rtype, crkey, prkey);
  });
}

uint16_t Reservations::release(const uint8_t hostid[16], uint8_t action, bool iekey, uint8_t rtype,
                               uint64_t crkey) {
  if (action > 1) return st::kInvalidField;
  return run("Reservation Release", [&](ReservationState& s) {
    return do_release(s, hostid, action, iekey, rtype, crkey);
  });
}

size_t Reservations::report(uint8_t* out, size_t room, uint16_t* status) {
  *status = st::kSuccess;
  if (record_) {  // the cluster's state, not a notification that may still be on its way
    std::string bytes, why;
    uint64_t version = 0;
    if (int rc = record_->read(&bytes, &version); rc < 0) {
      LOG_ERROR("%s: Reservation Report failed: cannot read the shared reservations in %s: %s",
                label_.c_str(), record_->describe().c_str(), std::strerror(-rc));
      *status = transient(rc) ? st::kNsNotReady : st::kInternalError;
      return 0;
    }
    if (!install(bytes, version, &why)) {
      LOG_ERROR("%s: Reservation Report refused: the shared reservations in %s are unreadable: %s",
                label_.c_str(), record_->describe().c_str(), why.c_str());
      *status = st::kInternalError;
      return 0;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto& regs = state_.regs;
  size_t total = 64 + 64 * regs.size();
  auto put = [&](size_t at, const void* v, size_t n) {
    if (at + n <= room) std::memcpy(out + at, v, n);
  };
  uint16_t regctl = uint16_t(regs.size());
  put(0, &state_.gen, 4);
  put(4, &state_.rtype, 1);
  put(5, &regctl, 2);
  // PTPLS (byte 9) stays 0: not persisted through a power loss.
  for (size_t i = 0; i < regs.size(); ++i) {
    size_t at = 64 + 64 * i;
    uint16_t cntlid = 0xFFFF;  // dynamic controller model: no single controller
    uint8_t rcsts = holds(state_, &regs[i]) ? 1 : 0;
    put(at, &cntlid, 2);
    put(at + 2, &rcsts, 1);
    put(at + 8, &regs[i].key, 8);
    put(at + 16, regs[i].hostid, 16);
  }
  return total;
}

}  // namespace sens::target
