#include "pipelines/scoring_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/bytes.h"
#include "fraud/entity_state.h"
#include "fraud/features.h"

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
  std::unique_ptr<ScoringPipeline> pipeline(new ScoringPipeline(config, db));
  Result<std::unique_ptr<fraud::CardTokenizer>> tokenizer = fraud::CardTokenizer::FromKeyFile(config.security.card_key_file);
  if (!tokenizer.ok()) return tokenizer.error();
  pipeline->tokenizer_ = std::move(tokenizer).value();
  fraud::XGBoostModelOptions model_options;
  model_options.nthread = config.model.nthread;
  model_options.schema_path = config.model.schema_path;
  model_options.fast_evaluator = config.model.fast_evaluator;
  Result<std::unique_ptr<fraud::XGBoostModel>> model = fraud::XGBoostModel::Load(config.model.model_path, model_options);
  if (!model.ok()) return model.error();
  pipeline->model_ = std::move(model).value();
  FindingsStageConfig findings = config.findings;
  if (runtime.devices != nullptr) {
    Result<PipelinePlan> plan = PlanPipeline(config, *runtime.devices);
    if (!plan.ok()) return plan.error();
    pipeline->plan_ = std::move(plan).value();
    if (const accelerator::Placement* p = pipeline->plan_.Find(findings.name); p != nullptr && findings.enabled) {
      findings.device = runtime.devices->Find(p->kind)->torch_device;
      findings.device_name = runtime.devices->Find(p->kind)->DisplayName();
      findings.dtype = p->dtype;
      findings.adapters = p->adapters;
      for (const accelerator::Candidate& c : p->fallback_candidates) {
        findings.fallback.push_back({c.device, runtime.devices->Find(c.kind)->torch_device, c.dtype, c.op_adapters});
      }
    }
  } else {
    for (const auto& [stage, placement] : {std::pair{config.model.name, config.model.placement},
                                           std::pair{findings.name, findings.enabled ? findings.placement : "cpu"}}) {
      if (placement != "cpu" && placement != "auto") {
        return FailedPrecondition("stage " + stage + ": placement \"" + placement +
                                  "\" needs device discovery, which this program did not run");
      }
    }
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

void ScoringPipeline::RunForensicStage(const fraud::Transaction& tx, SteadyClock::time_point arrival,
                                       ScoreOutcome* outcome) {
  const FindingsStageConfig& stage = config_.findings;
  const int budget_ms = tx.budget_ms ? std::min(*tx.budget_ms, stage.budget_ms) : stage.budget_ms;
  ForensicResult result =
      forensic_->Analyze(tx, outcome->score, outcome->reasons, arrival + std::chrono::milliseconds(budget_ms));
  outcome->forensic_device = result.device;
  for (const std::string& failed : result.failed_devices) {
    if (failed == result.device) continue;  // the last one tried: reported below as the stage's failure
    spdlog::warn("stage {} failed on {} for request {}; tried the next device ({})", stage.name, failed,
                 tx.request_id, result.device);
  }
  switch (result.outcome) {
    case ForensicResult::Outcome::kAnalysed:
      outcome->findings = std::move(result.findings);
      return;
    case ForensicResult::Outcome::kSkipped:
      outcome->skipped_stages.push_back(stage.name);
      return;
    case ForensicResult::Outcome::kCutShort:
      outcome->degraded_stages.push_back(stage.name);
      return;
    case ForensicResult::Outcome::kFailed:
      // The decision stands without findings; the operator sees why in the log.
      spdlog::warn("stage {} failed for request {}: {}", stage.name, tx.request_id, result.detail);
      outcome->degraded_stages.push_back(stage.name);
      return;
  }
}

Result<ScoreOutcome> ScoringPipeline::Score(fraud::RawTransaction raw) {
  const SteadyClock::time_point arrival = SteadyClock::now();
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

  const fraud::FeatureVector all_features = fraud::ComputeFeatures(tx, *state);
  std::array<float, fraud::kFeatureCount> row;
  model_->schema().Select(all_features, row.data());
  clock.Lap(config_.features_stage_name);

  Result<std::vector<float>> prediction = model_->Predict(row.data(), 1);
  if (!prediction.ok()) return prediction.error();
  Result<std::vector<float>> contributions = model_->Contributions(row.data());
  if (!contributions.ok()) return contributions.error();
  clock.Lap(config_.model.name);

  outcome.request_id = tx.request_id;
  outcome.card_token = tx.card_token;
  outcome.score = (*prediction)[0];
  outcome.decision = Decide(outcome.score, config_.decision);
  outcome.reasons = TopReasons(*contributions, row.data(), model_->schema(), config_.decision.max_reasons);
  outcome.model_id = model_->model_id();
  outcome.model_version = model_->model_version();
  outcome.pipeline_version = config_.version;
  clock.Lap(config_.decision.name);

  if (forensic_ && config_.findings.when.Evaluate({outcome.score, outcome.decision})) {
    card_lock.unlock();
    RunForensicStage(tx, arrival, &outcome);
    clock.Lap(config_.findings.name);
    card_lock.lock();
    state = ReadCardState(tx.card_token);  // another transaction of this card may have landed meanwhile
    if (!state.ok()) return state.error();
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
  record.placement = config_.model.name + "@" +
                     (plan_.Find(config_.model.name) != nullptr ? plan_.Find(config_.model.name)->device : "cpu");
  if (!outcome.forensic_device.empty()) record.placement += "," + config_.findings.name + "@" + outcome.forensic_device;
  record.traceparent = tx.traceparent;
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kEntityState, tx.card_token, fraud::EncodeCardState(*state));
  audit_log_.Append(record, &batch);
  TXSCORE_RETURN_IF_ERROR(db_->Write(batch));
  clock.Lap("persist");
  return outcome;
}

}  // namespace txscore::pipelines
