#include "common/utc_time.h"

#include <gtest/gtest.h>

namespace txscore {
namespace {

TEST(FormatUtcTime, WritesIso8601WithTheFractionAsked) {
  const int64_t time_us = 1796180000123456;  // 2026-12-02T02:53:20.123456Z
  EXPECT_EQ(FormatUtcTime(time_us), "2026-12-02T02:53:20Z");
  EXPECT_EQ(FormatUtcTime(time_us, 3), "2026-12-02T02:53:20.123Z");
  EXPECT_EQ(FormatUtcTime(time_us, 6), "2026-12-02T02:53:20.123456Z");
  EXPECT_EQ(FormatUtcTime(0, 6), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatUtcTime(-1, 6), "1969-12-31T23:59:59.999999Z");  // floored, not truncated
}

}  // namespace
}  // namespace txscore
