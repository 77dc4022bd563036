// The claims pipeline: a chunk of validated claims in, one outcome per claim out.
//
//   claim_features -> xgboost claims model -> [llm_findings when its `when` holds]
//   -> decision (with the findings, when there are some)
//
// Claims are scored a chunk at a time, stage by stage: every claim of the chunk passes a stage
// before the next stage starts, so the LLM stage gets all of the chunk's suspicious claims in
// one submission and they share forward passes (at batch-job priority: see
// ForensicStage::AnalyzeClaims). Nothing here is written anywhere: the batch job
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
#include "fraud/xgboost_model.h"
#include "pipelines/config.h"
#include "pipelines/forensic_stage.h"
#include "pipelines/model_stages.h"
#include "pipelines/placement.h"
#include "pipelines/scoring_pipeline.h"

namespace txscore::pipelines {

// Why the LLM stage wrote no findings for a claim it was asked to read.
struct LlmShortfall {
  std::string stage;
  std::string reason;  // "failed" (the model failed), "cut_short" (the deadline came mid-generation), "skipped"
  std::string detail;  // the stage's own words
};

struct ClaimOutcome {
  std::string claim_id;
  double score = 0;
  Decision decision = Decision::kApprove;
  std::vector<Reason> reasons;
  std::optional<llm::Findings> findings;
  std::vector<std::pair<std::string, double>> stage_scores;  // every model stage that ran
  std::vector<std::pair<std::string, std::string>> devices;  // model stages that ran: stage -> device
  std::vector<LlmShortfall> llm_shortfalls;  // the LLM stage was asked to read the claim and wrote no findings
  bool llm_selected = false;                 // the LLM stage was asked to read the claim
  // Per stage, microseconds. The LLM stage's time is its batch's: every claim of a batch
  // waited for all of it.
  std::vector<StageTiming> timings;
};

class ClaimsPipeline {
 public:
  // Loads the claimant key, the models and the LLM stage named in a claims pipeline file.
  // `runtime.devices` must outlive the pipeline.
  static Result<std::unique_ptr<ClaimsPipeline>> Create(const PipelineConfig& config,
                                                        const PipelineRuntime& runtime = {});

  // `provider_claims[i]`: claims of the batch naming claims[i]'s provider (fraud/features.h).
  // Errors: a model failing (kInternal); the LLM stage's failures are per claim (degraded).
  Result<std::vector<ClaimOutcome>> ScoreChunk(const std::vector<fraud::Claim>& claims,
                                               const std::vector<int64_t>& provider_claims);

  const PipelineConfig& config() const { return config_; }
  const PipelinePlan& plan() const { return plan_; }
  const fraud::CardTokenizer& tokenizer() const { return *tokenizer_; }
  // The LLM stage's batch size (0 without one): a chunk of this many fills one batch.
  int llm_max_batch() const { return forensic_ ? config_.findings.max_batch : 0; }
  const ForensicStage* forensic_stage() const { return forensic_; }
  bool shares_llm_stage() const { return forensic_ != nullptr && owned_forensic_ == nullptr; }

  // The LLM's view of a claim.
  static llm::ClaimFields FieldsFor(const fraud::Claim& claim);

 private:
  explicit ClaimsPipeline(PipelineConfig config) : config_(std::move(config)) {}

  PipelineConfig config_;
  PipelinePlan plan_;
  std::unique_ptr<fraud::CardTokenizer> tokenizer_;
  std::vector<PreparedStage> runners_;             // indexed like config_.graph
  std::unique_ptr<ForensicStage> owned_forensic_;  // null when shared (runtime.shared_llm_stage)
  ForensicStage* forensic_ = nullptr;
};

}  // namespace txscore::pipelines
