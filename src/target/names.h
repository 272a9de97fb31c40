#pragma once
// The names a target is configured with: subsystem NQNs and serial numbers.
#include <cstdint>
#include <string>

namespace sens::target {

// A subsystem NQN as the Linux target takes it: any name of 1..223 bytes of UTF-8 without
// control characters (Linux's blktests use "blktests-subsystem-1"). A name without the
// "nqn." prefix is refused when `strict`, else *warning says that sens took it. Returns "" or
// the error.
std::string check_subsystem_nqn(const std::string& nqn, bool strict, std::string* warning);

// A serial number (Identify Controller SN): 1..20 printable ASCII characters. "" or the error
// ("'SN' is not ...", for the caller to say whose).
std::string check_serial(const std::string& serial);

// "namespace N of NQN", as the log and the RPC's answers name a namespace.
std::string namespace_name(const std::string& nqn, uint32_t nsid);

}  // namespace sens::target
