// sens netblk: serve a namespace over UDP with the NBLK protocol, and the client side of it
// (info, read, write, flush, verify, bench). See docs/netblk.md.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "common/units.h"
#include "netblk/client.h"
#include "netblk/server.h"
#include "netblk/workload.h"
#include "tools/cli.h"
#include "tools/command.h"

namespace {

using namespace sens::netblk;
using sens::format_size;
using sens::Nanos;

constexpr const char* kProg = "sens netblk";
constexpr uint64_t kStreamChunk = 16u << 20;

// ---- shared argument handling ----

struct ClientArgs {
  std::string host;
  std::string port;
  uint32_t window = 16;
  double timeout_s = 0.25;
  double give_up_s = 10;
  uint32_t poll_us = 0;
};

void add_client_args(CLI::App* sub, ClientArgs& args) {
  sub->add_option("host", args.host, "server address or name")->required();
  sub->add_option("port", args.port, "server UDP port")->required();
  sub->add_option("-w,--window", args.window, "requests in flight")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  sub->add_option("--timeout", args.timeout_s,
                  "seconds before a request that heard nothing is "
                  "sent again (busy answers: after 2 ms)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--give-up", args.give_up_s, "seconds of retrying before a request fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--poll-us", args.poll_us,
                  "spin this long for replies before sleeping (lower latency, burns a core)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
}

std::unique_ptr<Client> connect(const ClientArgs& args) {
  ClientOptions options;
  options.window = args.window;
  options.retry_after = Nanos(args.timeout_s * 1e9);
  options.give_up_after = Nanos(args.give_up_s * 1e9);
  options.poll = Nanos(args.poll_us) * sens::kMicro;
  std::string error;
  auto client = Client::connect(args.host, args.port, options, &error);
  if (!client) std::fprintf(stderr, "%s: %s\n", kProg, error.c_str());
  return client;
}

// A size option ("4k", "64M", "1G"), kept as text so the units parse the way storage people
// type them.
bool size_arg(const std::string& text, const char* option, uint64_t* out) {
  if (text.empty()) return true;
  auto value = sens::parse_size(text);
  if (!value) {
    std::fprintf(stderr, "%s: %s '%s' is not a size (e.g. 512, 4k, 64M, 1G)\n", kProg, option,
                 text.c_str());
    return false;
  }
  *out = *value;
  return true;
}

// "1.5 GiB": for counters, which are rarely round.
std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.1f %s" : "%.0f %s", value, units[unit]);
  return text;
}

bool check_extent(const Info& info, uint64_t offset, uint64_t length) {
  if (offset % info.sector_size || length % info.sector_size) {
    std::fprintf(stderr, "%s: offset and length must be whole %u-byte sectors\n", kProg,
                 info.sector_size);
    return false;
  }
  if (offset > info.size || length > info.size - offset) {
    std::fprintf(stderr, "%s: %llu bytes at %llu run past the end of the device (%llu bytes)\n",
                 kProg, (unsigned long long)length, (unsigned long long)offset,
                 (unsigned long long)info.size);
    return false;
  }
  return true;
}

int report_status(const char* what, int status) {
  if (status == kOk) return 0;
  std::fprintf(stderr, "%s: %s: %s\n", kProg, what, status_name(status));
  return 1;
}

// ---- serve ----

std::atomic<Server*> g_server{nullptr};

void on_stop_signal(int) {
  if (Server* server = g_server.load()) server->stop();  // an eventfd write: signal-safe
}

struct ServeArgs {
  ServerOptions options;
  std::string ns;
};

int serve(ServeArgs& args) {
  std::string error;
  auto server = Server::create(args.options, args.ns, &error);
  if (!server) {
    std::fprintf(stderr, "%s serve: %s\n", kProg, error.c_str());
    return 1;
  }
  g_server = server.get();
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::fprintf(stderr, "%s\n", server->describe().c_str());
  std::printf("listening on udp port %u\n", server->port());
  std::fflush(stdout);
  int rc = server->run();
  g_server = nullptr;
  ServerStats s = server->stats();
  std::fprintf(stderr,
               "stopped: %llu requests, %llu replies, %s read, %s written, %llu refused, "
               "%llu busy, %llu I/O errors, %llu dropped, %llu filtered\n",
               (unsigned long long)s.requests, (unsigned long long)s.replies,
               human_bytes(s.bytes_read).c_str(), human_bytes(s.bytes_written).c_str(),
               (unsigned long long)s.refused, (unsigned long long)s.busy,
               (unsigned long long)s.io_errors, (unsigned long long)s.dropped,
               (unsigned long long)s.filtered);
  if (rc != 0) {
    std::fprintf(stderr, "%s serve: syncing the device at exit: %s\n", kProg, std::strerror(-rc));
    return 1;
  }
  return 0;
}

// ---- client commands ----

int info_command(const ClientArgs& args, bool json) {
  auto client = connect(args);
  if (!client) return 1;
  const Info& i = client->info();
  if (json) {
    nlohmann::json j = {
        {"size", i.size},         {"sector_size", i.sector_size}, {"max_io", i.max_io},
        {"max_read", i.max_read}, {"read_only", i.read_only()},   {"slots", i.slots}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("size        %llu (%s)\n", (unsigned long long)i.size, format_size(i.size).c_str());
  std::printf("sector      %u\n", i.sector_size);
  std::printf("max_io      %u\n", i.max_io);
  std::printf("max_read    %u\n", i.max_read);
  std::printf("read_only   %s\n", i.read_only() ? "yes" : "no");
  std::printf("slots       %u\n", i.slots);
  return 0;
}

bool write_all(int fd, const uint8_t* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= size_t(n);
  }
  return true;
}

// Fills up to `len` bytes; fewer only at the end of the input.
ssize_t read_full(int fd, uint8_t* data, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = ::read(fd, data + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += size_t(n);
  }
  return ssize_t(got);
}

int read_command(const ClientArgs& args, const std::string& offset_text,
                 const std::string& length_text, const std::string& out_path) {
  uint64_t offset = 0, length = 0;
  if (!size_arg(offset_text, "--offset", &offset) || !size_arg(length_text, "--length", &length))
    return 2;
  auto client = connect(args);
  if (!client) return 1;
  if (!check_extent(client->info(), offset, length)) return 2;
  int fd = STDOUT_FILENO;
  if (!out_path.empty() && out_path != "-") {
    fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      std::fprintf(stderr, "%s: --out %s: %s\n", kProg, out_path.c_str(), std::strerror(errno));
      return 1;
    }
  }
  std::vector<uint8_t> buf(std::min(length, kStreamChunk));
  int rc = 0;
  for (uint64_t done = 0; done < length && rc == 0; done += buf.size()) {
    size_t len = size_t(std::min<uint64_t>(buf.size(), length - done));
    rc = report_status("read", client->read(offset + done, buf.data(), len));
    if (rc == 0 && !write_all(fd, buf.data(), len)) {
      std::fprintf(stderr, "%s: writing the output: %s\n", kProg, std::strerror(errno));
      rc = 1;
    }
  }
  if (fd != STDOUT_FILENO) ::close(fd);
  return rc;
}

int write_command(const ClientArgs& args, const std::string& offset_text,
                  const std::string& length_text, const std::string& in_path, bool fua) {
  uint64_t offset = 0, length = UINT64_MAX;
  if (!size_arg(offset_text, "--offset", &offset) || !size_arg(length_text, "--length", &length))
    return 2;
  auto client = connect(args);
  if (!client) return 1;
  const Info& info = client->info();
  int fd = STDIN_FILENO;
  if (!in_path.empty() && in_path != "-") {
    fd = ::open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      std::fprintf(stderr, "%s: --in %s: %s\n", kProg, in_path.c_str(), std::strerror(errno));
      return 1;
    }
  }
  std::vector<uint8_t> buf(kStreamChunk);
  uint64_t done = 0;
  int rc = 0;
  while (rc == 0 && done < length) {
    ssize_t got = read_full(fd, buf.data(), size_t(std::min<uint64_t>(buf.size(), length - done)));
    if (got < 0) {
      std::fprintf(stderr, "%s: reading the input: %s\n", kProg, std::strerror(errno));
      rc = 1;
      break;
    }
    if (got == 0) break;
    if (!check_extent(info, offset + done, uint64_t(got))) {
      std::fprintf(stderr, "%s: the input (%llu bytes so far) must be whole sectors\n", kProg,
                   (unsigned long long)(done + uint64_t(got)));
      rc = 2;
      break;
    }
    rc = report_status("write", client->write(offset + done, buf.data(), uint64_t(got), fua));
    done += uint64_t(got);
  }
  if (rc == 0 && length != UINT64_MAX && done < length) {
    std::fprintf(stderr, "%s: the input ended after %llu of --length %llu bytes\n", kProg,
                 (unsigned long long)done, (unsigned long long)length);
    rc = 1;
  }
  if (fd != STDIN_FILENO) ::close(fd);
  if (rc == 0)
    std::fprintf(stderr, "wrote %llu bytes at offset %llu%s\n", (unsigned long long)done,
                 (unsigned long long)offset, fua ? " (FUA)" : "");
  return rc;
}

