#include "fraud/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fraud/xgboost_model.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

TEST(RocAuc, PerfectRankingIsOneAndReversedIsZero) {
  EXPECT_DOUBLE_EQ(RocAuc({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(RocAuc({0.9f, 0.8f, 0.2f, 0.1f}, {0, 0, 1, 1}), 0.0);
}

TEST(RocAuc, TiesCountHalf) {
  EXPECT_DOUBLE_EQ(RocAuc({0.5f, 0.5f}, {0, 1}), 0.5);
  // Pairs (neg, pos): (0.1,0.4) win, (0.1,0.35) win, (0.35n,0.4) win, (0.35n,0.35p) tie -> 3.5/4.
  EXPECT_DOUBLE_EQ(RocAuc({0.1f, 0.35f, 0.35f, 0.4f}, {0, 0, 1, 1}), 0.875);
}

TEST(AveragePrecision, MatchesHandComputedValue) {
  // Ranked: 0.9(1) 0.8(0) 0.7(1) 0.1(0): AP = 0.5*1 + 0.5*(2/3).
  EXPECT_DOUBLE_EQ(AveragePrecision({0.9f, 0.8f, 0.7f, 0.1f}, {1, 0, 1, 0}), 0.5 + 1.0 / 3.0);
}

TEST(TrainFraudModel, WritesModelSchemaAndMetricsThatLoad) {
  testing::TempDir dir;
  TrainOptions options;
  options.data.cards = 200;
  options.data.days = 8;
  options.rounds = 20;
  options.nthread = 1;
  options.out_dir = dir.path();
  int last_round = 0;
  auto report = TrainFraudModel(options, [&](int round, int rounds) { last_round = round; });
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_EQ(last_round, 20);
  EXPECT_EQ(report->model_path, dir.file("fraud.ubj"));
  EXPECT_TRUE(std::filesystem::exists(dir.file("fraud.features.json")));
  auto metrics = nlohmann::json::parse(testing::ReadFile(dir.file("fraud.metrics.json")));
  EXPECT_DOUBLE_EQ(metrics["roc_auc"].get<double>(), report->roc_auc);
  EXPECT_EQ(metrics["train_rows"].get<size_t>() + metrics["test_rows"].get<size_t>(),
            report->train_rows + report->test_rows);
  // The generated patterns are learnable: a weak model would be a generator or feature bug.
  EXPECT_GT(report->roc_auc, 0.9);
  EXPECT_TRUE(XGBoostModel::Load(report->model_path).ok());
  // No temporary files are left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 3);
}

TEST(TrainFraudModel, RejectsUnknownFormat) {
  TrainOptions options;
  options.out_dir = "/tmp/unused";
  options.format = "bin";
  auto report = TrainFraudModel(options);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().field, "format");
}

}  // namespace
}  // namespace txscore::fraud
