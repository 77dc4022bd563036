// The source stage kinds: `features` computes a transaction's features from it and its card's
// state (fraud/features.h), `claim_features` a claim's. Which one a pipeline starts with fixes
// what it scores: transactions (`txscore serve`) or claims (`txscore batch run`, jobs).
// Neither has keys of its own.
//
//   - {name: features, kind: features}
#pragma once

#include <memory>

#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

std::unique_ptr<StageKind> MakeTransactionFeaturesStageKind();  // kind: features
std::unique_ptr<StageKind> MakeClaimFeaturesStageKind();        // kind: claim_features

}  // namespace txscore::pipelines
