#include "pipelines/scoring_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/bytes.h"
#include "fraud/entity_state.h"
#include "fraud/features.h"
#include "pipelines/model_stages.h"

namespace txscore::pipelines {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Measures consecutive stages: each Lap() records the time since the previous one.
class StageClock {
 public:
  explicit StageClock(std::vector<StageTiming>* out) : out_(out), last_(SteadyClock::now()) {}
  void Lap(const std::string& stage) {
    const auto now = SteadyClock::now();
    out_->push_back({stage, std::chrono::duration_cast<std::chrono::microseconds>(now - last_).count()});
    last_ = now;
  }

 private:
  std::vector<StageTiming>* out_;
  SteadyClock::time_point last_;
};

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<std::unique_ptr<ScoringPipeline>> ScoringPipeline::Create(const PipelineConfig& config, storage::Database* db,
                                                                 const PipelineRuntime& runtime) {
  if (config.kind != "transactions") {
    return FailedPrecondition(config.source_path + " is a " + config.kind +
                              " pipeline; run it with `txscore batch run --config " + config.source_path + "`");
  }
  std::unique_ptr<ScoringPipeline> pipeline(new ScoringPipeline(config, db));
  TXSCORE_RETURN_IF_ERROR(pipeline->audit_log_.BeginWriting());
  Result<std::unique_ptr<fraud::CardTokenizer>> tokenizer =
      fraud::CardTokenizer::FromKeyFile(config.security.card_key_file);
  if (!tokenizer.ok()) return tokenizer.error();
  pipeline->tokenizer_ = std::move(tokenizer).value();
  pipeline->clock_ = runtime.clock ? runtime.clock : [] { return SteadyClock::now(); };

  Result<PlacedStages> placed = PlaceStages(config, runtime.devices);
  if (!placed.ok()) return placed.error();
  pipeline->plan_ = std::move(placed->plan);
  const FindingsStageConfig& findings = placed->findings;

  Result<std::vector<PreparedStage>> stages = PrepareStages(config, pipeline->plan_, findings);
  if (!stages.ok()) return stages.error();
  pipeline->runners_ = std::move(stages).value();
  for (int i : config.graph.order()) {
    const PreparedStage& stage = pipeline->runners_[static_cast<size_t>(i)];
    if (stage.model != nullptr && config.graph.stage(i).required && pipeline->primary_model_ == nullptr) {
      pipeline->primary_model_ = stage.model.get();
    }
  }
  if (pipeline->primary_model_ == nullptr) {
    // Build() makes every pipeline's decision read a score, and only xgboost stages make one.
    return Internal("the decision stage depends on no xgboost stage");
  }
  if (findings.enabled) {
    Result<std::unique_ptr<ForensicStage>> forensic = ForensicStage::Create(findings, runtime.load_decoder);
    if (!forensic.ok()) return forensic.error();
    pipeline->forensic_ = std::move(forensic).value();
  }
  return pipeline;
}

Result<std::string> ScoringPipeline::CardToken(fraud::RawTransaction* raw) const {
  if (raw->card_verification_code) {
    Status cvc = fraud::ValidateCardVerificationCode(*raw->card_verification_code);
    fraud::WipeString(&*raw->card_verification_code);
    raw->card_verification_code.reset();
    if (!cvc.ok()) {
      if (raw->card_number) fraud::WipeString(&*raw->card_number);
      return cvc.error();
    }
  }
  if (raw->card_number.has_value() == raw->card_token.has_value()) {
    if (raw->card_number) fraud::WipeString(&*raw->card_number);
    return InvalidArgument("exactly one of card_number and card_token must be set", "card_number");
  }
  if (raw->card_token) {
    TXSCORE_RETURN_IF_ERROR(fraud::ValidateCardToken(*raw->card_token));
    return *raw->card_token;
  }
  Status valid = fraud::ValidatePan(*raw->card_number);
  std::string token = valid.ok() ? tokenizer_->Tokenize(*raw->card_number) : std::string();
  fraud::WipeString(&*raw->card_number);
  if (!valid.ok()) return valid.error();
  return token;
}

Result<fraud::CardState> ScoringPipeline::ReadCardState(const std::string& card_token) const {
  Result<std::optional<std::string>> stored = db_->Get(storage::ColumnFamily::kEntityState, card_token);
  if (!stored.ok()) return stored.error();
  if (!stored->has_value()) return fraud::CardState();
  return fraud::DecodeCardState(**stored);
}

void ScoringPipeline::RunForensicStage(int stage, const fraud::Transaction& tx, const RequestValues& values,
                                       SteadyClock::time_point deadline, StageOutputs* out, ScoreOutcome* outcome) {
  const StageGraph& graph = config_.graph;
  const StageOutputs& scored = values[static_cast<size_t>(graph.InputStage(stage, "score"))];
  const StageOutputs& explained = values[static_cast<size_t>(graph.InputStage(stage, "reasons"))];
  const std::string& name = graph.stage(stage).name;
  ForensicResult result = forensic_->Analyze(tx, scored.score, explained.reasons, deadline);
  outcome->forensic_device = result.device;
  for (const std::string& failed : result.failed_devices) {
    if (failed == result.device) continue;  // the last one tried: reported below as the stage's failure
    spdlog::warn("stage {} failed on {} for request {}; tried the next device ({})", name, failed, tx.request_id,
                 result.device);
  }
  switch (result.outcome) {
    case ForensicResult::Outcome::kAnalysed:
      out->findings = result.findings;
      out->ran = true;
      outcome->findings = std::move(result.findings);
      return;
    case ForensicResult::Outcome::kSkipped:
      outcome->skipped_stages.push_back(name);
      return;
    case ForensicResult::Outcome::kCutShort:
      outcome->degraded_stages.push_back(name);
      return;
    case ForensicResult::Outcome::kFailed:
      // The decision stands without findings; the operator sees why in the log.
      spdlog::warn("stage {} failed for request {}: {}", name, tx.request_id, result.detail);
      outcome->degraded_stages.push_back(name);
      return;
  }
}

Result<ScoreOutcome> ScoringPipeline::Score(fraud::RawTransaction raw) {
  const SteadyClock::time_point arrival = clock_();
  ScoreOutcome outcome;
  StageClock clock(&outcome.timings);

  // Validate everything before touching storage: bad input writes nothing.
  Result<std::string> token = CardToken(&raw);
  if (!token.ok()) return token.error();
  Result<fraud::Transaction> validated = fraud::ValidateTransaction(raw);
  if (!validated.ok()) return validated.error();
  fraud::Transaction& tx = validated.value();
  tx.card_token = std::move(token).value();
  clock.Lap("validate");

  std::unique_lock<std::mutex> card_lock(card_locks_[Fnv1a64(tx.card_token) % kCardLockStripes]);
  Result<fraud::CardState> state = ReadCardState(tx.card_token);
  if (!state.ok()) return state.error();
  clock.Lap("state");

  const StageGraph& graph = config_.graph;
  RequestValues values(graph.size());
  std::vector<bool> skipped(graph.size(), false);
  for (int i : graph.order()) {
    const GraphStage& stage = graph.stage(i);
    const PreparedStage& runner = runners_[static_cast<size_t>(i)];
    StageOutputs& out = values[static_cast<size_t>(i)];
    if (!graph.ShouldRun(i, values)) {
      // Downstream of a skipped stage is skipped too; a false condition is no news.
      for (const InputBinding& b : stage.inputs) {
        for (int u : b.stages) {
          if (skipped[static_cast<size_t>(u)]) skipped[static_cast<size_t>(i)] = true;
        }
      }
      if (skipped[static_cast<size_t>(i)]) outcome.skipped_stages.push_back(stage.name);
      continue;
    }
    int budget_ms = runner.budget_ms > 0 ? runner.budget_ms : config_.deadline_ms;
    if (tx.budget_ms) budget_ms = std::min(budget_ms, *tx.budget_ms);
    const SteadyClock::time_point deadline = arrival + std::chrono::milliseconds(budget_ms);
    if (!stage.required && clock_() >= deadline) {
      skipped[static_cast<size_t>(i)] = true;
      outcome.skipped_stages.push_back(stage.name);
      continue;
    }
    out.ran = true;
    if (runner.kind == "features") {
      out.features = fraud::ComputeFeatures(tx, *state);
    } else if (runner.kind == "xgboost") {
      TXSCORE_RETURN_IF_ERROR(
          RunXGBoostStage(*runner.model, values[static_cast<size_t>(stage.inputs[0].stages[0])].features, &out));
      outcome.stage_scores.emplace_back(stage.name, out.score);
    } else if (runner.kind == "blend") {
      RunBlendStage(graph, i, runner.weights, values, &out);
      outcome.stage_scores.emplace_back(stage.name, out.score);
    } else if (runner.kind == "decision") {
      RunDecisionStage(graph, i, config_.decision, values, &out);
    } else if (runner.kind == "llm_findings") {
      out.ran = false;  // until it has findings
      card_lock.unlock();
      RunForensicStage(i, tx, values, deadline, &out, &outcome);
      card_lock.lock();
      state = ReadCardState(tx.card_token);  // another transaction of this card may have landed meanwhile
      if (!state.ok()) return state.error();
    }
    clock.Lap(stage.name);
  }

  const StageOutputs& decided = values[static_cast<size_t>(graph.sink())];
  outcome.request_id = tx.request_id;
  outcome.card_token = tx.card_token;
  outcome.score = decided.score;
  outcome.decision = decided.decision;
  outcome.reasons = decided.reasons;
  outcome.pipeline_version = config_.version;
  for (size_t i = 0; i < graph.size(); ++i) {
    if (!graph.stage(static_cast<int>(i)).required || runners_[i].model == nullptr) continue;
    outcome.model_id += (outcome.model_id.empty() ? "" : "+") + runners_[i].model->model_id();
    outcome.model_version += (outcome.model_version.empty() ? "" : "+") + runners_[i].model->model_version();
  }

  fraud::UpdateCardState(tx, &*state);
  storage::AuditRecord record;
  record.time_us = NowMicros();
  record.request_id = outcome.request_id;
  record.card_token = outcome.card_token;
  record.transaction_time_ms = tx.timestamp_ms;
  record.model_id = outcome.model_id;
  record.model_version = outcome.model_version;
  record.pipeline_version = outcome.pipeline_version;
  record.score = outcome.score;
  record.decision = DecisionName(outcome.decision);
  for (const Reason& r : outcome.reasons) record.reasons.push_back({r.feature, r.contribution, r.value});
  for (const StageTiming& t : outcome.timings) record.timings_us.emplace_back(t.stage, t.elapsed_us);
  record.degraded_stages = outcome.degraded_stages;
  record.skipped_stages = outcome.skipped_stages;
  if (outcome.findings) {
    record.findings = storage::AuditFindings{outcome.findings->risk_level, outcome.findings->flags,
                                             outcome.findings->summary, outcome.findings->model_id};
  }
  for (int i : graph.order()) {
    const PreparedStage& runner = runners_[static_cast<size_t>(i)];
    std::string device;
    if (runner.model != nullptr && values[static_cast<size_t>(i)].ran) device = runner.device;
    if (runner.kind == "llm_findings") device = outcome.forensic_device;
    if (device.empty()) continue;
    record.placement += (record.placement.empty() ? "" : ",") + graph.stage(i).name + "@" + device;
  }
  record.stage_scores = outcome.stage_scores;
  record.traceparent = tx.traceparent;
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kEntityState, tx.card_token, fraud::EncodeCardState(*state));
  TXSCORE_RETURN_IF_ERROR(audit_log_.Append(record, &batch));
  TXSCORE_RETURN_IF_ERROR(db_->Write(batch));
  clock.Lap("persist");
  return outcome;
}

}  // namespace txscore::pipelines
