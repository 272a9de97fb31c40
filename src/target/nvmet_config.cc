#include "target/nvmet_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "auth/dhchap.h"
#include "target/names.h"
#include "target/ns_options.h"
#include "target/nvmet_convert.h"
#include "target/subsystem.h"

namespace sens::target {

namespace nvmetcli {

namespace {

std::string hex(const uint8_t* p, bool dashes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (dashes && (i == 4 || i == 6 || i == 8 || i == 10)) out += '-';
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

bool all_zero(const uint8_t* p) {
  return std::all_of(p, p + 16, [](uint8_t b) { return b == 0; });
}

// A namespace to serve: its nsid in the file, and the spec it becomes.
struct ServedNamespace {
  uint64_t nsid;
  std::string label, spec;
  uint32_t group;
};

}  // namespace

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw Refusal{path + ": " + what};
}

std::string at(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}
std::string dot(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

const json& object_at(const json& v, const std::string& path) {
  if (!v.is_object()) refuse(path, "expected an object");
  return v;
}
const json& array_at(const json& v, const std::string& path) {
  if (!v.is_array()) refuse(path, "expected an array");
  return v;
}
const json* member(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

// configfs attributes are text: nvmetcli writes most as strings, a few (nsid, enable, portid,
// grpid) as numbers, and a file written by hand may use either.
std::string text(const json& v, const std::string& path) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_null()) return "";
  refuse(path, "expected a string or a whole number");
}

// A number as the kernel's kstrto*() reads it (base 0: 16, 0x10, 020) within lo..hi.
uint64_t number(const json& v, const std::string& path, uint64_t lo, uint64_t hi) {
  std::string t = text(v, path);
  char* end = nullptr;
  uint64_t n = t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))
                   ? 0
                   : std::strtoull(t.c_str(), &end, 0);
  if (!end || *end != '\0') refuse(path, "'" + t + "' is not a number");
  if (n < lo || n > hi)
    refuse(path,
           std::to_string(n) + " is not in " + std::to_string(lo) + ".." + std::to_string(hi));
  return n;
}

// A boolean as kstrtobool() reads it.
bool flag(const json& v, const std::string& path) {
  std::string t = text(v, path);
  for (char& ch : t) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (t == "1" || t == "y" || t == "yes" || t == "on" || t == "true") return true;
  if (t == "0" || t == "n" || t == "no" || t == "off" || t == "false") return false;
  refuse(path, "'" + t + "' is not 0 or 1");
}

std::string required_text(const json& o, const char* key, const std::string& path) {
  const json* v = member(o, key);
  if (!v) refuse(dot(path, key), "missing");
  return text(*v, dot(path, key));
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

void Converter::run(const json& root) {
  object_at(root, "the file");
  for (auto& [key, v] : root.items())
    if (key != "hosts" && key != "ports" && key != "subsystems")
      note(key, "unknown (nvmetcli writes hosts, ports, subsystems), ignored");
  hosts(root);
  subsystems(root);
  ports(root);
  finish();
}

void Converter::note(const std::string& path, const std::string& what) {
  report_->push_back(path + ": " + what);
}

void Converter::unknown_keys(const json& o, const std::string& path,
                             std::initializer_list<const char*> known) {
  for (auto& item : o.items()) {
    const std::string& key = item.key();  // (clang 14 lambdas cannot capture a binding)
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
      note(dot(path, key), "unknown, ignored");
  }
}

// hosts: [{"nqn", "dhchap_key", "dhchap_ctrl_key", "dhchap_hash", "dhchap_dhgroup"}], the
// dhchap attributes also as a group {"dhchap": {"key", ...}} (nvmetcli's form for any group).
void Converter::hosts(const json& root) {
  const json* list = member(root, "hosts");
  if (!list) return;
  array_at(*list, "hosts");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string p = at("hosts", i);
    const json& h = object_at((*list)[i], p);
    std::string nqn = required_text(h, "nqn", p);
    if (nqn.empty()) refuse(dot(p, "nqn"), "empty");
    if (hosts_.count(nqn)) refuse(dot(p, "nqn"), "'" + nqn + "' given twice");
    Host host;
    for (auto& [key, v] : h.items()) {
      if (key == "nqn") continue;
      if (key.rfind("dhchap_", 0) == 0 && set_dhchap(host, key.substr(7), v, dot(p, key))) continue;
      if (key == "dhchap" && v.is_object()) {
        for (auto& [k2, v2] : v.items())
          if (!set_dhchap(host, k2, v2, dot(dot(p, key), k2)))
            note(dot(dot(p, key), k2), "unknown, ignored");
        continue;
      }
      note(dot(p, key), "unknown, ignored");
    }
    if (host.key.empty() && !host.ctrl_key.empty()) {
      note(dot(p, "dhchap_ctrl_key"),
           "a controller key without a dhchap_key: Linux does not authenticate the host, so "
           "it never uses it; neither does sens");
      host.ctrl_key.clear();
    }
    hosts_[nqn] = host;
  }
}