int flush_command(const ClientArgs& args) {
  auto client = connect(args);
  if (!client) return 1;
  return report_status("flush", client->flush());
}

double mib_per_s(uint64_t bytes, Nanos ns) {
  return ns ? double(bytes) / (1 << 20) * 1e9 / double(ns) : 0;
}

int verify_command(const ClientArgs& args, const std::string& offset_text,
                   const std::string& size_text, uint64_t seed) {
  uint64_t offset = 0, size = 64u << 20;
  if (!size_arg(offset_text, "--offset", &offset) || !size_arg(size_text, "--size", &size))
    return 2;
  auto client = connect(args);
  if (!client) return 1;
  const Info& info = client->info();
  if (info.read_only()) {
    std::fprintf(stderr, "%s: verify writes, and the server is read-only\n", kProg);
    return 1;
  }
  if (offset < info.size && size > info.size - offset) {
    size = (info.size - offset) / info.sector_size * info.sector_size;
    std::fprintf(stderr, "verify: --size clipped to the %s left on the device\n",
                 format_size(size).c_str());
  }
  if (size == 0 || !check_extent(info, offset, size)) return 2;
  if (seed == 0) seed = std::random_device{}() | 1;
  VerifyResult r = verify(*client, offset, size, seed);
  if (r.status != kOk) return report_status("verify", r.status);
  std::printf("verify: wrote %s at %s (%.1f MiB/s), flushed (%.2f ms), read back (%.1f MiB/s)\n",
              format_size(size).c_str(), std::to_string(offset).c_str(),
              mib_per_s(size, r.write_ns), double(r.flush_ns) / 1e6, mib_per_s(size, r.read_ns));
  if (r.mismatched_bytes) {
    std::printf("verify FAILED: %llu bytes differ, the first at offset %llu (seed %llu)\n",
                (unsigned long long)r.mismatched_bytes, (unsigned long long)r.first_mismatch,
                (unsigned long long)seed);
    return 1;
  }
  std::printf("verify OK: all %llu bytes match (seed %llu, window %u)\n",
              (unsigned long long)r.bytes, (unsigned long long)seed, args.window);
  return 0;
}

