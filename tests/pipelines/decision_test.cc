#include "pipelines/decision.h"

#include <gtest/gtest.h>

#include <cmath>

namespace txscore::pipelines {
namespace {

TEST(Decide, ThresholdsAreInclusive) {
  DecisionStageConfig rules;
  rules.review_threshold = 0.5;
  rules.decline_threshold = 0.9;
  EXPECT_EQ(Decide(0.0, rules), Decision::kApprove);
  EXPECT_EQ(Decide(0.4999, rules), Decision::kApprove);
  EXPECT_EQ(Decide(0.5, rules), Decision::kReview);
  EXPECT_EQ(Decide(0.8999, rules), Decision::kReview);
  EXPECT_EQ(Decide(0.9, rules), Decision::kDecline);
  EXPECT_EQ(Decide(1.0, rules), Decision::kDecline);
}

TEST(Decide, EqualThresholdsSkipReview) {
  DecisionStageConfig rules;
  rules.review_threshold = 0.7;
  rules.decline_threshold = 0.7;
  EXPECT_EQ(Decide(0.69, rules), Decision::kApprove);
  EXPECT_EQ(Decide(0.7, rules), Decision::kDecline);
}

TEST(TopReasons, LargestPositiveContributionsFirst) {
  auto schema = fraud::FeatureSchema::Parse(
      R"({"format": "txscore.feature_schema/1", "features": [{"name": "log_amount"}, {"name": "new_device"},
          {"name": "velocity_count_1m"}, {"name": "distance_km"}]})",
      "s");
  ASSERT_TRUE(schema.ok());
  const std::vector<float> contributions = {0.5f, 2.0f, -1.0f, 0.75f, /*bias*/ -3.0f};
  const float values[] = {3.0f, 1.0f, 0.0f, NAN};
  auto reasons = TopReasons(contributions, values, *schema, 2);
  ASSERT_EQ(reasons.size(), 2u);
  EXPECT_EQ(reasons[0].feature, "new_device");
  EXPECT_EQ(reasons[0].contribution, 2.0);
  EXPECT_EQ(reasons[0].value, 1.0);
  EXPECT_EQ(reasons[1].feature, "distance_km");
  EXPECT_TRUE(std::isnan(reasons[1].value));
}

TEST(TopReasons, NegativeContributionsAreNeverReasons) {
  auto schema = fraud::FeatureSchema::Parse(
      R"({"format": "txscore.feature_schema/1", "features": [{"name": "log_amount"}]})", "s");
  const float values[] = {1.0f};
  EXPECT_TRUE(TopReasons({-0.5f, 0.1f}, values, *schema, 3).empty());
}

TEST(DecisionName, MatchesThriftNames) {
  EXPECT_STREQ(DecisionName(Decision::kApprove), "APPROVE");
  EXPECT_STREQ(DecisionName(Decision::kReview), "REVIEW");
  EXPECT_STREQ(DecisionName(Decision::kDecline), "DECLINE");
}

}  // namespace
}  // namespace txscore::pipelines
