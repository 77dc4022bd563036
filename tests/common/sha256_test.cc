#include "common/sha256.h"

#include <gtest/gtest.h>

#include "common/host_port.h"
#include "common/pan_scan.h"
#include "tests/test_support.h"

namespace txscore {
namespace {

TEST(Sha256, MatchesTheStandardsTestVectors) {
  // FIPS 180-2, appendix B.1, and the empty message.
  EXPECT_EQ(Sha256Hex("abc").value(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("").value(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, OfAFileEqualsOfItsBytesAcrossReadBlocks) {
  testing::TempDir dir;
  const std::string bytes(200000, 'x');  // more than one 64 KiB block
  testing::WriteFile(dir.file("f"), bytes);
  EXPECT_EQ(Sha256HexOfFile(dir.file("f")).value(), Sha256Hex(bytes).value());
  auto missing = Sha256HexOfFile(dir.file("none"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

// How log lines and the trail name a peer: an IPv6 address in brackets, so the log-line rule for
// card numbers recognizes it, and ParseHostPort reads it back.
TEST(PeerText, BracketsAnIpv6AddressAndReadsBack) {
  EXPECT_EQ(PeerText("10.244.13.201", false, 45678), "10.244.13.201:45678");
  EXPECT_EQ(PeerText("fd00:10:244:81::8675", true, 40583), "[fd00:10:244:81::8675]:40583");
  EXPECT_EQ(RedactPans("by " + PeerText("fd00:10:244:81::8675", true, 40583), nullptr, PanRule::kLogLine),
            "by [fd00:10:244:81::8675]:40583");
  EXPECT_EQ(ParseHostPort(PeerText("::1", true, 9090))->host, "::1");
}

TEST(ParseHostPort, TakesHostAndPortAndSaysWhatToWriteOtherwise) {
  EXPECT_EQ(ParseHostPort("127.0.0.1:9090")->host, "127.0.0.1");
  EXPECT_EQ(ParseHostPort("127.0.0.1:9090")->port, 9090);
  EXPECT_EQ(ParseHostPort("[::1]:65535")->host, "::1");
  EXPECT_EQ(ParseHostPort("[::1]:65535")->port, 65535);
  EXPECT_EQ(ParseHostPort("localhost").error().message,
            "\"localhost\" is not HOST:PORT (HOST:PORT, e.g. 127.0.0.1:9090)");
  EXPECT_EQ(ParseHostPort(":9090").error().message, "\":9090\" is not HOST:PORT (HOST:PORT, e.g. 127.0.0.1:9090)");
  for (const std::string port : {"", "abc", "0", "65536", "123456", "-1"}) {
    auto parsed = ParseHostPort("h:" + port);
    ASSERT_FALSE(parsed.ok()) << port;
    EXPECT_EQ(parsed.error().message,
              "\"" + port + "\" in \"h:" + port + "\" is not a port from 1 to 65535 (HOST:PORT, e.g. 127.0.0.1:9090)");
  }
}

}  // namespace
}  // namespace txscore
