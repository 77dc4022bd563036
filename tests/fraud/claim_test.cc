#include "fraud/claim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "fraud/claims_synthetic.h"
#include "fraud/features.h"
#include "fraud/trainer.h"
#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

RawClaim ValidRawClaim() {
  RawClaim c;
  c.claim_id = "CLM-1";
  c.policy_id = "POL-1";
  c.claimant_id = "C-1";
  c.incident_date = "2026-02-27";
  c.report_date = "2026-03-02";
  c.claim_type = "burglary";
  c.amount_claimed = 9500;
  c.policy_limit = 10000;
  c.prior_claims = 2;
  c.provider_id = "P-7";
  c.narrative = "Our flat was broken into  while we were away.";
  return c;
}

std::unique_ptr<CardTokenizer> Tokenizer() { return CardTokenizer::FromKey(testing::TestCardKey()); }

TEST(ParseIsoDate, AcceptsRealCalendarDatesOnly) {
  EXPECT_EQ(ParseIsoDate("1970-01-01").value(), 0);
  EXPECT_EQ(ParseIsoDate("2026-01-01").value(), 20454);
  EXPECT_EQ(ParseIsoDate("2024-02-29").value() + 1, ParseIsoDate("2024-03-01").value());  // a leap year
  EXPECT_EQ(ParseIsoDate("2026-02-29").error().message, "\"2026-02-29\" is not a calendar date");
  EXPECT_EQ(ParseIsoDate("2026-13-01").error().message, "\"2026-13-01\" is not a calendar date");
  EXPECT_EQ(ParseIsoDate("2026-1-01").error().message, "\"2026-1-01\" is not a date of the form YYYY-MM-DD");
  EXPECT_EQ(IsoDate(ParseIsoDate("2000-02-29").value()), "2000-02-29");
  EXPECT_EQ(ParseIsoDate("0000-01-01").error().message, "\"0000-01-01\" is outside the years 1900 to 2100");
  EXPECT_EQ(ParseIsoDate("2101-01-01").error().message, "\"2101-01-01\" is outside the years 1900 to 2100");
}

TEST(ValidateClaim, TokenizesTheClaimantAndCountsDays) {
  auto claim = ValidateClaim(ValidRawClaim(), *Tokenizer());
  ASSERT_TRUE(claim.ok()) << claim.error().ToString();
  EXPECT_EQ(claim->claimant_token, Tokenizer()->TokenizeClaimant("C-1"));
  EXPECT_EQ(claim->report_day - claim->incident_day, 3);
  EXPECT_EQ(ClaimTypes()[static_cast<size_t>(claim->claim_type)], "burglary");
}

TEST(ValidateClaim, RedactsCardNumbersInFreeText) {
  RawClaim raw = ValidRawClaim();
  raw.narrative = "They charged my card 4000 0012 3456 7899 twice.";
  raw.adjuster_notes = "Claimant quoted 4000-0012-3456-7899 and ref 12345.";
  auto claim = ValidateClaim(raw, *Tokenizer());
  ASSERT_TRUE(claim.ok()) << claim.error().ToString();
  EXPECT_EQ(claim->narrative, "They charged my card [card number redacted] twice.");
  EXPECT_EQ(claim->adjuster_notes, "Claimant quoted [card number redacted] and ref 12345.");
}

TEST(ClaimForStorage, KeepsTheClaimantTokenNotTheIdAndValidatesTheSame) {
  RawClaim raw = ValidRawClaim();
  raw.narrative = "Paid with 4000001234567899.";
  auto stored = ClaimForStorage(raw, *Tokenizer());
  ASSERT_TRUE(stored.ok()) << stored.error().ToString();
  EXPECT_EQ(stored->claimant_id, "");
  EXPECT_EQ(stored->claimant_token, Tokenizer()->TokenizeClaimant("C-1"));
  EXPECT_EQ(stored->narrative, "Paid with [card number redacted].");
  const std::string line = ClaimToJson(*stored);
  EXPECT_EQ(line.find("claimant_id"), std::string::npos);
  // Read back, it is the same claim as the original: the token is not tokenized again.
  auto reread = ParseClaimJson(line);
  ASSERT_TRUE(reread.ok()) << reread.error().ToString();
  EXPECT_EQ(ValidateClaim(*reread, *Tokenizer())->claimant_token, ValidateClaim(raw, *Tokenizer())->claimant_token);
  raw.claimant_id = "";
  EXPECT_EQ(ClaimForStorage(raw, *Tokenizer()).error().field, "claimant_id");
}

