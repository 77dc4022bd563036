#include "pipelines/claim_fields.h"

#include <cstdio>
#include <string>

namespace txscore::pipelines {
namespace {

std::string Money(double amount) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f", amount);
  return text;
}

}  // namespace

llm::ClaimFields ClaimFieldsFor(const fraud::Claim& claim) {
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

}  // namespace txscore::pipelines
