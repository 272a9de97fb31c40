#pragma once
// The management methods: their names, parameters and help (shared by the server, which
// checks requests against them, and by `sens rpc`, which builds its command line and --help
// from them), and their handlers over a running target.
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace sens::target {
class Target;
}

namespace sens::mgmt {

enum class ParamType {
  kString,
  kInt,  // a JSON integer >= 0
  kBool,
  kSize,     // bytes: an integer, or a string with a unit ("1G", "512M")
  kStrings,  // an array of strings
};
const char* param_type_name(ParamType t);

struct ParamSpec {
  std::string name;
  ParamType type;
  bool required;
  std::string help;
};

struct MethodSpec {
  std::string name;
  std::string help;     // one or two sentences: what it does, what it returns
  std::string example;  // a `sens rpc` command line
  std::vector<ParamSpec> params;
};

const std::vector<MethodSpec>& method_specs();
const MethodSpec* find_method(const std::string& name);

}  // namespace sens::mgmt