// One dhchap attribute ("key", "ctrl_key", "hash", "dhgroup"); false if `name` is none.
bool Converter::set_dhchap(Host& host, const std::string& name, const json& v,
                           const std::string& path) {
  if (name != "key" && name != "ctrl_key" && name != "hash" && name != "dhgroup") return false;
  std::string t = text(v, path), why;
  if (name == "key" || name == "ctrl_key") {
    // Checked here so that the error names the field; it never shows the secret.
    if (!t.empty() && !auth::parse_secret(t, &why)) refuse(path, why);
    (name == "key" ? host.key : host.ctrl_key) = t;
  } else if (name == "hash" && !t.empty()) {
    if (!auth::parse_hash(t, &host.hash_id))
      refuse(path, "'" + t + "' is not hmac(sha256), hmac(sha384) or hmac(sha512)");
    host.hash = t;
  } else if (name == "dhgroup" && !t.empty()) {
    if (!auth::parse_dh_group(t, &host.dhgroup_id))
      refuse(path, "'" + t + "' is not null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or " +
                       "ffdhe8192");
    host.dhgroup = t;
  }
  return true;
}

void Converter::subsystems(const json& root) {
  const json* list = member(root, "subsystems");
  if (!list) refuse("subsystems", "missing");
  array_at(*list, "subsystems");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string p = at("subsystems", i);
    const json& s = object_at((*list)[i], p);
    std::string nqn = required_text(s, "nqn", p);
    if (nqn.empty()) refuse(dot(p, "nqn"), "empty");
    if (!all_nqns_.insert(nqn).second) refuse(dot(p, "nqn"), "'" + nqn + "' given twice");
    subsystem(s, p, nqn);
  }
}

