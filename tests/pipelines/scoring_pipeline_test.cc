#include "pipelines/scoring_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/logging.h"
#include "fraud/card_token.h"
#include "fraud/entity_state.h"
#include "pipelines/decision.h"
#include "tests/pipelines/exploding_kind.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

using storage::ColumnFamily;

class ScoringPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto config = LoadPipelineConfig(testing::WriteTestPipeline(dir_));
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    config_ = *config;
    auto db = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    db_ = std::move(db).value();
    auto pipeline = ScoringPipeline::Create(config_, db_.get(), testing::TestCardKeyPath(dir_));
    ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
    pipeline_ = std::move(pipeline).value();
  }

  std::string ExpectedToken() const {
    return fraud::CardTokenizer::FromKey(testing::TestCardKey())->Tokenize(testing::kTestPan);
  }

  testing::TempDir dir_;
  PipelineConfig config_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<ScoringPipeline> pipeline_;
};

TEST_F(ScoringPipelineTest, ScoreWritesAuditRecordAndCardState) {
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->request_id, "req-1");
  EXPECT_EQ(outcome->card_token, ExpectedToken());
  EXPECT_GE(outcome->score, 0.0);
  EXPECT_LE(outcome->score, 1.0);
  EXPECT_EQ(outcome->decision, Decide(outcome->score, DecisionThresholds{}));
  EXPECT_EQ(outcome->model_id, "fraud");
  EXPECT_EQ(outcome->pipeline_version, "t1");
  std::vector<std::string> stages;
  for (const auto& t : outcome->timings) stages.push_back(t.stage);
  EXPECT_EQ(stages, (std::vector<std::string>{"validate", "state", "features", "fraud", "decision", "persist"}));

  auto audit = pipeline_->audit_log().ReadLast(10);
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].request_id, "req-1");
  EXPECT_EQ((*audit)[0].card_token, ExpectedToken());
  EXPECT_EQ((*audit)[0].score, outcome->score);
  EXPECT_EQ((*audit)[0].decision, DecisionName(outcome->decision));
  EXPECT_EQ((*audit)[0].placement, "fraud@cpu");

  auto state_bytes = db_->Get(ColumnFamily::kEntityState, ExpectedToken());
  ASSERT_TRUE(state_bytes.ok() && state_bytes->has_value());
  EXPECT_EQ(fraud::DecodeCardState(**state_bytes).value().transaction_count, 1u);
}

TEST_F(ScoringPipelineTest, LaterTransactionSeesEarlierOneInItsFeatures) {
  ASSERT_TRUE(pipeline_->Score(testing::ValidTransaction("a")).ok());
  fraud::RawTransaction second = testing::ValidTransaction("b");
  second.timestamp_ms += 20 * 1000;
  ASSERT_TRUE(pipeline_->Score(second).ok());
  auto state = fraud::DecodeCardState(db_->Get(ColumnFamily::kEntityState, ExpectedToken()).value().value());
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->transaction_count, 2u);
  EXPECT_EQ(state->last_timestamp_ms, second.timestamp_ms);
}

TEST_F(ScoringPipelineTest, InvalidInputWritesNothing) {
  fraud::RawTransaction bad = testing::ValidTransaction();
  bad.currency = "ABC";
  auto outcome = pipeline_->Score(bad);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().field, "currency");
  EXPECT_TRUE(pipeline_->audit_log().ReadLast(100).value().empty());
  EXPECT_TRUE(db_->ReadAll(ColumnFamily::kEntityState).value().empty());
}

TEST_F(ScoringPipelineTest, InvalidPanIsRejectedOnTheCardNumberField) {
  fraud::RawTransaction bad = testing::ValidTransaction();
  bad.card_number = "4000001234567898";
  auto outcome = pipeline_->Score(bad);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().field, "card_number");
  EXPECT_EQ(outcome.error().message, "fails the Luhn check digit");
}

TEST_F(ScoringPipelineTest, CardNumberAndTokenTogetherAreRejected) {
  fraud::RawTransaction bad = testing::ValidTransaction();
  bad.card_token = "tok_1";
  auto outcome = pipeline_->Score(bad);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "exactly one of card_number and card_token must be set");
}

TEST_F(ScoringPipelineTest, CallerTokenIsUsedAsTheStateKey) {
  fraud::RawTransaction tx = testing::ValidTransaction();
  tx.card_number.reset();
  tx.card_token = "tok_caller_42";
  auto outcome = pipeline_->Score(tx);
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->card_token, "tok_caller_42");
  EXPECT_TRUE(db_->Get(ColumnFamily::kEntityState, "tok_caller_42").value().has_value());
}

TEST_F(ScoringPipelineTest, PanNeverReachesTheDatabase) {
  fraud::RawTransaction tx = testing::ValidTransaction();
  tx.card_verification_code = "737";  // accepted, and dropped: Transaction has no field for it
  ASSERT_TRUE(pipeline_->Score(tx).ok());
  for (ColumnFamily cf : {ColumnFamily::kEntityState, ColumnFamily::kAudit, ColumnFamily::kJobs}) {
    const auto entries = db_->ReadAll(cf).value();
    for (const auto& [key, value] : entries) {
      EXPECT_EQ(key.find(testing::kTestPan), std::string::npos);
      EXPECT_EQ(value.find(testing::kTestPan), std::string::npos);
    }
  }
}

