#include "fraud/xgboost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "fraud/trainer.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

using testing::SmallModelDir;

TEST(XGBoostModel, LoadsUbjsonAndReportsIdAndVersion) {
  auto model = XGBoostModel::Load(SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(model.ok()) << model.error().ToString();
  EXPECT_EQ((*model)->model_id(), "fraud");
  EXPECT_EQ((*model)->model_version().size(), 12u);
  EXPECT_EQ((*model)->schema().size(), FeatureSchema::TransactionFeatures().size());
}

TEST(XGBoostModel, JsonAndUbjsonCopiesPredictTheSame) {
  auto json_model = XGBoostModel::Load(SmallModelDir() + "/fraud.json");
  auto ubj_model = XGBoostModel::Load(SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(json_model.ok() && ubj_model.ok());
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 5, .cards = 20, .days = 3}));
  ASSERT_TRUE(table.ok());
  auto a = (*json_model)->Predict(table->values.data(), table->rows());
  auto b = (*ubj_model)->Predict(table->values.data(), table->rows());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(XGBoostModel, BatchPredictionEqualsRowByRow) {
  auto model = XGBoostModel::Load(SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(model.ok());
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 6, .cards = 10, .days = 3}));
  ASSERT_TRUE(table.ok());
  auto batch = (*model)->Predict(table->values.data(), table->rows());
  ASSERT_TRUE(batch.ok());
  for (size_t r = 0; r < table->rows(); ++r) {
    auto one = (*model)->Predict(table->values.data() + r * table->schema.size(), 1);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ((*one)[0], (*batch)[r]) << "row " << r;
  }
}

TEST(XGBoostModel, ContributionsSumToTheMargin) {
  auto model = XGBoostModel::Load(SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(model.ok());
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 8, .cards = 5, .days = 3}));
  ASSERT_TRUE(table.ok());
  for (size_t r = 0; r < 20 && r < table->rows(); ++r) {
    const float* row = table->values.data() + r * table->schema.size();
    auto contributions = (*model)->Contributions(row);
    auto p = (*model)->Predict(row, 1);
    ASSERT_TRUE(contributions.ok() && p.ok());
    ASSERT_EQ(contributions->size(), table->schema.size() + 1);  // + bias
    double margin = 0;
    for (float c : *contributions) margin += c;
    EXPECT_NEAR(1.0 / (1.0 + std::exp(-margin)), (*p)[0], 1e-5);
  }
}

TEST(XGBoostModel, RefusesFeatureCountMismatchNamingBothNumbers) {
  testing::TempDir dir;
  std::filesystem::copy_file(SmallModelDir() + "/fraud.json", dir.file("fraud.json"));
  testing::WriteFile(dir.file("fraud.features.json"),
                     R"({"format": "txscore.feature_schema/1", "features": [{"name": "log_amount"}, {"name": "hour_of_day"}]})");
  auto model = XGBoostModel::Load(dir.file("fraud.json"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(model.error().message, "model " + dir.file("fraud.json") + " expects 19 features but its schema " +
                                       dir.file("fraud.features.json") + " lists 2");
}

TEST(XGBoostModel, RefusesCorruptModelFile) {
  testing::TempDir dir;
  testing::WriteFile(dir.file("fraud.json"), "{\"learner\": {\"this is not\": ");
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  auto model = XGBoostModel::Load(dir.file("fraud.json"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(model.error().message.rfind("model file " + dir.file("fraud.json") + " is not a valid XGBoost model: ", 0), 0u)
      << model.error().message;
}

// XGBoost itself crashes on many truncated .ubj files; Load must refuse them all with an error.
TEST(XGBoostModel, RefusesTruncatedUbjson) {
  testing::TempDir dir;
  const std::string bytes = testing::ReadFile(SmallModelDir() + "/fraud.ubj");
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  for (size_t eighth = 1; eighth < 8; ++eighth) {
    testing::WriteFile(dir.file("fraud.ubj"), bytes.substr(0, bytes.size() * eighth / 8));
    auto model = XGBoostModel::Load(dir.file("fraud.ubj"));
    ASSERT_FALSE(model.ok()) << "accepted " << eighth << "/8 of the model";
    EXPECT_EQ(model.error().code, ErrorCode::kDataLoss);
    EXPECT_EQ(model.error().message.rfind("model file " + dir.file("fraud.ubj") +
                                              " is not a valid XGBoost model: malformed UBJSON: the input ends inside ",
                                          0),
              0u)
        << model.error().message;
  }
}

TEST(XGBoostModel, MissingModelIsNotFound) {
  auto model = XGBoostModel::Load("/nonexistent/fraud.ubj");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(model.error().message, "model file /nonexistent/fraud.ubj does not exist or cannot be read");
}

TEST(XGBoostModel, MissingSchemaIsNotFound) {
  testing::TempDir dir;
  std::filesystem::copy_file(SmallModelDir() + "/fraud.ubj", dir.file("fraud.ubj"));
  auto model = XGBoostModel::Load(dir.file("fraud.ubj"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(model.error().message,
            "feature schema " + dir.file("fraud.features.json") + " does not exist or cannot be read");
}

}  // namespace
}  // namespace txscore::fraud
