#include "fraud/synthetic.h"

#include <gtest/gtest.h>

#include <map>

#include "fraud/card_token.h"

namespace txscore::fraud {
namespace {

TEST(GenerateTransactions, SameSeedSameTransactions) {
  const auto a = GenerateTransactions({.seed = 11, .cards = 50, .days = 5});
  const auto b = GenerateTransactions({.seed = 11, .cards = 50, .days = 5});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tx.request_id, b[i].tx.request_id);
    EXPECT_EQ(a[i].tx.timestamp_ms, b[i].tx.timestamp_ms);
    EXPECT_EQ(a[i].tx.amount_minor, b[i].tx.amount_minor);
    EXPECT_EQ(a[i].tx.merchant_id, b[i].tx.merchant_id);
    EXPECT_EQ(a[i].is_fraud, b[i].is_fraud);
  }
}

TEST(GenerateTransactions, DifferentSeedDifferentTransactions) {
  const auto a = GenerateTransactions({.seed = 11, .cards = 50, .days = 5});
  const auto b = GenerateTransactions({.seed = 12, .cards = 50, .days = 5});
  std::vector<int64_t> amounts_a, amounts_b;
  for (const auto& t : a) amounts_a.push_back(t.tx.amount_minor);
  for (const auto& t : b) amounts_b.push_back(t.tx.amount_minor);
  EXPECT_NE(amounts_a, amounts_b);
}

TEST(GenerateTransactions, FraudRateBetweenHalfAndTwoPercentWithEveryPattern) {
  const auto all = GenerateTransactions({});  // the defaults the demo model trains on
  std::map<FraudPattern, int> by_pattern;
  size_t fraud = 0;
  for (const auto& t : all) {
    if (t.is_fraud) {
      ++fraud;
      by_pattern[t.pattern]++;
    }
  }
  const double rate = static_cast<double>(fraud) / static_cast<double>(all.size());
  EXPECT_GE(rate, 0.005);
  EXPECT_LE(rate, 0.02);
  EXPECT_GT(by_pattern[FraudPattern::kCardTesting], 0);
  EXPECT_GT(by_pattern[FraudPattern::kAccountTakeover], 0);
  EXPECT_GT(by_pattern[FraudPattern::kImpossibleTravel], 0);
  EXPECT_GT(by_pattern[FraudPattern::kHighRiskNight], 0);
}

TEST(GenerateTransactions, OrderedByTimeWithValidPans) {
  const auto all = GenerateTransactions({.seed = 3, .cards = 30, .days = 4});
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].tx.timestamp_ms, all[i].tx.timestamp_ms);
  for (const auto& t : all) {
    ASSERT_TRUE(t.tx.card_number.has_value());
    EXPECT_TRUE(ValidatePan(*t.tx.card_number).ok());
  }
}

TEST(GenerateTransactions, CardTestingIsABurstOfSmallOnlinePayments) {
  const auto all = GenerateTransactions({.seed = 42, .cards = 400, .days = 10});
  int small = 0, total = 0;
  for (const auto& t : all) {
    if (t.pattern != FraudPattern::kCardTesting || t.tx.mcc == "5732") continue;  // 5732: the cash-out purchase
    ++total;
    small += t.tx.amount_minor <= 300 || (t.tx.currency == "JPY" && t.tx.amount_minor <= 300);
    EXPECT_EQ(t.tx.channel, static_cast<int>(Channel::kEcommerce));
  }
  ASSERT_GT(total, 0);
  EXPECT_EQ(small, total);
}

}  // namespace
}  // namespace txscore::fraud
