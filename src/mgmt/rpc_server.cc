#include "mgmt/rpc_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/units.h"

namespace sens::mgmt {

using nlohmann::json;

namespace {

bool is_type(const json& v, ParamType t) {
  switch (t) {
    case ParamType::kString:
      return v.is_string();
    case ParamType::kInt:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    case ParamType::kBool:
      return v.is_boolean();
    case ParamType::kSize:
      return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0) ||
             (v.is_string() && parse_size(v.get<std::string>()).has_value());
    case ParamType::kStrings:
      if (!v.is_array()) return false;
      for (auto& e : v)
        if (!e.is_string()) return false;
      return true;
  }
  return false;
}

// How deep brackets nest in `text`, outside strings (the text need not be valid JSON).
size_t nesting_depth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// An answer as sent. Bytes that are not UTF-8 come only from the request (a parse error quotes
// them) and are replaced (U+FFFD): dump() would throw on them otherwise.
std::string answer_text(const json& answer) {
  return answer.dump(-1, ' ', false, json::error_handler_t::replace);
}

json error_response(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"error", {{"code", code}, {"message", message}}}, {"id", id}};
}

}  // namespace

void check_params(const MethodSpec& spec, const json& params) {
  if (!params.is_null() && !params.is_object())
    throw RpcError{kInvalidParams, "params must be an object of named parameters"};
  if (params.is_object())
    for (auto& [name, value] : params.items()) {
      const ParamSpec* p = nullptr;
      for (auto& s : spec.params)
        if (s.name == name) p = &s;
      if (!p) {
        std::string known;
        for (auto& s : spec.params) known += (known.empty() ? "" : ", ") + s.name;
        throw RpcError{kInvalidParams,
                       "unknown parameter '" + name + "' of " + spec.name +
                           (known.empty() ? " (it takes none)" : " (" + known + ")")};
      }
      if (!is_type(value, p->type))
        throw RpcError{kInvalidParams, "parameter '" + name + "': expected " +
                                           param_type_name(p->type) + ", got " + value.dump()};
    }
  for (auto& s : spec.params)
    if (s.required && (!params.is_object() || !params.contains(s.name)))
      throw RpcError{kInvalidParams, "missing parameter '" + s.name + "' (" + s.help + ")"};
}

RpcServer::RpcServer(std::map<std::string, Handler> handlers) : handlers_(std::move(handlers)) {}

RpcServer::~RpcServer() {
  stop();
}

json RpcServer::handle_one(const json& request) {
  json id = nullptr;
  if (!request.is_object())
    return error_response(id, kInvalidRequest, "a request is a JSON object");
  if (request.contains("id")) {
    id = request["id"];
    if (!id.is_null() && !id.is_string() && !id.is_number())
      return error_response(nullptr, kInvalidRequest, "id must be a string, a number or null");
  }
  // (value("jsonrpc", "") would throw on a jsonrpc that is not a string)
  if (!request.contains("jsonrpc") || request["jsonrpc"] != "2.0")
    return error_response(id, kInvalidRequest, "\"jsonrpc\": \"2.0\" is missing");
  if (!request.contains("method") || !request["method"].is_string())
    return error_response(id, kInvalidRequest, "\"method\" must be a string");
  std::string name = request["method"].get<std::string>();
  json params = request.contains("params") ? request["params"] : json(nullptr);
  bool notification = !request.contains("id");
  json response;
  try {
    const MethodSpec* spec = find_method(name);
    auto it = handlers_.find(name);
    if (!spec || it == handlers_.end())
      throw RpcError{kMethodNotFound, "unknown method '" + name + "' (rpc_get_methods lists them)"};
    check_params(*spec, params);
    json result = it->second(params.is_null() ? json::object() : params);
    response = {{"jsonrpc", "2.0"}, {"result", result}, {"id", id}};
  } catch (const RpcError& e) {
    response = error_response(id, e.code, e.message);
  } catch (const std::exception& e) {
    response = error_response(id, kInternalError, std::string("internal error: ") + e.what());
  }
  if (response.contains("error")) {
    errors_.fetch_add(1);
    LOG_INFO("rpc %s refused: %s", name.c_str(),
             response["error"]["message"].get<std::string>().c_str());
  }
  return notification ? json() : response;
}

