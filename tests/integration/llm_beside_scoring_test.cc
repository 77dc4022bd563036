// REVIEW decisions waiting for the LLM beside APPROVE decisions, through a whole ScoringServer
// over loopback Thrift (issue 30, item 3: the LLM stage held scoring workers, and an
// APPROVE-only client's p99 went from 214 ms to 1,460 ms under mixed traffic). The LLM stage's
// decoder is held at a gate, so the LLM is as slow as the test wants: what is checked is which
// requests are answered while it is held, never how fast (bench/run_mixed_llm_bench.sh times
// the same mix).
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "llm/checkpoint_maker.h"
#include "service/rpc_client.h"
#include "service/transaction_json.h"
#include "tests/pipelines/flat_logits_decoder.h"
#include "tests/server_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

class LlmBesideScoringTest : public ::testing::Test {
 protected:
  // Two workers and two waiting threads (for stages that can only wait the blocking way); a rule sends transactions of
  // 400 or more to REVIEW (the small model scores the test card low, so the rest are APPROVE), and every REVIEW asks
  // the LLM stage for findings, with a budget longer than any test.
  void SetUp() override {
    ASSERT_TRUE(llm::MakeCheckpoint({.family = "qwen3", .size = "tiny"}, dir_.file("llm")).ok());
    testing::WriteTestPipelineWithStages(
        dir_, testing::FraudModelStagesYaml() +
                  "  - {name: rules, kind: rules, after: features, rules: [{id: BIG, when: \"amount >= 400\", "
                  "decision: REVIEW}]}\n"
                  "  - {name: decision, kind: decision, after: [fraud, rules], review_threshold: 0.99, "
                  "decline_threshold: 1.0}\n"
                  "  - {name: forensic, kind: llm_findings, after: decision, model: llm, budget_ms: 600000}\n");
    std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
    const std::string workers = "  workers: 4\n";
    settings.replace(settings.find(workers), workers.size(),
                     "  workers: 2\n  waiting_threads: 2\n  drain_timeout_ms: 100\n");
    testing::WriteFile(testing::TestSettingsPath(dir_), settings);

    control_.block_first_call = true;  // the first LLM step waits for Release: so does every later one
    pipelines::PipelineRuntime runtime;
    runtime.load_decoder = [this](const std::string& dir, const llm::DecoderOptions&) {
      Result<llm::ModelConfig> config = llm::LoadModelConfig(dir);
      if (!config.ok()) return Result<std::unique_ptr<llm::Decoder>>(config.error());
      return Result<std::unique_ptr<llm::Decoder>>(std::make_unique<pipelines::FlatLogitsDecoder>(*config, &control_));
    };
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_), runtime);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  void TearDown() override {
    if (!server_) return;
    control_.Release();
    server_->Stop();
  }

  // A score call on a connection of its own, in the background.
  std::future<rpc::ScoreResult> ScoreLater(const std::string& id, int64_t amount_minor) {
    fraud::RawTransaction tx = testing::ValidTransaction(id);
    tx.amount_minor = amount_minor;
    tx.timestamp_ms += next_second_++ * 1000;
    return std::async(std::launch::async, [this, tx] {
      // A REVIEW waits for the test to release the LLM: far longer than a client's usual 10 s.
      std::unique_ptr<RpcConnection> connection =
          RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.recv_timeout_ms = 600000}).value();
      rpc::ScoreResult result;
      connection->client().score(result, ToThriftTransaction(tx));
      connection->Close();
      return result;
    });
  }
  // The answer of `call`, which must come while the LLM is held: a server that makes it wait
  // for the LLM fails the test after a minute (far beyond any machine's need), and the LLM is
  // then released so that the call can end.
  rpc::ScoreResult AnsweredWhileTheLlmIsHeld(std::future<rpc::ScoreResult> call) {
    if (call.wait_for(std::chrono::minutes(1)) != std::future_status::ready) {
      ADD_FAILURE() << "a call was not answered while the LLM was held";
      control_.Release();
    }
    return call.get();
  }
  // Waits until `condition` holds; a server that never gets there fails the test after a
  // minute (far beyond any machine's need), rather than hanging it.
  static bool Eventually(const std::function<bool()>& condition) {
    for (int i = 0; i < 6000; ++i) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return condition();
  }

  // Releases the held LLM when a test ends, whatever failed, before the calls' futures are
  // destroyed (the future of a std::async call waits for it): a failed check ends the test
  // instead of hanging it.
  struct ReleaseOnExit {
    pipelines::FlatLogitsDecoder::Control* control;
    ~ReleaseOnExit() { control->Release(); }
  };

  testing::TempDir dir_;
  pipelines::FlatLogitsDecoder::Control control_;
  std::unique_ptr<ScoringServer> server_;
  int next_second_ = 0;
};

