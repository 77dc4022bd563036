// Helpers shared by txscore's tests: temporary directories, a small trained model, a key and
// a pipeline config that points at them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "common/result.h"
#include "fraud/transaction.h"

namespace txscore::testing {

// The exact error a Status or Result must hold, for EXPECT_TRUE / ASSERT_TRUE:
//   EXPECT_TRUE(testing::IsError(config, ErrorCode::kInvalidArgument, "p.yaml:2:3: unknown key ..."));
// Fails, saying what was held instead, when it is ok, or its code or message differ.
template <typename R>
::testing::AssertionResult IsError(const R& held, ErrorCode code, const std::string& message) {
  if (held.ok()) {
    return ::testing::AssertionFailure() << "expected " << ErrorCodeName(code) << ": " << message
                                         << "\n   but it is ok";
  }
  const Error& error = held.error();
  if (error.code != code || error.message != message) {
    return ::testing::AssertionFailure() << "expected " << ErrorCodeName(code) << ": " << message << "\n   but got "
                                         << ErrorCodeName(error.code) << ": " << error.message;
  }
  return ::testing::AssertionSuccess();
}

// Polls `condition` every millisecond until it holds (true) or `limit` passes (false): for
// state that changes on a server's own threads. The limit is generous, so that a slow, loaded
// machine only makes a test slower, never wrong.
inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& contents);
std::string ReadFile(const std::string& path);

// Trains (once per test process) a small fraud model: 300 cards x 10 days, 40 rounds, json
// and ubj copies. Returns the directory holding fraud.json, fraud.ubj and fraud.features.json.
const std::string& SmallModelDir();

// How a test server's ports are reached: plaintext (server.plaintext and admin.plaintext true),
// or TLS with client certificates from SharedTestPki (tests/test_pki.h).
enum class TestTransport { kPlaintext, kTls };

// Writes a 32-byte key DIR/card.key (mode 0600), a pipeline file DIR/pipeline.yaml using the
// small model, and service settings DIR/settings.yaml naming it (database DIR/db with
// `durability`, ports 0, `transport`). Returns the pipeline file's path.
std::string WriteTestPipeline(const TempDir& dir, const std::string& durability = "wal",
                              TestTransport transport = TestTransport::kPlaintext);
// What WriteTestPipeline wrote beside the pipeline file.
inline std::string TestSettingsPath(const TempDir& dir) { return dir.file("settings.yaml"); }
inline std::string TestCardKeyPath(const TempDir& dir) { return dir.file("card.key"); }
// A second, different model (other data seed, fewer rounds) in the same layout: a challenger.
const std::string& ChallengerModelDir();
// A small claims model (fraud/claims_synthetic.h), claims.ubj + claims.features.json.
const std::string& ClaimsModelDir();
// The first stages of most test pipelines, as lines that follow "stages:": `features` and the
// model stage over it, on the small test model (`fraud`) or on the claims test model
// (`claims_model`, after claim features).
std::string FraudModelStagesYaml();
std::string ClaimsModelStagesYaml();
// The test pipeline's file with `stages_yaml` (the lines after "stages:") as its stages.
std::string WriteTestPipelineWithStages(const TempDir& dir, const std::string& stages_yaml);
// DIR/claims.yaml: claim features, the test claims model, an LLM stage "analysis" on the
// checkpoint DIR/llm reading the claims where `when` holds, and a decision after both. Uses
// DIR/card.key (WriteTestPipeline writes it). Returns the path.
std::string WriteClaimsPipelineWithLlmStage(const TempDir& dir, const std::string& when);

// A valid transaction with a Luhn-valid test PAN (4000001234567899).
fraud::RawTransaction ValidTransaction(const std::string& request_id = "req-1");
inline constexpr char kTestPan[] = "4000001234567899";
// The tests' card key: 32 distinct bytes, fixed so that a test can compute the tokens a server
// under test writes. A raw key file of one byte repeated is refused as weak (fraud/keyset.h).
inline std::string TestCardKey() {
  std::string key;
  for (int i = 0; i < 32; ++i) key.push_back(static_cast<char>((i * 73 + 41) & 0xff));  // 73 is odd: all distinct
  return key;
}

}  // namespace txscore::testing
