#include "service/transaction_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

namespace txscore::service {
namespace {

TEST(TransactionFromJson, BudgetIsOptionalAndBounded) {
  std::string line = kLine;
  line.insert(line.size() - 1, R"(, "budget_ms": 250)");
  auto t = TransactionFromJson(line);
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(t->budget_ms, 250);
  EXPECT_EQ(*TransactionFromJson(TransactionToJson(*t)), *t);
  line.replace(line.find("\"budget_ms\": 250"), 16, "\"budget_ms\": 0");
  auto zero = TransactionFromJson(line);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().field, "budget_ms");
  EXPECT_EQ(zero.error().message, "must be an integer between 1 and 600000");
}

TEST(ScoreResultToJson, IncludesFindingsWhenTheForensicStageWroteThem) {
  rpc::ScoreResult r;
  r.request_id = "r1";
  r.decision = rpc::Decision::REVIEW;
  rpc::Findings f;
  f.__set_risk_level("high");
  f.__set_flags({"amount_mismatch"});
  f.__set_summary("Large manual-keyed payment abroad.");
  f.__set_model_id("llm-tiny");
  r.__set_findings(f);
  const auto doc = nlohmann::json::parse(ScoreResultToJson(r));
  EXPECT_EQ(doc["findings"], nlohmann::json::parse(R"({"risk_level": "high", "flags": ["amount_mismatch"],
      "summary": "Large manual-keyed payment abroad.", "model_id": "llm-tiny"})"));
  r.__isset.findings = false;
  EXPECT_FALSE(nlohmann::json::parse(ScoreResultToJson(r)).contains("findings"));
}

}  // namespace
}  // namespace txscore::service
