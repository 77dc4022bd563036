#include "fraud/card_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/test_support.h"

namespace txscore::fraud {
namespace {

TEST(LuhnValid, AcceptsKnownValidNumbers) {
  EXPECT_TRUE(LuhnValid("4111111111111111"));
  EXPECT_TRUE(LuhnValid("79927398713"));
  EXPECT_TRUE(LuhnValid("4000001234567899"));
}

TEST(LuhnValid, RejectsWrongCheckDigitAndNonDigits) {
  EXPECT_FALSE(LuhnValid("4111111111111112"));
  EXPECT_FALSE(LuhnValid("79927398710"));
  EXPECT_FALSE(LuhnValid("4111-1111-1111-1111"));
  EXPECT_FALSE(LuhnValid(""));
}

TEST(LuhnCheckDigit, CompletesAValidNumber) {
  EXPECT_EQ(LuhnCheckDigit("7992739871"), '3');
  EXPECT_EQ(LuhnCheckDigit("400000123456789"), '9');
  EXPECT_TRUE(LuhnValid(std::string("41111111111111") + LuhnCheckDigit("41111111111111")));
}

TEST(ValidatePan, RejectsTooShortWithFieldAndLength) {
  Status s = ValidatePan("42424242424");  // 11 digits
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().field, "card_number");
  EXPECT_EQ(s.error().message, "must be 12 to 19 digits, got 11 characters");
}

TEST(ValidatePan, RejectsTwentyDigits) {
  EXPECT_EQ(ValidatePan("41111111111111111113").error().message, "must be 12 to 19 digits, got 20 characters");
}

TEST(ValidatePan, RejectsNonDigitsWithoutEchoingThePan) {
  Status s = ValidatePan("4111 1111 1111 1111");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "must contain digits only");
}

TEST(ValidatePan, RejectsLuhnFailure) {
  EXPECT_EQ(ValidatePan("4111111111111112").error().message, "fails the Luhn check digit");
}

TEST(ValidatePan, AcceptsTwelveAndNineteenDigits) {
  EXPECT_TRUE(ValidatePan("123456789015").ok());         // 12 digits, Luhn-valid
  EXPECT_TRUE(ValidatePan("4000000000000000006").ok());  // 19 digits, Luhn-valid
}

TEST(ValidateCardToken, RejectsSomethingThatIsAPan) {
  Status s = ValidateCardToken("4111111111111111");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().field, "card_token");
  EXPECT_EQ(s.error().message,
            "holds a card number (12-19 digits passing the Luhn check, separators ignored); send the card number "
            "in card_number so that it is tokenized");
}

TEST(ValidateCardToken, RejectsAPanFormattedSplitOrEmbedded) {
  for (const char* token : {"4000-0012-3456-7899", "4000 0012 3456 7899", "x4000001234567899", "4000_0012_3456_7899",
                            "tok-4000001234567899-a", "card4000.0012.3456.7899end", "98764000001234567899"}) {
    Status s = ValidateCardToken(token);
    ASSERT_FALSE(s.ok()) << token;
    EXPECT_EQ(s.error().field, "card_token");
    EXPECT_EQ(s.error().message.rfind("holds a card number", 0), 0u) << token << ": " << s.error().message;
  }
  // The same digits with the check digit off by one are not a PAN, so the token is taken.
  EXPECT_TRUE(ValidateCardToken("x4000001234567898").ok());
  EXPECT_TRUE(ValidateCardToken("tok-4000-0012-3456-7898").ok());
}

TEST(ValidateCardToken, TakesTxscoresOwnFormEvenWithADigitRunInside) {
  // 64 lowercase hex digits, as Tokenize() gives, whose digits include a Luhn-valid run.
  const std::string hmac_like = "4000001234567899" + std::string(48, 'a');
  ASSERT_TRUE(IsTxscoreTokenForm(hmac_like));
  EXPECT_TRUE(ValidateCardToken(hmac_like).ok());
  EXPECT_TRUE(IsTxscoreTokenForm(CardTokenizer::FromKey(testing::TestCardKey())->Tokenize("4000001234567899")));
  EXPECT_FALSE(IsTxscoreTokenForm("4000001234567899" + std::string(48, 'A')));  // uppercase: caller form, scanned
  EXPECT_FALSE(ValidateCardToken("4000001234567899" + std::string(48, 'A')).ok());
}

