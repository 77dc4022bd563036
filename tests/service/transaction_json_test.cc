#include "service/transaction_json.h"

#include <gtest/gtest.h>

namespace txscore::service {
namespace {

constexpr char kLine[] =
    R"({"request_id": "r1", "timestamp_ms": 1767225600000, "amount_minor": 1250, "currency": "USD",
        "card_number": "4000001234567899", "merchant_id": "m-1", "mcc": "5411", "merchant_country": "US",
        "channel": "CARD_PRESENT", "entry_mode": 1, "latitude": 40.5, "longitude": -73.5})";

TEST(TransactionFromJson, ParsesFieldsAndEnumsByNameOrNumber) {
  auto t = TransactionFromJson(kLine);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(t->request_id, "r1");
  EXPECT_EQ(t->amount_minor, 1250);
  EXPECT_TRUE(t->__isset.card_number);
  EXPECT_FALSE(t->__isset.card_token);
  EXPECT_EQ(t->channel, rpc::Channel::CARD_PRESENT);
  EXPECT_EQ(t->entry_mode, rpc::EntryMode::CHIP);
  EXPECT_TRUE(t->__isset.latitude);
  EXPECT_EQ(t->longitude, -73.5);
}

TEST(TransactionFromJson, RoundTripsThroughTransactionToJson) {
  auto t = TransactionFromJson(kLine);
  ASSERT_TRUE(t.ok());
  auto again = TransactionFromJson(TransactionToJson(*t));
  ASSERT_TRUE(again.ok()) << again.error().ToString();
  EXPECT_EQ(*again, *t);
}

TEST(TransactionFromJson, NamesTheBadField) {
  EXPECT_EQ(TransactionFromJson(R"({"request_id": 5})").error().field, "request_id");
  auto unknown = TransactionFromJson(R"({"request_id": "r", "colour": "red"})");
  EXPECT_EQ(unknown.error().field, "colour");
  EXPECT_EQ(unknown.error().message, "unknown field");
  std::string bad_enum = kLine;
  bad_enum.replace(bad_enum.find("\"CARD_PRESENT\""), 14, "\"TELEPATHY\"");
  EXPECT_EQ(TransactionFromJson(bad_enum).error().field, "channel");
  EXPECT_EQ(TransactionFromJson("not json").error().message, "not a JSON object");
}

}  // namespace
}  // namespace txscore::service