int bench_command(const ClientArgs& args, const std::string& mode_text, double secs,
                  const std::string& bs_text, const std::string& offset_text,
                  const std::string& size_text, bool json) {
  BenchOptions options;
  uint64_t bs = 1024;
  if (!parse_bench_mode(mode_text, &options.mode)) {
    std::fprintf(stderr, "%s: --mode %s: expected randread, randwrite, read or write\n", kProg,
                 mode_text.c_str());
    return 2;
  }
  if (!size_arg(bs_text, "--bs", &bs) || !size_arg(offset_text, "--offset", &options.offset) ||
      !size_arg(size_text, "--size", &options.span))
    return 2;
  if (bs > UINT32_MAX) bs = 0;  // refused below with the limits
  options.block_size = uint32_t(bs);
  options.duration = Nanos(secs * 1e9);
  auto client = connect(args);
  if (!client) return 1;
  BenchResult r;
  std::string error;
  if (!bench(*client, options, &r, &error)) {
    std::fprintf(stderr, "%s bench: %s\n", kProg, error.c_str());
    return 2;
  }
  const auto& lat = r.latency_ns;
  if (json) {
    nlohmann::json j = {{"mode", bench_mode_name(options.mode)},
                        {"bs", options.block_size},
                        {"window", args.window},
                        {"secs", double(r.elapsed) / 1e9},
                        {"ios", r.ios},
                        {"errors", r.errors},
                        {"iops", r.iops()},
                        {"mib_per_s", r.mib_per_s(options.block_size)},
                        {"latency_us", lat.summary(1000.0)},
                        {"retries", r.client.timeouts},
                        {"busy", r.client.busy}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s bs=%s window=%u %.2f s: %.0f IOPS, %.1f MiB/s\n", bench_mode_name(options.mode),
                format_size(options.block_size).c_str(), args.window, double(r.elapsed) / 1e9,
                r.iops(), r.mib_per_s(options.block_size));
    std::printf("latency us: avg %.1f  p50 %.1f  p99 %.1f  max %.1f\n", lat.mean() / 1000,
                double(lat.percentile(50)) / 1000, double(lat.percentile(99)) / 1000,
                double(lat.max()) / 1000);
    std::printf("ios %llu, errors %llu, retries %llu, busy %llu\n", (unsigned long long)r.ios,
                (unsigned long long)r.errors, (unsigned long long)r.client.timeouts,
                (unsigned long long)r.client.busy);
  }
  return r.errors ? 1 : 0;
}

