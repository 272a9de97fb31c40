#pragma once
// The Prometheus text exposition format (version 0.0.4): a writer that groups each metric
// family's samples under its HELP and TYPE lines and escapes what needs it, and the rendering
// of a target's metrics (docs/metrics.md lists them).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "target/metrics_source.h"

namespace sens::mgmt {

inline constexpr const char* kExpositionContentType = "text/plain; version=0.0.4";

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);
// HELP text: backslash and newline escaped (quotes stay).
std::string escape_help(std::string_view v);
// A sample value: integers exactly, "+Inf", "-Inf", "NaN", other numbers as %.17g does.
std::string format_value(double v);

using Labels = std::vector<std::pair<std::string, std::string>>;

class Exposition {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  void family(const std::string& name, const char* type, std::string_view help);
  // One sample line: name{label="value",...} value. `name` is the family's name or, for a
  // histogram, the family's name with _bucket, _sum or _count.
  void sample(const std::string& name, const Labels& labels, double value);
  void sample(const std::string& name, const Labels& labels, uint64_t value);
  const std::string& text() const { return text_; }

 private:
  void labels(const Labels& l);
  std::string text_;
};

// The target's metrics as the exposition format.
std::string render(const target::MetricsSnapshot& m);

}  // namespace sens::mgmt
