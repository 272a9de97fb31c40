#include "coalesce/stats_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace sens::coalesce {
namespace {

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.insert(it.key());
  return out;
}

TEST(StatsJson, KeysAndValues) {
  ManualClock clock;
  Config c;
  c.policy = Policy::kSemantic;
  Scheduler s(c, clock);
  s.on_enqueue(PduClass::kData, 4096);
  s.on_enqueue(PduClass::kControl, 24);
  clock.advance(10 * kMicro);
  ASSERT_EQ(s.on_timer(), FlushReason::kControlTimer);
  s.on_flushed(FlushReason::kControlTimer);
  s.on_enqueue(PduClass::kUrgent, 128);
  s.on_flushed(FlushReason::kImmediate);
  s.stats().send_calls = 2;

  const nlohmann::json j = to_json(s.stats());
  EXPECT_EQ(keys(j),
            (std::set<std::string>{"pdus_sent", "send_calls", "holds", "flushes", "pdus_per_flush",
                                   "r2t_delay_us", "timer_flush_late_us"}));
  EXPECT_EQ(
      keys(j["flushes"]),
      (std::set<std::string>{"immediate", "capacity", "control_capacity", "timer", "control_timer",
                             "byte_cap", "socket_full", "close", "pass_end", "control_pass_end"}));
  const std::set<std::string> hist_keys{"count", "mean", "p50", "p99", "max"};
  EXPECT_EQ(keys(j["pdus_per_flush"]), hist_keys);
  EXPECT_EQ(keys(j["r2t_delay_us"]), hist_keys);
  EXPECT_EQ(keys(j["timer_flush_late_us"]), hist_keys);
  EXPECT_EQ(j["timer_flush_late_us"]["count"], 1) << "the control-timer flush";

  EXPECT_EQ(j["pdus_sent"], 3);
  EXPECT_EQ(j["send_calls"], 2);
  EXPECT_EQ(j["flushes"]["control_timer"], 1);
  EXPECT_EQ(j["flushes"]["immediate"], 1);
  EXPECT_EQ(j["flushes"]["capacity"], 0);
  EXPECT_EQ(j["pdus_per_flush"]["count"], 2);
  EXPECT_DOUBLE_EQ(j["pdus_per_flush"]["mean"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["pdus_per_flush"]["max"].get<double>(), 2.0);
  EXPECT_EQ(j["r2t_delay_us"]["count"], 1);
  EXPECT_TRUE(j["r2t_delay_us"]["mean"].is_number_float());
  EXPECT_DOUBLE_EQ(j["r2t_delay_us"]["mean"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["r2t_delay_us"]["max"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["r2t_delay_us"]["p50"].get<double>(), 10.0);
}

TEST(StatsJson, EmptyStats) {
  const nlohmann::json j = to_json(Stats{});
  EXPECT_EQ(j["pdus_sent"], 0);
  EXPECT_EQ(j["flushes"].size(), 10u);
  EXPECT_EQ(j["pdus_per_flush"]["count"], 0);
  EXPECT_DOUBLE_EQ(j["r2t_delay_us"]["mean"].get<double>(), 0.0);
}

}  // namespace
}  // namespace sens::coalesce
