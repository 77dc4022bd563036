// common/logging.h: the JSON line format's fields and their order, the request context,
// messages that would break a naive JSON writer, the text format and the level.
#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cstdio>
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
// either format; the digits of a digest txscore made stay as they are.
TEST_F(LoggingTest, ACardNumberInAMessageIsRedactedInEitherFormatAndDigestsStay) {
  // sha256("txscore pipeline bundle 123"): its digits 3774381013054796 hold an Amex-shaped run.
  const std::string hex = "ac9b1680c1171d8c337f244c3774381013054796f43d212966aa8b659e556703";
  const std::string digest = "sha256:" + hex;
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
    // So the digest would be cut, were the forms txscore makes not judged as their words.
    ASSERT_EQ(RedactPans("v" + hex, nullptr, PanRule::kLogLine),
              "vac9b1680c1171d8c337f244c[card number redacted]f43d212966aa8b659e556703");
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

// The ids a request is logged with passed the id rule, which leaves a card inside a longer
// digit run or in groups not printed as cards are: the line that names them, as the pipeline
// writes it, holds no card in either format, in its message, request_id or trace_id; ids of
// the recommended shapes and peers' addresses (both of which read as cards without the address
// rule) stay whole.
TEST_F(LoggingTest, ACardInARequestOrTraceIdReachesNoPartOfTheLineThatNamesIt) {
  const std::vector<std::pair<std::string, std::string>> cards_in_ids = {
      {"a94111111111111111", "4111111111111111"},
      {"a41111-11111-111111", "4111111111111111"},
      {"e37828:22463:10005", "378282246310005"},
      {"a41_11_11_11_11_11_11_11", "4111111111111111"},
      {"x0005555555555554444", "5555555555554444"}};
  const std::string trace_id = "e94111111111111111dddddddddddddd";
  for (LogFormat format : {LogFormat::kJson, LogFormat::kText}) {
    ConfigureLogging({.level = "info", .format = format});
    for (const auto& [id, card] : cards_in_ids) {
      const auto lines = LinesLoggedBy([&, id = id] {
        const LogContext context(id, trace_id);
        Log("pipeline").warn("stage {} failed for request {}: {}", "forensic", id, "remote: connection refused");
        // An operator action's target is the caller's text too (a job id, a file name).
        Log("admin").info("operator action: {} by {} on {}: {}", "claims_job_status",
                          "txscore-client (10.244.13.201:45678)", id, "denied");
      });
      ASSERT_EQ(lines.size(), 2u);
      for (const std::string& line : lines) {
        std::string digits;  // every digit of the line, so that no grouping hides the card
        for (char c : line) {
          if (c >= '0' && c <= '9') digits.push_back(c);
        }
        EXPECT_EQ(digits.find(card), std::string::npos) << line;
        EXPECT_EQ(digits.find("4111111111111111"), std::string::npos) << line;  // the trace id's
      }
      EXPECT_NE(lines[0].find("[card number redacted]: remote: connection refused"), std::string::npos) << lines[0];
      EXPECT_NE(lines[1].find("by txscore-client (10.244.13.201:45678) on "), std::string::npos) << lines[1];
      EXPECT_NE(lines[1].find("[card number redacted]: denied"), std::string::npos) << lines[1];
    }
  }
  ConfigureLogging({.level = "info", .format = LogFormat::kJson});
  const std::vector<std::string> kept = {"REQ-20261204-000123", "3f2b8c1e-9a4d-4e6f-8b2a-1c3d5e7f9a0b",
                                         "txn-2026-12-04-42"};
  for (const std::string& id : kept) {
    const auto lines = LinesLoggedBy([&] {
      const LogContext context(id, "4bf92f3577b34da6a3ce929d0e0e4736");
      Log("thrift").info("request {} from 10.244.13.201:45678 on 10.203.179.214:9090 (8 workers)", id);
    });
    ASSERT_EQ(lines.size(), 1u);
    const nlohmann::json line = nlohmann::json::parse(lines[0]);
    EXPECT_EQ(line["message"], "request " + id + " from 10.244.13.201:45678 on 10.203.179.214:9090 (8 workers)");
    EXPECT_EQ(line["request_id"], id);
    EXPECT_EQ(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  }
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

// Before anything configures logging (main() does so first thing, but a static object or a test
// may log earlier), lines already go through the redacting formatter: spdlog's default logger,
// before any of txscore's own loggers was made, and a component's. The statement runs in a process of its own (a death
// test in the "threadsafe" style re-runs this binary for this test alone), where nothing has logged yet.
TEST(LoggingBeforeConfiguration, ACardNumberIsRedactedFromTheFirstLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child exits 0 only when both lines were written redacted; what it logged is shown on failure.
  EXPECT_EXIT(
      {
        const std::vector<std::string> lines = LinesLoggedBy([] {
          spdlog::warn("a library's card {}", "5555 5555 5555 4444");  // before any of txscore's loggers
          Log("early").warn("card {}", "4111111111111111");
        });
        const bool redacted = lines.size() == 2 &&
                              lines[0].find("a library's card [card number redacted]") != std::string::npos &&
                              lines[1].find("early: card [card number redacted]") != std::string::npos &&
                              lines[0].find("5555 5555 5555 4444") == std::string::npos &&
                              lines[1].find("4111111111111111") == std::string::npos;
        for (const std::string& line : lines) std::fprintf(stderr, "logged: %s\n", line.c_str());
        std::exit(redacted ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ParseLogFormat, KnowsJsonAndTextOnly) {
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(ParseLogFormat("JSON"), std::nullopt);
  EXPECT_EQ(ParseLogFormat(""), std::nullopt);
}

}  // namespace
}  // namespace txscore
