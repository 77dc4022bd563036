#include "service/thrift_handler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "pipelines/config.h"
#include "storage/database.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

TEST(TakeFromThrift, ConvertsThenWipesTheCardFieldsOfTheWireStruct) {
  rpc::Transaction wire;
  wire.request_id = "r1";
  wire.__set_card_number("4000001234567899");
  wire.__set_card_verification_code("737");
  // The buffers the wire struct holds: wiped means their bytes are zero, not only emptied.
  const char* card_buffer = wire.card_number.data();
  const char* code_buffer = wire.card_verification_code.data();
  const fraud::RawTransaction raw = TakeFromThrift(wire);
  EXPECT_EQ(raw.card_number.value_or(""), "4000001234567899");
  EXPECT_EQ(raw.card_verification_code.value_or(""), "737");
  EXPECT_EQ(raw.request_id, "r1");
  EXPECT_EQ(wire.card_number, "");
  EXPECT_EQ(wire.card_verification_code, "");
  ASSERT_EQ(wire.card_number.data(), card_buffer);
  ASSERT_EQ(wire.card_verification_code.data(), code_buffer);
  EXPECT_EQ(std::string(card_buffer, 16), std::string(16, '\0'));
  EXPECT_EQ(std::string(code_buffer, 3), std::string(3, '\0'));
  EXPECT_EQ(wire.request_id, "r1");  // only the card fields are touched
}

// A pipeline whose optional shadow stage (and the blend after it) always misses its 1 ms
// budget: the clock steps 1 ms per reading.
class ScoringMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string stages =
        "  - {name: features, kind: features}\n"
        "  - {name: fraud, kind: xgboost, after: features, model: " +
        testing::SmallModelDir() +
        "/fraud.ubj}\n"
        "  - {name: shadow, kind: xgboost, after: features, budget_ms: 1, model: " +
        testing::ChallengerModelDir() +
        "/fraud.ubj}\n"
        "  - {name: shadow_blend, kind: blend, after: [fraud, shadow]}\n"
        "  - {name: decision, kind: decision, after: fraud}\n";
    auto config = pipelines::LoadPipelineConfig(testing::WriteTestPipelineWithStages(dir_, stages));
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    db_ = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal}).value();
    pipelines::PipelineRuntime runtime;
    auto now = std::make_shared<std::chrono::steady_clock::time_point>();
    runtime.clock = [now] { return *now += std::chrono::milliseconds(1); };
    auto pipeline = pipelines::ScoringPipeline::Create(*config, db_.get(), testing::TestCardKeyPath(dir_), runtime);
    ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
    pipeline_ = std::move(pipeline).value();
  }

  static bool Has(const std::string& metrics, const std::string& line) {
    return metrics.find(line + "\n") != std::string::npos;
  }

  testing::TempDir dir_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<pipelines::ScoringPipeline> pipeline_;
};

TEST_F(ScoringMetricsTest, EachSeriesCountsItsOwnStageDecisionAndRequest) {
  MetricsRegistry registry;
  ScoringMetrics metrics(&registry, *pipeline_);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-metrics"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  metrics.RecordOutcome(*outcome);
  metrics.RecordRequest(ScoringMetrics::Method::kScoreBatch, ScoringMetrics::RequestOutcome::kInvalid, 0.001);
  const std::string text = registry.RenderPrometheus();
  for (const char* ran : {"validate", "state", "features", "fraud", "decision", "persist"}) {
    EXPECT_TRUE(Has(text, "txscore_stage_duration_seconds_count{stage=\"" + std::string(ran) + "\"} 1")) << ran;
  }
  for (const char* skipped : {"shadow", "shadow_blend"}) {
    EXPECT_TRUE(Has(text, "txscore_stage_duration_seconds_count{stage=\"" + std::string(skipped) + "\"} 0"));
    EXPECT_TRUE(Has(text, "txscore_stage_incomplete_total{stage=\"" + std::string(skipped) + "\",how=\"skipped\"} 1"))
        << text;
    EXPECT_TRUE(Has(text, "txscore_stage_incomplete_total{stage=\"" + std::string(skipped) + "\",how=\"degraded\"} 0"));
  }
  const std::string decided = pipelines::DecisionName(outcome->decision);
  for (const char* decision : {"APPROVE", "REVIEW", "DECLINE"}) {
    EXPECT_TRUE(Has(text, "txscore_decisions_total{decision=\"" + std::string(decision) + "\"} " +
                              (decided == decision ? "1" : "0")))
        << decision;
  }
  EXPECT_TRUE(Has(text, "txscore_requests_total{method=\"scoreBatch\",outcome=\"invalid\"} 1"));
  EXPECT_TRUE(Has(text, "txscore_requests_total{method=\"scoreBatch\",outcome=\"ok\"} 0"));
  EXPECT_TRUE(Has(text, "txscore_requests_total{method=\"score\",outcome=\"invalid\"} 0"));
  EXPECT_TRUE(Has(text, "txscore_request_duration_seconds_count{method=\"scoreBatch\"} 1"));
  EXPECT_TRUE(Has(text, "txscore_request_duration_seconds_count{method=\"score\"} 0"));
  // Required stages never go without, so they have no incomplete series.
  EXPECT_EQ(text.find("txscore_stage_incomplete_total{stage=\"fraud\""), std::string::npos);
}

}  // namespace
}  // namespace txscore::service
