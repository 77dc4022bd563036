#include "common/signing.h"

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace txscore {
namespace {

std::string BytesOfHex(std::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return bytes;
}

TEST(HkdfSha256, MatchesRfc5869TestCase1) {
  const std::string ikm(22, '\x0b');
  const std::string salt = BytesOfHex("000102030405060708090a0b0c");
  const std::string info = BytesOfHex("f0f1f2f3f4f5f6f7f8f9");
  EXPECT_EQ(HexOfBytes(HkdfSha256(ikm, salt, info, 42)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

TEST(HkdfSha256, DifferentInfoGivesUnrelatedKeys) {
  const std::string secret(32, 's');
  EXPECT_NE(HkdfSha256(secret, "", "purpose a", 32), HkdfSha256(secret, "", "purpose b", 32));
  EXPECT_EQ(HkdfSha256(secret, "", "purpose a", 32), HkdfSha256(secret, "", "purpose a", 32));
}

// RFC 8032, section 7.1, TEST 1 (the empty message) and TEST 2 (one byte, 0x72).
TEST(Ed25519, MatchesRfc8032TestVectors) {
  const std::string seed1 = BytesOfHex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  EXPECT_EQ(HexOfBytes(Ed25519PublicKey(seed1).value()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  EXPECT_EQ(
      HexOfBytes(Ed25519Sign(seed1, {}).value()),
      "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595"
      "bbe24655141438e7a100b");
  const std::string seed2 = BytesOfHex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb");
  EXPECT_EQ(HexOfBytes(Ed25519PublicKey(seed2).value()),
            "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c");
  EXPECT_EQ(
      HexOfBytes(Ed25519Sign(seed2, {"\x72"}).value()),
      "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb430"
      "2aeeb00d291612bb0c00");
}

TEST(Ed25519, AVerifierWithThePublicKeyAcceptsTheSignatureAndNothingAltered) {
  const std::string seed(32, 'k');
  const std::string public_key = Ed25519PublicKey(seed).value();
  const std::string signature = Ed25519Sign(seed, {"key", "value"}).value();
  EXPECT_TRUE(Ed25519Verify(public_key, {"key", "value"}, signature));
  EXPECT_TRUE(Ed25519Verify(public_key, {"keyvalue"}, signature));  // the parts are one message
  EXPECT_FALSE(Ed25519Verify(public_key, {"key", "valuf"}, signature));
  std::string flipped = signature;
  flipped[10] ^= 1;
  EXPECT_FALSE(Ed25519Verify(public_key, {"key", "value"}, flipped));
  EXPECT_FALSE(Ed25519Verify(Ed25519PublicKey(std::string(32, 'j')).value(), {"key", "value"}, signature));
  EXPECT_FALSE(Ed25519Verify(public_key, {"key", "value"}, signature.substr(1)));
  EXPECT_FALSE(Ed25519PublicKey(std::string(31, 'k')).ok());
}

}  // namespace
}  // namespace txscore