void Converter::subsystem(const json& s, const std::string& p, const std::string& nqn) {
  const std::string label = p + " (" + nqn + ")";
  unknown_keys(s, p, {"nqn", "attr", "namespaces", "allowed_hosts", "passthru"});
  Converted sub;
  sub.config.nqn = nqn;
  bool any_host = false;  // Linux's default
  if (const json* attr = member(s, "attr")) {
    const std::string ap = dot(p, "attr");
    for (auto& [key, v] : object_at(*attr, ap).items()) {
      const std::string kp = dot(ap, key);
      if (key == "allow_any_host") {
        any_host = flag(v, kp);
      } else if (key == "serial") {
        std::string t = text(v, kp), why = check_serial(t);
        if (!why.empty()) refuse(kp, why);
        sub.config.serial = t;
      } else if (key == "cntlid_min" || key == "cntlid_max") {
        (key == "cntlid_min" ? sub.cntlid_min : sub.cntlid_max) =
            uint16_t(number(v, kp, 1, 0xFFEF));
      } else if (key == "qid_max") {
        sub.qid_max = number(v, kp, 1, 65535);
      } else if (key == "version") {
        std::string t = text(v, kp);
        if (t != "1.3" && t != "1.3.0") note(kp, "'" + t + "': sens reports NVMe 1.3");
      } else if (key == "model") {
        std::string t = text(v, kp);  // "Linux" is the kernel's default
        if (t != "Linux") note(kp, "'" + t + "': sens reports its own model number");
      } else if (key == "firmware") {  // the kernel's default is its release, so always said
        std::string t = text(v, kp);
        if (!t.empty()) note(kp, "'" + t + "': sens reports its own firmware revision");
      } else if (key == "ieee_oui" || key == "vendor_id" || key == "subsys_vendor_id") {
        if (uint64_t n = number(v, kp, 0, 0xFFFFFF))
          note(kp, std::to_string(n) + ": sens reports its own");
      } else if (key == "pi_enable") {
        if (flag(v, kp)) note(kp, "1: sens has no protection information");
      } else {
        note(kp, "unknown attribute, ignored");
      }
    }
    if (sub.cntlid_min > sub.cntlid_max)
      refuse(ap, "cntlid_min " + std::to_string(sub.cntlid_min) + " is above cntlid_max " +
                     std::to_string(sub.cntlid_max));
  }
  std::string passthru;  // the device of an enabled passthru
  bool is_passthru = false;
  if (const json* list = member(s, "passthru")) {
    array_at(*list, dot(p, "passthru"));
    for (size_t k = 0; k < list->size(); ++k) {
      const std::string tp = at(dot(p, "passthru"), k);
      const json& pt = object_at((*list)[k], tp);
      const json* en = member(pt, "enable");
      const json* dev = member(pt, "device");
      std::string path = dev && dev->is_object() && member(*dev, "path")
                             ? text(*member(*dev, "path"), dot(tp, "device.path"))
                             : "";
      if (en && flag(*en, dot(tp, "enable"))) {
        is_passthru = true;
        passthru = path;
      }
    }
  }
  std::vector<std::string> allowed;
  if (const json* list = member(s, "allowed_hosts")) {
    const std::string hp = dot(p, "allowed_hosts");
    array_at(*list, hp);
    for (size_t k = 0; k < list->size(); ++k) {
      std::string h = text((*list)[k], at(hp, k));
      if (!hosts_.count(h)) refuse(at(hp, k), "'" + h + "' is not one of the hosts");
      if (std::find(allowed.begin(), allowed.end(), h) != allowed.end())
        refuse(at(hp, k), "'" + h + "' given twice");
      allowed.push_back(h);
    }
  }
  namespaces(s, p, &sub);

  // Whether it is served, and to whom.
  if (is_passthru) {
    note(label,
         "passthru of '" + passthru + "': sens serves no NVMe passthru; the subsystem is left out");
    return;
  }
  if (!allowed.empty()) {
    if (any_host)
      note(dot(p, "attr.allow_any_host"),
           "1 beside allowed_hosts: Linux refuses it while hosts are linked and keeps the "
           "list; so does sens");
    sub.config.allowed_hosts = allowed;
  } else if (!any_host) {
    note(label,
         "allow_any_host is 0 and no host is allowed: Linux admits no host, and sens cannot "
         "serve a subsystem to nobody (no list means any host); left out");
    return;
  }
  keys(&sub, allowed, p);
  if (sub.config.namespaces.empty()) {
    note(label, "no enabled namespace, and sens serves no subsystem without one; left out");
    return;
  }
  carried_.push_back(sub);
}

