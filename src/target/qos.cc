#include "target/qos.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

namespace sens::target::qos {

using nlohmann::json;

const char* const kKeys[kKeyCount] = {"read_iops",  "write_iops",  "total_iops",
                                      "read_mibps", "write_mibps", "total_mibps"};

namespace {
constexpr uint32_t kMaxNsid = 1024;  // (subsystem.h's kMaxNsid; this file stays pure)

bool is_iops(int key) {
  return key < 3;
}
uint64_t bound(int key) {
  return is_iops(key) ? kMaxIops : kMaxMibps;
}

bool parse_nsid(const std::string& text, uint32_t* nsid) {
  if (text.empty() || text.size() > 4 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *nsid = uint32_t(std::stoul(text));
  return *nsid >= 1 && *nsid <= kMaxNsid;
}

bool host_nqn(const std::string& h) {
  return h.size() > 4 && h.size() <= 223 && h.rfind("nqn.", 0) == 0;
}
}  // namespace

bool Limits::any() const {
  for (int k = 0; k < kKeyCount; ++k)
    if (field(*this, k)) return true;
  return false;
}

uint64_t& field(Limits& l, int key) {
  uint64_t* f[kKeyCount] = {&l.read_iops,  &l.write_iops,  &l.total_iops,
                            &l.read_mibps, &l.write_mibps, &l.total_mibps};
  return *f[key];
}

uint64_t field(const Limits& l, int key) {
  return field(const_cast<Limits&>(l), key);
}

bool parse_limits(const json& v, const std::string& where, Limits* out, std::string* error) {
  if (!v.is_object()) {
    *error = where +
             ": expected an object of limits (read_iops, write_iops, total_iops, "
             "read_mibps, write_mibps, total_mibps)";
    return false;
  }
  for (auto& [key, value] : v.items()) {
    int k = int(std::find(kKeys, kKeys + kKeyCount, key) - kKeys);
    if (k == kKeyCount) {
      *error = where + ": unknown key '" + key +
               "' (read_iops, write_iops, total_iops, read_mibps, write_mibps, total_mibps)";
      return false;
    }
    if (!value.is_number_unsigned() || value.get<uint64_t>() > bound(k)) {
      *error = where + ": '" + key + "' must be an integer 0.." + std::to_string(bound(k)) +
               (is_iops(k) ? " (commands a second; 0: no limit)" : " (MiB/s; 0: no limit)");
      return false;
    }
    field(*out, k) = value.get<uint64_t>();
  }
  return true;
}

json limits_json(const Limits& l) {
  json j = json::object();
  for (int k = 0; k < kKeyCount; ++k)
    if (field(l, k)) j[kKeys[k]] = field(l, k);
  return j;
}

bool parse_config(const json& v, const std::string& where, Config* out, std::string* error) {
  if (!v.is_object()) {
    *error = where + ": expected {\"namespaces\": {\"NSID\": {...}}, \"hosts\": {\"NQN\": {...}}}";
    return false;
  }
  Config c;
  for (auto& [key, value] : v.items()) {
    bool ns = key == "namespaces";
    if (!ns && key != "hosts") {
      *error = where + ": unknown key '" + key + "' (namespaces, hosts)";
      return false;
    }
    if (!value.is_object()) {
      *error = where + " '" + key + "': expected an object keyed by " +
               (ns ? "nsid (\"1\")" : "host NQN");
      return false;
    }
    for (auto& [name, limits] : value.items()) {
      std::string at = where + " " + (ns ? "namespace '" : "host '") + name + "'";
      uint32_t nsid = 0;
      if (ns && !parse_nsid(name, &nsid)) {
        *error = at + ": an nsid is 1..1024";
        return false;
      }
      if (!ns && !host_nqn(name)) {
        *error = at + ": not a host NQN (nqn.…)";
        return false;
      }
      Limits l;
      if (!parse_limits(limits, at, &l, error)) return false;
      if (!l.any()) continue;
      if (ns)
        c.namespaces[nsid] = l;
      else
        c.hosts[name] = l;
    }
  }
  *out = std::move(c);
  return true;
}

json config_json(const Config& c) {
  json j = json::object();
  for (auto& [nsid, l] : c.namespaces) j["namespaces"][std::to_string(nsid)] = limits_json(l);
  for (auto& [host, l] : c.hosts) j["hosts"][host] = limits_json(l);
  return j;
}

bool parse_option(const std::string& text, Config* out, std::string* error) {
  const std::string usage = "expected ns=NSID,KEY=N,... or host=HOSTNQN,KEY=N,...";
  std::vector<std::string> items;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  auto fail = [&](const std::string& why) { return *error = "'" + text + "': " + why, false; };
  bool ns = items[0].rfind("ns=", 0) == 0, host = items[0].rfind("host=", 0) == 0;
  if (!ns && !host) return fail(usage);
  std::string name = items[0].substr(ns ? 3 : 5);
  uint32_t nsid = 0;
  if (ns && !parse_nsid(name, &nsid)) return fail("an nsid is 1..1024");
  if (host && !host_nqn(name)) return fail("'" + name + "' is not a host NQN (nqn.…)");
  if (items.size() < 2) return fail("no limit given (" + usage + ")");
  Limits l = ns ? out->namespaces[nsid] : out->hosts[name];
  json given = json::object();
  for (size_t i = 1; i < items.size(); ++i) {
    size_t eq = items[i].find('=');
    std::string key = items[i].substr(0, eq),
                value = eq == std::string::npos ? "" : items[i].substr(eq + 1);
    if (value.empty() || value.size() > 19 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail("'" + items[i] + "': expected KEY=N (N an integer)");
    given[key] = std::stoull(value);
  }
  if (!parse_limits(given, "'" + text + "'", &l, error)) return false;
  if (ns) {
    if (l.any())
      out->namespaces[nsid] = l;
    else
      out->namespaces.erase(nsid);
  } else {
    if (l.any())
      out->hosts[name] = l;
    else
      out->hosts.erase(name);
  }
  return true;
}

std::string check_config(const Config& c) {
  auto check = [](const Limits& l) -> std::string {
    for (int k = 0; k < kKeyCount; ++k)
      if (field(l, k) > bound(k))
        return std::string(kKeys[k]) + " must be 0.." + std::to_string(bound(k));
    return "";
  };
  for (auto& [nsid, l] : c.namespaces) {
    if (nsid < 1 || nsid > kMaxNsid) return "qos namespace " + std::to_string(nsid) + ": 1..1024";
    if (auto e = check(l); !e.empty()) return "qos namespace " + std::to_string(nsid) + ": " + e;
  }
  for (auto& [host, l] : c.hosts) {
    if (!host_nqn(host)) return "qos host '" + host + "': not a host NQN (nqn.…)";
    if (auto e = check(l); !e.empty()) return "qos host '" + host + "': " + e;
  }
  return "";
}

// ---------------------------------------------------------------------------- TokenBucket

void TokenBucket::configure(uint64_t rate, uint32_t share, Nanos now) {
  bool was_limited = rate_ != 0;
  refill(now);
  rate_ = rate;
  unit_ = __int128(kSecond) * std::max<uint32_t>(share, 1);
  cap_ = std::max(__int128(rate) * kBurst, unit_);
  tokens_ = was_limited ? std::min(tokens_, cap_) : cap_;
  last_ = now;
}

void TokenBucket::refill(Nanos now) {
  if (!rate_ || now <= last_) return;
  __int128 dt = now - last_;
  last_ = now;
  tokens_ = std::min(cap_, tokens_ + dt * rate_);  // (128 bits: no overflow for any dt)
}

Nanos TokenBucket::ready_at(uint64_t n, Nanos now) const {
  if (!rate_) return now;
  __int128 missing = need(n) - tokens_;
  if (missing <= 0) return std::max(now, last_);
  Nanos at = last_ + Nanos((missing + rate_ - 1) / rate_);
  return std::max(now, at);
}

// ---------------------------------------------------------------------------- Limiter

void Limiter::configure(const Limits& limits, uint32_t share) {
  Nanos now = clock_.now();
  limits_ = limits;
  for (int k = 0; k < kKeyCount; ++k) {
    uint64_t rate = field(limits, k);
    if (!is_iops(k)) rate <<= 20;  // MiB/s -> bytes/s
    buckets_[k].configure(rate, share, now);
  }
}

bool Limiter::fits(Dir dir, uint32_t bytes) const {
  int d = dir == Dir::kRead ? 0 : 1;
  return buckets_[d].has(1) && buckets_[2].has(1) && buckets_[3 + d].has(bytes) &&
         buckets_[5].has(bytes);
}

void Limiter::take(Dir dir, uint32_t bytes) {
  int d = dir == Dir::kRead ? 0 : 1;
  buckets_[d].take(1);
  buckets_[2].take(1);
  buckets_[3 + d].take(bytes);
  buckets_[5].take(bytes);
  ++counters_.admitted;
}

bool Limiter::admit(Waiter& w, Dir dir, uint32_t bytes) {
  Nanos now = clock_.now();
  if (!head_) {
    for (auto& b : buckets_) b.refill(now);
    if (fits(dir, bytes)) {
      take(dir, bytes);
      return true;
    }
  }
  w.dir = dir;
  w.bytes = bytes;
  w.since = now;
  w.on = this;
  w.next = nullptr;
  w.prev = tail_;
  (tail_ ? tail_->next : head_) = &w;
  tail_ = &w;
  ++counters_.throttled;
  return false;
}

void Limiter::unlink(Waiter& w) {
  (w.prev ? w.prev->next : head_) = w.next;
  (w.next ? w.next->prev : tail_) = w.prev;
  w.prev = w.next = nullptr;
  w.on = nullptr;
}

Waiter* Limiter::release() {
  if (!head_) return nullptr;
  Nanos now = clock_.now();
  for (auto& b : buckets_) b.refill(now);
  Waiter* w = head_;
  if (!fits(w->dir, w->bytes)) return nullptr;
  take(w->dir, w->bytes);
  counters_.delay_ns += uint64_t(now - w->since);
  unlink(*w);
  return w;
}

Nanos Limiter::next_ready() const {
  if (!head_) return kNever;
  Nanos now = clock_.now();
  int d = head_->dir == Dir::kRead ? 0 : 1;
  uint32_t bytes = head_->bytes;
  return std::max({buckets_[d].ready_at(1, now), buckets_[2].ready_at(1, now),
                   buckets_[3 + d].ready_at(bytes, now), buckets_[5].ready_at(bytes, now)});
}

void Limiter::cancel(Waiter& w) {
  if (w.on == this) unlink(w);
}

Waiter* Limiter::drop_first() {
  Waiter* w = head_;
  if (!w) return nullptr;
  ++counters_.admitted;
  counters_.delay_ns += uint64_t(std::max<Nanos>(0, clock_.now() - w->since));
  unlink(*w);
  return w;
}

}  // namespace sens::target::qos
