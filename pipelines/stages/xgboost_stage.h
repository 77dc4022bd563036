// The xgboost stage kind: an XGBoost model scores the features it is given, with per-feature
// contributions and its three largest reasons. A pipeline may have several: a champion and a
// shadow (challenger) fed by the same features, or models joined by a blend stage.
//
//   - {name: fraud, kind: xgboost, after: features, model: fraud.ubj}
//
// Keys (defaults beside them):
//   model      required: an XGBoost .json or .ubj file
//   schema     Default: beside the model (fraud.ubj -> fraud.features.json)
//   placement  Default: cpu. auto or a device kind (cpu, cuda, a backend's); tree ensembles are branchy
//              and small, so only the CPU walks trees, and auto finds that
//   threads    Default: 1 XGBoost thread (fastest for single rows)
//   evaluator  Default: fast (txscore's tree evaluator where the model allows); xgboost
//              forces XGBoost's C API
//   budget_ms  Default: the pipeline's deadline_ms (see StageSettings::budget_ms)
#pragma once

#include <memory>
#include <string>

#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct XGBoostStageSettings : StageSettings {
  std::string model_path;
  std::string schema_path;
  int nthread = 1;
  bool fast_evaluator = true;
};

std::unique_ptr<StageKind> MakeXGBoostStageKind();

}  // namespace txscore::pipelines