TEST(ClaimForStorage, RefusesACardNumberInAnId) {
  for (const char* field : {"claim_id", "policy_id", "provider_id"}) {
    RawClaim raw = ValidRawClaim();
    (std::string(field) == "claim_id"    ? raw.claim_id
     : std::string(field) == "policy_id" ? raw.policy_id
                                         : raw.provider_id) = "4000 0012 3456 7899";
    auto stored = ClaimForStorage(raw, *Tokenizer());
    ASSERT_FALSE(stored.ok()) << field;
    EXPECT_EQ(stored.error().field, field);
    EXPECT_EQ(stored.error().message, std::string(field) +
                                          " holds what looks like a card number (a Luhn-valid run of digits with a "
                                          "card network's prefix and length); card numbers belong in card_number only");
  }
}

// Claim ids are kept by job outputs and log lines: a card the log-line rule would leave there (in
// a word shaped as a token txscore makes) is refused too.
TEST(ClaimForStorage, RefusesACardInAnIdShapedAsATokenTxscoreMakes) {
  RawClaim raw = ValidRawClaim();
  raw.claim_id = "CLM.4111111111111111337f244c3774381013054796f43d212966aa8b659e556703";
  auto stored = ClaimForStorage(raw, *Tokenizer());
  ASSERT_FALSE(stored.ok());
  EXPECT_EQ(stored.error().field, "claim_id");
}

TEST(ClaimForStorage, StoresOnlyAClaimThatPassesEveryCheck) {
  // A claim type or date that is not one is refused before it could be stored.
  RawClaim raw = ValidRawClaim();
  raw.claim_type = "card 4000 0012 3456 7899";
  EXPECT_EQ(ClaimForStorage(raw, *Tokenizer()).error().field, "claim_type");
  raw = ValidRawClaim();
  raw.incident_date = "4000001234567899";
  EXPECT_EQ(ClaimForStorage(raw, *Tokenizer()).error().field, "incident_date");
}

TEST(ValidateClaim, AClaimantTokenMadeUnderARetiredKeyIsRefused) {
  const Keyset keys = Keyset::Generate(1).Rotated(2);
  const std::string old_token = Keyset::TokenUnder(keys.keys()[0], "claimant:C-1", KeyPurpose::kClaimantToken);
  RawClaim raw = ValidRawClaim();
  raw.claimant_id.clear();
  raw.claimant_token = old_token;
  EXPECT_TRUE(ValidateClaim(raw, *CardTokenizer::FromKeyset(keys)).ok());  // k1 active: resolved
  const auto retired = CardTokenizer::FromKeyset(keys.WithRetired("k1", 3).value());
  EXPECT_TRUE(
      testing::IsError(ValidateClaim(raw, *retired), ErrorCode::kInvalidArgument,
                       "claimant_token was made with key k1, which is retired: tokenize with the primary key k2"));
  EXPECT_EQ(ValidateClaim(raw, *retired).error().field, "claimant_token");
}

TEST(ParseClaimJson, TakesExactlyOneOfClaimantIdAndToken) {
  RawClaim raw = ValidRawClaim();
  raw.claimant_token = std::string(64, 'a');
  std::string both = ClaimToJson(raw);  // writes the token only
  both.insert(1, "\"claimant_id\":\"C-1\",");
  EXPECT_EQ(ParseClaimJson(both).error().message, "exactly one of claimant_id and claimant_token is required");
  raw.claimant_token = "not-a-token";
  auto parsed = ParseClaimJson(ClaimToJson(raw));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(ValidateClaim(*parsed, *Tokenizer()).error().field, "claimant_token");
}

