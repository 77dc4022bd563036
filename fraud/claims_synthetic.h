// A seeded, deterministic generator of insurance claims with labelled fraud.
//
// Legitimate claims: reported within days, amounts a modest share of the policy limit, a
// provider drawn from many, few earlier claims, and a specific narrative (what, where, when,
// who) whose date matches the incident date. Hard negatives are included on purpose: total
// losses claimed at the full limit, travel claims reported weeks later on return, claimants
// with several honest earlier claims, brief narratives.
// Fraud patterns, one to three per fraudulent claim:
//   structured: late reporting (30-120 days), an amount just under the limit (90-99 %), one of
//               a few "mill" providers that many fraudulent claims share, many earlier claims;
//   narrative:  a date in the text that contradicts the incident date, a vague description,
//               pressure to settle quickly (in cash, or "a lawyer").
// The same options give the same claims on every run of the same build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fraud/claim.h"

namespace txscore::fraud {

struct SyntheticClaimsOptions {
  uint64_t seed = 42;         // Default: 42
  int claims = 4000;          // Default: 4000 claims
  double fraud_rate = 0.12;   // Default: 12 % fraudulent
  int64_t start_day = 20454;  // Default: 2026-01-01 (days since 1970-01-01)
  // Default: 0, as many days as keep the demo's rate of about 11 claims a day (4,000 claims
  // over a year): a larger file covers a longer time, as an insurer's files do, rather than
  // crowding more claims onto each provider's days.
  int days = 0;
  int providers = 300;  // Default: 300 providers, 6 of them mills
};

inline constexpr int kSyntheticClaimsPerYear = 4000;

struct LabeledClaim {
  RawClaim claim;
  bool is_fraud = false;
  std::vector<std::string> patterns;  // late_report, just_under_limit, mill_provider, many_prior_claims,
                                      // inconsistent_dates, vague_description, pressure_to_settle
};

// Ordered by report date; claim ids are "CLM-<seed>-<n>".
std::vector<LabeledClaim> GenerateClaims(const SyntheticClaimsOptions& options);

// "YYYY-MM-DD" of a day number (days since 1970-01-01).
std::string IsoDate(int64_t day);

}  // namespace txscore::fraud
