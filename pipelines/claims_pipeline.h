// The claims pipeline: a chunk of validated claims in, one outcome per claim out.
//
//   claim_features -> xgboost claims model [+ rules] -> [llm_findings when its `when` holds]
//   -> decision (with the findings, when there are some)
//
// Claims are scored a chunk at a time, stage by stage: every claim of the chunk passes a stage
// before the next stage starts (PreparedStage::RunChunk), so the LLM stage gets all of the
// chunk's suspicious claims in one submission and they share forward passes (at batch-job
// priority: see ForensicStage::AnalyzeClaims). Nothing here is written anywhere: the batch job
// (claims_job.h) writes the outcomes and its progress.
//
// Thread safety: ScoreChunk may be called from several threads; the LLM stage's batcher
// serialises model work.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "fraud/card_token.h"
#include "fraud/claim.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "pipelines/scoring_pipeline.h"
#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

// Why a best-effort stage (the LLM) wrote nothing for a claim it was asked to read.
struct LlmShortfall {
  std::string stage;
  // kFailed (the model failed), kCutShort (the deadline came mid-generation) or kSkipped;
  // written as OutcomeName's "failed", "cut_short", "skipped".
  StageReport::Outcome reason = StageReport::Outcome::kFailed;
  std::string detail;  // the stage's own words
};

struct ClaimOutcome {
  std::string claim_id;
  double score = 0;
  Decision decision = Decision::kApprove;
  std::vector<Reason> reasons;
  std::vector<RuleHit> rule_hits;
  std::optional<llm::Findings> findings;
  std::vector<std::pair<std::string, double>> stage_scores;  // every model stage that ran
  std::vector<std::pair<std::string, std::string>> devices;  // stages that report one: stage -> device
  std::vector<LlmShortfall> llm_shortfalls;  // a best-effort stage was asked to read the claim and wrote nothing
  bool llm_selected = false;                 // a best-effort stage (the LLM) was asked to read the claim
  // Per stage, microseconds. The LLM stage's time is its batch's: every claim of a batch
  // waited for all of it.
  std::vector<StageTiming> timings;
};

class ClaimsPipeline {
 public:
  // Loads the claimant keys (`key_file`, a keyset or raw key file, fraud/keyset.h: claimant ids
  // are tokenized like card numbers, under the primary key), the models and the LLM stage named
  // in a claims pipeline file. `runtime.devices` must outlive the pipeline.
  static Result<std::unique_ptr<ClaimsPipeline>> Create(const PipelineConfig& config, const std::string& key_file,
                                                        const PipelineRuntime& runtime = {},
                                                        const fraud::KekSource& kek = {},
                                                        fraud::KeyFileForm form = fraud::KeyFileForm::kKeysetOrRawKey);

  // `provider_claims[i]`: claims[i]'s provider's claims of the 90 days before it (fraud/features.h).
  // Errors: a model failing (kInternal); the LLM stage's failures are per claim (degraded).
  Result<std::vector<ClaimOutcome>> ScoreChunk(const std::vector<fraud::Claim>& claims,
                                               const std::vector<int64_t>& provider_claims);

  const PipelineConfig& config() const { return config_; }
  // "sha256:..." over the pipeline's files when it was created (bundle_digest.h).
  const std::string& bundle_digest() const { return bundle_digest_; }
  const PipelinePlan& plan() const { return plan_; }
  const fraud::CardTokenizer& tokenizer() const { return *tokenizer_; }
  // The largest chunk a stage asks for (the LLM's batch size), 0 when none does.
  int preferred_chunk() const;
  const PreparedStage* FindStage(const std::string& name) const;  // null when absent
  // The prepared stages, indexed like config().graph.
  const PreparedStage& stage(int index) const { return *stages_[static_cast<size_t>(index)]; }

 private:
  explicit ClaimsPipeline(PipelineConfig config) : config_(std::move(config)) {}

  PipelineConfig config_;
  std::string bundle_digest_;
  PipelinePlan plan_;
  std::unique_ptr<fraud::CardTokenizer> tokenizer_;
  std::vector<std::unique_ptr<PreparedStage>> stages_;  // indexed like config_.graph
  DeadlineClock clock_;                                 // PipelineRuntime::clock
};

}  // namespace txscore::pipelines