TEST(ValidateClaim, NamesTheFieldAtFault) {
  auto error = [](void (*change)(RawClaim*)) {
    RawClaim c = ValidRawClaim();
    change(&c);
    return ValidateClaim(c, *Tokenizer()).error();
  };
  Error e = error([](RawClaim* c) { c->report_date = "2026-02-01"; });
  EXPECT_EQ(e.field, "report_date");
  EXPECT_EQ(e.message, "report_date 2026-02-01 is before incident_date 2026-02-27");
  e = error([](RawClaim* c) { c->claim_type = "alien_abduction"; });
  EXPECT_EQ(e.field, "claim_type");
  e = error([](RawClaim* c) { c->policy_limit = 0; });
  EXPECT_EQ(e.message, "policy_limit must be a finite number > 0");
  e = error([](RawClaim* c) { c->amount_claimed = NAN; });
  EXPECT_EQ(e.field, "amount_claimed");
  e = error([](RawClaim* c) { c->claimant_id.clear(); });
  EXPECT_EQ(e.message, "claimant_id must not be empty");
  e = error([](RawClaim* c) { c->narrative.clear(); });
  EXPECT_EQ(e.field, "narrative");
  for (void (*change)(RawClaim*) : {+[](RawClaim* c) { c->claim_id = "CLM-4000001234567899"; },
                                    +[](RawClaim* c) { c->policy_id = "4000 0012 3456 7899"; },
                                    +[](RawClaim* c) { c->provider_id = "P-4000001234567899"; }}) {
    e = error(change);
    EXPECT_EQ(e.message, e.field +
                             " holds what looks like a card number (a Luhn-valid run of digits with a card network's "
                             "prefix and length); card numbers belong in card_number only");
  }
}

