// Fraud features of one transaction, computed from the transaction and its card's state
// *before* the transaction is folded in.
//
// Every feature txscore knows has a FeatureId and a canonical name; a model's feature schema
// (feature_schema.h) picks which of them it uses and in what order. A value that cannot be
// computed (no previous transaction, no coordinates) is NaN, which XGBoost treats as missing.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "fraud/entity_state.h"
#include "fraud/transaction.h"

namespace txscore::fraud {

enum class FeatureId : int {
  kLogAmount,        // ln(1 + amount in major units)
  kHourOfDay,        // 0-23, UTC
  kDayOfWeek,        // 0 = Monday ... 6 = Sunday, UTC
  kMccRiskGroup,     // 0 low, 1 medium, 2 high (see MccRiskGroup)
  kCrossBorder,      // 1 when merchant country differs from the card's country
  kChannel,          // Channel enum value
  kEntryMode,        // EntryMode enum value
  kVelocityCount1m,  // earlier transactions of the card in (t - 1 min, t]
  kVelocitySum1m,    // their amounts, major units
  kVelocityCount1h,
  kVelocitySum1h,
  kVelocityCount24h,
  kVelocitySum24h,
  kDistinctMerchants24h,  // distinct merchants in (t - 24 h, t], this transaction included
  kSecondsSinceLast,      // since the card's newest earlier transaction; NaN for a new card
  kAmountZscore,          // (amount - running mean) / max(running stddev, 1); NaN before 2 transactions
  kNewDevice,             // 1 device not seen on this card, 0 seen or first transaction; NaN without device_id
  kDistanceKm,            // great-circle distance from the previous transaction; NaN without both coordinates
  kSpeedKmh,              // distance / max(elapsed, 1 min); NaN without both coordinates
  // Claims (ComputeClaimFeatures); NaN in a transaction's vector, as the above are in a claim's.
  kClaimDaysToReport,    // report date - incident date, days
  kClaimAmountToLimit,   // amount claimed / policy limit
  kClaimLogAmount,       // ln(1 + amount claimed)
  kClaimPriorClaims,     // the claimant's earlier claims
  kClaimProviderClaims,  // the provider's claims reported in the 90 days before this one (provider_history.h)
  kClaimType,            // index into ClaimTypes()
  kClaimNarrativeWords,  // words in the narrative
  kCount,
};
inline constexpr FeatureId kFirstClaimFeature = FeatureId::kClaimDaysToReport;

inline constexpr int kFeatureCount = static_cast<int>(FeatureId::kCount);
using FeatureVector = std::array<float, kFeatureCount>;

std::string_view FeatureName(FeatureId id);
std::optional<FeatureId> FeatureIdFromName(std::string_view name);
// "float", "int", "bool" or "category": how the value should be read, for the schema file.
std::string_view FeatureType(FeatureId id);

// 2 high risk (gambling, quasi-cash, money transfer, ...), 1 medium (electronics, jewellery,
// travel, ATM cash, digital goods), 0 everything else.
int MccRiskGroup(std::string_view mcc);

// Great-circle distance in km on a sphere of the Earth's mean radius.
double HaversineKm(double lat1, double lon1, double lat2, double lon2);

FeatureVector ComputeFeatures(const Transaction& tx, const CardState& state);

struct Claim;  // fraud/claim.h
// `provider_claims`: the claims naming this claim's provider that were reported in the 90 days
// before its report day (fraud/provider_history.h; 0 for a provider never seen).
FeatureVector ComputeClaimFeatures(const Claim& claim, int64_t provider_claims);

}  // namespace txscore::fraud
