#include "fraud/provider_history.h"

#include <gtest/gtest.h>

#include <string>

namespace txscore::fraud {
namespace {

constexpr int64_t kDay = 20500;

TEST(ProviderClaimsHistory, CountsTheClaimsOfTheNinetyDaysBeforeAndNotTheDayItself) {
  ProviderClaimsHistory history;
  history.Add(1, kDay - 91);  // one day too old
  history.Add(2, kDay - 90);  // the window's first day
  history.Add(3, kDay - 1);   // its last day
  history.Add(4, kDay);       // the claim's own day: left out, whatever the order within it
  history.Add(5, kDay + 3);   // after the claim: left out
  EXPECT_EQ(history.CountBefore(kDay), 2);
  EXPECT_EQ(history.CountBefore(kDay + 1), 2);  // kDay - 90 has left the window, kDay has come in
  EXPECT_EQ(history.CountBefore(kDay - 90), 1);
  EXPECT_EQ(history.size(), 5u);
}

TEST(ProviderClaimsHistory, AClaimHeldOnceIsCountedOnce) {
  ProviderClaimsHistory history;
  EXPECT_TRUE(history.Add(7, kDay - 10));
  EXPECT_FALSE(history.Add(7, kDay - 10));
  EXPECT_FALSE(history.Add(7, kDay - 20));  // the same claim id with another day keeps its first
  EXPECT_EQ(history.CountBefore(kDay), 1);
  EXPECT_EQ(history.CountBefore(kDay - 15), 0);
}

TEST(ProviderClaimsHistory, PruneDropsOnlyClaimsOlderThanTheRetention) {
  ProviderClaimsHistory history;
  history.Add(1, kDay - ProviderClaimsHistory::kRetentionDays - 1);
  history.Add(2, kDay - ProviderClaimsHistory::kRetentionDays);
  history.Add(3, kDay);
  history.Prune();
  EXPECT_EQ(history.size(), 2u);
  // The pruned claim is forgotten: recording it again adds it.
  EXPECT_TRUE(history.Add(1, kDay - ProviderClaimsHistory::kRetentionDays - 1));
  EXPECT_FALSE(history.Add(2, kDay - ProviderClaimsHistory::kRetentionDays));
}

TEST(ProviderClaimsHistory, EncodesLittleEndianWhateverTheHost) {
  ProviderClaimsHistory history;
  history.Add(0x0102030405060708ull, 0x1234);
  const std::string expected = std::string("\x01", 1) +              // format
                               std::string("\x01\x00\x00\x00", 4) +  // one claim
                               std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) +
                               std::string("\x34\x12\x00\x00\x00\x00\x00\x00", 8);
  EXPECT_EQ(history.Encode(), expected);
}

TEST(ProviderClaimsHistory, RoundTripsThroughItsEncoding) {
  ProviderClaimsHistory history;
  for (uint64_t i = 0; i < 50; ++i) history.Add(i * 7919, kDay - static_cast<int64_t>(i % 120));
  const Result<ProviderClaimsHistory> decoded = ProviderClaimsHistory::Decode(history.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  EXPECT_EQ(decoded->Encode(), history.Encode());
  EXPECT_EQ(decoded->CountBefore(kDay), history.CountBefore(kDay));
  EXPECT_FALSE(ProviderClaimsHistory(*decoded).Add(7919, kDay - 1));  // digests are restored too
}

TEST(ProviderClaimsHistory, DecodeRefusesAnUnknownFormatATruncatedRecordAndTrailingBytes) {
  ProviderClaimsHistory history;
  history.Add(9, kDay);
  const std::string good = history.Encode();
  std::string other_format = good;
  other_format[0] = '\x02';
  for (const std::string& bad : {std::string(), other_format, good.substr(0, good.size() - 1), good + "x",
                                 std::string("\x01\xff\xff\xff\xff", 5)}) {
    const Result<ProviderClaimsHistory> decoded = ProviderClaimsHistory::Decode(bad);
    ASSERT_FALSE(decoded.ok()) << bad.size();
    EXPECT_EQ(decoded.error().code, ErrorCode::kDataLoss);
  }
}

TEST(ProviderClaimsHistory, AClaimDigestIsTheFirstEightBytesOfItsSha256) {
  // SHA-256("abc") = ba7816bf8f01cfea 414140de...
  EXPECT_EQ(ProviderClaimsHistory::ClaimDigest("abc"), 0xba7816bf8f01cfeaull);
}

}  // namespace
}  // namespace txscore::fraud
