#include "fraud/xgboost_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "fraud/trainer.h"
#include "fraud/ubjson_check.h"
#include "tests/memory_support.h"
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

TEST(XGBoostModel, XGBoostLoadsTheBytesThatWereCheckedNotWhatThePathHoldsLater) {
  testing::TempDir dir;
  std::filesystem::copy_file(SmallModelDir() + "/fraud.ubj", dir.file("fraud.ubj"));
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  XGBoostModelOptions options;
  options.fast_evaluator = false;  // predictions from XGBoost's booster, which is what is loaded
  auto original = XGBoostModel::Load(dir.file("fraud.ubj"), options);
  ASSERT_TRUE(original.ok()) << original.error().ToString();
  // Between the checks and XGBoost's load, the file is replaced by bytes that were never
  // checked (here: not a model at all).
  options.after_check = [&] { testing::WriteFile(dir.file("fraud.ubj"), "{this is not what was checked"); };
  auto model = XGBoostModel::Load(dir.file("fraud.ubj"), options);
  ASSERT_TRUE(model.ok()) << model.error().ToString();
  EXPECT_EQ((*model)->model_version(), (*original)->model_version());
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 7, .cards = 10, .days = 3}));
  ASSERT_TRUE(table.ok());
  auto a = (*original)->Predict(table->values.data(), table->rows());
  auto b = (*model)->Predict(table->values.data(), table->rows());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(XGBoostModel, AModelFileRewrittenWhileItIsReadIsRefused) {
  testing::TempDir dir;
  std::filesystem::copy_file(SmallModelDir() + "/fraud.ubj", dir.file("fraud.ubj"));
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  // An hour old, so that the rewrite below gets another modification time on any clock.
  std::filesystem::last_write_time(dir.file("fraud.ubj"),
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  const std::string bytes = testing::ReadFile(dir.file("fraud.ubj"));
  XGBoostModelOptions options;
  // The same bytes written again in place while the file is read: the size is the same, and
  // the read is refused all the same (what a reader cannot know is which bytes it got).
  options.after_read = [&] { testing::WriteFile(dir.file("fraud.ubj"), bytes); };
  EXPECT_TRUE(testing::IsError(XGBoostModel::Load(dir.file("fraud.ubj"), options), ErrorCode::kUnavailable,
                               "model file " + dir.file("fraud.ubj") +
                                   " changed while it was read (rewritten in place?); nothing read from it is used. "
                                   "Update it by writing a new file and renaming it over this one"));
  // Left alone while it is read, the same file loads.
  options.after_read = [] {};
  EXPECT_TRUE(XGBoostModel::Load(dir.file("fraud.ubj"), options).ok());
}

TEST(XGBoostModel, AModelFileOverTheSizeLimitIsRefusedBeforeItIsRead) {
  testing::TempDir dir;
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  // 1 GiB of nothing (a sparse file: no disk used): read whole, it would cost 1 GiB of memory.
  const std::string path = dir.file("fraud.ubj");
  testing::WriteFile(path, "");
  std::filesystem::resize_file(path, size_t{1} << 30);
  testing::ResetPeakResidentBytes();
  const size_t peak_before = testing::PeakResidentBytes();
  EXPECT_TRUE(testing::IsError(XGBoostModel::Load(path), ErrorCode::kResourceExhausted,
                               "model file " + path + " is 1073741824 bytes; the limit is 536870912"));
  testing::ExpectPeakGrowthBelow(peak_before, 16u << 20);
  // The limit is the caller's: the small model loads under the default and is refused under 1,000 bytes.
  const std::string small = SmallModelDir() + "/fraud.ubj";
  EXPECT_TRUE(XGBoostModel::Load(small).ok());
  XGBoostModelOptions options;
  options.max_file_bytes = 1000;
  auto refused = XGBoostModel::Load(small, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted) << refused.error().ToString();
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
  testing::WriteFile(
      dir.file("fraud.features.json"),
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
  EXPECT_EQ(model.error().message.rfind("model file " + dir.file("fraud.json") + " is not a valid XGBoost model: ", 0),
            0u)
      << model.error().message;
}

// XGBoost itself crashes on many truncated .ubj files; Load must refuse them all with an error.
TEST(XGBoostModel, RefusesTruncatedUbjson) {
  // A fixed 3-tree model (tests/data, made once with `txscore train --cards 50 --days 3
  // --rounds 3 --max-depth 3`), so that what is cut does not change with the trainer or the
  // features: the file is whole UBJSON, and every cut of it is refused at the cut.
  testing::TempDir dir;
  const std::string bytes = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/tests/data/fraud-3-trees.ubj");
  ASSERT_EQ(bytes.size(), 2979u);
  ASSERT_TRUE(CheckUbjsonDocument(bytes).ok());
  std::filesystem::copy_file(SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  for (size_t length = 1; length < bytes.size(); length += 37) {
    testing::WriteFile(dir.file("fraud.ubj"), bytes.substr(0, length));
    auto model = XGBoostModel::Load(dir.file("fraud.ubj"));
    ASSERT_FALSE(model.ok()) << "accepted the first " << length << " bytes of the model";
    EXPECT_EQ(model.error().code, ErrorCode::kDataLoss);
    // Cut short: "the input ends where a value should start at byte N", "... ends inside a
    // length at byte N", "an object is not closed at byte N", and the like.
    const std::string& message = model.error().message;
    EXPECT_EQ(
        message.rfind("model file " + dir.file("fraud.ubj") + " is not a valid XGBoost model: malformed UBJSON: ", 0),
        0u)
        << message;
    EXPECT_TRUE(message.find("the input ends ") != std::string::npos ||
                message.find(" is not closed at byte ") != std::string::npos)
        << length << ": " << message;
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

#include <xgboost/c_api.h>

#include <random>

#include "fraud/features.h"
#include "fraud/synthetic.h"

namespace txscore::fraud {
namespace {

// The small test model saved by XGBoost itself as JSON (the repository keeps only .ubj).
std::string SmallModelAsJson(const testing::TempDir& dir) {
  BoosterHandle booster = nullptr;
  EXPECT_EQ(XGBoosterCreate(nullptr, 0, &booster), 0);
  EXPECT_EQ(XGBoosterLoadModel(booster, (testing::SmallModelDir() + "/fraud.ubj").c_str()), 0);
  const std::string path = dir.file("reference.json");
  EXPECT_EQ(XGBoosterSaveModel(booster, path.c_str()), 0);
  XGBoosterFree(booster);
  return testing::ReadFile(path);
}

// Loads `bytes` as a model of the given extension; a loaded model must predict finite
// probabilities. Returns whether it loaded. A crash fails the whole test binary.
bool LoadsAndPredictsSanely(const testing::TempDir& dir, const std::string& extension, const std::string& bytes,
                            const FeatureTable& table) {
  testing::WriteFile(dir.file("fraud" + extension), bytes);
  auto model = XGBoostModel::Load(dir.file("fraud" + extension));
  if (!model.ok()) {
    EXPECT_EQ(model.error().code, ErrorCode::kDataLoss) << model.error().ToString();
    return false;
  }
  auto predictions = (*model)->Predict(table.values.data(), table.rows());
  if (!predictions.ok()) return true;  // refused at prediction: still no crash
  for (float p : *predictions) EXPECT_TRUE(std::isfinite(p) && p >= 0 && p <= 1) << p;
  return true;
}

TEST(XGBoostModel, CorruptModelsAreRefusedOrLoadWithoutCrashing) {
  // 200 single-bit flips and 50 truncations of each format. Before the tree check, 13 of 200
  // flipped .ubj copies and 1 of 200 .json copies crashed inside libxgboost.
  testing::TempDir dir;
  std::filesystem::copy_file(testing::SmallModelDir() + "/fraud.features.json", dir.file("fraud.features.json"));
  auto table = BuildFeatureTable(GenerateTransactions({.seed = 3, .cards = 20, .days = 2}));
  ASSERT_TRUE(table.ok());
  const std::string ubj = testing::ReadFile(testing::SmallModelDir() + "/fraud.ubj");
  const std::string json = SmallModelAsJson(dir);
  // TXSCORE_FLIP_SEED explores other corruptions (the suite runs with the fixed seed).
  std::mt19937_64 random(getenv("TXSCORE_FLIP_SEED") ? std::stoull(getenv("TXSCORE_FLIP_SEED")) : 20261201);
  for (const auto& [extension, original] :
       {std::pair<std::string, const std::string*>{".ubj", &ubj}, {".json", &json}}) {
    int loaded = 0;
    for (int i = 0; i < 200; ++i) {
      std::string flipped = *original;
      const size_t at = random() % flipped.size();
      flipped[at] = static_cast<char>(flipped[at] ^ (1 << (random() % 8)));
      loaded += LoadsAndPredictsSanely(dir, extension, flipped, *table);
    }
    for (int i = 0; i < 50; ++i) {
      const std::string cut = original->substr(0, 1 + random() % (original->size() - 1));
      EXPECT_FALSE(LoadsAndPredictsSanely(dir, extension, cut, *table)) << extension << " cut at " << cut.size();
    }
    std::cout << extension << ": " << loaded << " of 200 bit-flipped copies loaded (the rest refused)\n";
  }
}

}  // namespace
}  // namespace txscore::fraud
