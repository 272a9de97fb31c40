// libFuzzer target: target::ReservationState::parse on arbitrary bytes (the shared
// reservation record of an RBD namespace, which any client of the cluster can overwrite).
// What parse accepts must be a state the target can hold and give back unchanged:
// serialize(parse(x)) parses again to the same state, and a refusal always says why.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "target/reservations.h"

using sens::target::ReservationState;

namespace {

bool same(const ReservationState& a, const ReservationState& b) {
  if (a.rtype != b.rtype || a.gen != b.gen || a.regs.size() != b.regs.size()) return false;
  if (std::memcmp(a.holder, b.holder, sizeof a.holder) != 0) return false;
  for (size_t i = 0; i < a.regs.size(); ++i) {
    if (std::memcmp(a.regs[i].hostid, b.regs[i].hostid, 16) != 0) return false;
    if (a.regs[i].key != b.regs[i].key) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ReservationState state;
  std::string error;
  if (!ReservationState::parse(bytes, &state, &error)) {
    if (error.empty()) std::abort();  // a refusal names its cause
    return 0;
  }
  if (state.regs.size() > sens::target::resv::kMaxRegistrants) std::abort();
  ReservationState again;
  std::string error2;
  if (!ReservationState::parse(state.serialize(), &again, &error2)) std::abort();
  if (!same(state, again)) std::abort();
  return 0;
}
