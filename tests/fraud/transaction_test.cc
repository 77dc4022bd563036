#include "fraud/transaction.h"

#include <gtest/gtest.h>

#include "fraud/currency.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

using testing::ValidTransaction;

void ExpectInvalid(const RawTransaction& raw, const std::string& field, const std::string& message) {
  Result<Transaction> result = ValidateTransaction(raw);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(result.error().field, field);
  EXPECT_EQ(result.error().message, message);
}

TEST(ValidateTransaction, AcceptsAValidTransactionAndDropsCardData) {
  Result<Transaction> tx = ValidateTransaction(ValidTransaction());
  ASSERT_TRUE(tx.ok()) << tx.error().ToString();
  EXPECT_EQ(tx->currency_exponent, 2);
  EXPECT_DOUBLE_EQ(tx->amount_major(), 42.5);
  EXPECT_TRUE(tx->card_token.empty());  // the pipeline sets it from the tokenizer
}

// The request id is kept by log lines and the trail: an id whose card those would leave (in a
// word shaped as a token txscore makes, or written as an address) is refused. A device id, which
// neither keeps, is checked by the plain id rule, so a 64-hex fingerprint with such a run passes.
TEST(ValidateTransaction, ARequestIdWhoseCardLogLinesWouldKeepIsRefusedADeviceIdIsNot) {
  const std::string hex_tail = "f244c3774381013054796f43d212966aa8b659e556703";  // 45 hex digits
  for (const std::string& id : {"r.4111111111111111337" + hex_tail, std::string("r-41.111.111.111:11111")}) {
    RawTransaction raw = ValidTransaction();
    raw.request_id = id;
    Result<Transaction> result = ValidateTransaction(raw);
    ASSERT_FALSE(result.ok()) << id;
    EXPECT_EQ(result.error().field, "request_id");
    RawTransaction device = ValidTransaction();
    device.device_id = id.substr(2);
    EXPECT_TRUE(ValidateTransaction(device).ok()) << id;
  }
}

TEST(ValidateTransaction, RejectsNegativeAmount) {
  RawTransaction raw = ValidTransaction();
  raw.amount_minor = -1;
  ExpectInvalid(raw, "amount_minor", "must not be negative");
}

TEST(ValidateTransaction, BudgetMustBeBetweenOneMillisecondAndTenMinutes) {
  RawTransaction raw = ValidTransaction();
  raw.budget_ms = 250;
  EXPECT_EQ(ValidateTransaction(raw)->budget_ms, 250);
  for (int32_t bad : {0, 600001}) {
    raw.budget_ms = bad;
    Result<Transaction> tx = ValidateTransaction(raw);
    ASSERT_FALSE(tx.ok());
    EXPECT_EQ(tx.error().field, "budget_ms");
    EXPECT_EQ(tx.error().message, "must be between 1 and 600000 milliseconds");
  }
}

TEST(ValidateTransaction, RejectsUnknownCurrency) {
  RawTransaction raw = ValidTransaction();
  raw.currency = "XXY";
  ExpectInvalid(raw, "currency", "is not an ISO 4217 currency code");
}

TEST(ValidateTransaction, RejectsLowercaseCurrency) {
  RawTransaction raw = ValidTransaction();
  raw.currency = "usd";
  ExpectInvalid(raw, "currency", "is not an ISO 4217 currency code");
}

TEST(ValidateTransaction, RejectsEmptyRequestId) {
  RawTransaction raw = ValidTransaction();
  raw.request_id = "";
  ExpectInvalid(raw, "request_id", "must not be empty");
}

TEST(ValidateTransaction, RejectsOverlongMerchantId) {
  RawTransaction raw = ValidTransaction();
  raw.merchant_id = std::string(129, 'm');
  ExpectInvalid(raw, "merchant_id", "is 129 bytes; the limit is 128");
}

TEST(ValidateTransaction, RejectsTimestampBefore2000) {
  RawTransaction raw = ValidTransaction();
  raw.timestamp_ms = 1000;
  ExpectInvalid(raw, "timestamp_ms", "must be milliseconds since 1970-01-01 UTC between the years 2000 and 2100");
}

TEST(ValidateTransaction, RejectsBadMcc) {
  RawTransaction raw = ValidTransaction();
  raw.mcc = "54x1";
  ExpectInvalid(raw, "mcc", "must be 4 digits (ISO 18245)");
}

TEST(ValidateTransaction, RejectsBadCountry) {
  RawTransaction raw = ValidTransaction();
  raw.merchant_country = "USA";
  ExpectInvalid(raw, "merchant_country", "must be an ISO 3166-1 alpha-2 code such as \"US\"");
}

TEST(ValidateTransaction, RejectsUnknownChannel) {
  RawTransaction raw = ValidTransaction();
  raw.channel = 99;
  ExpectInvalid(raw, "channel", "is not a known Channel value");
}

