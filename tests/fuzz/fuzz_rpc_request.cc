// libFuzzer target: the management socket's request handling (mgmt::RpcServer::handle: the
// JSON-RPC 2.0 parser, batches, the envelope checks and check_params) on one request line,
// answered twice:
//   - by the real method handlers over a real target (target::Target, one reactor, a RAM
//     namespace), except the methods that touch files, bind sockets or allocate backing
//     memory (load_config, save_config with a path, listener_add, namespace_add /
//     subsystem_create with a namespace other than null:, namespace_resize), which the
//     checking handler below answers instead;
//   - by checking handlers for every method, which abort if check_params let through a
//     parameter the method does not take, of the wrong type, or left out a required one.
// Every answer must be JSON-RPC 2.0: one response object (or an array of them for a batch,
// nothing for notifications), "jsonrpc": "2.0", the request's id, exactly one of result and
// error, and an error code of the documented set. -32603 (internal error) is a finding too:
// a handler threw on parameters check_params had accepted.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/log.h"
#include "common/units.h"
#include "mgmt/rpc_server.h"
#include "mgmt/target_methods.h"
#include "target/target.h"

namespace {

using namespace sens;
using nlohmann::json;

[[noreturn]] void broken(const std::string& what, const std::string& input) {
  std::fprintf(stderr, "fuzz_rpc_request: %s\ninput: %.400s\n", what.c_str(), input.c_str());
  std::abort();
}

bool has_type(const json& v, mgmt::ParamType t) {
  switch (t) {
    case mgmt::ParamType::kString:
      return v.is_string();
    case mgmt::ParamType::kInt:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case mgmt::ParamType::kBool:
      return v.is_boolean();
    case mgmt::ParamType::kSize:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
             (v.is_string() && parse_size(v.get<std::string>()).has_value());
    case mgmt::ParamType::kStrings:
      if (!v.is_array()) return false;
      for (auto& e : v)
        if (!e.is_string()) return false;
      return true;
  }
  return false;
}

// What every handler may assume once check_params passed: an object of known parameters of
// their types, with the required ones.
mgmt::Handler checking_handler(const mgmt::MethodSpec& spec) {
  return [&spec](const json& params) -> json {
    if (!params.is_object())
      broken(spec.name + ": params reached the handler not as an object", "");
    for (auto& [name, value] : params.items()) {
      const mgmt::ParamSpec* p = nullptr;
      for (auto& s : spec.params)
        if (s.name == name) p = &s;
      if (!p) broken(spec.name + ": unknown parameter '" + name + "' reached the handler", "");
      if (!has_type(value, p->type))
        broken(spec.name + ": parameter '" + name + "' of the wrong type reached the handler", "");
    }
    for (auto& s : spec.params)
      if (s.required && !params.contains(s.name))
        broken(spec.name + ": required '" + s.name + "' missing in the handler", "");
    return params;
  };
}

std::map<std::string, mgmt::Handler> checking_handlers() {
  std::map<std::string, mgmt::Handler> h;
  for (auto& m : mgmt::method_specs()) h[m.name] = checking_handler(m);
  return h;
}

bool only_null_specs(const json& p, const char* key, bool array) {
  if (!p.is_object() || !p.contains(key)) return true;
  const json& v = p[key];
  auto null_spec = [](const json& s) {
    return s.is_string() && s.get<std::string>().rfind("null:", 0) == 0;
  };
  if (!array) return null_spec(v);
  if (!v.is_array()) return true;  // check_params refuses it
  for (auto& s : v)
    if (!null_spec(s)) return false;
  return true;
}

// The real handlers, but those with effects outside the process (or large allocations) give
// way to the checking handler for the parameters that would have them.
std::map<std::string, mgmt::Handler> target_handlers(target::Target& t) {
  auto real = mgmt::target_handlers(t);
  auto check = checking_handlers();
  std::map<std::string, mgmt::Handler> h = real;
  for (const char* name : {"load_config", "listener_add", "namespace_resize"})
    h[name] = check[name];
  h["save_config"] = [real, check](const json& p) {
    return p.is_object() && p.contains("path") ? check.at("save_config")(p)
                                               : real.at("save_config")(p);
  };
  h["namespace_add"] = [real, check](const json& p) {
    return only_null_specs(p, "spec", false) ? real.at("namespace_add")(p)
                                             : check.at("namespace_add")(p);
  };
  h["subsystem_create"] = [real, check](const json& p) {
    return only_null_specs(p, "namespaces", true) ? real.at("subsystem_create")(p)
                                                  : check.at("subsystem_create")(p);
  };
  return h;
}

target::Target* start_target() {
  target::TargetConfig c;
  c.listen.push_back({"127.0.0.1", 0});
  c.discovery_port = 0;
  c.subsystems.push_back({"nqn.2026-11.io.sens-target:ram0", {"ram:1M"}, {}});
  target::apply_defaults(c);
  if (std::string e = target::validate(c); !e.empty()) broken(e, "");
  auto* t = new target::Target(c);  // never destroyed: its reactor runs until the process exits
  if (std::string e = t->start(); !e.empty()) broken(e, "");
  return t;
}

bool known_code(int code) {
  return code == mgmt::kParseError || code == mgmt::kInvalidRequest ||
         code == mgmt::kMethodNotFound || code == mgmt::kInvalidParams || code == mgmt::kRefused;
}

// One response object, for `request` (the request it answers, when it is an object).
void check_response(const json& r, const json* request, const std::string& input) {
  if (!r.is_object()) broken("a response is not an object", input);
  if (r.value("jsonrpc", "") != "2.0") broken("a response without \"jsonrpc\": \"2.0\"", input);
  if (!r.contains("id")) broken("a response without an id", input);
  if (r.contains("result") == r.contains("error")) broken("not exactly one of result/error", input);
  if (r.contains("error")) {
    const json& e = r["error"];
    if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer() ||
        !e.contains("message") || !e["message"].is_string() ||
        e["message"].get<std::string>().empty())
      broken("an error without a code and a message", input);
    if (!known_code(e["code"].get<int>()))
      broken("error " + e.dump() + " (a handler threw on accepted parameters?)", input);
  }
  // A well-formed id comes back as it was sent.
  if (request && request->is_object() && request->contains("id")) {
    const json& id = (*request)["id"];
    if ((id.is_string() || id.is_number() || id.is_null()) && r["id"] != id)
      broken("the response's id is not the request's", input);
  }
}

