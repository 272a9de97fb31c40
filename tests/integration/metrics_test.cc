// `sens target --metrics 127.0.0.1:0`: the Prometheus endpoint scraped over a real TCP socket
// with a plain HTTP/1.1 request written here. The counters move by exactly the I/O a raw host
// did, every line is exposition format, counters end in _total, other paths get 404 and other
// methods 405; a bad --metrics value is refused with a precise message.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <signal.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "child_process.h"
#include "raw_client.h"

namespace sens::testing {
namespace {

constexpr const char* kNqn = "nqn.2026-11.io.sens-target:ram0";

struct MetricsTarget {
  TempDir dir;
  Child child;
  uint16_t port = 0, metrics_port = 0;

  std::string start(const std::vector<std::string>& extra = {}) {
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      std::vector<std::string> argv = {
          SENS_BINARY,        "target",     "--listen", "127.0.0.1:" + std::to_string(port),
          "--discovery-port", "0",          "--ns",     "ram:64M",
          "--metrics",        "127.0.0.1:0"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (!child.start(argv, dir.file("out"), dir.file("err"))) return "fork failed";
      if (child.wait_for_text(dir.file("out"), "/metrics\n", 5000)) {
        std::smatch m;
        std::string out = read_file(dir.file("out"));
        if (!std::regex_search(out, m,
                               std::regex("metrics on http://127\\.0\\.0\\.1:(\\d+)/metrics")))
          return "no metrics address in: " + out;
        metrics_port = uint16_t(std::stoul(m[1]));
        return "";
      }
      child.kill_now();
      why = read_file(dir.file("err"));
      if (why.find("cannot listen") == std::string::npos) return "target did not start: " + why;
    }
    return "no free port: " + why;
  }
};

struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// A TCP connection to 127.0.0.1:`port` whose reads give up after `receive_timeout_s`: the
// socket, or -1.
int connect_loopback(uint16_t port, int receive_timeout_s) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{receive_timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One HTTP/1.1 request on a fresh connection (Connection: close), read to EOF.
HttpAnswer http(uint16_t port, const std::string& method, const std::string& path) {
  HttpAnswer a;
  const int fd = connect_loopback(port, 10);
  if (fd < 0) return a;
  std::string req = method + " " + path +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: sens-test\r\nAccept: */*\r\n"
                    "Connection: close\r\n" +
                    (method == "POST" ? "Content-Length: 0\r\n" : "") + "\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[65536];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.rfind("HTTP/1.1 ", 0) != 0) return a;
  a.status = std::stoi(raw.substr(9, 3));
  size_t pos = raw.find("\r\n") + 2;
  while (pos < end) {
    size_t eol = raw.find("\r\n", pos);
    std::string line = raw.substr(pos, eol - pos);
    auto colon = line.find(':');
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value[0] == ' ') value.erase(0, 1);
    a.headers[name] = value;
    pos = eol + 2;
  }
  a.body = raw.substr(end + 4);
  return a;
}

// Sample lines by their full series text (name{labels}) -> value; checks each line's syntax.
struct Scrape {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram
  std::vector<std::string> errors;

  double value(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? -1 : it->second;
  }
};

Scrape parse(const std::string& body) {
  Scrape s;
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")"
      R"((?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? )"
      R"((-?[0-9][0-9.e+-]*|\+Inf|-Inf|NaN))");
  std::set<std::string> helped;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t eol = body.find('\n', pos);
    if (eol == std::string::npos) {
      s.errors.push_back("no newline after the last line");
      break;
    }
    std::string line = body.substr(pos, eol - pos);
    pos = eol + 1;
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      helped.insert(m[1]);
    } else if (std::regex_match(line, m, type)) {
      if (!helped.count(m[1])) s.errors.push_back("TYPE before HELP: " + line);
      if (s.types.count(m[1])) s.errors.push_back("family twice: " + line);
      s.types[m[1]] = m[2];
    } else if (std::regex_match(line, m, sample)) {
      std::string name = m[1];
      std::string family = name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        std::string sfx = suffix;
        if (!s.types.count(family) && name.size() > sfx.size() &&
            name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0 &&
            s.types.count(name.substr(0, name.size() - sfx.size())))
          family = name.substr(0, name.size() - sfx.size());
      }
      if (!s.types.count(family)) s.errors.push_back("sample without TYPE: " + line);
      std::string v = m[3];
      s.samples[name + std::string(m[2])] = v == "+Inf"   ? INFINITY
                                            : v == "-Inf" ? -INFINITY
                                            : v == "NaN"  ? NAN
                                                          : std::stod(v);
    } else {
      s.errors.push_back("not exposition format: '" + line + "'");
    }
  }
  for (auto& [family, t] : s.types) {
    bool total = family.size() > 6 && family.compare(family.size() - 6, 6, "_total") == 0;
    if (t == "counter" && !total) s.errors.push_back("counter not named _total: " + family);
    if (t != "counter" && total) s.errors.push_back("a " + t + " named _total: " + family);
    if (family.rfind("sens_", 0) != 0) s.errors.push_back("no sens_ prefix: " + family);
  }
  return s;
}

std::string ns1(const std::string& rest = "") {
  return "{subsystem=\"" + std::string(kNqn) + "\",nsid=\"1\"" + rest + "}";
}

Scrape scrape_ok(uint16_t port) {
  HttpAnswer a = http(port, "GET", "/metrics");
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u)
      << a.headers["content-type"];
  Scrape s = parse(a.body);
  for (auto& e : s.errors) ADD_FAILURE() << e;
  return s;
}

TEST(Metrics, CountersMoveWithIo) {
  MetricsTarget t;
  ASSERT_EQ(t.start(), "");
  Scrape before = scrape_ok(t.metrics_port);
  EXPECT_EQ(before.types["sens_io_commands_total"], "counter");
  EXPECT_EQ(before.types["sens_io_latency_seconds"], "histogram");
  EXPECT_EQ(before.value("sens_io_commands_total" + ns1(",opcode=\"read\"")), 0);
  EXPECT_EQ(before.value("sens_connections{subsystem=\"" + std::string(kNqn) + "\"}"), 0);

  // Exact counts from a raw host: 8 writes and 8 reads of 16 KiB (write_read checks the data),
  // one read of a namespace that does not exist.
  constexpr int kPairs = 8;
  constexpr uint32_t kLen = 16384;
  {
    Session s;
    ASSERT_EQ(s.open(t.port, kNqn), "");
    for (int i = 0; i < kPairs; ++i)
      ASSERT_EQ(write_read(s.io, uint64_t(i) * (kLen / 512), kLen, uint32_t(i + 1), false), "");
    Result bad =
        s.io.exec(nvme::make_io(nvme::io_op::kRead, 99, 0, 8, nvme::Xfer::kTransport, 4096),
                  nullptr, 0, nullptr, 0);
    EXPECT_EQ(bad.status(), nvme::status::kInvalidNamespace) << bad.describe();
    Scrape during = scrape_ok(t.metrics_port);
    EXPECT_EQ(during.value("sens_connections{subsystem=\"" + std::string(kNqn) + "\"}"), 2);
    EXPECT_EQ(during.value("sens_controllers{subsystem=\"" + std::string(kNqn) + "\"}"), 1);
    EXPECT_EQ(during.value("sens_io_inflight_commands" + ns1()), 0);
  }
  Scrape after = scrape_ok(t.metrics_port);
  auto delta = [&](const std::string& series) {
    return after.value(series) - before.value(series);
  };
  EXPECT_EQ(delta("sens_io_commands_total" + ns1(",opcode=\"write\"")), kPairs);
  EXPECT_EQ(delta("sens_io_commands_total" + ns1(",opcode=\"read\"")), kPairs);
  EXPECT_EQ(delta("sens_io_bytes_total" + ns1(",opcode=\"write\"")), kPairs * kLen);
  EXPECT_EQ(delta("sens_io_bytes_total" + ns1(",opcode=\"read\"")), kPairs * kLen);
  EXPECT_EQ(delta("sens_io_latency_seconds_count" + ns1(",opcode=\"read\"")), kPairs);
  EXPECT_EQ(after.value("sens_io_latency_seconds_bucket" + ns1(",opcode=\"read\",le=\"+Inf\"")),
            after.value("sens_io_latency_seconds_count" + ns1(",opcode=\"read\"")));
  EXPECT_GT(delta("sens_io_latency_seconds_sum" + ns1(",opcode=\"write\"")), 0);
  std::string none = "{subsystem=\"" + std::string(kNqn) + "\",nsid=\"0\"";
  EXPECT_EQ(after.value("sens_io_errors_total" + none + ",status=\"0x00b\"}"), 1);
  EXPECT_EQ(after.value("sens_io_commands_total" + none + ",opcode=\"read\"}"), 1);
  EXPECT_EQ(after.value("sens_io_errors_total" + ns1(",status=\"0x00b\"")), -1);  // none there
  EXPECT_GT(delta("sens_coalesce_pdus_sent_total{reactor=\"0\"}"), 2 * kPairs);
  EXPECT_GT(delta("sens_buffer_pool_gets_total{reactor=\"0\",pool=\"general\"}"), 0);
  EXPECT_GT(after.value("sens_buffer_pool_capacity_bytes{reactor=\"0\",pool=\"general\"}"), 0);
  EXPECT_GT(delta("sens_reactor_polls_total{reactor=\"0\"}"), 0);
  EXPECT_EQ(after.value("sens_dhchap_authentications_total{result=\"failure\"}"), 0);
  EXPECT_EQ(after.value("sens_tls_handshake_failures_total"), 0);

  // Verified I/O from sens perf: every command moved its 4 KiB, none failed.
  auto run = run_command(
      {SENS_BINARY,
       "perf",
       "-r",
       "trtype:tcp traddr:127.0.0.1 trsvcid:" + std::to_string(t.port) + " subnqn:" + kNqn,
       "--rw",
       "randrw",
       "--bs",
       "4k",
       "--qd",
       "8",
       "--time",
       "1",
       "--warmup",
       "0",
       "--size",
       "16M",
       "--verify",
       "-q",
       "--json",
       "-"},
      30000);
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  Scrape last = scrape_ok(t.metrics_port);
  double reads = last.value("sens_io_commands_total" + ns1(",opcode=\"read\"")) -
                 after.value("sens_io_commands_total" + ns1(",opcode=\"read\"")),
         writes = last.value("sens_io_commands_total" + ns1(",opcode=\"write\"")) -
                  after.value("sens_io_commands_total" + ns1(",opcode=\"write\""));
  EXPECT_GT(reads, 100);
  EXPECT_GT(writes, 100);
  EXPECT_EQ(last.value("sens_io_bytes_total" + ns1(",opcode=\"read\"")) -
                after.value("sens_io_bytes_total" + ns1(",opcode=\"read\"")),
            reads * 4096);
  EXPECT_EQ(last.value("sens_io_bytes_total" + ns1(",opcode=\"write\"")) -
                after.value("sens_io_bytes_total" + ns1(",opcode=\"write\"")),
            writes * 4096);
  // What perf counted (its measured I/O), the target counted too.
  std::smatch ios;
  ASSERT_TRUE(std::regex_search(run.out, ios, std::regex(R"("total_ios":\s*(\d+))"))) << run.out;
  EXPECT_GE(reads + writes, std::stod(ios[1]));
  EXPECT_EQ(last.value("sens_io_errors_total" + ns1(",status=\"0x00b\"")), -1);
  EXPECT_EQ(last.value("sens_io_inflight_commands" + ns1()), 0);

  t.child.signal(SIGTERM);
  EXPECT_EQ(t.child.wait(10000), 0);
}

TEST(Metrics, NotFoundAndMethodNotAllowed) {
  MetricsTarget t;
  ASSERT_EQ(t.start(), "");
  HttpAnswer a = http(t.metrics_port, "GET", "/");
  EXPECT_EQ(a.status, 404);
  a = http(t.metrics_port, "GET", "/metrics/x");
  EXPECT_EQ(a.status, 404);
  a = http(t.metrics_port, "POST", "/metrics");
  EXPECT_EQ(a.status, 405);
  EXPECT_EQ(a.headers["allow"], "GET, HEAD");
  a = http(t.metrics_port, "DELETE", "/metrics");
  EXPECT_EQ(a.status, 405);
  a = http(t.metrics_port, "HEAD", "/metrics");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "");
  a = http(t.metrics_port, "GET", "/metrics?x=1");  // a query string is still /metrics
  EXPECT_EQ(a.status, 200);
  t.child.signal(SIGTERM);
  EXPECT_EQ(t.child.wait(10000), 0);
}

// Bytes as they come, on a fresh connection: the status of the answer (0: none) once the
// server closes, or -1 if it neither answered nor closed within 15 s.
int raw_http(uint16_t port, const std::string& bytes) {
  const int fd = connect_loopback(port, 15);
  if (fd < 0) return -2;
  send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, size_t(n));
  const bool timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  ::close(fd);
  if (timed_out) return -1;
  return raw.rfind("HTTP/1.1 ", 0) == 0 && raw.size() >= 12 ? std::stoi(raw.substr(9, 3)) : 0;
}

// Malformed and oversized requests are refused (4xx) or dropped, never hang the endpoint, and
// scrapes go on. A client that stalls mid-request holds the single worker until its read
// timeout (2 s, twice), so a scrape behind it waits that long, not more.
TEST(Metrics, BadRequestsAreRefusedAndScrapesGoOn) {
  MetricsTarget t;
  ASSERT_EQ(t.start(), "");
  const std::string end = "\r\nHost: x\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"garbage", "\x16\x03\x01\x02\x00garbage\r\n\r\n"},
      {"no version", "GET /metrics\r\n\r\n"},
      {"an unknown version", "GET /metrics HTTP/9.9" + end},
      {"a 100 KB path", "GET /" + std::string(100000, 'a') + " HTTP/1.1" + end},
      {"a 100 KB header", "GET /metrics HTTP/1.1\r\nX: " + std::string(100000, 'b') + end},
      {"10,000 headers", "GET /metrics HTTP/1.1\r\n" +
                             [] {
                               std::string h;
                               for (int i = 0; i < 10000; ++i)
                                 h += "X-" + std::to_string(i) + ": 1\r\n";
                               return h;
                             }() +
                             "\r\n"},
      {"a 100 MB body announced", "POST /metrics HTTP/1.1\r\nContent-Length: 100000000" + end},
      {"a bad chunk size",
       "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked" + end + "zzzz\r\nabc\r\n0\r\n\r\n"},
      {"half a request line", "GET /metr"},
      {"nothing", ""},
  };
  for (auto& [what, bytes] : bad) {
    int status = raw_http(t.metrics_port, bytes);
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500)) << what << ": " << status;
    EXPECT_EQ(http(t.metrics_port, "GET", "/metrics").status, 200) << "after " << what;
  }
  // A client that connects, sends half a request and waits.
  const int stalled = connect_loopback(t.metrics_port, 15);  // (it never reads)
  ASSERT_GE(stalled, 0);
  const std::string half = "GET /metrics HTTP/1.1\r\nHost:";
  send(stalled, half.data(), half.size(), MSG_NOSIGNAL);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(http(t.metrics_port, "GET", "/metrics").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(7));
  ::close(stalled);
  t.child.signal(SIGTERM);
  EXPECT_EQ(t.child.wait(10000), 0);
}

TEST(Metrics, BadAddressIsRefused) {
  struct Case {
    std::string value, message;
  };
  for (const Case& c : std::vector<Case>{
           {"9100", "metrics address '9100': expected ADDR:PORT (e.g. 127.0.0.1:9100)"},
           {"127.0.0.1:http", "metrics address '127.0.0.1:http': the port must be a number"},
           {"127.0.0.1:70000", "the port must be a number 0..65535"},
           {":9100", "metrics address ':9100': no address before the port"},
           {"::1:9100", "an IPv6 address goes in brackets ([::1]:9100)"},
           {"no-such-host.invalid:9100", "cannot resolve 'no-such-host.invalid'"},
       }) {
    auto r = run_command({SENS_BINARY, "target", "--metrics", c.value});
    EXPECT_EQ(r.code, 2) << c.value << ": " << r.err;
    EXPECT_NE(r.err.find("sens target: --metrics: " + std::string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.value << ": " << r.err;
  }
  // A port already taken: the target stops and says so (exit 1).
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  uint16_t taken = ntohs(sa.sin_port);
  uint16_t port = free_port();
  auto r = run_command(
      {SENS_BINARY, "target", "--listen", "127.0.0.1:" + std::to_string(port), "--discovery-port",
       "0", "--ns", "ram:16M", "--metrics", "127.0.0.1:" + std::to_string(taken)},
      10000);
  ::close(fd);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("metrics: cannot listen on 127.0.0.1:" + std::to_string(taken) +
                       ": Address already in use"),
            std::string::npos)
      << r.err;
}

TEST(Metrics, ConfigKey) {
  TempDir dir;
  write_file(dir.file("t.json"), R"({"metrics": "127.0.0.1:9100"})");
  auto r = run_command({SENS_BINARY, "target", "--config", dir.file("t.json"), "--dump-config"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"metrics\": \"127.0.0.1:9100\""), std::string::npos) << r.out;
  write_file(dir.file("bad.json"), R"({"metrics": 9100})");
  r = run_command({SENS_BINARY, "target", "--config", dir.file("bad.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("config key 'metrics': expected ADDR:PORT"), std::string::npos) << r.err;
  write_file(dir.file("bad2.json"), R"({"metrics": "localhost"})");
  r = run_command({SENS_BINARY, "target", "--config", dir.file("bad2.json")});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("metrics address 'localhost': expected ADDR:PORT"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace sens::testing
