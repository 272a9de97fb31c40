#pragma once
// The scheduler's counters as JSON, the shape `sens perf --json` and the benches consume.
#include <nlohmann/json_fwd.hpp>

#include "coalesce/scheduler.h"

namespace sens::coalesce {

// {"pdus_sent", "send_calls",
//  "flushes": {"immediate", "capacity", "control_capacity", "timer", "control_timer",
//              "byte_cap", "socket_full", "close"} (every reason, 0 included),
//  "pdus_per_flush": {"count", "mean", "p50", "p99", "max"},
//  "r2t_delay_us", "timer_flush_late_us": {"count", "mean", "p50", "p99", "max"}
//  (microseconds, doubles)}
nlohmann::json to_json(const Stats& stats);

}  // namespace sens::coalesce
