// The stage kinds both executors run the same way: xgboost, blend and decision, each reading
// its inputs from a request's values and writing its outputs (pipelines/values.h). The
// transaction pipeline (scoring_pipeline.h) and the claims pipeline (claims_pipeline.h) differ
// only in their features stage and in how they call the LLM.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/xgboost_model.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "pipelines/stage_graph.h"
#include "pipelines/values.h"

namespace txscore::pipelines {

// What runs one stage of a pipeline, prepared at load.
struct PreparedStage {
  std::string kind;
  int budget_ms = 0;                           // 0: the pipeline's deadline_ms
  std::unique_ptr<fraud::XGBoostModel> model;  // xgboost stages
  std::vector<double> weights;                 // blend stages (empty: equal)
  std::string device = "cpu";                  // where it runs, as reported
};

// One PreparedStage per stage of config.graph (same index): models loaded, devices from the
// plan (the LLM stage's from `findings`, as placed).
Result<std::vector<PreparedStage>> PrepareStages(const PipelineConfig& config, const PipelinePlan& plan,
                                                 const FindingsStageConfig& findings);

// How many of its contributions a model or blend stage reports as `reasons`.
inline constexpr int kModelReasons = 3;

// An xgboost stage: score, named contributions and reasons for `features`.
Status RunXGBoostStage(const fraud::XGBoostModel& model, const fraud::FeatureVector& features, StageOutputs* out);

// A blend stage (stage `index` of `graph`) with its weights (default: equal).
void RunBlendStage(const StageGraph& graph, int index, const std::vector<double>& weights, const RequestValues& values,
                   StageOutputs* out);

// A decision stage (stage `index` of `graph`): thresholds, reasons, and, when its optional
// findings input ran and says risk "high", an APPROVE escalated to REVIEW (with
// rules.escalate_high_risk).
void RunDecisionStage(const StageGraph& graph, int index, const DecisionStageConfig& rules, const RequestValues& values,
                      StageOutputs* out);

}  // namespace txscore::pipelines