// The allowed hosts' keys become the subsystem's; Linux uses a host's dhchap_hash and
// dhchap_dhgroup only, so the subsystem's lists become those when its keyed hosts agree.
void Converter::keys(Converted* sub, const std::vector<std::string>& allowed,
                     const std::string& p) {
  std::map<uint8_t, std::string> hashes, groups;  // id: the name as the file has it
  for (auto& nqn : allowed) {
    const Host& h = hosts_[nqn];
    if (h.key.empty()) continue;
    sub->config.host_keys.push_back({nqn, h.key});
    if (!h.ctrl_key.empty()) sub->config.ctrl_keys.push_back({nqn, h.ctrl_key});
    hashes.emplace(h.hash_id, h.hash);
    groups.emplace(h.dhgroup_id, h.dhgroup);
  }
  auto one = [&](const std::map<uint8_t, std::string>& ids, const char* what,
                 std::vector<uint8_t>* out) {
    if (ids.size() == 1) {
      *out = {ids.begin()->first};
    } else if (ids.size() > 1) {
      std::vector<std::string> names;
      for (auto& [id, name] : ids) names.push_back(name);
      note(dot(p, "allowed_hosts"),
           std::string("the keyed hosts want different ") + what + " (" + join(names) +
               "): sens has one list per subsystem and keeps the target's");
    }
  };
  one(hashes, "dhchap_hash", &sub->config.dhchap_hashes);
  one(groups, "dhchap_dhgroup", &sub->config.dhchap_dhgroups);
}

// namespaces: [{"nsid", "enable", "device": {"path", "uuid", "nguid"}, "ana_grpid",
// "ana": {"grpid"}, "resv": {"enable"}}]
void Converter::namespaces(const json& s, const std::string& p, Converted* sub) {
  const json* list = member(s, "namespaces");
  if (!list) return;
  const std::string np = dot(p, "namespaces");
  array_at(*list, np);
  std::set<uint64_t> nsids;
  std::vector<ServedNamespace> served;
  for (size_t k = 0; k < list->size(); ++k) {
    const std::string q = at(np, k);
    const json& n = object_at((*list)[k], q);
    const json* nsid_v = member(n, "nsid");
    if (!nsid_v) refuse(dot(q, "nsid"), "missing");
    uint64_t nsid = number(*nsid_v, dot(q, "nsid"), 1, 0xFFFFFFFE);
    if (!nsids.insert(nsid).second) refuse(dot(q, "nsid"), std::to_string(nsid) + " given twice");
    const std::string label = q + " (nsid " + std::to_string(nsid) + ")";
    unknown_keys(n, q, {"nsid", "enable", "device", "ana_grpid", "ana", "resv", "buffered_io"});
    std::string path, uuid, nguid;
    if (const json* dev = member(n, "device")) {
      const std::string dp = dot(q, "device");
      object_at(*dev, dp);
      unknown_keys(*dev, dp, {"path", "uuid", "nguid"});
      if (const json* v = member(*dev, "path")) path = text(*v, dot(dp, "path"));
      if (const json* v = member(*dev, "uuid")) uuid = identity(*v, dot(dp, "uuid"), true);
      if (const json* v = member(*dev, "nguid")) nguid = identity(*v, dot(dp, "nguid"), false);
    }
    uint32_t group = 1;
    if (const json* ana = member(n, "ana")) {
      object_at(*ana, dot(q, "ana"));
      unknown_keys(*ana, dot(q, "ana"), {"grpid"});
      if (const json* v = member(*ana, "grpid")) group = ana_group(*v, dot(q, "ana.grpid"));
    }
    // nvmetcli writes ana_grpid after the "ana" group, so it wins.
    if (const json* v = member(n, "ana_grpid")) group = ana_group(*v, dot(q, "ana_grpid"));
    if (const json* resv = member(n, "resv")) {
      object_at(*resv, dot(q, "resv"));
      unknown_keys(*resv, dot(q, "resv"), {"enable"});
      const json* v = member(*resv, "enable");
      if (v && !flag(*v, dot(q, "resv.enable")))
        note(dot(q, "resv.enable"),
             "0: sens always serves persistent reservations (Linux refuses them here)");
    }
    if (const json* v = member(n, "buffered_io"); v && flag(*v, dot(q, "buffered_io")))
      note(dot(q, "buffered_io"), "1: sens reads and writes files with O_DIRECT");
    const json* enable = member(n, "enable");
    if (!enable || !flag(*enable, dot(q, "enable"))) {
      note(label, enable ? "disabled in Linux: not served"
                         : "no 'enable', so disabled in Linux: not served");
      continue;
    }
    if (path.empty()) refuse(dot(q, "device.path"), "missing");
    if (path.find(',') != std::string::npos)
      refuse(dot(q, "device.path"),
             "'" + path + "' has a ',', which separates the options of a sens namespace spec");
    std::string spec = "file:" + path;
    if (!uuid.empty()) spec += ",uuid=" + uuid;
    if (!nguid.empty()) spec += ",nguid=" + nguid;
    if (group != 1) spec += ",anagrpid=" + std::to_string(group);
    if (std::string why = check_namespace_spec(spec); !why.empty()) refuse(q, why);
    served.push_back({nsid, label, spec, group});
  }
  // The nsids as Linux had them (nsid= where they leave a gap); sens serves 1..1024.
  std::sort(served.begin(), served.end(),
            [](const ServedNamespace& a, const ServedNamespace& b) { return a.nsid < b.nsid; });
  for (size_t k = 0; k < served.size(); ++k) {
    if (served[k].nsid > kMaxNsid) {
      note(served[k].label, "not carried: sens serves nsids 1.." + std::to_string(kMaxNsid));
      continue;
    }
    std::string spec = served[k].spec;
    if (served[k].nsid != k + 1) spec += ",nsid=" + std::to_string(served[k].nsid);
    sub->config.namespaces.push_back(spec);
    sub->groups.insert(served[k].group);
  }
}