TEST_F(ScoringPipelineTest, ConcurrentTransactionsOfOneCardLoseNoStateUpdates) {
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        fraud::RawTransaction tx = testing::ValidTransaction("c-" + std::to_string(t) + "-" + std::to_string(i));
        tx.timestamp_ms += (t * kPerThread + i) * 1000;
        ASSERT_TRUE(pipeline_->Score(tx).ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto state = fraud::DecodeCardState(db_->Get(ColumnFamily::kEntityState, ExpectedToken()).value().value());
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->transaction_count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(pipeline_->audit_log().ReadLast(100000).value().size(), static_cast<size_t>(kThreads * kPerThread));
}

// Pipelines whose stages form other graphs: fan-out to a shadow model, a blend join, deadlines.
class PipelineGraphTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<ScoringPipeline>> Create(const std::string& stages, const PipelineRuntime& runtime = {}) {
    auto config = LoadPipelineConfig(testing::WriteTestPipelineWithStages(dir_, stages));
    if (!config.ok()) return config.error();
    config_ = *config;
    if (db_ == nullptr)
      db_ = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal}).value();
    return ScoringPipeline::Create(config_, db_.get(), testing::TestCardKeyPath(dir_), runtime);
  }
  static std::string Model(const std::string& dir) { return dir + "/fraud.ubj"; }
  // Each reading is 1 ms after the previous one: any stage that checks its deadline after
  // arrival finds it 1 ms later or more.
  static PipelineRuntime SteppingClock() {
    PipelineRuntime runtime;
    auto now = std::make_shared<std::chrono::steady_clock::time_point>();
    runtime.clock = [now] { return *now += std::chrono::milliseconds(1); };
    return runtime;
  }

  testing::TempDir dir_;
  PipelineConfig config_;
  std::unique_ptr<storage::Database> db_;
};