void check_answer(const std::string& answer, const std::string& input) {
  json request = json::parse(input, nullptr, false);
  if (answer.empty()) {
    // Only notifications go unanswered: a request object (or batch of them) without an id.
    auto notification = [](const json& r) { return r.is_object() && !r.contains("id"); };
    if (request.is_discarded()) broken("no answer to a line that is not JSON", input);
    if (request.is_array()) {
      for (auto& r : request)
        if (!notification(r)) broken("a batch answered with nothing", input);
    } else if (!notification(request)) {
      broken("no answer to a request with an id", input);
    }
    return;
  }
  json r = json::parse(answer, nullptr, false);
  if (r.is_discarded()) broken("the answer is not JSON: " + answer.substr(0, 200), input);
  if (request.is_discarded()) {  // -32700, or -32600 for text nested too deep to parse
    const int code = r.is_object() && r.contains("error") ? r["error"].value("code", 0) : 0;
    if (code != mgmt::kParseError && code != mgmt::kInvalidRequest)
      broken("a line that is not JSON is not answered -32700", input);
    return;
  }
  if (r.is_array()) {
    if (!request.is_array() || request.empty() || r.size() > request.size())
      broken("an array answer to a request that is no batch", input);
    for (auto& one : r) check_response(one, nullptr, input);
    return;
  }
  // (nlohmann's parse stops at a NUL byte, while the server's depth check reads the whole
  // line: for such a line the refusal may carry no id)
  const bool nul = input.find('\0') != std::string::npos;
  check_response(r, request.is_array() || nul ? nullptr : &request, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mgmt::RpcServer* checking = new mgmt::RpcServer(checking_handlers());
  static target::Target* target = (g_log_level = LogLevel::kError, start_target());
  static mgmt::RpcServer* real = new mgmt::RpcServer(target_handlers(*target));
  const std::string input(reinterpret_cast<const char*>(data), size);
  // The server takes one line at a time (it splits at '\n'); a line has none.
  if (input.find('\n') != std::string::npos) return 0;
  check_answer(checking->handle(input), input);
  check_answer(real->handle(input), input);
  g_log_level = LogLevel::kError;  // log_set_level may have changed it
  return 0;
}