TEST(ValidateTransaction, RejectsLatitudeWithoutLongitude) {
  RawTransaction raw = ValidTransaction();
  raw.longitude.reset();
  ExpectInvalid(raw, "longitude", "latitude and longitude must be sent together");
}

TEST(ValidateTransaction, RejectsLatitudeOutOfRange) {
  RawTransaction raw = ValidTransaction();
  raw.latitude = 91;
  ExpectInvalid(raw, "latitude", "must be between -90 and 90 degrees");
}

TEST(CurrencyExponent, KnowsMinorUnits) {
  EXPECT_EQ(CurrencyExponent("USD"), 2);
  EXPECT_EQ(CurrencyExponent("JPY"), 0);
  EXPECT_EQ(CurrencyExponent("BHD"), 3);
  EXPECT_EQ(CurrencyExponent("ZZZ"), std::nullopt);
}

}  // namespace
}  // namespace txscore::fraud

namespace txscore::fraud {
namespace {

TEST(ValidateTransaction, CountriesMustBeAssignedIsoCodes) {
  for (const char* code : {"QQ", "XX", "AB"}) {
    RawTransaction raw = testing::ValidTransaction();
    raw.merchant_country = code;
    ExpectInvalid(raw, "merchant_country", "must be an ISO 3166-1 alpha-2 code such as \"US\"");
    raw = testing::ValidTransaction();
    raw.card_country = code;
    ExpectInvalid(raw, "card_country", "must be an ISO 3166-1 alpha-2 code such as \"US\"");
  }
}

TEST(ValidateTransaction, IpAddressMustBeARealIpv4OrIpv6Address) {
  for (const char* good : {"192.0.2.1", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::1"}) {
    RawTransaction raw = testing::ValidTransaction();
    raw.ip_address = good;
    EXPECT_TRUE(ValidateTransaction(raw).ok()) << good;
  }
  for (const char* bad : {"999.1.1.1", "1.2.3.4.5", "1.2.3", "256.0.0.1", "2001:db8:::1", "localhost", ""}) {
    RawTransaction raw = testing::ValidTransaction();
    raw.ip_address = bad;
    ExpectInvalid(raw, "ip_address", "must be an IPv4 address (dotted decimal, each part 0-255) or an IPv6 address");
  }
}

TEST(ValidateTransaction, IdsAndTraceparentMustNotHoldACardNumber) {
  const std::string message =
      "holds what looks like a card number (a Luhn-valid run of digits with a card network's prefix and length); "
      "card numbers belong in card_number only";
  RawTransaction raw = ValidTransaction();
  raw.request_id = "req-4000-0012-3456-7899";
  ExpectInvalid(raw, "request_id", message);
  raw = ValidTransaction();
  raw.merchant_id = "4000 0012 3456 7899";
  ExpectInvalid(raw, "merchant_id", message);
  // A long numeric request id without a network's prefix is an id, not a card.
  raw = ValidTransaction();
  raw.request_id = "20261201123456788";
  EXPECT_TRUE(ValidateTransaction(raw).ok());
}

TEST(ValidateTransaction, ATraceparentKeepsItsFourFieldsAndIsDroppedWhenItHoldsACardNumber) {
  RawTransaction raw = ValidTransaction();
  raw.traceparent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-card=4000/0012/3456/7899";
  Result<Transaction> later_version = ValidateTransaction(raw);
  ASSERT_TRUE(later_version.ok()) << later_version.error().ToString();
  EXPECT_EQ(later_version->traceparent, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  // W3C-valid, with a Visa-shaped parent id: scored, but the trace context is not kept.
  raw.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-4000001234567899-01";
  Result<Transaction> card_shaped = ValidateTransaction(raw);
  ASSERT_TRUE(card_shaped.ok()) << card_shaped.error().ToString();
  EXPECT_EQ(card_shaped->traceparent, "");
}

TEST(ValidateTransaction, TraceparentMustFollowW3cTraceContext) {
  const std::string valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const std::string& good :
       {valid, std::string("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")}) {
    RawTransaction raw = testing::ValidTransaction();
    raw.traceparent = good;
    EXPECT_TRUE(ValidateTransaction(raw).ok()) << good;
  }
  const std::string message =
      "must be a W3C traceparent: version-traceid-parentid-flags in lowercase hex, e.g. "
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const std::string& bad :
       std::vector<std::string>{"zz", "", valid + "-x",                                     // version 00 is 55 chars
                                "ff" + valid.substr(2),                                     // version ff
                                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
                                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero parent id
                                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // uppercase
                                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"}) {
    RawTransaction raw = testing::ValidTransaction();
    raw.traceparent = bad;
    ExpectInvalid(raw, "traceparent", message);
  }
}

}  // namespace
}  // namespace txscore::fraud
