// LogThrottle: the first line passes, then one per gap, each telling how many were held back.
#include <gtest/gtest.h>

#include "common/log.h"

namespace sens {
namespace {

TEST(LogThrottle, OneLinePerGapWithTheCountHeldBack) {
  LogThrottle t(kSecond);
  uint64_t held = 99;
  ASSERT_TRUE(t.allow(5 * kSecond, &held));
  EXPECT_EQ(held, 0u);
  for (int i = 1; i <= 1000; ++i) EXPECT_FALSE(t.allow(5 * kSecond + i * kMilli / 2, &held));
  EXPECT_FALSE(t.allow(6 * kSecond - 1, &held));
  ASSERT_TRUE(t.allow(6 * kSecond, &held));
  EXPECT_EQ(held, 1001u);
  ASSERT_TRUE(t.allow(60 * kSecond, &held));  // a quiet spell: the next line passes at once
  EXPECT_EQ(held, 0u);
}

TEST(LogThrottle, FirstLinePassesAtTimeZero) {
  LogThrottle t(kSecond);
  uint64_t held = 7;
  EXPECT_TRUE(t.allow(0, &held));
  EXPECT_EQ(held, 0u);
  EXPECT_FALSE(t.allow(1, &held));
}

}  // namespace
}  // namespace sens