TEST(ValidateCardToken, RefusesACardNumberPaddedWithZerosToTheTokensForm) {
  const std::string pan = "4111111111111111";
  const std::string leading = std::string(48, '0') + pan;
  const std::string trailing = pan + std::string(48, '0');
  const std::string both = std::string(24, '0') + pan + std::string(24, '0');
  for (const std::string& padded : {leading, trailing, both, "k1_" + leading, std::string(64, '0')}) {
    ASSERT_TRUE(IsTxscoreTokenForm(padded)) << padded;  // it would pass as an HMAC's hex digits
    const Status refused = ValidateCardToken(padded);
    ASSERT_FALSE(refused.ok()) << padded;
    EXPECT_EQ(refused.error().field, "card_token");
    EXPECT_EQ(refused.error().message.find(pan), std::string::npos);  // never echoed
  }
  // 64 decimal digits with no short number between zeros and no card number (no run of 12-19
  // ones passes the Luhn check): taken.
  EXPECT_TRUE(ValidateCardToken(std::string(64, '1')).ok());
}

TEST(ValidateCardToken, AcceptsOpaqueTokensAndRejectsBadCharacters) {
  EXPECT_TRUE(ValidateCardToken("tok_8f14e45fceea167a").ok());
  EXPECT_EQ(ValidateCardToken("tok 1").error().message, "may contain only letters, digits, '_' and '-'");
  EXPECT_EQ(ValidateCardToken(std::string(129, 'a')).error().message, "must be 1 to 128 characters");
}

TEST(ValidateCardVerificationCode, AcceptsThreeOrFourDigitsOnly) {
  EXPECT_TRUE(ValidateCardVerificationCode("737").ok());
  EXPECT_TRUE(ValidateCardVerificationCode("1234").ok());
  Status bad = ValidateCardVerificationCode("12a");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "card_verification_code");
  EXPECT_EQ(bad.error().message, "must be 3 or 4 digits");
  EXPECT_FALSE(ValidateCardVerificationCode("12").ok());
}

TEST(CardTokenizer, MatchesRfc4231HmacSha256TestCase2) {
  // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
  auto tokenizer = CardTokenizer::FromKey("Jefe");
  EXPECT_EQ(tokenizer->Tokenize("what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(CardTokenizer, SamePanSameTokenDifferentKeyDifferentToken) {
  auto a = CardTokenizer::FromKey(std::string(32, 'a'));
  auto b = CardTokenizer::FromKey(std::string(32, 'b'));
  EXPECT_EQ(a->Tokenize("4111111111111111"), a->Tokenize("4111111111111111"));
  EXPECT_NE(a->Tokenize("4111111111111111"), b->Tokenize("4111111111111111"));
  EXPECT_EQ(a->Tokenize("4111111111111111").size(), 64u);
}

TEST(CardTokenizer, RefusesKeyFileReadableByOthers) {
  testing::TempDir dir;
  const std::string path = dir.file("key");
  testing::WriteFile(path, testing::TestCardKey());
  for (const mode_t mode : {0644, 0640, 0604}) {  // others, group alone, others alone
    ::chmod(path.c_str(), mode);
    auto result = CardTokenizer::FromKeyFile(path);
    ASSERT_FALSE(result.ok()) << std::oct << mode;
    EXPECT_EQ(result.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_EQ(result.error().message,
              "keyset file " + path + " is readable by group or others; run: chmod 600 " + path);
  }
}

TEST(CardTokenizer, RefusesShortKey) {
  testing::TempDir dir;
  const std::string path = dir.file("key");
  testing::WriteFile(path, "short");
  ::chmod(path.c_str(), 0600);
  auto result = CardTokenizer::FromKeyFile(path);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message, "card key file " + path +
                                        " holds 5 bytes; at least 32 random bytes are needed (openssl rand -out " +
                                        path + " 32)");
}

TEST(CardTokenizer, MissingKeyFileIsNotFound) {
  auto result = CardTokenizer::FromKeyFile("/nonexistent/card.key");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace txscore::fraud
