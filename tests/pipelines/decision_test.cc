#include "pipelines/decision.h"

#include <gtest/gtest.h>

#include <cmath>

namespace txscore::pipelines {
namespace {

TEST(Decide, ThresholdsAreInclusive) {
  DecisionThresholds rules;
  rules.review = 0.5;
  rules.decline = 0.9;
  EXPECT_EQ(Decide(0.0, rules), Decision::kApprove);
  EXPECT_EQ(Decide(0.4999, rules), Decision::kApprove);
  EXPECT_EQ(Decide(0.5, rules), Decision::kReview);
  EXPECT_EQ(Decide(0.8999, rules), Decision::kReview);
  EXPECT_EQ(Decide(0.9, rules), Decision::kDecline);
  EXPECT_EQ(Decide(1.0, rules), Decision::kDecline);
}

TEST(Decide, EqualThresholdsSkipReview) {
  DecisionThresholds rules;
  rules.review = 0.7;
  rules.decline = 0.7;
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
  auto reasons = TopReasons(NamedContributions(contributions, values, *schema), 2);
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
  EXPECT_TRUE(TopReasons(NamedContributions({-0.5f, 0.1f}, values, *schema), 3).empty());
}

TEST(NamedContributions, NamesEveryFeatureInSchemaOrderAndDropsTheBias) {
  auto schema = fraud::FeatureSchema::Parse(
      R"({"format": "txscore.feature_schema/1", "features": [{"name": "log_amount"}, {"name": "new_device"}]})", "s");
  ASSERT_TRUE(schema.ok());
  const float values[] = {3.0f, 1.0f};
  auto named = NamedContributions({-0.5f, 0.25f, /*bias*/ 9.0f}, values, *schema);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].feature, "log_amount");
  EXPECT_EQ(named[0].contribution, -0.5);
  EXPECT_EQ(named[1].feature, "new_device");
  EXPECT_EQ(named[1].value, 1.0);
  EXPECT_EQ(named[0].id, fraud::FeatureId::kLogAmount);
  EXPECT_EQ(named[1].id, fraud::FeatureId::kNewDevice);
}

TEST(Blend, WeightsScoresAndMatchesContributionsByFeature) {
  RequestValues values(3);
  values[0].score = 0.8;
  using fraud::FeatureId;
  values[0].contributions = {{"log_amount", 1.0, 3.0, FeatureId::kLogAmount},
                             {"new_device", -0.5, 1.0, FeatureId::kNewDevice}};
  values[2].score = 0.4;
  values[2].contributions = {{"new_device", 2.0, 1.0, FeatureId::kNewDevice},
                             {"distance_km", 4.0, 12.0, FeatureId::kDistanceKm}};
  StageOutputs out;
  Blend(values, {0, 2}, {3, 1}, &out);
  EXPECT_DOUBLE_EQ(out.score, 0.75 * 0.8 + 0.25 * 0.4);
  ASSERT_EQ(out.contributions.size(), 3u);
  EXPECT_EQ(out.contributions[0].feature, "log_amount");
  EXPECT_DOUBLE_EQ(out.contributions[0].contribution, 0.75);          // absent from the second model
  EXPECT_DOUBLE_EQ(out.contributions[1].contribution, -0.375 + 0.5);  // in both
  EXPECT_EQ(out.contributions[2].feature, "distance_km");
  EXPECT_DOUBLE_EQ(out.contributions[2].contribution, 1.0);
  EXPECT_EQ(out.contributions[2].value, 12.0);
}

TEST(Blend, AContributionWithoutAFeatureIdIsKeptUnmerged) {
  RequestValues values(2);
  values[0].score = values[1].score = 0.5;
  values[0].contributions = {{"custom", 1.0, 3.0}};  // no FeatureId: a kind of its own made it
  values[1].contributions = {{"custom", 2.0, 3.0}};
  StageOutputs out;
  Blend(values, {0, 1}, {1, 1}, &out);
  ASSERT_EQ(out.contributions.size(), 2u);
  EXPECT_DOUBLE_EQ(out.contributions[0].contribution, 0.5);
  EXPECT_DOUBLE_EQ(out.contributions[1].contribution, 1.0);
}

TEST(DecisionName, MatchesThriftNames) {
  EXPECT_STREQ(DecisionName(Decision::kApprove), "APPROVE");
  EXPECT_STREQ(DecisionName(Decision::kReview), "REVIEW");
  EXPECT_STREQ(DecisionName(Decision::kDecline), "DECLINE");
}

}  // namespace
}  // namespace txscore::pipelines
