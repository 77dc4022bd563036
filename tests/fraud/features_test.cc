#include "fraud/features.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/bytes.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

constexpr int64_t kT = 1767261600000;  // 2026-01-01T10:00:00Z, a Thursday

float At(const FeatureVector& f, FeatureId id) { return f[static_cast<int>(id)]; }

Transaction BaseTransaction() {
  Transaction tx = ValidateTransaction(testing::ValidTransaction()).value();
  tx.timestamp_ms = kT;
  return tx;
}

CardState HandBuiltState() {
  CardState state;
  state.recent = {
      {kT - 25 * 3600 * 1000LL, 50.0, Fnv1a64("old")},  // outside every window
      {kT - 23 * 3600 * 1000LL, 40.0, Fnv1a64("c")},   {kT - 2 * 3600 * 1000LL, 30.0, Fnv1a64("a")},
      {kT - 30 * 60 * 1000LL, 20.0, Fnv1a64("b")},     {kT - 30 * 1000LL, 10.0, Fnv1a64("a")},
  };
  state.transaction_count = 5;
  state.last_timestamp_ms = kT - 30 * 1000LL;
  state.last_latitude = 40.71;
  state.last_longitude = -74.0;
  state.amount_mean = 25.0;
  state.amount_m2 = 1000.0;  // variance 250 with n - 1 = 4
  state.known_devices = {Fnv1a64("laptop")};
  state.home_country = "US";
  return state;
}

TEST(ComputeFeatures, TransactionFieldsGiveAmountTimeAndCategories) {
  const FeatureVector f = ComputeFeatures(BaseTransaction(), CardState());
  EXPECT_FLOAT_EQ(At(f, FeatureId::kLogAmount), static_cast<float>(std::log1p(42.5)));
  EXPECT_EQ(At(f, FeatureId::kHourOfDay), 10);
  EXPECT_EQ(At(f, FeatureId::kDayOfWeek), 3);  // Thursday, Monday = 0
  EXPECT_EQ(At(f, FeatureId::kMccRiskGroup), 0);
  EXPECT_EQ(At(f, FeatureId::kCrossBorder), 0);
  EXPECT_EQ(At(f, FeatureId::kChannel), 1);
  EXPECT_EQ(At(f, FeatureId::kEntryMode), 1);
}

TEST(ComputeFeatures, VelocityWindowsCountEarlierTransactions) {
  const FeatureVector f = ComputeFeatures(BaseTransaction(), HandBuiltState());
  EXPECT_EQ(At(f, FeatureId::kVelocityCount1m), 1);
  EXPECT_EQ(At(f, FeatureId::kVelocitySum1m), 10);
  EXPECT_EQ(At(f, FeatureId::kVelocityCount1h), 2);
  EXPECT_EQ(At(f, FeatureId::kVelocitySum1h), 30);
  EXPECT_EQ(At(f, FeatureId::kVelocityCount24h), 4);
  EXPECT_EQ(At(f, FeatureId::kVelocitySum24h), 100);
  // m-US-17 (this one), a, b, c: "old" is outside 24 h.
  EXPECT_EQ(At(f, FeatureId::kDistinctMerchants24h), 4);
}

TEST(ComputeFeatures, SecondsSinceLastAndZscoreFromRunningStats) {
  const FeatureVector f = ComputeFeatures(BaseTransaction(), HandBuiltState());
  EXPECT_EQ(At(f, FeatureId::kSecondsSinceLast), 30);
  EXPECT_FLOAT_EQ(At(f, FeatureId::kAmountZscore), static_cast<float>((42.5 - 25.0) / std::sqrt(250.0)));
}

TEST(ComputeFeatures, UnknownDeviceOnAKnownCardIsNew) {
  Transaction tx = BaseTransaction();
  tx.device_id = "phone";
  EXPECT_EQ(At(ComputeFeatures(tx, HandBuiltState()), FeatureId::kNewDevice), 1);
  tx.device_id = "laptop";
  EXPECT_EQ(At(ComputeFeatures(tx, HandBuiltState()), FeatureId::kNewDevice), 0);
}

TEST(ComputeFeatures, DistanceAndSpeedFromPreviousCoordinates) {
  Transaction tx = BaseTransaction();
  tx.latitude = 41.71;  // one degree north of the previous transaction
  tx.longitude = -74.0;
  const FeatureVector f = ComputeFeatures(tx, HandBuiltState());
  const double one_degree_km = 6371.0088 * M_PI / 180.0;
  EXPECT_NEAR(At(f, FeatureId::kDistanceKm), one_degree_km, 1e-3);
  // 30 s apart, but elapsed time is floored at one minute.
  EXPECT_NEAR(At(f, FeatureId::kSpeedKmh), one_degree_km * 60.0, 1e-1);
}

TEST(ComputeFeatures, NewCardHasMissingHistoryFeatures) {
  Transaction tx = BaseTransaction();
  tx.device_id = "phone";
  const FeatureVector f = ComputeFeatures(tx, CardState());
  EXPECT_TRUE(std::isnan(At(f, FeatureId::kSecondsSinceLast)));
  EXPECT_TRUE(std::isnan(At(f, FeatureId::kAmountZscore)));
  EXPECT_TRUE(std::isnan(At(f, FeatureId::kDistanceKm)));
  EXPECT_TRUE(std::isnan(At(f, FeatureId::kSpeedKmh)));
  EXPECT_EQ(At(f, FeatureId::kNewDevice), 0);  // nothing to compare with yet
  EXPECT_EQ(At(f, FeatureId::kVelocityCount24h), 0);
  EXPECT_EQ(At(f, FeatureId::kDistinctMerchants24h), 1);
}

TEST(ComputeFeatures, NoDeviceIdMeansMissingNewDevice) {
  EXPECT_TRUE(std::isnan(At(ComputeFeatures(BaseTransaction(), HandBuiltState()), FeatureId::kNewDevice)));
}

TEST(ComputeFeatures, CrossBorderFallsBackToHomeCountry) {
  Transaction tx = BaseTransaction();
  tx.card_country.clear();
  tx.merchant_country = "FR";
  EXPECT_EQ(At(ComputeFeatures(tx, HandBuiltState()), FeatureId::kCrossBorder), 1);  // home US
  EXPECT_EQ(At(ComputeFeatures(tx, CardState()), FeatureId::kCrossBorder), 0);       // no home yet
}

TEST(MccRiskGroup, GroupsHighMediumAndLow) {
  EXPECT_EQ(MccRiskGroup("7995"), 2);
  EXPECT_EQ(MccRiskGroup("6051"), 2);
  EXPECT_EQ(MccRiskGroup("5732"), 1);
  EXPECT_EQ(MccRiskGroup("5411"), 0);
}

TEST(FeatureNames, RoundTripThroughIds) {
  for (int i = 0; i < kFeatureCount; ++i) {
    const FeatureId id = static_cast<FeatureId>(i);
    EXPECT_EQ(FeatureIdFromName(FeatureName(id)), id);
  }
  EXPECT_EQ(FeatureIdFromName("no_such_feature"), std::nullopt);
}

}  // namespace
}  // namespace txscore::fraud
