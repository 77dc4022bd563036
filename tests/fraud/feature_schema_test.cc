#include "fraud/feature_schema.h"

#include <gtest/gtest.h>

namespace txscore::fraud {
namespace {

TEST(FeatureSchema, ParsesSubsetInAnyOrderAndSelectsThoseValues) {
  auto schema = FeatureSchema::Parse(
      R"({"format": "txscore.feature_schema/1", "features": [{"name": "hour_of_day", "type": "int"}, {"name": "log_amount"}]})",
      "s.json");
  ASSERT_TRUE(schema.ok()) << schema.error().ToString();
  FeatureVector all{};
  all[static_cast<int>(FeatureId::kLogAmount)] = 1.5f;
  all[static_cast<int>(FeatureId::kHourOfDay)] = 7.0f;
  float out[2];
  schema->Select(all, out);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], 1.5f);
}

TEST(FeatureSchema, RejectsUnknownFeatureNamingIt) {
  auto schema =
      FeatureSchema::Parse(R"({"format": "txscore.feature_schema/1", "features": [{"name": "shoe_size"}]})", "s.json");
  ASSERT_FALSE(schema.ok());
  EXPECT_EQ(schema.error().message, "s.json: features[0]: unknown feature \"shoe_size\"");
}

TEST(FeatureSchema, RejectsDuplicateAndWrongType) {
  EXPECT_EQ(
      FeatureSchema::Parse(
          R"({"format": "txscore.feature_schema/1", "features": [{"name": "channel"}, {"name": "channel"}]})", "s.json")
          .error()
          .message,
      "s.json: features[1]: feature \"channel\" listed twice");
  EXPECT_EQ(
      FeatureSchema::Parse(
          R"({"format": "txscore.feature_schema/1", "features": [{"name": "channel", "type": "float"}]})", "s.json")
          .error()
          .message,
      "s.json: features[0]: feature \"channel\" has type category; write \"type\": \"category\", or leave "
      "\"type\" out");
}

TEST(FeatureSchema, NumericFeaturesMayBeDeclaredFloat) {
  // A data scientist's export that calls every numeric feature a float is taken as it is.
  auto schema = FeatureSchema::Parse(
      R"({"format": "txscore.feature_schema/1", "features": [{"name": "hour_of_day", "type": "float"},
          {"name": "cross_border", "type": "float"}, {"name": "log_amount", "type": "float"}]})",
      "s.json");
  ASSERT_TRUE(schema.ok()) << schema.error().ToString();
  EXPECT_EQ(schema->size(), 3u);
  EXPECT_EQ(
      FeatureSchema::Parse(
          R"({"format": "txscore.feature_schema/1", "features": [{"name": "log_amount", "type": "int"}]})", "s.json")
          .error()
          .message,
      "s.json: features[0]: feature \"log_amount\" has type float; write \"type\": \"float\", or leave \"type\" "
      "out");
}

TEST(FeatureSchema, RejectsMissingFormatAndBadJson) {
  EXPECT_EQ(FeatureSchema::Parse(R"({"features": []})", "s.json").error().message,
            "s.json: expected an object with \"format\": \"txscore.feature_schema/1\"");
  EXPECT_EQ(FeatureSchema::Parse("{nope", "s.json").error().message, "s.json: not valid JSON");
}

TEST(FeatureSchema, AllFeaturesRoundTripsThroughJson) {
  const FeatureSchema all = FeatureSchema::AllFeatures();
  auto parsed = FeatureSchema::Parse(all.ToJson(), "all.json");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->features(), all.features());
}

TEST(SchemaPathForModel, SitsBesideTheModel) {
  EXPECT_EQ(SchemaPathForModel("var/models/fraud.ubj"), "var/models/fraud.features.json");
  EXPECT_EQ(SchemaPathForModel("fraud.json"), "fraud.features.json");
}

}  // namespace
}  // namespace txscore::fraud
