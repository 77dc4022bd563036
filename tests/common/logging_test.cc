// common/logging.h: the JSON line format's fields and their order, the request context,
// messages that would break a naive JSON writer, the text format and the level.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/pan_scan.h"

namespace txscore {
namespace {

// Everything logged while `log` runs, one entry per line.
std::vector<std::string> LinesLoggedBy(const std::function<void()>& log) {
  ::testing::internal::CaptureStderr();
  log();
  const std::string text = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class LoggingTest : public ::testing::Test {
 protected:
  void TearDown() override { ConfigureLogging({}); }  // text at info, as the other tests expect
};

TEST_F(LoggingTest, AJsonLineHasTheDocumentedFieldsInOrderAndNullIdsOutsideARequest) {
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  const auto lines = LinesLoggedBy([] { Log("thrift").warn("closed {} connections", 3); });
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::ordered_json line = nlohmann::ordered_json::parse(lines[0]);
  std::vector<std::string> keys;
  for (const auto& [key, value] : line.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"time", "level", "component", "message", "request_id", "trace_id"}));
  EXPECT_TRUE(
      std::regex_match(line["time"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << line["time"];
  EXPECT_EQ(line["level"], "warning");
  EXPECT_EQ(line["component"], "thrift");
  EXPECT_EQ(line["message"], "closed 3 connections");
  EXPECT_TRUE(line["request_id"].is_null());
  EXPECT_TRUE(line["trace_id"].is_null());
}

TEST_F(LoggingTest, LinesInsideALogContextCarryItsIdsAndNestedScopesRestoreTheOuterOnes) {
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  std::vector<std::string> lines = LinesLoggedBy([] {
    const LogContext outer("req-1", "4bf92f3577b34da6a3ce929d0e0e4736");
    Log("pipeline").info("outer");
    {
      const LogContext inner("req-2", "");
      Log("pipeline").info("inner");
    }
    Log("pipeline").info("outer again");
    // Another thread is outside the request.
    std::thread([] { Log("pipeline").info("elsewhere"); }).join();
  });
  const auto after = LinesLoggedBy([] { Log("pipeline").info("after"); });
  lines.insert(lines.end(), after.begin(), after.end());
  ASSERT_EQ(lines.size(), 5u);
  const auto ids = [](const std::string& text) {
    const nlohmann::json line = nlohmann::json::parse(text);
    return line["message"].get<std::string>() + " " + line["request_id"].dump() + " " + line["trace_id"].dump();
  };
  EXPECT_EQ(ids(lines[0]), "outer \"req-1\" \"4bf92f3577b34da6a3ce929d0e0e4736\"");
  EXPECT_EQ(ids(lines[1]), "inner \"req-2\" null");
  EXPECT_EQ(ids(lines[2]), "outer again \"req-1\" \"4bf92f3577b34da6a3ce929d0e0e4736\"");
  EXPECT_EQ(ids(lines[3]), "elsewhere null null");
  EXPECT_EQ(ids(lines[4]), "after null null");
}

TEST_F(LoggingTest, QuotesNewlinesAndBytesThatAreNotUtf8StayInOneValidJsonLine) {
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  const auto lines = LinesLoggedBy([] { Log("admin").info("a \"quoted\"\nsecond line\tand \xff\xfe bytes"); });
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json line = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(line["message"], "a \"quoted\"\nsecond line\tand \xEF\xBF\xBD\xEF\xBF\xBD bytes");  // U+FFFD each
}

// Whatever a message quotes (a caller's job id or file name), no card number is written, in
// either format; the digits of a hex digest stay as they are.
TEST_F(LoggingTest, ACardNumberInAMessageIsRedactedInEitherFormatAndDigestsStay) {
  const std::string digest = "sha256:412345678901234567abcdef0123456789012345678901234567890123456789";
  for (LogFormat format : {LogFormat::kJson, LogFormat::kText}) {
    ConfigureLogging({.level = "info", .format = format});
    const auto lines = LinesLoggedBy([&] {
      Log("admin").info("operator action: claims_job_status on {}: denied", "4111111111111111");
      Log("claims").warn("cannot read {}", "/in/4000 0012 3456 7899.jsonl");
      spdlog::info("a library's line: {}", "5555-5555-5555-4444");  // the default logger's sink too
      Log("reload").info("files {}", digest);
      Log("admin").info("operator action on {} and {}", "card4111111111111111", "371449635398431F");
      Log("claims").info("on {} and {}", "card4111111111111111-2026", "dead4111111111111111_2.jsonl");
      Log("admin").info("on {}", "a4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1");
    });
    ASSERT_EQ(lines.size(), 7u);
    for (const std::string& line : lines) {
      for (const char* card : {"4111111111111111", "4000 0012 3456 7899", "5555-5555-5555-4444", "371449635398431"}) {
        EXPECT_EQ(line.find(card), std::string::npos) << line;
      }
    }
    ASSERT_TRUE(ContainsPan(digest));  // so the digest would be cut, were hex words not left alone
    EXPECT_NE(lines[0].find("claims_job_status on [card number redacted]: denied"), std::string::npos) << lines[0];
    EXPECT_NE(lines[1].find("cannot read /in/[card number redacted].jsonl"), std::string::npos) << lines[1];
    EXPECT_NE(lines[2].find("a library's line: [card number redacted]"), std::string::npos) << lines[2];
    EXPECT_NE(lines[3].find("files " + digest), std::string::npos) << lines[3];
    // Glued to letters a-f, a card number as ids are checked is redacted all the same.
    EXPECT_NE(lines[4].find("operator action on card[card number redacted] and [card number redacted]F"),
              std::string::npos)
        << lines[4];
    EXPECT_NE(lines[5].find("on card[card number redacted] and dead[card number redacted].jsonl"), std::string::npos)
        << lines[5];
    EXPECT_NE(lines[6].find("on a[card number redacted]"), std::string::npos) << lines[6];
  }
}

TEST_F(LoggingTest, ARequestIdHoldingACardInsideALongerRunIsRedactedInTheJsonLine) {
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  const auto lines = LinesLoggedBy([] {
    LogContext context("a94111111111111111", "");  // passes the id rule: a card inside a longer run
    Log("pipeline").warn("stage failed");
  });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines[0])["request_id"], "a[card number redacted]") << lines[0];
}

TEST_F(LoggingTest, TheTextFormatIsTimeLevelComponentAndMessage) {
  ConfigureLogging({.level = "info", .format = LogFormat::kText});
  const auto lines = LinesLoggedBy([] { Log("audit").info("start checkpoint seq {}", 0); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      lines[0],
      std::regex(
          R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (\x1b\[[0-9;]*m)?info(\x1b\[m)? audit: start checkpoint seq 0)")))
      << lines[0];
}

TEST_F(LoggingTest, TheLevelAppliesToLoggersMadeBeforeAndAfterIt) {
  Log("made-before").info("x");
  ConfigureLogging({.level = "warn", .format = LogFormat::kText});
  const auto lines = LinesLoggedBy([] {
    Log("made-before").info("hidden");
    Log("made-after").info("hidden");
    Log("made-before").warn("shown");
    Log("made-after").error("shown");
  });
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("made-before: shown"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("made-after: shown"), std::string::npos) << lines[1];
}

TEST(ParseLogFormat, KnowsJsonAndTextOnly) {
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("JSON"), std::nullopt);
  EXPECT_EQ(ParseLogFormat(""), std::nullopt);
}

}  // namespace
}  // namespace txscore
