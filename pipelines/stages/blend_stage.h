// The blend stage kind, a join: the weighted mean of the scores (and of each feature's
// contributions, matched by feature name) of the stages it comes after, at least two.
//
//   - {name: blend, kind: blend, after: [champion, challenger], weights: [0.7, 0.3]}
//
// Keys: weights  Default: equal; else one number >= 0 per stage in `after:`, in that order,
//                at least one above 0 (normalised to sum 1).
#pragma once

#include <memory>
#include <vector>

#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct BlendStageSettings : StageSettings {
  std::vector<double> weights;  // empty: equal
};

std::unique_ptr<StageKind> MakeBlendStageKind();

}  // namespace txscore::pipelines
