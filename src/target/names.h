#pragma once
// The names a target is configured with: subsystem NQNs.
#include <string>

namespace sens::target {

// A subsystem NQN as the Linux target takes it: any name of 1..223 bytes of UTF-8 without
// control characters (Linux's blktests use "blktests-subsystem-1"). A name without the
// "nqn." prefix is refused when `strict`, else *warning says that sens took it. Returns "" or
// the error.
std::string check_subsystem_nqn(const std::string& nqn, bool strict, std::string* warning);

}  // namespace sens::target
