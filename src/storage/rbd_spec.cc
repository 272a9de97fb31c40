// The syntax of "rbd:POOL/IMAGE[,conf=PATH][,id=NAME][,timeout=S][,op_timeout=S][,qd=N]".
// Always built (so that a sens without librbd still names a bad spec precisely).
#include <charconv>
#include <string>

#include "storage/backends.h"

namespace sens::storage {

namespace {

constexpr const char* kRbdHelp =
    "expected rbd:POOL/IMAGE[,conf=PATH][,id=NAME][,timeout=S][,op_timeout=S][,qd=N]";

bool parse_unsigned(std::string_view text, unsigned min, unsigned max, unsigned* out) {
  unsigned v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return false;
  if (v < min || v > max) return false;
  *out = v;
  return true;
}

// Pool and image names as Ceph allows them, minus what would make the spec ambiguous.
bool bad_name_char(char c) {
  return c == '/' || c == ',' || c == '@' || c == '=' || static_cast<unsigned char>(c) < 0x20 ||
         c == 0x7f;
}

}  // namespace

bool parse_rbd_spec(std::string_view rest, RbdSpec* out, std::string* error) {
  const std::string spec = "rbd:" + std::string(rest);
  RbdSpec s;
  size_t comma = rest.find(',');
  std::string_view name = rest.substr(0, comma);
  size_t slash = name.find('/');
  if (name.empty()) {
    *error = spec + ": missing POOL/IMAGE (" + kRbdHelp + ")";
    return false;
  }
  if (slash == std::string_view::npos) {
    *error = spec + ": '" + std::string(name) +
             "' names no image: expected POOL/IMAGE (e.g. rbd:rbd/disk0)";
    return false;
  }
  s.pool = std::string(name.substr(0, slash));
  s.image = std::string(name.substr(slash + 1));
  if (s.pool.empty()) {
    *error = spec + ": empty pool name (expected POOL/IMAGE)";
    return false;
  }
  if (s.image.empty()) {
    *error = spec + ": empty image name (expected POOL/IMAGE)";
    return false;
  }
  for (const std::string* n : {&s.pool, &s.image}) {
    for (char c : *n) {
      if (bad_name_char(c)) {
        *error = spec + ": " + (n == &s.pool ? "pool" : "image") + " name '" + *n +
                 "' has a character it cannot have here ('" +
                 (c == '/'   ? "/"
                  : c == '@' ? "@ (snapshots are not served)"
                             : std::string(1, c)) +
                 "')";
        return false;
      }
    }
  }
  while (comma != std::string_view::npos) {
    size_t next = rest.find(',', comma + 1);
    std::string_view item = rest.substr(
        comma + 1, next == std::string_view::npos ? std::string_view::npos : next - comma - 1);
    comma = next;
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (eq == std::string_view::npos || value.empty()) {
      *error = spec + ": option '" + std::string(item) + "' needs a value (KEY=VALUE)";
      return false;
    }
    if (key == "conf") {
      s.conf = std::string(value);
    } else if (key == "id") {
      // Ceph's client id, without the "client." prefix that `ceph auth` shows.
      std::string_view v = value;
      if (v.substr(0, 7) == "client.") v.remove_prefix(7);
      if (v.empty()) {
        *error = spec + ": id=client. names no user";
        return false;
      }
      s.id = std::string(v);
    } else if (key == "timeout") {
      if (!parse_unsigned(value, 1, 300, &s.timeout_s)) {
        *error = spec + ": timeout must be 1..300 seconds (monitor connection and commands)";
        return false;
      }
    } else if (key == "op_timeout") {
      if (!parse_unsigned(value, 0, 3600, &s.op_timeout_s)) {
        *error = spec + ": op_timeout must be 0..3600 seconds (OSD requests; 0: wait forever)";
        return false;
      }
    } else if (key == "qd") {
      if (!parse_unsigned(value, 1, 4096, &s.qd)) {
        *error = spec + ": qd must be 1..4096 (librbd requests in flight per reactor)";
        return false;
      }
    } else {
      *error =
          spec + ": unknown option '" + std::string(key) + "' (conf, id, timeout, op_timeout, qd)";
      return false;
    }
  }
  *out = std::move(s);
  return true;
}

}  // namespace sens::storage
