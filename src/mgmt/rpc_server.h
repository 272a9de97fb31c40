#pragma once
// The management socket: JSON-RPC 2.0 over a Unix stream socket, one JSON text per line each
// way (requests may also be batches, as JSON-RPC 2.0 allows). One thread serves every client
// and runs methods one at a time, so a method never races another; the target's live changes
// (target/live.cc) are what reach the reactors.
//
// Errors follow JSON-RPC 2.0: -32700 parse error, -32600 invalid request, -32601 unknown
// method, -32602 invalid params (each names the parameter and what was wrong), and
// kRefused (-32000) for a change the target refuses (the message says why; nothing changed).
#include <atomic>
#include <functional>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <thread>
#include <vector>

#include "mgmt/methods.h"

namespace sens::mgmt {

inline constexpr int kParseError = -32700, kInvalidRequest = -32600, kMethodNotFound = -32601,
                     kInvalidParams = -32602, kInternalError = -32603, kRefused = -32000;
inline constexpr size_t kMaxRequestBytes = 1 << 20;  // a longer line is refused, the client dropped
inline constexpr size_t kMaxClients = 64;
// nlohmann::json copies, compares and prints values recursively, so a request nested 100,000
// levels deep (200 KB) would overflow the server thread's stack: deeper than this is refused
// before parsing (a request needs 4: a batch, a request, its params, a list).
inline constexpr size_t kMaxRequestDepth = 32;

struct RpcError {
  int code;
  std::string message;
};

// Runs a method with its checked parameters; returns its result or throws RpcError.
using Handler = std::function<nlohmann::json(const nlohmann::json& params)>;

class RpcServer {
 public:
  explicit RpcServer(std::map<std::string, Handler> handlers);
  ~RpcServer();

  // Binds `path` (a stale socket file of a dead process is replaced; a live one is an error),
  // makes it mode 0600 and starts serving. "" or why not.
  std::string start(const std::string& path);
  void stop();  // closes every client; the socket file is removed
  const std::string& path() const { return path_; }

  // One request text (a line) to its response text ("" for a notification). Thread-safe only
  // on the server's thread, or before start() (tests).
  std::string handle(const std::string& text);

  uint64_t requests() const { return requests_.load(); }
  uint64_t errors() const { return errors_.load(); }

 private:
  nlohmann::json handle_one(const nlohmann::json& request);
  void run();

  std::map<std::string, Handler> handlers_;
  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  std::atomic<uint64_t> requests_{0}, errors_{0};
};

// Checks `params` against `spec` (names, types, required ones, nothing unknown); throws
// RpcError(kInvalidParams) naming the first problem.
void check_params(const MethodSpec& spec, const nlohmann::json& params);

}  // namespace sens::mgmt
