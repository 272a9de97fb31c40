// `sens rpc`: the client of a running target's management socket (mgmt/rpc_server.h). Each
// method is a subcommand whose options are the method's parameters, built from the same table
// the server checks requests against, so `sens rpc METHOD --help` is always what the target
// takes.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "mgmt/methods.h"
#include "tools/cli.h"
#include "tools/command.h"

namespace sens::tools {
namespace {

using nlohmann::json;

constexpr const char* kDefaultSocket = "/var/tmp/sens.sock";

// Connects to `path`, retrying for up to `wait_s` seconds while nothing listens there yet.
int connect_socket(const std::string& path, double wait_s, std::string* error) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    *error = "socket path too long";
    return -1;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (;;) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("socket: ") + std::strerror(errno);
      return -1;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int err = errno;
    ::close(fd);
    if (std::chrono::steady_clock::now() >= deadline || (err != ENOENT && err != ECONNREFUSED)) {
      *error = "cannot connect to " + path + ": " + std::strerror(err) +
               (err == ENOENT || err == ECONNREFUSED
                    ? " (is `sens target` running, with this --rpc path?)"
                    : "");
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Sends one request line and reads one answer line (up to `timeout_s`).
bool call(int fd, const std::string& line, double timeout_s, std::string* answer,
          std::string* error) {
  std::string out = line + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      *error = std::string("send: ") + std::strerror(errno);
      return false;
    }
    off += size_t(n);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string in;
  for (;;) {
    auto nl = in.find('\n');
    if (nl != std::string::npos) {
      *answer = in.substr(0, nl);
      return true;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, int(left)) == 0) {
      *error = "no answer within " + std::to_string(int(timeout_s)) + " s";
      return false;
    }
    char buf[65536];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      *error = n == 0 ? "the target closed the connection" : std::strerror(errno);
      return false;
    }
    in.append(buf, size_t(n));
  }
}

std::string describe_methods() {
  std::string text = "\nMethods (sens rpc METHOD --help for its parameters):\n";
  for (auto& m : mgmt::method_specs()) text += "  " + m.name + "\n";
  return text;
}

int run_rpc(int argc, char** argv) {
  CLI::App app{
      "Manage a running `sens target` over its JSON-RPC 2.0 socket (--rpc of the target). "
      "Prints the result as JSON; exits 1 when the target refuses (the reason on stderr), 2 on "
      "a bad command line, 3 when the target cannot be reached.",
      "sens rpc"};
  app.footer(describe_methods());
  std::string socket_path = kDefaultSocket, raw;
  double wait_s = 0, timeout_s = 60;
  app.add_option("-s,--socket", socket_path, "the target's RPC socket")
      ->default_str(kDefaultSocket)
      ->envname("SENS_RPC_SOCKET");
  app.add_option("--wait", wait_s,
                 "seconds to wait for the socket to appear (a target that is starting)")
      ->default_str("0");
  app.add_option("--timeout", timeout_s, "seconds to wait for the answer")->default_str("60");
  app.add_option("--raw", raw, "send this JSON-RPC request (or batch) as is, print the answer");
  app.require_subcommand(0, 1);
  app.fallthrough();
  // One subcommand per method; the values land in `params` as the server wants them.
  json params = json::object();
  std::vector<std::unique_ptr<std::string>> scalars;
  std::vector<std::unique_ptr<std::vector<std::string>>> lists;
  struct Bound {
    CLI::App* sub;
    const mgmt::MethodSpec* spec;
    std::vector<std::pair<const mgmt::ParamSpec*, CLI::Option*>> options;
  };
  std::vector<Bound> bound;
  for (auto& m : mgmt::method_specs()) {
    CLI::App* sub = app.add_subcommand(m.name, m.help);
    sub->footer("Example:\n  " + m.example);
    Bound b{sub, &m, {}};
    for (auto& p : m.params) {
      std::string flag = "--" + p.name;
      std::string help = p.help + (p.required ? " (required)" : "");
      CLI::Option* o;
      if (p.type == mgmt::ParamType::kStrings) {
        lists.push_back(std::make_unique<std::vector<std::string>>());
        o = sub->add_option(flag, *lists.back(), help + "; repeatable");
      } else {
        scalars.push_back(std::make_unique<std::string>());
        o = sub->add_option(flag, *scalars.back(), help);
        if (p.type == mgmt::ParamType::kInt)
          o->check(CLI::NonNegativeNumber)->type_name("N");
        else if (p.type == mgmt::ParamType::kBool)
          o->check(CLI::IsMember({"true", "false"}))->type_name("true|false");
        else if (p.type == mgmt::ParamType::kSize)
          o->type_name("SIZE");
      }
      if (p.required) o->required();
      b.options.push_back({&p, o});
    }
    bound.push_back(std::move(b));
  }
  if (auto rc = parse_cli(app, argc, argv)) return *rc;

  std::string request;
  if (!raw.empty()) {
    try {
      request = json::parse(raw).dump();  // one line, whatever its layout
    } catch (const json::parse_error& e) {
      std::fprintf(stderr, "sens rpc: --raw is not JSON: %s\n", e.what());
      return 2;
    }
  } else {
    const Bound* chosen = nullptr;
    for (auto& b : bound)
      if (b.sub->parsed()) chosen = &b;
    if (!chosen) {
      std::fprintf(stderr, "sens rpc: name a method (or --raw JSON)\n%s",
                   describe_methods().c_str());
      return 2;
    }
    for (auto& [p, o] : chosen->options) {
      if (o->count() == 0) continue;
      switch (p->type) {
        case mgmt::ParamType::kStrings:
          params[p->name] = o->as<std::vector<std::string>>();
          break;
        case mgmt::ParamType::kInt:
          params[p->name] = o->as<uint64_t>();
          break;
        case mgmt::ParamType::kBool:
          params[p->name] = o->as<std::string>() == "true";
          break;
        default:
          params[p->name] = o->as<std::string>();
      }
    }
    request =
        json{{"jsonrpc", "2.0"}, {"id", 1}, {"method", chosen->spec->name}, {"params", params}}
            .dump();
  }
  std::string error, answer;
  int fd = connect_socket(socket_path, wait_s, &error);
  if (fd < 0) {
    std::fprintf(stderr, "sens rpc: %s\n", error.c_str());
    return 3;
  }
  bool ok = call(fd, request, timeout_s, &answer, &error);
  ::close(fd);
  if (!ok) {
    std::fprintf(stderr, "sens rpc: %s\n", error.c_str());
    return 3;
  }
  if (!raw.empty()) {
    std::printf("%s\n", answer.c_str());
    return 0;
  }
  json response = json::parse(answer, nullptr, false);
  if (response.is_discarded() || !response.is_object()) {
    std::fprintf(stderr, "sens rpc: the target answered something that is not JSON-RPC: %s\n",
                 answer.c_str());
    return 3;
  }
  if (response.contains("error")) {
    auto& e = response["error"];
    std::fprintf(stderr, "sens rpc: %s (code %d)\n", e.value("message", "?").c_str(),
                 e.value("code", 0));
    return 1;
  }
  std::printf("%s\n", response["result"].dump(2).c_str());
  return 0;
}

RegisterCommand register_rpc("rpc", "manage a running target (JSON-RPC over its Unix socket)",
                             run_rpc);

}  // namespace
}  // namespace sens::tools
