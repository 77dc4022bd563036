#include "pipelines/claims_pipeline.h"

#include <algorithm>
#include <chrono>

#include "pipelines/bundle_digest.h"

namespace txscore::pipelines {
namespace {

// A batch job has no caller waiting on one claim: a stage's limit is generous, and only guards
// against a model that never finishes.
constexpr std::chrono::hours kBatchStageLimit{1};

}  // namespace

Result<std::unique_ptr<ClaimsPipeline>> ClaimsPipeline::Create(const PipelineConfig& config,
                                                               const std::string& key_file,
                                                               const PipelineRuntime& runtime,
                                                               const fraud::KekSource& kek, fraud::KeyFileForm form) {
  if (config.items != ItemKind::kClaim) {
    return FailedPrecondition(config.source_path +
                              " is a transactions pipeline; claims jobs need one whose first stage is of kind "
                              "claim_features");
  }
  std::unique_ptr<ClaimsPipeline> pipeline(new ClaimsPipeline(config));
  pipeline->clock_ = runtime.clock ? runtime.clock : SteadyDeadlineClock();
  TXSCORE_ASSIGN_OR_RETURN(pipeline->tokenizer_, fraud::CardTokenizer::FromKeyFile(key_file, kek, form));
  // Every job's summary names the digest of what decided; a settings file may pin it (`txscore
  // batch run --config`, a server's jobs.claims_pipeline_digest): nothing else is loaded first.
  TXSCORE_ASSIGN_OR_RETURN(BundleDigest bundle, DigestPipelineBundle(config));
  TXSCORE_RETURN_IF_ERROR(
      CheckPinnedDigest(config.pinned_digest, bundle, config.pinned_in, config.pinned_by, config.source_path));
  pipeline->bundle_digest_ = bundle.digest;
  TXSCORE_ASSIGN_OR_RETURN(pipeline->plan_, PlaceStages(config, runtime.devices));
  TXSCORE_ASSIGN_OR_RETURN(pipeline->stages_, PrepareStages(config, pipeline->plan_, runtime));
  return pipeline;
}

int ClaimsPipeline::preferred_chunk() const {
  int chunk = 0;
  for (const auto& stage : stages_) chunk = std::max(chunk, stage->preferred_chunk());
  return chunk;
}

const PreparedStage* ClaimsPipeline::FindStage(const std::string& name) const {
  const int index = config_.graph.Find(name);
  return index < 0 ? nullptr : stages_[static_cast<size_t>(index)].get();
}

Result<std::vector<ClaimOutcome>> ClaimsPipeline::ScoreChunk(const std::vector<fraud::Claim>& claims,
                                                             const std::vector<int64_t>& provider_claims) {
  const StageGraph& graph = config_.graph;
  std::vector<RequestValues> values(claims.size(), RequestValues(graph.size()));
  std::vector<ClaimOutcome> outcomes(claims.size());
  for (size_t c = 0; c < claims.size(); ++c) outcomes[c].claim_id = claims[c].claim_id;

  for (int i : graph.order()) {
    const GraphStage& stage = graph.stage(i);
    const StageKindSpec& spec = config_.kinds[static_cast<size_t>(i)]->spec();
    std::vector<size_t> selected;
    for (size_t c = 0; c < claims.size(); ++c) {
      if (graph.ShouldRun(i, values[c])) selected.push_back(c);
    }
    if (selected.empty()) continue;
    const auto deadline = clock_() + kBatchStageLimit;
    std::vector<StageReport> reports(selected.size());
    std::vector<PreparedStage::ChunkItem> chunk;
    for (size_t k = 0; k < selected.size(); ++k) {
      const size_t c = selected[k];
      chunk.push_back({StageInputs(stage, values[c]),
                       ScoredItem{nullptr, nullptr, &claims[c], provider_claims[c], deadline},
                       &values[c][static_cast<size_t>(i)], &reports[k]});
    }
    TXSCORE_RETURN_IF_ERROR(stages_[static_cast<size_t>(i)]->RunChunk(chunk));
    for (size_t k = 0; k < selected.size(); ++k) {
      const size_t c = selected[k];
      StageOutputs& out = values[c][static_cast<size_t>(i)];
      const StageReport& report = reports[k];
      ClaimOutcome& outcome = outcomes[c];
      out.ran = report.outcome == StageReport::Outcome::kDone;
      outcome.timings.push_back({stage.name, std::max<int64_t>(report.elapsed_us, 0), /*slot=*/i});
      if (!report.device.empty()) outcome.devices.emplace_back(stage.name, report.device);
      if (spec.best_effort) outcome.llm_selected = true;
      if (!out.ran) {
        outcome.llm_shortfalls.push_back({stage.name, report.outcome, report.detail});
        continue;
      }
      if (spec.reports_score) outcome.stage_scores.emplace_back(stage.name, out.score);
      if (out.findings) outcome.findings = out.findings;
    }
  }
  for (size_t c = 0; c < claims.size(); ++c) {
    const StageOutputs& decided = values[c][static_cast<size_t>(graph.sink())];
    outcomes[c].score = decided.score;
    outcomes[c].decision = decided.decision;
    outcomes[c].reasons = decided.reasons;
    outcomes[c].rule_hits = decided.rule_hits;
  }
  return outcomes;
}

}  // namespace txscore::pipelines
