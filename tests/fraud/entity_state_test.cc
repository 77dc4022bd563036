#include "fraud/entity_state.h"

#include <gtest/gtest.h>

#include "common/bytes.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

Transaction Tx(int64_t t_ms, int64_t amount_minor, const std::string& merchant) {
  Transaction tx = ValidateTransaction(testing::ValidTransaction()).value();
  tx.timestamp_ms = t_ms;
  tx.amount_minor = amount_minor;
  tx.merchant_id = merchant;
  return tx;
}

TEST(UpdateCardState, KeepsRunningMeanAndVariance) {
  CardState state;
  UpdateCardState(Tx(1000000, 1000, "a"), &state);  // 10.00
  UpdateCardState(Tx(2000000, 3000, "b"), &state);  // 30.00
  UpdateCardState(Tx(3000000, 5000, "c"), &state);  // 50.00
  EXPECT_EQ(state.transaction_count, 3u);
  EXPECT_DOUBLE_EQ(state.amount_mean, 30.0);
  EXPECT_DOUBLE_EQ(state.amount_m2, 800.0);  // (20^2 + 0 + 20^2)
  EXPECT_EQ(state.last_timestamp_ms, 3000000);
  EXPECT_EQ(state.home_country, "US");
  ASSERT_EQ(state.recent.size(), 3u);
  EXPECT_EQ(state.recent[1], (RecentEvent{2000000, 30.0, Fnv1a64("b")}));
}

TEST(UpdateCardState, DropsEventsOlderThan24Hours) {
  CardState state;
  UpdateCardState(Tx(0 + 946684800000, 100, "a"), &state);
  UpdateCardState(Tx(946684800000 + kStateWindowMs, 100, "b"), &state);  // exactly 24 h later
  ASSERT_EQ(state.recent.size(), 1u);
  EXPECT_EQ(state.recent[0].merchant_hash, Fnv1a64("b"));
}

TEST(UpdateCardState, KeepsLateArrivalsInTimeOrder) {
  CardState state;
  UpdateCardState(Tx(946684800000 + 2000, 100, "b"), &state);
  UpdateCardState(Tx(946684800000 + 1000, 100, "a"), &state);
  ASSERT_EQ(state.recent.size(), 2u);
  EXPECT_EQ(state.recent[0].timestamp_ms, 946684800000 + 1000);
  EXPECT_EQ(state.last_timestamp_ms, 946684800000 + 2000);
}

TEST(UpdateCardState, CapsRecentEventsAtTheMaximum) {
  CardState state;
  for (int i = 0; i < static_cast<int>(kMaxRecentEvents) + 10; ++i) {
    UpdateCardState(Tx(946684800000 + i * 1000, 100, "m"), &state);
  }
  EXPECT_EQ(state.recent.size(), kMaxRecentEvents);
  EXPECT_EQ(state.recent.front().timestamp_ms, 946684800000 + 10 * 1000);
}

TEST(UpdateCardState, RemembersDevicesNewestLast) {
  CardState state;
  Transaction tx = Tx(946684800000, 100, "m");
  tx.device_id = "phone";
  UpdateCardState(tx, &state);
  tx.device_id = "laptop";
  UpdateCardState(tx, &state);
  tx.device_id = "phone";
  UpdateCardState(tx, &state);
  EXPECT_EQ(state.known_devices, (std::vector<uint64_t>{Fnv1a64("laptop"), Fnv1a64("phone")}));
}

TEST(CardStateCodec, RoundTripsEveryField) {
  CardState state;
  state.recent = {{1, 2.5, 3}, {4, 5.25, 6}};
  state.transaction_count = 7;
  state.last_timestamp_ms = 8;
  state.last_latitude = 40.5;
  state.last_longitude = -73.25;
  state.amount_mean = 9.5;
  state.amount_m2 = 10.75;
  state.known_devices = {11, 12};
  state.home_country = "GB";
  Result<CardState> decoded = DecodeCardState(EncodeCardState(state));
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  EXPECT_EQ(*decoded, state);
}

TEST(CardStateCodec, EncodesLittleEndianWithVersionByte) {
  CardState state;
  state.transaction_count = 0x0102;
  const std::string bytes = EncodeCardState(state);
  ASSERT_GE(bytes.size(), 9u);
  EXPECT_EQ(bytes[0], 1);     // format version
  EXPECT_EQ(bytes[1], 0x02);  // low byte first, on every host
  EXPECT_EQ(bytes[2], 0x01);
}

TEST(CardStateCodec, RejectsTruncatedBytes) {
  CardState state;
  state.recent = {{1, 2.5, 3}};
  std::string bytes = EncodeCardState(state);
  bytes.pop_back();
  Result<CardState> decoded = DecodeCardState(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().code, ErrorCode::kDataLoss);
  EXPECT_EQ(decoded.error().message, "card state is truncated or has trailing bytes");
}

TEST(CardStateCodec, RejectsUnknownVersion) {
  Result<CardState> decoded = DecodeCardState(std::string("\x09", 1));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error().message, "card state has unknown format version 9");
}

}  // namespace
}  // namespace txscore::fraud