TEST_F(PipelineGraphTest, ShadowModelIsScoredAndAuditedButDoesNotDecide) {
  auto pipeline = Create(
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: " +
      Model(testing::SmallModelDir()) +
      "}\n"
      "  - {name: shadow, kind: xgboost, after: features, model: " +
      Model(testing::ChallengerModelDir()) +
      "}\n"
      "  - {name: decision, kind: decision, after: fraud}\n");
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  auto outcome = (*pipeline)->Score(testing::ValidTransaction("req-shadow"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  ASSERT_EQ(outcome->stage_scores.size(), 2u);
  EXPECT_EQ(outcome->stage_scores[0].first, "fraud");
  EXPECT_EQ(outcome->stage_scores[1].first, "shadow");
  EXPECT_NE(outcome->stage_scores[0].second, outcome->stage_scores[1].second);  // two different models
  EXPECT_EQ(outcome->score, outcome->stage_scores[0].second);
  // The shadow is not the decision's model: only the champion is named.
  EXPECT_EQ(outcome->model_version, (*pipeline)->FindStage("fraud")->model()->version);
  EXPECT_NE(outcome->model_version, (*pipeline)->FindStage("shadow")->model()->version);
  std::vector<std::string> stages;
  std::vector<int> slots;
  for (const auto& t : outcome->timings) {
    stages.push_back(t.stage);
    slots.push_back(t.slot);
  }
  EXPECT_EQ(stages,
            (std::vector<std::string>{"validate", "state", "features", "fraud", "shadow", "decision", "persist"}));
  EXPECT_EQ((*pipeline)->TimingSlotNames(), stages);  // every stage ran, so slot i is timing i
  EXPECT_EQ(slots, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  auto audit = (*pipeline)->audit_log().ReadLast(1);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ((*audit)[0].stage_scores, outcome->stage_scores);
  EXPECT_EQ((*audit)[0].placement, "fraud@cpu,shadow@cpu");
}

TEST_F(PipelineGraphTest, BlendJoinsTwoModelsByWeight) {
  auto pipeline = Create(
      "  - {name: features, kind: features}\n"
      "  - {name: a, kind: xgboost, after: features, model: " +
      Model(testing::SmallModelDir()) +
      "}\n"
      "  - {name: b, kind: xgboost, after: features, model: " +
      Model(testing::ChallengerModelDir()) +
      "}\n"
      "  - {name: blend, kind: blend, after: [a, b], weights: [3, 1]}\n"
      "  - {name: decision, kind: decision, after: blend, max_reasons: 64}\n");
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  auto outcome = (*pipeline)->Score(testing::ValidTransaction("req-blend"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  ASSERT_EQ(outcome->stage_scores.size(), 3u);
  const double a = outcome->stage_scores[0].second, b = outcome->stage_scores[1].second;
  EXPECT_EQ(outcome->stage_scores[2].first, "blend");
  EXPECT_DOUBLE_EQ(outcome->score, 0.75 * a + 0.25 * b);
  EXPECT_EQ(outcome->decision, Decide(outcome->score, DecisionThresholds{}));
  EXPECT_EQ(outcome->model_id, "fraud+fraud");  // both models decide
}

TEST_F(PipelineGraphTest, OptionalStagePastItsDeadlineIsSkippedWithWhatDependsOnIt) {
  const std::string stages =
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: " +
      Model(testing::SmallModelDir()) +
      "}\n"
      "  - {name: shadow, kind: xgboost, after: features, budget_ms: 1, model: " +
      Model(testing::ChallengerModelDir()) +
      "}\n"
      "  - {name: shadow_blend, kind: blend, after: [fraud, shadow]}\n"
      "  - {name: decision, kind: decision, after: fraud}\n";
  auto pipeline = Create(stages, SteppingClock());
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  auto outcome = (*pipeline)->Score(testing::ValidTransaction("req-late"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  // By graph index (features 0, fraud 1, shadow 2, shadow_blend 3) and name.
  EXPECT_EQ(outcome->skipped_stages, (std::vector<StageRef>{{2, "shadow"}, {3, "shadow_blend"}}));
  ASSERT_EQ(outcome->stage_scores.size(), 1u);  // the decision's model always runs
  EXPECT_EQ(outcome->stage_scores[0].first, "fraud");
  EXPECT_EQ((*pipeline)->audit_log().ReadLast(1)->at(0).skipped_stages,
            (std::vector<std::string>{"shadow", "shadow_blend"}));
}

TEST_F(PipelineGraphTest, RequestBudgetCapsEveryStagesDeadline) {
  const std::string stages =
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: " +
      Model(testing::SmallModelDir()) +
      "}\n"
      "  - {name: shadow, kind: xgboost, after: features, model: " +
      Model(testing::ChallengerModelDir()) +
      "}\n"
      "  - {name: decision, kind: decision, after: fraud}\n";
  auto pipeline = Create(stages, SteppingClock());
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  // The pipeline's deadline_ms (1500 ms) leaves the shadow time...
  auto unhurried = (*pipeline)->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(unhurried.ok());
  EXPECT_TRUE(unhurried->skipped_stages.empty());
  EXPECT_EQ(unhurried->stage_scores.size(), 2u);
  // ...a request that allows 1 ms does not.
  fraud::RawTransaction hurried = testing::ValidTransaction("req-2");
  hurried.budget_ms = 1;
  auto outcome = (*pipeline)->Score(hurried);
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->skipped_stages, (std::vector<StageRef>{{2, "shadow"}}));
  EXPECT_EQ(outcome->stage_scores.size(), 1u);
}

TEST_F(ScoringPipelineTest, TheCanaryScoresWithoutWritingAndNamesAStageThatFails) {
  ASSERT_TRUE(pipeline_->Canary().ok());
  EXPECT_TRUE(pipeline_->audit_log().ReadLast(10).value().empty());  // nothing written
  EXPECT_FALSE(db_->Get(ColumnFamily::kEntityState, std::string(64, '0')).value().has_value());

  StageKindRegistry kinds;
  RegisterBuiltinStageKinds(&kinds);
  ASSERT_TRUE(kinds.Register(std::make_unique<testing::ExplodingKind>()).ok());
  std::string yaml = testing::ReadFile(dir_.file("pipeline.yaml"));
  yaml += "  - {name: tripwire, kind: explodes, after: features}\n";
  auto config = ParsePipelineConfig(yaml, dir_.file("pipeline.yaml"), kinds);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto pipeline = ScoringPipeline::Create(*config, db_.get(), testing::TestCardKeyPath(dir_));
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
  EXPECT_TRUE(testing::IsError((*pipeline)->Canary(), ErrorCode::kFailedPrecondition,
                               "the canary transaction failed in stage tripwire: boom"));
  // A request meets the same failure as an error, and nothing is written.
  EXPECT_TRUE(
      testing::IsError((*pipeline)->Score(testing::ValidTransaction("req-boom")), ErrorCode::kInternal, "boom"));
  EXPECT_TRUE((*pipeline)->audit_log().ReadLast(10).value().empty());

  // The failure is logged once, naming the request and its trace; bad input is not logged at
  // all (the caller is told), so an id holding a card number never reaches the log.
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  ::testing::internal::CaptureStderr();
  fraud::RawTransaction traced = testing::ValidTransaction("req-traced");
  traced.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_FALSE((*pipeline)->Score(traced).ok());
  EXPECT_FALSE((*pipeline)->Score(testing::ValidTransaction("order-4111111111111111")).ok());
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ConfigureLogging({});
  ASSERT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1) << logged;
  const nlohmann::json line = nlohmann::json::parse(logged);
  EXPECT_EQ(line["level"], "error");
  EXPECT_EQ(line["component"], "pipeline");
  EXPECT_EQ(line["message"], "the request failed: internal: boom") << line;
  EXPECT_EQ(line["request_id"], "req-traced");
  EXPECT_EQ(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
}

}  // namespace
}  // namespace txscore::pipelines
