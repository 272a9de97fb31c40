// The ports of an nvmetcli file, and the settings sens has once for the target while Linux has
// them per port or per subsystem (nvmet_convert.h).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "target/nvmet_convert.h"

namespace sens::target::nvmetcli {

// ports: [{"portid", "addr": {"trtype", "adrfam", "traddr", "trsvcid", "treq", "tsas"},
// "param": {"inline_data_size", "max_queue_size", "pi_enable"}, "subsystems": [NQN],
// "ana_groups": [{"grpid", "ana": {"state"}}], "referrals": [...]}]
void Converter::ports(const json& root) {
  const json* list = member(root, "ports");
  if (!list) return;
  array_at(*list, "ports");
  for (size_t i = 0; i < list->size(); ++i)
    port(object_at((*list)[i], at("ports", i)), at("ports", i));
}

void Converter::port(const json& o, const std::string& p) {
  std::string label = p;
  if (const json* v = member(o, "portid"))
    label += " (portid " + std::to_string(number(*v, dot(p, "portid"), 0, 65535)) + ")";
  unknown_keys(o, p, {"portid", "addr", "param", "subsystems", "ana_groups", "referrals"});
  const json* addr = member(o, "addr");
  if (!addr) refuse(dot(p, "addr"), "missing");
  const std::string ap = dot(p, "addr");
  object_at(*addr, ap);
  unknown_keys(*addr, ap, {"trtype", "adrfam", "traddr", "trsvcid", "treq", "tsas"});
  std::string trtype = required_text(*addr, "trtype", ap);

  // The links, ANA groups and referrals are checked whatever the transport.
  std::vector<std::string> links;
  if (const json* subs = member(o, "subsystems")) {
    array_at(*subs, dot(p, "subsystems"));
    for (size_t k = 0; k < subs->size(); ++k) {
      std::string n = text((*subs)[k], at(dot(p, "subsystems"), k));
      if (!all_nqns_.count(n))
        refuse(at(dot(p, "subsystems"), k), "'" + n + "' is not a subsystem of this file");
      links.push_back(n);
    }
  }
  std::map<uint32_t, uint8_t> states;
  if (const json* groups = member(o, "ana_groups")) {
    const std::string gp = dot(p, "ana_groups");
    array_at(*groups, gp);
    for (size_t k = 0; k < groups->size(); ++k) {
      const std::string q = at(gp, k);
      const json& g = object_at((*groups)[k], q);
      unknown_keys(g, q, {"grpid", "ana"});
      if (!member(g, "grpid")) refuse(dot(q, "grpid"), "missing");
      uint64_t id = number(*member(g, "grpid"), dot(q, "grpid"), 1, 0xFFFFFFFF);
      const json* ana = member(g, "ana");
      if (!ana) refuse(dot(q, "ana.state"), "missing");
      object_at(*ana, dot(q, "ana"));
      std::string name = required_text(*ana, "state", dot(q, "ana"));
      uint8_t state = 0;
      if (!ana::parse_state(name, &state))
        refuse(dot(q, "ana.state"), "'" + name +
                                        "' is not optimized, non-optimized, inaccessible, "
                                        "persistent-loss or change");
      if (id > ana::kMaxGroups) {
        note(q, "group " + std::to_string(id) + ": sens has ANA groups 1.." +
                    std::to_string(ana::kMaxGroups) + "; not carried");
        continue;
      }
      if (!states.emplace(uint32_t(id), state).second)
        refuse(dot(q, "grpid"), std::to_string(id) + " given twice");
    }
  }
  if (const json* refs = member(o, "referrals")) {
    array_at(*refs, dot(p, "referrals"));
    for (size_t k = 0; k < refs->size(); ++k) {
      const std::string q = at(dot(p, "referrals"), k);
      const json& r = object_at((*refs)[k], q);
      std::string name = member(r, "name") ? text(*member(r, "name"), dot(q, "name")) : "";
      std::string where;
      if (const json* ra = member(r, "addr"); ra && ra->is_object() && member(*ra, "traddr"))
        where = " to " + text(*member(*ra, "traddr"), dot(q, "addr.traddr")) + ":" +
                (member(*ra, "trsvcid") ? text(*member(*ra, "trsvcid"), dot(q, "addr.trsvcid"))
                                        : std::string("?"));
      note(q, "referral '" + name + "'" + where +
                  ": sens's discovery log lists only its own listeners; not carried");
    }
  }

  if (trtype != "tcp") {
    note(label, "trtype '" + trtype + "': sens serves NVMe/TCP only; the port is not carried");
    return;
  }
  if (links.empty()) {
    note(label, "links no subsystem, so Linux does not listen on it; neither does sens");
    return;
  }
  std::string traddr = required_text(*addr, "traddr", ap);
  std::string trsvcid = required_text(*addr, "trsvcid", ap);
  std::string adrfam =
      member(*addr, "adrfam") ? text(*member(*addr, "adrfam"), dot(ap, "adrfam")) : "";
  bool v6 = traddr.find(':') != std::string::npos;
  if (adrfam.empty()) adrfam = v6 ? "ipv6" : "ipv4";
  if (adrfam != "ipv4" && adrfam != "ipv6")
    refuse(dot(ap, "adrfam"), "'" + adrfam + "' is not ipv4 or ipv6");
  if (v6 != (adrfam == "ipv6"))
    refuse(dot(ap, "traddr"), "'" + traddr + "' is not an " + adrfam + " address (adrfam)");
  std::string tsas = member(*addr, "tsas") ? text(*member(*addr, "tsas"), dot(ap, "tsas")) : "";
  if (!tsas.empty() && tsas != "none" && tsas != "tls1.3")
    refuse(dot(ap, "tsas"), "'" + tsas + "' is not none or tls1.3");
  if (const json* v = member(*addr, "treq")) {
    std::string t = text(*v, dot(ap, "treq"));
    if (!t.empty() && t != "not specified" && t != "required" && t != "not required")
      refuse(dot(ap, "treq"), "'" + t + "' is not 'not specified', 'required' or 'not required'");
  }
  const std::string where = (v6 ? "[" + traddr + "]" : traddr) + ":" + trsvcid;
  ListenAddress a;
  std::string why;
  if (!parse_listen(where, &a, &why)) refuse(ap, why);
  for (auto& [other, other_path] : addresses_)
    if (other == where) refuse(ap, where + " is also " + other_path + "'s address");
  addresses_.push_back({where, p});

  if (const json* param = member(o, "param")) {
    const std::string pp = dot(p, "param");
    object_at(*param, pp);
    for (auto& [key, v] : param->items()) {
      const std::string kp = dot(pp, key);
      if (key == "inline_data_size" || key == "max_queue_size") {
        std::string t = text(v, kp);
        if (t.empty() || t[0] == '-') continue;  // < 0: the transport chooses
        (key == "inline_data_size" ? inline_sizes_ : queue_sizes_)
            .push_back({kp, number(v, kp, 0, UINT32_MAX)});
      } else if (key == "pi_enable") {
        if (flag(v, kp)) note(kp, "1: sens has no protection information");
      } else {
        note(kp, "unknown, ignored");
      }
    }
  }
  if (tsas == "tls1.3")
    note(label,
         "TLS 1.3: its PSKs are in the kernel's keyring, not in this file; give sens target "
         "--tls PSKFILE (interchange format, as nvme gen-tls-key writes them)");
  Listener l{a, tsas == "tls1.3", label, links, states};
  listeners_.push_back(l);
}

// A size several ports set: sens has one for the target.
void Converter::one_size(const std::vector<std::pair<std::string, uint64_t>>& sizes,
                         const char* what, bool (*fits)(uint64_t), uint32_t* out) {
  std::set<uint64_t> values;
  for (auto& [path, n] : sizes) values.insert(n);
  if (values.empty()) return;
  uint64_t v = *values.begin();
  if (values.size() > 1) {
    std::vector<std::string> list;
    for (auto& [path, n] : sizes) list.push_back(path + " " + std::to_string(n));
    note("ports", std::string(what) + " differs (" + join(list) +
                      "): sens has one for every listener: the smallest");
  }
  if (!fits(v)) {
    note(sizes.front().first,
         std::to_string(v) + ": sens cannot use it, keeps " + std::to_string(*out));
    return;
  }
  *out = uint32_t(v);
}

void Converter::finish() {
  std::set<std::string> served;
  std::set<uint32_t> groups;
  for (auto& s : carried_) {
    served.insert(s.config.nqn);
    groups.insert(s.groups.begin(), s.groups.end());
  }
  if (carried_.empty()) refuse("subsystems", "none left to serve (see the settings not carried)");
  config_->listen.clear();
  config_->tls_listen.clear();
  for (auto& l : listeners_) {
    std::vector<std::string> linked, missing;
    for (auto& n : l.links)
      if (served.count(n)) linked.push_back(n);
    if (linked.empty()) {  // it would serve only what the others serve, which Linux does not
      note(l.label, "links only subsystems sens leaves out (" + join(l.links) + "); not carried");
      continue;
    }
    for (auto& s : carried_)
      if (std::find(l.links.begin(), l.links.end(), s.config.nqn) == l.links.end())
        missing.push_back(s.config.nqn);
    if (!missing.empty())
      note(l.label, "links only " + join(linked) +
                        ": sens serves every subsystem on every listener, so " + join(missing) +
                        (missing.size() > 1 ? " are" : " is") + " reachable there too");
    // Linux: group 1 is optimized unless set, a group without a directory on the port
    // inaccessible through it.
    ListenAddress a = l.address;
    for (uint32_t g : groups) {
      auto it = l.states.find(g);
      uint8_t state = it != l.states.end() ? it->second
                      : g == 1             ? ana::kOptimized
                                           : ana::kInaccessible;
      if (state != a.ana_state) a.ana_groups.push_back({g, state});
    }
    (l.tls ? config_->tls_listen : config_->listen).push_back(a);
    // Linux serves discovery on every port; sens does on every I/O listener too, beside its
    // discovery listeners, unless a port takes the discovery port's number: then there is none.
    if (config_->discovery_port && a.port == config_->discovery_port) {
      note(l.label, "listens on " + std::to_string(a.port) +
                        ", sens's discovery port: sens then serves no discovery "
                        "(--discovery-port PORT moves it)");
      config_->discovery_port = 0;
    }
  }
  if (config_->listen.empty())
    note("ports", std::string(config_->tls_listen.empty() ? "no TCP port" : "only TLS ports") +
                      " to listen on: sens listens on 127.0.0.1:4420 unless --listen says "
                      "otherwise");

  // One cntlid range and one qid_max for the target.
  uint16_t lo = 1, hi = 0xFFEF;
  std::set<std::string> ranges;
  std::set<uint64_t> qids;
  for (auto& s : carried_) {
    lo = std::max(lo, s.cntlid_min);
    hi = std::min(hi, s.cntlid_max);
    ranges.insert(std::to_string(s.cntlid_min) + "-" + std::to_string(s.cntlid_max));
    if (s.qid_max) qids.insert(s.qid_max);
  }
  if (lo > hi)
    refuse("subsystems", "the cntlid ranges (" + join({ranges.begin(), ranges.end()}) +
                             ") share no id, and sens has one range for the target");
  if (ranges.size() > 1)
    note("subsystems", "cntlid ranges differ (" + join({ranges.begin(), ranges.end()}) +
                           "): sens has one range for the target: " + std::to_string(lo) + "-" +
                           std::to_string(hi) + ", the ids every one of them allows");
  config_->cntlid_min = lo;
  config_->cntlid_max = hi;
  if (!qids.empty()) {
    if (qids.size() > 1)
      note("subsystems", "qid_max differs between subsystems: sens has one for the target: " +
                             std::to_string(*qids.begin()));
    if (*qids.begin() <= 1024) config_->max_io_queues = uint32_t(*qids.begin());
  }
  one_size(
      inline_sizes_, "inline_data_size", [](uint64_t n) { return n % 16 == 0 && n <= 1024 * 1024; },
      &config_->inline_data);
  one_size(
      queue_sizes_, "max_queue_size", [](uint64_t n) { return n >= 2 && n <= 1024; },
      &config_->queue_size);
  config_->subsystems.clear();
  for (auto& s : carried_) config_->subsystems.push_back(s.config);
}

}  // namespace sens::target::nvmetcli