TEST(ValidateClaim, BytesThatAreNotUtf8AndInfinitiesAreRefusedNamingTheField) {
  using Setter = void (*)(RawClaim*, const std::string&);
  const std::vector<std::pair<std::string, Setter>> text_fields = {
      {"claim_id", [](RawClaim* c, const std::string& v) { c->claim_id = v; }},
      {"policy_id", [](RawClaim* c, const std::string& v) { c->policy_id = v; }},
      {"claimant_id", [](RawClaim* c, const std::string& v) { c->claimant_id = v; }},
      {"provider_id", [](RawClaim* c, const std::string& v) { c->provider_id = v; }},
      {"narrative", [](RawClaim* c, const std::string& v) { c->narrative = v; }},
      {"adjuster_notes", [](RawClaim* c, const std::string& v) { c->adjuster_notes = v; }},
  };
  // Two ids differing only in a byte that is not UTF-8 would both be written "CLM-\uFFFD".
  for (const std::string bad :
       {"CLM-\xff", "CLM-\xfe", "\xc3\x28", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xe2\x82"}) {
    for (const auto& [field, set] : text_fields) {
      RawClaim c = ValidRawClaim();
      set(&c, bad);
      const auto validated = ValidateClaim(c, *Tokenizer());
      ASSERT_FALSE(validated.ok()) << field;
      EXPECT_EQ(validated.error().field, field);
      EXPECT_EQ(validated.error().message, field + " is not valid UTF-8");
    }
  }
  RawClaim accented = ValidRawClaim();
  accented.narrative =
      "Der Keller stand unter Wasser; Sch\xc3\xa4"
      "den an W\xc3\xa4nden \xe2\x82\xac 2000 \xf0\x9f\x8c\x8a";
  EXPECT_TRUE(ValidateClaim(accented, *Tokenizer()).ok());  // the control: well-formed UTF-8
  for (const double bad : {INFINITY, -INFINITY}) {
    RawClaim c = ValidRawClaim();
    c.amount_claimed = bad;
    EXPECT_EQ(ValidateClaim(c, *Tokenizer()).error().field, "amount_claimed");
    c = ValidRawClaim();
    c.policy_limit = bad;
    EXPECT_EQ(ValidateClaim(c, *Tokenizer()).error().field, "policy_limit");
  }
}

TEST(ParseClaimJson, RoundTripsAndRefusesWhatItDoesNotKnow) {
  const RawClaim original = ValidRawClaim();
  auto parsed = ParseClaimJson(ClaimToJson(original));
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString();
  EXPECT_EQ(parsed->claim_id, original.claim_id);
  EXPECT_EQ(parsed->amount_claimed, original.amount_claimed);
  EXPECT_EQ(parsed->prior_claims, 2);
  EXPECT_EQ(ParseClaimJson("[1]").error().message, "the line is not a JSON object");
  EXPECT_EQ(ParseClaimJson(R"({"claim_id": "x", "colour": "red"})").error().message, "unknown key \"colour\"");
  std::string text = ClaimToJson(original);
  text.replace(text.find("\"prior_claims\":2"), 16, "\"prior_claims\":2.5");
  EXPECT_EQ(ParseClaimJson(text).error().message, "prior_claims must be an integer");
}

TEST(Csv, QuotedFieldsMayHoldCommasQuotesAndNewlines) {
  bool complete = false;
  EXPECT_EQ(SplitCsvRecord("a,\"b, \"\"c\"\"\",,d\r", &complete), (std::vector<std::string>{"a", "b, \"c\"", "", "d"}));
  EXPECT_TRUE(complete);
  SplitCsvRecord("a,\"open", &complete);
  EXPECT_FALSE(complete);
  EXPECT_EQ(SplitCsvRecord("a,\"two\nlines\"", &complete)[1], "two\nlines");
  EXPECT_TRUE(complete);
}

TEST(Csv, TheHeaderNamesTheColumnsInAnyOrder) {
  std::vector<std::string> columns = {"narrative",     "claim_id",     "policy_id",  "claimant_id",
                                      "incident_date", "report_date",  "claim_type", "amount_claimed",
                                      "policy_limit",  "prior_claims", "provider_id"};
  auto header = ClaimCsvHeader::Parse(columns);
  ASSERT_TRUE(header.ok()) << header.error().ToString();
  auto claim =
      header->Read({"text", "CLM-1", "POL-1", "C-1", "2026-01-01", "2026-01-02", "travel", "12.5", "100", "0", "P-1"});
  ASSERT_TRUE(claim.ok()) << claim.error().ToString();
  EXPECT_EQ(claim->narrative, "text");
  EXPECT_EQ(claim->amount_claimed, 12.5);
  EXPECT_EQ(
      header->Read({"text", "CLM-1", "POL-1", "C-1", "2026-01-01", "2026-01-02", "travel", "12,5", "100", "0", "P-1"})
          .error()
          .message,
      "amount_claimed must be a number");
  EXPECT_EQ(header->Read({"too", "few"}).error().message, "the record has 2 fields; the header has 11");
  columns.pop_back();
  EXPECT_EQ(ClaimCsvHeader::Parse(columns).error().message, "the header has no column \"provider_id\"");
}

TEST(ComputeClaimFeatures, FillsTheClaimFeaturesOnly) {
  const Claim claim = ValidateClaim(ValidRawClaim(), *Tokenizer()).value();
  const FeatureVector f = ComputeClaimFeatures(claim, 4);
  auto at = [&](FeatureId id) { return f[static_cast<size_t>(id)]; };
  EXPECT_EQ(at(FeatureId::kClaimDaysToReport), 3);
  EXPECT_FLOAT_EQ(at(FeatureId::kClaimAmountToLimit), 0.95f);
  EXPECT_FLOAT_EQ(at(FeatureId::kClaimLogAmount), static_cast<float>(std::log1p(9500.0)));
  EXPECT_EQ(at(FeatureId::kClaimPriorClaims), 2);
  EXPECT_EQ(at(FeatureId::kClaimProviderClaims), 4);
  EXPECT_EQ(at(FeatureId::kClaimNarrativeWords), 9);   // a run of spaces separates once
  EXPECT_TRUE(std::isnan(at(FeatureId::kLogAmount)));  // a transaction feature
}

TEST(GenerateClaims, IsDeterministicValidAndHasEveryPattern) {
  SyntheticClaimsOptions options;
  options.claims = 1500;
  const std::vector<LabeledClaim> a = GenerateClaims(options), b = GenerateClaims(options);
  ASSERT_EQ(a.size(), 1500u);
  std::map<std::string, int> patterns;
  int fraud = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(ClaimToJson(a[i].claim), ClaimToJson(b[i].claim));
    ASSERT_TRUE(ValidateClaim(a[i].claim, *Tokenizer()).ok()) << ClaimToJson(a[i].claim);
    if (i > 0) {
      EXPECT_LE(a[i - 1].claim.report_date, a[i].claim.report_date);
    }
    fraud += a[i].is_fraud;
    EXPECT_EQ(a[i].is_fraud, !a[i].patterns.empty());
    for (const std::string& p : a[i].patterns) ++patterns[p];
  }
  EXPECT_NEAR(fraud / 1500.0, options.fraud_rate, 0.03);
  for (const char* p : {"late_report", "just_under_limit", "mill_provider", "many_prior_claims", "inconsistent_dates",
                        "vague_description", "pressure_to_settle"}) {
    EXPECT_GT(patterns[p], 10) << p;
  }
}

