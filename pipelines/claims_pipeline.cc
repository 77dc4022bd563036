#include "pipelines/claims_pipeline.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "fraud/features.h"
#include "pipelines/model_stages.h"

namespace txscore::pipelines {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t MicrosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - start).count();
}

std::string Money(double amount) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f", amount);
  return text;
}

// A batch job has no caller waiting on one claim: the LLM stage's limit is generous, and only
// guards against a model that never finishes.
constexpr std::chrono::hours kBatchLlmLimit{1};

const char* ShortfallReason(ForensicResult::Outcome outcome) {
  switch (outcome) {
    case ForensicResult::Outcome::kSkipped:
      return "skipped";
    case ForensicResult::Outcome::kCutShort:
      return "cut_short";
    case ForensicResult::Outcome::kFailed:
    case ForensicResult::Outcome::kAnalysed:  // not a shortfall; listed for -Wswitch
      break;
  }
  return "failed";
}

}  // namespace

llm::ClaimFields ClaimsPipeline::FieldsFor(const fraud::Claim& claim) {
  llm::ClaimFields f;
  f.claim_id = claim.claim_id;
  f.policy_id = claim.policy_id;
  f.claim_type = fraud::ClaimTypes()[static_cast<size_t>(claim.claim_type)];
  f.incident_date = claim.incident_date;
  f.report_date = claim.report_date;
  f.amount_claimed = Money(claim.amount_claimed);
  f.policy_limit = Money(claim.policy_limit);
  f.prior_claims = static_cast<int>(claim.prior_claims);
  f.provider_id = claim.provider_id;
  f.narrative = claim.narrative;
  f.adjuster_notes = claim.adjuster_notes;
  return f;
}

Result<std::unique_ptr<ClaimsPipeline>> ClaimsPipeline::Create(const PipelineConfig& config,
                                                               const PipelineRuntime& runtime) {
  if (config.kind != "claims") {
    return FailedPrecondition(config.source_path + " is a " + config.kind +
                              " pipeline; claims jobs need one whose first stage is of kind claim_features");
  }
  std::unique_ptr<ClaimsPipeline> pipeline(new ClaimsPipeline(config));
  Result<std::unique_ptr<fraud::CardTokenizer>> tokenizer =
      fraud::CardTokenizer::FromKeyFile(config.security.card_key_file);
  if (!tokenizer.ok()) return tokenizer.error();
  pipeline->tokenizer_ = std::move(tokenizer).value();
  Result<PlacedStages> placed = PlaceStages(config, runtime.devices);
  if (!placed.ok()) return placed.error();
  pipeline->plan_ = std::move(placed->plan);
  placed->findings.background = runtime.background;

  Result<std::vector<PreparedStage>> stages = PrepareStages(config, pipeline->plan_, placed->findings);
  if (!stages.ok()) return stages.error();
  pipeline->runners_ = std::move(stages).value();
  if (placed->findings.enabled) {
    if (runtime.shared_llm_stage != nullptr && runtime.shared_llm_stage->model_dir() == placed->findings.model_dir) {
      pipeline->forensic_ = runtime.shared_llm_stage;
      for (PreparedStage& stage : pipeline->runners_) {
        if (stage.kind == "llm_findings") stage.device = runtime.shared_llm_stage->device_name();
      }
    } else {
      Result<std::unique_ptr<ForensicStage>> forensic = ForensicStage::Create(placed->findings, runtime.load_decoder);
      if (!forensic.ok()) return forensic.error();
      pipeline->owned_forensic_ = std::move(forensic).value();
      pipeline->forensic_ = pipeline->owned_forensic_.get();
    }
  }
  return pipeline;
}

Result<std::vector<ClaimOutcome>> ClaimsPipeline::ScoreChunk(const std::vector<fraud::Claim>& claims,
                                                             const std::vector<int64_t>& provider_claims) {
  const StageGraph& graph = config_.graph;
  std::vector<RequestValues> values(claims.size(), RequestValues(graph.size()));
  std::vector<ClaimOutcome> outcomes(claims.size());
  for (size_t c = 0; c < claims.size(); ++c) outcomes[c].claim_id = claims[c].claim_id;

  for (int i : graph.order()) {
    const GraphStage& stage = graph.stage(i);
    const PreparedStage& runner = runners_[static_cast<size_t>(i)];
    if (runner.kind == "llm_findings") {
      std::vector<size_t> selected;
      std::vector<llm::ClaimFields> fields;
      for (size_t c = 0; c < claims.size(); ++c) {
        if (!graph.ShouldRun(i, values[c])) continue;
        selected.push_back(c);
        fields.push_back(FieldsFor(claims[c]));
      }
      if (selected.empty()) continue;
      spdlog::debug("{}: generating findings for {} claims", stage.name, fields.size());
      const SteadyClock::time_point start = SteadyClock::now();
      std::vector<ForensicResult> results = forensic_->AnalyzeClaims(fields, start + kBatchLlmLimit);
      const int64_t elapsed_us = MicrosSince(start);
      for (size_t k = 0; k < selected.size(); ++k) {
        ClaimOutcome& outcome = outcomes[selected[k]];
        StageOutputs& out = values[selected[k]][static_cast<size_t>(i)];
        ForensicResult& result = results[k];
        outcome.timings.push_back({stage.name, elapsed_us});
        outcome.devices.emplace_back(stage.name, result.device);
        outcome.llm_selected = true;
        if (result.outcome == ForensicResult::Outcome::kAnalysed) {
          out.ran = true;
          out.findings = result.findings;
          outcome.findings = std::move(result.findings);
        } else {
          outcome.llm_shortfalls.push_back({stage.name, ShortfallReason(result.outcome), result.detail});
        }
      }
      continue;
    }
    for (size_t c = 0; c < claims.size(); ++c) {
      RequestValues& v = values[c];
      if (!graph.ShouldRun(i, v)) continue;
      const SteadyClock::time_point start = SteadyClock::now();
      StageOutputs& out = v[static_cast<size_t>(i)];
      ClaimOutcome& outcome = outcomes[c];
      out.ran = true;
      if (runner.kind == "claim_features") {
        out.features = fraud::ComputeClaimFeatures(claims[c], provider_claims[c]);
      } else if (runner.kind == "xgboost") {
        TXSCORE_RETURN_IF_ERROR(
            RunXGBoostStage(*runner.model, v[static_cast<size_t>(stage.inputs[0].stages[0])].features, &out));
        outcome.stage_scores.emplace_back(stage.name, out.score);
        outcome.devices.emplace_back(stage.name, runner.device);
      } else if (runner.kind == "blend") {
        RunBlendStage(graph, i, runner.weights, v, &out);
        outcome.stage_scores.emplace_back(stage.name, out.score);
      } else if (runner.kind == "decision") {
        RunDecisionStage(graph, i, config_.decision, v, &out);
      } else {
        return FailedPrecondition("stage " + stage.name + ": kind " + runner.kind + " does not run on claims");
      }
      outcome.timings.push_back({stage.name, MicrosSince(start)});
    }
  }
  for (size_t c = 0; c < claims.size(); ++c) {
    const StageOutputs& decided = values[c][static_cast<size_t>(graph.sink())];
    outcomes[c].score = decided.score;
    outcomes[c].decision = decided.decision;
    outcomes[c].reasons = decided.reasons;
  }
  return outcomes;
}

}  // namespace txscore::pipelines
