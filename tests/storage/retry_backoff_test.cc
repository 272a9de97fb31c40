// The backoff of device operations the backend refused for now (storage/retry_backoff.h).
#include <gtest/gtest.h>

#include "storage/retry_backoff.h"

namespace sens::storage {
namespace {

TEST(RetryBackoff, DoublesFrom100UsTo10Ms) {
  EXPECT_EQ(RetryBackoff::delay(0), 100 * kMicro);
  EXPECT_EQ(RetryBackoff::delay(1), 200 * kMicro);
  EXPECT_EQ(RetryBackoff::delay(6), 6400 * kMicro);
  EXPECT_EQ(RetryBackoff::delay(7), 10 * kMilli);
  EXPECT_EQ(RetryBackoff::delay(1000), 10 * kMilli);
}

TEST(RetryBackoff, GivesUpOnceTheWaitsAddUpToASecond) {
  RetryBackoff b;
  Nanos total = 0, wait = 0;
  int tries = 0;
  while (b.next(&wait)) {
    EXPECT_EQ(wait, RetryBackoff::delay(uint32_t(tries)));
    total += wait;
    ++tries;
    ASSERT_LT(tries, 1000);
  }
  // 100 us .. 6.4 ms (12.7 ms in all), then 10 ms a try until the second is reached.
  EXPECT_GE(total, RetryBackoff::kGiveUpAfter);
  EXPECT_LT(total, RetryBackoff::kGiveUpAfter + RetryBackoff::kMaxDelay);
  EXPECT_EQ(tries, 7 + 99);
  EXPECT_FALSE(b.next(&wait));  // stays given up
  b.reset();
  EXPECT_TRUE(b.next(&wait));
  EXPECT_EQ(wait, 100 * kMicro);
}

}  // namespace
}  // namespace sens::storage
