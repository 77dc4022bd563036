#include "fraud/pan_scan.h"

#include <gtest/gtest.h>

namespace txscore::fraud {
namespace {

TEST(PanScan, FindsPansWrittenTheWaysPeopleWriteThem) {
  EXPECT_TRUE(ContainsPan("4000001234567899"));
  EXPECT_TRUE(ContainsPan("card 4000 0012 3456 7899 was used"));
  EXPECT_TRUE(ContainsPan("4000-0012-3456-7899"));
  EXPECT_TRUE(ContainsPan("4000.0012.3456.7899"));
  EXPECT_TRUE(ContainsPan("ref:x4000001234567899y"));
  EXPECT_TRUE(ContainsPan("378282246310005"));      // 15-digit Amex test number
  EXPECT_TRUE(ContainsPan("12 4000001234567899"));  // inside a longer run: every window is checked
}

TEST(PanScan, LeavesOtherNumbersAlone) {
  EXPECT_FALSE(ContainsPan("4000001234567898"));  // Luhn fails
  EXPECT_FALSE(ContainsPan("40000012345"));       // 11 digits
  EXPECT_FALSE(ContainsPan("claim on 2024-05-06, policy POL-88123, 3 prior claims, 1200.50 EUR"));
  EXPECT_FALSE(
      ContainsPan("4000  0012 3456 7899"));  // two separators in a row end the run: 4 + 12 digits, 12 fail Luhn
  EXPECT_FALSE(ContainsPan(""));
}

TEST(PanScan, RedactsEachRunWithItsSeparators) {
  int count = -1;
  EXPECT_EQ(RedactPans("paid with 4000 0012 3456 7899, then 378282246310005.", &count),
            "paid with [card number redacted], then [card number redacted].");
  EXPECT_EQ(count, 2);
  EXPECT_EQ(RedactPans("no card here 1234", &count), "no card here 1234");
  EXPECT_EQ(count, 0);
  EXPECT_EQ(RedactPans("x4000001234567899y"), "x[card number redacted]y");
}

}  // namespace
}  // namespace txscore::fraud
