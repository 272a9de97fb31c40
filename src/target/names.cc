#include "target/names.h"

#include <cstdint>
#include <cstdio>

namespace sens::target {

namespace {

// The name with its control and non-ASCII bytes as \xNN, for an error message.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

// Well-formed UTF-8: no stray continuation bytes, no overlong forms, no surrogates, at most
// U+10FFFF.
bool is_utf8(const std::string& s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};  // shortest form per length
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t more = c < 0x80           ? 0
                  : (c >> 5) == 0x6  ? 1
                  : (c >> 4) == 0xE  ? 2
                  : (c >> 3) == 0x1E ? 3
                                     : 9;
    if (more == 9 || s.size() - i - 1 < more) return false;
    uint32_t cp = more == 0 ? c : c & (0x3F >> more);
    for (size_t k = 1; k <= more; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    if (cp < kMin[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += more + 1;
  }
  return true;
}

}  // namespace

std::string check_subsystem_nqn(const std::string& nqn, bool strict, std::string* warning) {
  const std::string what = "subsystem NQN '" + printable(nqn) + "'";
  if (nqn.empty()) return what + " is empty";
  if (nqn.size() > 223)
    return what + " is " + std::to_string(nqn.size()) + " bytes, at most 223 allowed";
  for (unsigned char c : nqn)
    if (c < 0x20 || c == 0x7f) return what + " has a control character";
  if (!is_utf8(nqn)) return what + " is not UTF-8";
  if (nqn.rfind("nqn.", 0) != 0) {
    if (strict) return what + " does not start with 'nqn.' (--strict-nqn)";
    if (warning)
      *warning = what +
                 " does not start with 'nqn.': taken as the Linux target takes it (--strict-nqn "
                 "refuses it)";
  }
  return "";
}

std::string check_serial(const std::string& serial) {
  bool ok = !serial.empty() && serial.size() <= 20;
  for (unsigned char c : serial) ok = ok && c >= 0x20 && c <= 0x7e;
  return ok ? "" : "'" + printable(serial) + "' is not 1..20 printable ASCII characters";
}

std::string namespace_name(const std::string& nqn, uint32_t nsid) {
  return "namespace " + std::to_string(nsid) + " of " + nqn;
}

}  // namespace sens::target