TEST(GenerateClaims, ALargerFileCoversALongerTimeAtTheSameDailyRate) {
  for (const auto& [claims, days] : {std::pair{4000, 365}, std::pair{30000, 2737}, std::pair{100, 9}}) {
    SyntheticClaimsOptions options;
    options.claims = claims;
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const LabeledClaim& c : GenerateClaims(options)) {
      const int64_t day = ParseIsoDate(c.claim.incident_date).value();
      first = std::min(first, day);
      last = std::max(last, day);
    }
    EXPECT_EQ(first, options.start_day) << claims;
    EXPECT_LE(last - first + 1, days) << claims;
    EXPECT_GE(last - first + 1, days - 3) << claims;  // the span is used, to within a few days
  }
  SyntheticClaimsOptions fixed;
  fixed.claims = 1000;
  fixed.days = 20;
  for (const LabeledClaim& c : GenerateClaims(fixed)) {
    EXPECT_LT(ParseIsoDate(c.claim.incident_date).value(), fixed.start_day + 20);
  }
}

TEST(BuildClaimFeatureTable, TheProviderFeatureCountsTheProvidersClaimsOfTheNinetyDaysBefore) {
  SyntheticClaimsOptions options;
  options.claims = 2000;
  const std::vector<LabeledClaim> claims = GenerateClaims(options);
  const Result<FeatureTable> table = BuildClaimFeatureTable(claims);
  ASSERT_TRUE(table.ok()) << table.error().ToString();
  size_t column = table->schema.size();
  for (size_t c = 0; c < table->schema.size(); ++c) {
    if (table->schema.at(c) == FeatureId::kClaimProviderClaims) column = c;
  }
  ASSERT_LT(column, table->schema.size());
  int64_t largest = 0;
  for (size_t i = 0; i < claims.size(); i += 37) {
    const int64_t day = ParseIsoDate(claims[i].claim.report_date).value();
    int64_t expected = 0;
    for (const LabeledClaim& other : claims) {
      const int64_t other_day = ParseIsoDate(other.claim.report_date).value();
      expected += other.claim.provider_id == claims[i].claim.provider_id && other_day >= day - 90 && other_day < day;
    }
    EXPECT_EQ(table->values[i * table->schema.size() + column], static_cast<float>(expected)) << i;
    largest = std::max(largest, expected);
  }
  EXPECT_GT(largest, 2);  // the check saw counts other than 0 and 1
}

}  // namespace
}  // namespace txscore::fraud
