#include "fraud/tree_ensemble.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "fraud/trainer.h"
#include "fraud/xgboost_model.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

// One tree: feature 0 < 0.5 -> leaf +1.0 (cover 4), else leaf -1.0 (cover 6); missing goes
// left. base_score 0.5, so the base margin is 0.
std::string OneTreeModel(const std::string& objective = "binary:logistic", const std::string& num_class = "0",
                         const std::string& split_type = "[0, 0, 0]", const std::string& left = "[1, -1, -1]") {
  return R"({"learner": {
      "objective": {"name": ")" +
         objective + R"("},
      "learner_model_param": {"base_score": "5E-1", "num_class": ")" +
         num_class + R"(", "num_feature": "2"},
      "gradient_booster": {"name": "gbtree", "model": {"trees": [{
        "left_children": )" +
         left + R"(, "right_children": [2, -1, -1],
        "split_indices": [0, 0, 0], "split_conditions": [0.5, 1.0, -1.0],
        "default_left": [1, 0, 0], "sum_hessian": [10.0, 4.0, 6.0], "split_type": )" +
         split_type + R"(}]}}}})";
}

TEST(TreeEnsemble, WalksSplitsAndMissingValuesLikeXGBoost) {
  auto ensemble = TreeEnsemble::FromXGBoostJson(OneTreeModel());
  ASSERT_TRUE(ensemble.ok()) << ensemble.error().ToString();
  const float left_row[] = {0.2f, 0.0f}, right_row[] = {0.5f, 0.0f}, missing_row[] = {NAN, 0.0f};
  EXPECT_EQ(ensemble->Margin(left_row), 1.0f);
  EXPECT_EQ(ensemble->Margin(right_row), -1.0f);   // 0.5 is not < 0.5
  EXPECT_EQ(ensemble->Margin(missing_row), 1.0f);  // default_left
  EXPECT_FLOAT_EQ(ensemble->Probability(left_row), 1.0f / (1.0f + std::exp(-1.0f)));
}

TEST(TreeEnsemble, ContributionsFollowThePathFromTheCoverWeightedMean) {
  auto ensemble = TreeEnsemble::FromXGBoostJson(OneTreeModel());
  ASSERT_TRUE(ensemble.ok());
  const float row[] = {0.9f, 0.0f};
  float out[3];
  ensemble->Contributions(row, out);
  // Root mean: (1.0 * 4 + -1.0 * 6) / 10 = -0.2; going right adds -1.0 - (-0.2) to feature 0.
  EXPECT_FLOAT_EQ(out[0], -0.8f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_FLOAT_EQ(out[2], -0.2f);  // bias: base margin 0 + root mean
  EXPECT_FLOAT_EQ(out[0] + out[1] + out[2], ensemble->Margin(row));
}

TEST(TreeEnsemble, RefusesWhatItDoesNotImplement) {
  EXPECT_EQ(TreeEnsemble::FromXGBoostJson(OneTreeModel("reg:squarederror")).error().code,
            ErrorCode::kFailedPrecondition);
  EXPECT_EQ(TreeEnsemble::FromXGBoostJson(OneTreeModel("binary:logistic", "3")).error().message,
            "multi-class models are not supported by the fast evaluator");
  EXPECT_EQ(TreeEnsemble::FromXGBoostJson(OneTreeModel("binary:logistic", "0", "[1, 0, 0]")).error().message,
            "categorical splits are not supported by the fast evaluator");
}

TEST(TreeEnsemble, RejectsChildrenOutsideTheTree) {
  auto ensemble = TreeEnsemble::FromXGBoostJson(OneTreeModel("binary:logistic", "0", "[0, 0, 0]", "[7, -1, -1]"));
  ASSERT_FALSE(ensemble.ok());
  EXPECT_EQ(ensemble.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(ensemble.error().message, "XGBoost tree node 0 points outside its tree or feature range");
}

// The fast evaluator against XGBoost's C API on a trained model and generated rows, many of
// them with missing values (new cards, no device, no coordinates).
TEST(TreeEnsemble, AgreesWithXGBoostOnATrainedModel) {
  auto model = XGBoostModel::Load(testing::SmallModelDir() + "/fraud.ubj");
  ASSERT_TRUE(model.ok()) << model.error().ToString();
  ASSERT_STREQ((*model)->evaluator(), "tree_ensemble");
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 21, .cards = 100, .days = 5}));
  ASSERT_TRUE(table.ok());
  const size_t cols = table->schema.size();
  auto fast = (*model)->Predict(table->values.data(), table->rows());
  auto reference = (*model)->PredictWithXGBoost(table->values.data(), table->rows());
  ASSERT_TRUE(fast.ok() && reference.ok());
  double worst_probability = 0, worst_contribution = 0;
  for (size_t r = 0; r < table->rows(); ++r) {
    worst_probability = std::max(worst_probability, static_cast<double>(std::fabs((*fast)[r] - (*reference)[r])));
    auto c_fast = (*model)->Contributions(table->values.data() + r * cols);
    auto c_reference = (*model)->ContributionsWithXGBoost(table->values.data() + r * cols);
    ASSERT_TRUE(c_fast.ok() && c_reference.ok());
    for (size_t i = 0; i <= cols; ++i) {
      worst_contribution =
          std::max(worst_contribution, static_cast<double>(std::fabs((*c_fast)[i] - (*c_reference)[i])));
    }
  }
  std::cout << "largest differences over " << table->rows() << " rows: probability " << worst_probability
            << ", contribution " << worst_contribution << "\n";
  EXPECT_GT(table->rows(), 500u);
  EXPECT_EQ(worst_probability, 0.0);      // bit-identical, as README says
  EXPECT_LE(worst_contribution, 2.5e-7);  // float rounding of sums in another order (measured 2.4e-7)
}

TEST(XGBoostModel, FallsBackToTheCApiWhenAsked) {
  XGBoostModelOptions options;
  options.fast_evaluator = false;
  auto model = XGBoostModel::Load(testing::SmallModelDir() + "/fraud.ubj", options);
  ASSERT_TRUE(model.ok());
  EXPECT_STREQ((*model)->evaluator(), "xgboost");
}

}  // namespace
}  // namespace txscore::fraud