std::string RpcServer::handle(const std::string& text) {
  requests_.fetch_add(1);
  if (nesting_depth(text) > kMaxRequestDepth) {
    errors_.fetch_add(1);
    return answer_text(error_response(
        nullptr, kInvalidRequest,
        "request nested deeper than " + std::to_string(kMaxRequestDepth) + " levels"));
  }
  json request;
  try {
    request = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    errors_.fetch_add(1);
    return answer_text(error_response(nullptr, kParseError, std::string("not JSON: ") + e.what()));
  }
  if (request.is_array()) {  // a batch: the responses in one array (none for notifications)
    if (request.empty())
      return answer_text(error_response(nullptr, kInvalidRequest, "an empty batch"));
    json out = json::array();
    for (auto& r : request)
      if (json one = handle_one(r); !one.is_null()) out.push_back(one);
    return out.empty() ? "" : answer_text(out);
  }
  json one = handle_one(request);
  return one.is_null() ? "" : answer_text(one);
}

std::string RpcServer::start(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path))
    return "RPC socket path '" + path + "' must be 1.." +
           std::to_string(sizeof(addr.sun_path) - 1) + " bytes";
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // A socket file left by a process that died: nobody answers on it, so it may go. One that
  // answers belongs to a running target.
  int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    int err = errno;
    ::close(probe);
    if (live) return "RPC socket " + path + " is in use by another process (a target running?)";
    if (err == ECONNREFUSED) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
    }
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return std::string("socket: ") + std::strerror(errno);
  // 0600 from the start: umask while binding, so no other user can connect in between.
  mode_t old = ::umask(0177);
  int rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  ::umask(old);
  if (rc != 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return "RPC socket " + path + ": " + std::strerror(err);
  }
  if (::listen(listen_fd_, 16) != 0) {
    err = errno;
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(path.c_str());
    return "RPC socket " + path + ": listen: " + std::strerror(err);
  }
  path_ = path;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { run(); });
  return "";
}

void RpcServer::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
  ::unlink(path_.c_str());
}

void RpcServer::run() {
  struct Client {
    int fd;
    std::string in, out;
    bool closing = false;  // sent its last answer (an oversized request): close once out
  };
  std::vector<Client> clients;
  std::chrono::steady_clock::time_point accept_paused_until{};
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_fd_, POLLIN, 0});
    // Out of descriptors, accept() fails while the listener stays readable: it is not polled
    // for 100 ms then, instead of spinning (the clients wait in the backlog meanwhile).
    auto now = std::chrono::steady_clock::now();
    bool accepting = clients.size() < kMaxClients && now >= accept_paused_until;
    fds.push_back({listen_fd_, short(accepting ? POLLIN : 0), 0});
    for (auto& c : clients)
      // A client that sends and does not read its answers is not read from until it does.
      fds.push_back({c.fd,
                     short((c.closing || c.out.size() > kMaxRequestBytes ? 0 : POLLIN) |
                           (c.out.empty() ? 0 : POLLOUT)),
                     0});
    int wait_ms = -1;
    if (now < accept_paused_until)
      wait_ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until - now)
                        .count()) +
                1;
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("rpc: poll: %s", std::strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0)
        clients.push_back({fd, {}, {}});
      else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    // (clients accepted just now have no poll entry yet: they wait for the next round)
    size_t polled = fds.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      Client& c = clients[i];
      short ev = fds[i + 2].revents;
      bool drop = false;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
          c.in.append(buf, size_t(n));
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          // The client went (mid-request, perhaps): what it sent unfinished is dropped.
          drop = true;
        }
        size_t nl;
        while (!drop && !c.closing && (nl = c.in.find('\n')) != std::string::npos) {
          std::string line = c.in.substr(0, nl);
          c.in.erase(0, nl + 1);
          if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
          std::string answer = handle(line);
          if (!answer.empty()) c.out += answer + "\n";
        }
        if (!drop && c.in.size() > kMaxRequestBytes) {
          c.out += error_response(nullptr, kInvalidRequest,
                                  "request longer than " + std::to_string(kMaxRequestBytes) +
                                      " bytes without a newline")
                       .dump() +
                   "\n";
          c.in.clear();
          c.closing = true;
          errors_.fetch_add(1);
        }
      }
      if (!drop && !c.out.empty()) {
        ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0)
          c.out.erase(0, size_t(n));
        else if (n < 0 && errno != EAGAIN && errno != EINTR)
          drop = true;
      }
      if (c.closing && c.out.empty()) drop = true;
      if (drop) {
        ::close(c.fd);
        clients.erase(clients.begin() + long(i));
        fds.erase(fds.begin() + long(i) + 2);
        --i;
        --polled;
      }
    }
  }
  for (auto& c : clients) ::close(c.fd);
}

}  // namespace sens::mgmt
