#include "fraud/features.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/bytes.h"
#include "fraud/claim.h"

namespace txscore::fraud {
namespace {

constexpr float kMissing = std::numeric_limits<float>::quiet_NaN();

struct FeatureInfo {
  std::string_view name;
  std::string_view type;
};

constexpr std::array<FeatureInfo, kFeatureCount> kFeatures = {{
    {"log_amount", "float"},
    {"hour_of_day", "int"},
    {"day_of_week", "int"},
    {"mcc_risk_group", "category"},
    {"cross_border", "bool"},
    {"channel", "category"},
    {"entry_mode", "category"},
    {"velocity_count_1m", "int"},
    {"velocity_sum_1m", "float"},
    {"velocity_count_1h", "int"},
    {"velocity_sum_1h", "float"},
    {"velocity_count_24h", "int"},
    {"velocity_sum_24h", "float"},
    {"distinct_merchants_24h", "int"},
    {"seconds_since_last", "float"},
    {"amount_zscore", "float"},
    {"new_device", "bool"},
    {"distance_km", "float"},
    {"speed_kmh", "float"},
    {"claim_days_to_report", "int"},
    {"claim_amount_to_limit", "float"},
    {"claim_log_amount", "float"},
    {"claim_prior_claims", "int"},
    {"claim_provider_claims", "int"},
    {"claim_type", "category"},
    {"claim_narrative_words", "int"},
}};

constexpr int64_t kMinuteMs = 60 * 1000;
constexpr int64_t kHourMs = 60 * kMinuteMs;
constexpr int64_t kDayMs = 24 * kHourMs;

// Floor division, so timestamps before the epoch would still land on the right day.
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

std::string_view FeatureName(FeatureId id) { return kFeatures[static_cast<int>(id)].name; }
std::string_view FeatureType(FeatureId id) { return kFeatures[static_cast<int>(id)].type; }

std::optional<FeatureId> FeatureIdFromName(std::string_view name) {
  for (int i = 0; i < kFeatureCount; ++i) {
    if (kFeatures[i].name == name) return static_cast<FeatureId>(i);
  }
  return std::nullopt;
}

int MccRiskGroup(std::string_view mcc) {
  static constexpr std::string_view kHigh[] = {"4829", "5966", "5967", "6051", "6211", "7273", "7995"};
  static constexpr std::string_view kMedium[] = {"4722", "4814", "5045", "5732", "5816",
                                                 "5817", "5944", "5999", "6011", "6012"};
  if (std::find(std::begin(kHigh), std::end(kHigh), mcc) != std::end(kHigh)) return 2;
  if (std::find(std::begin(kMedium), std::end(kMedium), mcc) != std::end(kMedium)) return 1;
  return 0;
}

double HaversineKm(double lat1, double lon1, double lat2, double lon2) {
  constexpr double kEarthRadiusKm = 6371.0088;
  constexpr double kRad = M_PI / 180.0;
  const double dlat = (lat2 - lat1) * kRad;
  const double dlon = (lon2 - lon1) * kRad;
  const double a = std::sin(dlat / 2) * std::sin(dlat / 2) +
                   std::cos(lat1 * kRad) * std::cos(lat2 * kRad) * std::sin(dlon / 2) * std::sin(dlon / 2);
  return 2 * kEarthRadiusKm * std::asin(std::min(1.0, std::sqrt(a)));
}

FeatureVector ComputeFeatures(const Transaction& tx, const CardState& state) {
  FeatureVector f;
  f.fill(kMissing);
  auto set = [&f](FeatureId id, double v) { f[static_cast<int>(id)] = static_cast<float>(v); };

  const double amount = tx.amount_major();
  const int64_t t = tx.timestamp_ms;
  set(FeatureId::kLogAmount, std::log1p(amount));
  set(FeatureId::kHourOfDay, static_cast<double>(FloorDiv(t, kHourMs) - FloorDiv(t, kDayMs) * 24));
  // 1970-01-01 was a Thursday (index 3 with Monday = 0).
  set(FeatureId::kDayOfWeek, static_cast<double>(((FloorDiv(t, kDayMs) + 3) % 7 + 7) % 7));
  set(FeatureId::kMccRiskGroup, MccRiskGroup(tx.mcc));
  const std::string& card_country = !tx.card_country.empty() ? tx.card_country : state.home_country;
  set(FeatureId::kCrossBorder, !card_country.empty() && card_country != tx.merchant_country ? 1 : 0);
  set(FeatureId::kChannel, static_cast<int>(tx.channel));
  set(FeatureId::kEntryMode, static_cast<int>(tx.entry_mode));

  int count_1m = 0, count_1h = 0, count_24h = 0;
  double sum_1m = 0, sum_1h = 0, sum_24h = 0;
  std::vector<uint64_t> merchants{Fnv1a64(tx.merchant_id)};
  for (const RecentEvent& e : state.recent) {
    if (e.timestamp_ms > t) continue;  // a later transaction that arrived first
    const int64_t age = t - e.timestamp_ms;
    if (age < kDayMs) {
      count_24h++;
      sum_24h += e.amount_major;
      merchants.push_back(e.merchant_hash);
    }
    if (age < kHourMs) {
      count_1h++;
      sum_1h += e.amount_major;
    }
    if (age < kMinuteMs) {
      count_1m++;
      sum_1m += e.amount_major;
    }
  }
  std::sort(merchants.begin(), merchants.end());
  const auto distinct = std::unique(merchants.begin(), merchants.end()) - merchants.begin();
  set(FeatureId::kVelocityCount1m, count_1m);
  set(FeatureId::kVelocitySum1m, sum_1m);
  set(FeatureId::kVelocityCount1h, count_1h);
  set(FeatureId::kVelocitySum1h, sum_1h);
  set(FeatureId::kVelocityCount24h, count_24h);
  set(FeatureId::kVelocitySum24h, sum_24h);
  set(FeatureId::kDistinctMerchants24h, static_cast<double>(distinct));

  if (state.transaction_count > 0) {
    set(FeatureId::kSecondsSinceLast, std::max<int64_t>(0, t - state.last_timestamp_ms) / 1000.0);
  }
  if (state.transaction_count >= 2) {
    const double stddev = std::sqrt(state.amount_m2 / static_cast<double>(state.transaction_count - 1));
    set(FeatureId::kAmountZscore, (amount - state.amount_mean) / std::max(stddev, 1.0));
  }
  if (tx.device_id) {
    const bool known = std::find(state.known_devices.begin(), state.known_devices.end(), Fnv1a64(*tx.device_id)) !=
                       state.known_devices.end();
    set(FeatureId::kNewDevice, state.transaction_count > 0 && !known ? 1 : 0);
  }
  if (tx.latitude && tx.longitude && state.transaction_count > 0 && state.last_latitude && state.last_longitude) {
    const double km = HaversineKm(*state.last_latitude, *state.last_longitude, *tx.latitude, *tx.longitude);
    const double hours = std::max<int64_t>(t - state.last_timestamp_ms, kMinuteMs) / static_cast<double>(kHourMs);
    set(FeatureId::kDistanceKm, km);
    set(FeatureId::kSpeedKmh, km / hours);
  }
  return f;
}

FeatureVector ComputeClaimFeatures(const Claim& claim, int64_t provider_claims) {
  FeatureVector f;
  f.fill(kMissing);
  auto set = [&f](FeatureId id, double value) { f[static_cast<size_t>(id)] = static_cast<float>(value); };
  set(FeatureId::kClaimDaysToReport, static_cast<double>(claim.report_day - claim.incident_day));
  set(FeatureId::kClaimAmountToLimit, claim.amount_claimed / claim.policy_limit);
  set(FeatureId::kClaimLogAmount, std::log1p(claim.amount_claimed));
  set(FeatureId::kClaimPriorClaims, static_cast<double>(claim.prior_claims));
  set(FeatureId::kClaimProviderClaims, static_cast<double>(provider_claims));
  set(FeatureId::kClaimType, claim.claim_type);
  int64_t words = 0;
  bool in_word = false;
  for (unsigned char ch : claim.narrative) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  set(FeatureId::kClaimNarrativeWords, static_cast<double>(words));
  return f;
}

}  // namespace txscore::fraud
