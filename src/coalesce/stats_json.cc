#include "coalesce/stats_json.h"

#include <nlohmann/json.hpp>

namespace sens::coalesce {

namespace {

// A fixed subset of Histogram::summary, so the schema does not grow with it.
nlohmann::json brief(const Histogram& h, double divisor) {
  const nlohmann::json s = h.summary(divisor);
  nlohmann::json out = nlohmann::json::object();
  for (const char* key : {"count", "mean", "p50", "p99", "max"}) out[key] = s.at(key);
  return out;
}

}  // namespace

nlohmann::json to_json(const Stats& stats) {
  nlohmann::json flushes = nlohmann::json::object();
  // kNone is not a flush: it only shows up if an owner misuses on_flushed, so it is left out.
  for (size_t r = size_t(FlushReason::kImmediate); r < size_t(FlushReason::kCount); ++r) {
    flushes[reason_name(FlushReason(r))] = stats.flushes[r];
  }
  return {{"pdus_sent", stats.pdus_sent},
          {"send_calls", stats.send_calls},
          {"holds", stats.holds},
          {"flushes", std::move(flushes)},
          {"pdus_per_flush", brief(stats.pdus_per_flush, 1.0)},
          {"r2t_delay_us", brief(stats.r2t_delay_ns, double(kMicro))},
          {"timer_flush_late_us", brief(stats.timer_flush_late_ns, double(kMicro))}};
}

}  // namespace sens::coalesce
