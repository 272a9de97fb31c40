// The Prometheus text rendering: escaping, number formatting, histogram buckets, and a target
// snapshot rendered with every family once, counters named _total.
#include "mgmt/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>

namespace sens::mgmt {
namespace {

TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_label_value("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(escape_label_value("two\nlines"), "two\\nlines");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(escape_label_value("nqn.2014-08.org.nvmexpress:uuid:1234"),
            "nqn.2014-08.org.nvmexpress:uuid:1234");
}

TEST(MetricsText, EscapesHelp) {
  EXPECT_EQ(escape_help("a \"quoted\" word"), "a \"quoted\" word");  // quotes stay in HELP
  EXPECT_EQ(escape_help("back\\slash\nnewline"), "back\\\\slash\\nnewline");
}

TEST(MetricsText, FormatsValues) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(42), "42");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(5e-06), "5e-06");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(format_value(1.0 / 3)), 1.0 / 3);  // round-trips
}

TEST(MetricsText, WritesFamiliesAndSamples) {
  Exposition e;
  e.family("sens_x_total", "counter", "What x\ncounts");
  e.sample("sens_x_total", {{"subsystem", "a\"b\\c\nd"}, {"nsid", "1"}}, uint64_t(7));
  e.sample("sens_x_total", {}, 2.5);
  EXPECT_EQ(e.text(),
            "# HELP sens_x_total What x\\ncounts\n"
            "# TYPE sens_x_total counter\n"
            "sens_x_total{subsystem=\"a\\\"b\\\\c\\nd\",nsid=\"1\"} 7\n"
            "sens_x_total 2.5\n");
}

TEST(MetricsText, RendersATargetSnapshot) {
  target::MetricsSnapshot m;
  m.subsystems = {"nqn.test:\"odd\"\\name"};
  m.namespaces = {{m.subsystems[0], 1}};
  m.controllers[m.subsystems[0]] = 1;
  m.coalesce_policy = "adaptive";
  target::ReactorSnapshot r;
  target::NsIoMetrics ns;
  ns.nqn = m.subsystems[0];
  ns.nsid = 1;
  auto& rd = ns.ops[size_t(target::IoKind::kRead)];
  rd.commands = 3;
  rd.bytes = 3 * 4096;
  rd.latency.record(3 * kMicro);   // <= 5 us
  rd.latency.record(40 * kMicro);  // <= 50 us
  rd.latency.record(2 * kSecond);  // +Inf
  ns.count_error(0x00B);
  ns.count_error(0x00B);
  r.namespaces.push_back(ns);
  r.connections[m.subsystems[0]] = 2;
  r.coalesce.pdus_per_flush.record(1);
  r.coalesce.pdus_per_flush.record(16);
  r.coalesce.r2t_delay_ns.record(1500);
  m.reactors.push_back(r);
  r.index = 1;
  m.reactors.push_back(r);  // a second reactor: the I/O counters sum
  std::string text = render(m);

  const std::string l = "{subsystem=\"nqn.test:\\\"odd\\\"\\\\name\",nsid=\"1\"";
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find("\n" + line + "\n"), std::string::npos) << line << "\n" << text;
  };
  has("sens_io_commands_total" + l + ",opcode=\"read\"} 6");
  has("sens_io_commands_total" + l + ",opcode=\"write\"} 0");
  has("sens_io_bytes_total" + l + ",opcode=\"read\"} 24576");
  has("sens_io_errors_total" + l + ",status=\"0x00b\"} 4");
  has("sens_io_latency_seconds_bucket" + l + ",opcode=\"read\",le=\"5e-06\"} 2");
  has("sens_io_latency_seconds_bucket" + l + ",opcode=\"read\",le=\"1e-05\"} 2");
  has("sens_io_latency_seconds_bucket" + l + ",opcode=\"read\",le=\"5e-05\"} 4");
  has("sens_io_latency_seconds_bucket" + l + ",opcode=\"read\",le=\"1\"} 4");
  has("sens_io_latency_seconds_bucket" + l + ",opcode=\"read\",le=\"+Inf\"} 6");
  has("sens_io_latency_seconds_count" + l + ",opcode=\"read\"} 6");
  has("sens_io_latency_seconds_sum" + l + ",opcode=\"read\"} 4.000086");
  has("sens_connections{subsystem=\"nqn.test:\\\"odd\\\"\\\\name\"} 4");
  has("sens_coalesce_pdus_per_flush_bucket{reactor=\"1\",le=\"1\"} 1");
  has("sens_coalesce_pdus_per_flush_bucket{reactor=\"1\",le=\"8\"} 1");
  has("sens_coalesce_pdus_per_flush_bucket{reactor=\"1\",le=\"16\"} 2");
  has("sens_coalesce_pdus_per_flush_count{reactor=\"1\"} 2");
  has("sens_coalesce_r2t_delay_seconds_bucket{reactor=\"0\",le=\"1e-06\"} 0");
  has("sens_coalesce_r2t_delay_seconds_bucket{reactor=\"0\",le=\"2e-06\"} 1");

  // Each family once, HELP then TYPE; counters and only counters end in _total.
  std::istringstream in(text);
  std::string line, last_help;
  std::map<std::string, int> types;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      last_help = line.substr(7, line.find(' ', 7) - 7);
    } else if (line.rfind("# TYPE ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      std::string type = line.substr(line.rfind(' ') + 1);
      EXPECT_EQ(name, last_help);
      EXPECT_EQ(++types[name], 1) << name;
      bool total = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
      EXPECT_EQ(type == "counter", total) << line;
    }
  }
  EXPECT_GE(types.size(), 30u);
}

TEST(MetricsText, ResetZeroesCountersButKeepsEntries) {
  target::IoMetrics m;
  auto* e = m.entry("nqn.a", 1);
  e->ops[0].commands = 5;
  e->count_error(2);
  m.tls_handshake_failures = 3;
  m.tls_sessions[0] = 4;
  m.reset();
  EXPECT_EQ(m.entry("nqn.a", 1), e);  // queues keep pointing at it
  EXPECT_EQ(e->ops[0].commands, 0u);
  EXPECT_TRUE(e->errors.empty());
  EXPECT_EQ(m.tls_handshake_failures, 0u);
  EXPECT_EQ(m.tls_sessions[0], 0u);
}

}  // namespace
}  // namespace sens::mgmt
