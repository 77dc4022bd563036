// The stage kinds txscore ships. A new kind is its own files plus two lines here: its header's
// include and its Register call (docs/pipeline-file.md, "Adding a stage kind").
#include "pipelines/stage_kind.h"
#include "pipelines/stages/blend_stage.h"
#include "pipelines/stages/decision_stage.h"
#include "pipelines/stages/features_stage.h"
#include "pipelines/stages/llm_findings_stage.h"
#include "pipelines/stages/rules_stage.h"
#include "pipelines/stages/xgboost_stage.h"

namespace txscore::pipelines {

void RegisterBuiltinStageKinds(StageKindRegistry* registry) {
  // Each name is registered once here; a registry that already holds one keeps the first.
  (void)registry->Register(MakeTransactionFeaturesStageKind());
  (void)registry->Register(MakeClaimFeaturesStageKind());
  (void)registry->Register(MakeXGBoostStageKind());
  (void)registry->Register(MakeBlendStageKind());
  (void)registry->Register(MakeDecisionStageKind());
  (void)registry->Register(MakeLlmFindingsStageKind());
  (void)registry->Register(MakeRulesStageKind());
}

}  // namespace txscore::pipelines