TEST_F(LlmBesideScoringTest, ReviewsWaitingForTheLlmHoldNoThreadAndApprovalsAreAnsweredMeanwhile) {
  const ReleaseOnExit release_on_exit{&control_};
  // Eight REVIEWs, more than the server has threads (1 I/O thread, 2 workers, 2 waiting
  // threads): each is parked while the LLM is held, and none holds a thread, so all eight wait
  // at once and none is refused its findings.
  constexpr int kReviews = 8;
  constexpr uint64_t kServerThreads = 1 + 2 + 2;
  static_assert(kReviews > kServerThreads);
  std::vector<std::future<rpc::ScoreResult>> reviews;
  for (int i = 0; i < kReviews; ++i) reviews.push_back(ScoreLater("review-" + std::to_string(i), 50000));
  ASSERT_EQ(control_.entered.get_future().wait_for(std::chrono::minutes(1)), std::future_status::ready);
  ASSERT_TRUE(Eventually([&] { return server_->rpc_stats().requests_waiting == kReviews; }))
      << server_->rpc_stats().requests_waiting << " requests waiting";

  // APPROVEs, four at a time (twice the workers), are all answered while the LLM is held.
  for (int round = 0; round < 5; ++round) {
    std::vector<std::future<rpc::ScoreResult>> approvals;
    for (int i = 0; i < 4; ++i) approvals.push_back(ScoreLater("approve-" + std::to_string(round * 4 + i), 1200));
    for (auto& approval : approvals) {
      EXPECT_EQ(AnsweredWhileTheLlmIsHeld(std::move(approval)).decision, rpc::Decision::APPROVE);
    }
  }
  EXPECT_EQ(server_->rpc_stats().requests_waiting, static_cast<uint64_t>(kReviews));  // the LLM was held all along
  EXPECT_EQ(server_->rpc_stats().waits_refused, 0u);
  const std::string metrics = testing::AdminGet(server_->admin_port(), "/metrics").body;
  EXPECT_NE(metrics.find("\ntxscore_rpc_requests_waiting 8\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ntxscore_rpc_slow_stage_waits_refused_total 0\n"), std::string::npos) << metrics;

  // The LLM goes on: every REVIEW gets its findings.
  control_.Release();
  for (auto& review : reviews) {
    const rpc::ScoreResult answered = review.get();
    EXPECT_EQ(answered.decision, rpc::Decision::REVIEW);
    EXPECT_TRUE(answered.__isset.findings);
    EXPECT_TRUE(answered.skipped_stages.empty());
  }
  EXPECT_EQ(server_->rpc_stats().requests_waiting, 0u);
}

TEST_F(LlmBesideScoringTest, StoppingAnswersAParkedReviewFirstThoughTheDrainTimeoutHasPassed) {
  const ReleaseOnExit release_on_exit{&control_};
  std::future<rpc::ScoreResult> review = ScoreLater("review-at-stop", 50000);
  ASSERT_EQ(control_.entered.get_future().wait_for(std::chrono::minutes(1)), std::future_status::ready);
  ASSERT_TRUE(Eventually([&] { return server_->rpc_stats().requests_waiting == 1; }));
  std::future<void> stopped = std::async(std::launch::async, [this] { server_->Stop(); });
  // The drain timeout (100 ms) passes with the LLM held: the server does not stop, and close
  // its database, under the parked REVIEW.
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(2)), std::future_status::timeout);
  control_.Release();
  const rpc::ScoreResult answered = review.get();
  EXPECT_EQ(answered.decision, rpc::Decision::REVIEW);
  EXPECT_TRUE(answered.__isset.findings);  // written to the trail before it was answered
  stopped.get();
}

}  // namespace
}  // namespace txscore::service