// A device uuid or nguid as the ns spec takes it ("" for Linux's all-zero "none"): uuids
// 8-4-4-4-12, NGUIDs as the kernel shows them (the same) or 32 hex digits.
std::string Converter::identity(const json& v, const std::string& path, bool is_uuid) {
  std::string t = text(v, path), digits;
  uint8_t bytes[16];
  if (is_uuid) {
    if (!t.empty() && !parse_uuid(t, bytes)) refuse(path, "'" + t + "' is not a UUID");
  } else {
    for (char ch : t)
      if (ch != '-' && ch != ':') digits += ch;
    if (!t.empty() && (digits.size() != 32 || !parse_uuid(digits, bytes)))
      refuse(path, "'" + t + "' is not 16 bytes of hex");
  }
  if (t.empty() || all_zero(bytes)) return "";
  return hex(bytes, is_uuid);
}

uint32_t Converter::ana_group(const json& v, const std::string& path) {
  uint64_t g = number(v, path, 1, 0xFFFFFFFF);
  if (g > ana::kMaxGroups)
    refuse(path, std::to_string(g) + ": sens has ANA groups 1.." + std::to_string(ana::kMaxGroups));
  return uint32_t(g);
}

}  // namespace nvmetcli

using nlohmann::json;

bool is_nvmetcli_json(const json& j) {
  if (!j.is_object()) return false;
  if (j.contains("hosts") || j.contains("ports")) return true;
  auto subs = j.find("subsystems");
  if (subs == j.end() || !subs->is_array()) return false;
  for (auto& s : *subs) {
    if (!s.is_object()) continue;
    if (s.contains("attr")) return true;
    auto ns = s.find("namespaces");
    if (ns != s.end() && ns->is_array())
      for (auto& n : *ns)
        if (n.is_object()) return true;
  }
  return false;
}

bool load_nvmetcli(const json& j, TargetConfig* config, std::vector<std::string>* uncarried,
                   std::string* error) {
  TargetConfig converted = *config;
  std::vector<std::string> report;
  try {
    nvmetcli::Converter(&converted, &report).run(j);
  } catch (const nvmetcli::Refusal& r) {
    *error = r.text;
    return false;
  } catch (const json::exception& e) {  // a shape the walk did not foresee: still no crash
    *error = std::string("unexpected JSON: ") + e.what();
    return false;
  }
  *config = converted;
  uncarried->insert(uncarried->end(), report.begin(), report.end());
  return true;
}

}  // namespace sens::target
