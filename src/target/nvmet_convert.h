#pragma once
// Inside load_nvmetcli() (nvmet_config.h): the walk over an nvmetcli file, shared by
// nvmet_config.cc (hosts, subsystems, namespaces) and nvmet_ports.cc (ports, and the target-wide
// settings that come out of both). Not for use elsewhere.
#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "target/config.h"

namespace sens::target::nvmetcli {

using nlohmann::json;

// The conversion stops at the first malformed field, thrown as "PATH: what" and caught in
// load_nvmetcli(): the walk is four levels deep, and every level would otherwise pass it up.
struct Refusal {
  std::string text;
};
[[noreturn]] void refuse(const std::string& path, const std::string& what);

// "PATH[i]", "PATH.key".
std::string at(const std::string& path, size_t i);
std::string dot(const std::string& path, const std::string& key);
// `v` if it is an object (array), else a refusal naming `path`.
const json& object_at(const json& v, const std::string& path);
const json& array_at(const json& v, const std::string& path);
// The member `key` of the object `o`, or nullptr.
const json* member(const json& o, const char* key);
// configfs attributes are text: nvmetcli writes most as strings, a few (nsid, enable, portid,
// grpid) as numbers, and a file written by hand may use either.
std::string text(const json& v, const std::string& path);
std::string required_text(const json& o, const char* key, const std::string& path);
// A number as the kernel's kstrto*() reads it (base 0: 16, 0x10, 020) within lo..hi.
uint64_t number(const json& v, const std::string& path, uint64_t lo, uint64_t hi);
// A boolean as kstrtobool() reads it (1, 0, y, n, on, off).
bool flag(const json& v, const std::string& path);
std::string join(const std::vector<std::string>& items);

// A host object: its DH-HMAC-CHAP attributes, Linux's defaults where the file has none.
struct Host {
  std::string key, ctrl_key;
  std::string hash = "hmac(sha256)", dhgroup = "null";
  uint8_t hash_id = 1, dhgroup_id = 0;
};

// A subsystem to serve, and what it brings to the target-wide settings.
struct Converted {
  SubsystemConfig config;
  uint16_t cntlid_min = 1, cntlid_max = 0xFFEF;
  uint64_t qid_max = 0;       // 0: not in the file
  std::set<uint32_t> groups;  // the ANA groups of its namespaces
};

// A TCP port to listen on.
struct Listener {
  ListenAddress address;
  bool tls;
  std::string label;                   // "ports[1] (portid 2)"
  std::vector<std::string> links;      // the subsystems linked to it
  std::map<uint32_t, uint8_t> states;  // its ana_groups
};

class Converter {
 public:
  Converter(TargetConfig* config, std::vector<std::string>* report)
      : config_(config), report_(report) {}
  void run(const json& root);

 private:
  void note(const std::string& path, const std::string& what);
  void unknown_keys(const json& o, const std::string& path,
                    std::initializer_list<const char*> known);
  void hosts(const json& root);
  bool set_dhchap(Host& host, const std::string& name, const json& v, const std::string& path);
  void subsystems(const json& root);
  void subsystem(const json& s, const std::string& p, const std::string& nqn);
  void keys(Converted* sub, const std::vector<std::string>& allowed, const std::string& p);
  void namespaces(const json& s, const std::string& p, Converted* sub);
  static std::string identity(const json& v, const std::string& path, bool is_uuid);
  static uint32_t ana_group(const json& v, const std::string& path);
  void ports(const json& root);
  void port(const json& o, const std::string& p);
  void one_size(const std::vector<std::pair<std::string, uint64_t>>& sizes, const char* what,
                bool (*fits)(uint64_t), uint32_t* out);
  void finish();

  TargetConfig* config_;
  std::vector<std::string>* report_;
  std::map<std::string, Host> hosts_;
  std::set<std::string> all_nqns_;  // every subsystem of the file, served or not
  std::vector<Converted> carried_;
  std::vector<Listener> listeners_;
  std::vector<std::pair<std::string, std::string>> addresses_;  // "ADDR:PORT", its port's path
  std::vector<std::pair<std::string, uint64_t>> inline_sizes_, queue_sizes_;
};

}  // namespace sens::target::nvmetcli
