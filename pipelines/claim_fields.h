// The LLM's view of a claim (llm::ClaimFields) made from a validated claim: what the
// llm_findings stage and `txscore llm analyze-claim` give the model, so both read a claim alike.
#pragma once

#include "fraud/claim.h"
#include "llm/claim_analysis.h"

namespace txscore::pipelines {

// Amounts as fixed two-decimal text ("1250.00"); the claimant's token is not part of the view.
llm::ClaimFields ClaimFieldsFor(const fraud::Claim& claim);

}  // namespace txscore::pipelines