int netblk_main(int argc, char** argv) {
  CLI::App app{
      "Serves a namespace over UDP with the NBLK protocol (netblk's), and talks to such a "
      "server.\nNo authentication: see docs/netblk.md before serving on an untrusted network."};
  app.name(argv[0]);
  app.require_subcommand(1);

  ServeArgs serve_args;
  ServerOptions& so = serve_args.options;
  auto* serve_cmd = app.add_subcommand(
      "serve", "serve a namespace until SIGINT/SIGTERM (then flushes it and exits)");
  serve_cmd->add_option("--ns", serve_args.ns, "ram:SIZE, null:SIZE or file:PATH")->required();
  serve_cmd->add_option("-p,--port", so.port, "UDP port (0: any free one, printed)")->required();
  serve_cmd->add_option("--listen", so.listen, "address to bind (:: for IPv6 and IPv4)")
      ->capture_default_str();
  serve_cmd->add_flag("--ro", so.read_only, "refuse writes (status read-only)");
  serve_cmd
      ->add_option("--mtu", so.mtu,
                   "link MTU: max_io is the whole sectors that fit one datagram behind "
                   "the IP (20), UDP (8) and NBLK (30) headers")
      ->check(CLI::Range(59, 65535))
      ->capture_default_str();
  serve_cmd
      ->add_option("--slots", so.slots,
                   "requests held at once (fixed buffers, allocated at start); more are "
                   "answered busy")
      ->check(CLI::Range(1, 16384))
      ->capture_default_str();
  serve_cmd
      ->add_option("--poll-us", so.poll_us,
                   "while device completions are owed, poll this long before blocking")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  serve_cmd->add_option("--allow", so.allow,
                        "answer only these sources, ADDR/PREFIX (repeatable); others are "
                        "dropped");

  ClientArgs info_args, read_args, write_args, flush_args, verify_args, bench_args;
  bool info_json = false, bench_json = false, fua = false;
  std::string read_offset, read_length, out_path, write_offset, write_length, in_path;
  std::string verify_offset, verify_size = "64M";
  uint64_t seed = 0;
  std::string mode = "randread", bs = "1K", bench_offset, bench_size;
  double secs = 5;

  auto* info_cmd = app.add_subcommand("info", "print what the server's INFO says");
  add_client_args(info_cmd, info_args);
  info_cmd->add_flag("--json", info_json, "as JSON");

  auto* read_cmd = app.add_subcommand("read", "read a range to stdout or --out FILE");
  add_client_args(read_cmd, read_args);
  read_cmd->add_option("--offset", read_offset, "byte offset, whole sectors (e.g. 1M)");
  read_cmd->add_option("--length", read_length, "bytes to read, whole sectors (e.g. 64k)")
      ->required();
  read_cmd->add_option("-o,--out", out_path, "output file (default: stdout)");

  auto* write_cmd = app.add_subcommand("write", "write stdin or --in FILE at --offset");
  add_client_args(write_cmd, write_args);
  write_cmd->add_option("--offset", write_offset, "byte offset, whole sectors");
  write_cmd->add_option("--length", write_length, "write exactly this much of the input");
  write_cmd->add_option("-i,--in", in_path, "input file (default: stdin); whole sectors");
  write_cmd->add_flag("--fua", fua, "write through the device cache (FUA)");

  auto* flush_cmd = app.add_subcommand("flush", "flush the server's device cache");
  add_client_args(flush_cmd, flush_args);

  auto* verify_cmd = app.add_subcommand(
      "verify", "write a random pattern, flush, read it back and compare (overwrites data!)");
  add_client_args(verify_cmd, verify_args);
  verify_cmd->add_option("--offset", verify_offset, "where to start");
  verify_cmd->add_option("--size", verify_size, "how much")->capture_default_str();
  verify_cmd->add_option("--seed", seed, "pattern seed (default: random, printed)");

  auto* bench_cmd = app.add_subcommand(
      "bench", "measure IOPS, MiB/s and latency (avg, p50, p99, max) for --secs");
  add_client_args(bench_cmd, bench_args);
  bench_cmd->add_option("--mode", mode, "randread, randwrite, read or write (writes overwrite!)")
      ->check(CLI::IsMember({"randread", "randwrite", "read", "write"}))
      ->capture_default_str();
  bench_cmd->add_option("--secs", secs, "duration, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_cmd
      ->add_option("--bs", bs,
                   "I/O size: whole sectors, at most max_io for writes and "
                   "max_read for reads")
      ->capture_default_str();
  bench_cmd->add_option("--offset", bench_offset, "start of the region exercised");
  bench_cmd->add_option("--size", bench_size, "size of the region (default: to the end)");
  bench_cmd->add_flag("--json", bench_json, "as JSON");

  if (auto rc = sens::tools::parse_cli(app, argc, argv)) return *rc;
  if (serve_cmd->parsed()) return serve(serve_args);
  if (info_cmd->parsed()) return info_command(info_args, info_json);
  if (read_cmd->parsed()) return read_command(read_args, read_offset, read_length, out_path);
  if (write_cmd->parsed())
    return write_command(write_args, write_offset, write_length, in_path, fua);
  if (flush_cmd->parsed()) return flush_command(flush_args);
  if (verify_cmd->parsed()) return verify_command(verify_args, verify_offset, verify_size, seed);
  if (bench_cmd->parsed())
    return bench_command(bench_args, mode, secs, bs, bench_offset, bench_size, bench_json);
  return 2;
}

sens::tools::RegisterCommand register_netblk("netblk",
                                             "serve / use a block device over UDP (NBLK protocol)",
                                             netblk_main);

}  // namespace
