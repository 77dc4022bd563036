// Claims jobs over Thrift: submit (inline claims or a server-side file), status, cancel.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/pan_scan.h"
#include "fraud/card_token.h"
#include "fraud/claims_synthetic.h"
#include "gen-cpp/TxScore.h"
#include "llm/checkpoint_maker.h"
#include "llm/decoder.h"
#include "llm/model_config.h"
#include "pipelines/bundle_digest.h"
#include "pipelines/config.h"
#include "service/rpc_client.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "tests/pipelines/flat_logits_decoder.h"
#include "tests/server_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

class ClaimsJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);
    const std::string settings = testing::TestSettingsPath(dir_);
    testing::WriteFile(dir_.file("claims.yaml"), "stages:\n" + testing::ClaimsModelStagesYaml() +
                                                     "  - {name: decision, kind: decision, after: claims_model}\n");
    std::filesystem::create_directories(dir_.file("in"));
    std::ofstream(settings, std::ios::app)
        << "jobs: {claims_pipeline: claims.yaml, input_dir: in, output_dir: out, chunk: 4, priority: normal}\n";
    // priority normal: on a test machine kept busy by other tests, an idle-class job could wait
    // for minutes. bench/run_job_priority_bench.sh measures the idle class.
    settings_ = settings;
    released_future_ = release_.get_future().share();
    StartServer();
  }

  // A server (again) on the same directory and database, and a client connected to it.
  void StartServer() {
    ScoringServer::Hooks hooks;
    hooks.before_job = [this, released = released_future_](const std::string& job_id) {
      jobs_started_.fetch_add(1);
      if (hold_first_job_ && !held_.exchange(true)) {  // the first job only
        job_held_.set_value(job_id);
        released.wait();
      }
    };
    hooks.after_job_progress = [this, released = released_future_](const std::string& job_id, int64_t done) {
      if (hold_after_rows_ > 0 && done >= hold_after_rows_ && !held_.exchange(true)) {
        job_held_.set_value(job_id);
        released.wait();
      }
    };
    hooks.on_jobs_stopping = [this] {
      if (release_held_job_on_stop_ && held_ && !released_) {
        released_ = true;
        release_.set_value();
      }
    };
    pipelines::PipelineRuntime runtime;
    // A model runtime that fails every forward pass (a device that stopped responding).
    failing_decoder_.failure = ErrorCode::kInternal;
    runtime.load_decoder = [this](const std::string& dir, const llm::DecoderOptions&) {
      Result<llm::ModelConfig> model_config = llm::LoadModelConfig(dir);
      if (!model_config.ok()) return Result<std::unique_ptr<llm::Decoder>>(model_config.error());
      return Result<std::unique_ptr<llm::Decoder>>(
          std::make_unique<pipelines::FlatLogitsDecoder>(*model_config, &failing_decoder_, /*failing=*/true));
    };
    auto server = testing::CreateTestServer(settings_, runtime, hooks);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
    auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()});
    ASSERT_TRUE(connection.ok()) << connection.error().ToString();
    connection_ = std::move(connection).value();
    client_ = &connection_->client();
  }
  // Stops the server (its jobs stop resumably) and closes the client; StartServer starts again.
  void StopServer() {
    connection_.reset();
    server_->Stop();
    server_.reset();
  }
  void TearDown() override {
    if (held_ && !released_) release_.set_value();
    if (server_) server_->Stop();
  }

  rpc::ClaimsJobRequest Inline(int claims, uint64_t seed) {
    fraud::SyntheticClaimsOptions data;
    data.claims = claims;
    data.seed = seed;
    rpc::ClaimsJobRequest request;
    std::vector<rpc::Claim> list;
    for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) list.push_back(ToThriftClaim(c.claim));
    request.__set_claims(list);
    return request;
  }

  // `claims` generated claims as a JSON-lines file in the server's input directory.
  void WriteInputFile(const std::string& name, int claims, uint64_t seed) {
    fraud::SyntheticClaimsOptions data;
    data.claims = claims;
    data.seed = seed;
    std::ofstream out(dir_.file("in/" + name));
    for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) out << fraud::ClaimToJson(c.claim) << "\n";
  }

  // Restarts the server on the same files, with a claims pipeline whose LLM stage reads every
  // claim on a model runtime that always fails.
  void RestartWithAFailingLlmStage(double max_llm_shortfall_share) {
    llm::CheckpointSpec spec;
    spec.family = "qwen3";
    spec.size = "tiny";
    ASSERT_TRUE(llm::MakeCheckpoint(spec, dir_.file("llm")).ok());
    testing::WriteClaimsPipelineWithLlmStage(dir_, "claims_model.score >= 0");
    std::string yaml = testing::ReadFile(settings_);
    yaml.replace(yaml.find("priority: normal}"), 17,
                 "priority: normal, max_llm_shortfall_share: " + std::to_string(max_llm_shortfall_share) + "}");
    testing::WriteFile(settings_, yaml);
    StopServer();
    StartServer();
  }

  // Polls the job's status until it leaves QUEUED/RUNNING (a client's way to wait for a job).
  rpc::ClaimsJobStatus WaitForEnd(const std::string& job_id) {
    rpc::ClaimsJobStatus status;
    for (int i = 0; i < 3000; ++i) {
      client_->claimsJobStatus(status, job_id);
      if (status.state != rpc::JobState::QUEUED && status.state != rpc::JobState::RUNNING) return status;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "job " << job_id << " did not finish in 30 s";
    return status;
  }

  testing::TempDir dir_;
  pipelines::FlatLogitsDecoder::Control failing_decoder_;
  std::string settings_;  // the service settings (with a jobs section)
  std::unique_ptr<ScoringServer> server_;
  std::unique_ptr<RpcConnection> connection_;
  rpc::TxScoreClient* client_ = nullptr;
  bool hold_first_job_ = false;
  int64_t hold_after_rows_ = 0;            // > 0: the first job to report this many rows done is held there
  bool release_held_job_on_stop_ = false;  // once the server has told the job to stop
  std::atomic<bool> held_{false};
  std::atomic<int> jobs_started_{0};  // by every server of the test
  std::atomic<bool> released_{false};
  std::promise<std::string> job_held_;
  std::promise<void> release_;
  std::shared_future<void> released_future_;
};

TEST_F(ClaimsJobsTest, InlineClaimsRunToDoneAndTheSameClaimsAreTheSameJob) {
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, Inline(20, 3));
  EXPECT_EQ(submitted.job_id.size(), 16u);
  const rpc::ClaimsJobStatus done = WaitForEnd(submitted.job_id);
  EXPECT_EQ(done.state, rpc::JobState::DONE);
  EXPECT_EQ(done.done, 20);
  EXPECT_EQ(done.total, 20);
  EXPECT_EQ(done.errors, 0);
  EXPECT_TRUE(std::filesystem::exists(done.output_path + ".summary.json"));
  std::ifstream output(done.output_path);
  int lines = 0;
  for (std::string line; std::getline(output, line);) ++lines;
  EXPECT_EQ(lines, 20);
  // Submitted again, the finished job answers with its result at once and scores nothing.
  rpc::ClaimsJobStatus again;
  client_->submitClaimsJob(again, Inline(20, 3));
  EXPECT_EQ(again.job_id, submitted.job_id);
  EXPECT_EQ(again.state, rpc::JobState::DONE);
  EXPECT_EQ(again.done, 20);
  EXPECT_EQ(again.total, 20);
  EXPECT_GT(again.claims_per_s, 0);
  EXPECT_EQ(WaitForEnd(again.job_id).done, 20);
  // The claims it was sent again were written to disk to be compared; none is kept.
  for (const auto& entry : std::filesystem::directory_iterator(dir_.file("out"))) {
    EXPECT_EQ(entry.path().filename().string().rfind("inline-", 0), std::string::npos) << entry.path();
  }
  std::ifstream rescored(done.output_path);
  lines = 0;
  for (std::string line; std::getline(rescored, line);) ++lines;
  EXPECT_EQ(lines, 20);  // nothing scored twice
}

// The value of the one series `series` in the server's metrics; -1 when absent.
double JobMetric(ScoringServer& server, const std::string& series) {
  const std::string metrics = server.metrics().RenderPrometheus();
  const size_t at = metrics.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + series.size() + 2));
}

TEST_F(ClaimsJobsTest, JobMetricsCountJobsByStateAndFollowTheRunningOne) {
  hold_first_job_ = true;
  rpc::ClaimsJobStatus first, second;
  client_->submitClaimsJob(first, Inline(12, 5));
  job_held_.get_future().get();  // the worker is in the first job, held before its first chunk
  client_->submitClaimsJob(second, Inline(8, 6));
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"running\"}"), 1);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"queued\"}"), 1);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"done\"}"), 0);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_job_running_claims_done"), 0);
  release_.set_value();
  released_ = true;
  EXPECT_EQ(WaitForEnd(first.job_id).state, rpc::JobState::DONE);
  EXPECT_EQ(WaitForEnd(second.job_id).state, rpc::JobState::DONE);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"done\"}"), 2);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"running\"}"), 0);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"queued\"}"), 0);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_job_running_claims_in_input"), 0);  // none runs
  // The dashboard shows both jobs' progress.
  const nlohmann::json jobs =
      nlohmann::json::parse(testing::AdminGet(server_->admin_port(), "/api/dashboard").body)["jobs"];
  ASSERT_EQ(jobs.size(), 2u) << jobs;
  for (const nlohmann::json& job : jobs) {
    EXPECT_EQ(job["state"], "done") << job;
    EXPECT_TRUE(job["job_id"] == first.job_id || job["job_id"] == second.job_id) << job;
    EXPECT_EQ(job["done"], job["job_id"] == first.job_id ? 12 : 8) << job;
    EXPECT_EQ(job["total"], job["done"]) << job;
  }
  // The same claims again are the same job: still two.
  rpc::ClaimsJobStatus again;
  client_->submitClaimsJob(again, Inline(8, 6));
  WaitForEnd(again.job_id);
  EXPECT_EQ(JobMetric(*server_, "txscore_claims_jobs{state=\"done\"}"), 2);
}

TEST_F(ClaimsJobsTest, ARunningJobShowsItsRateAndOneSubmittedAgainShowsHowFarItGot) {
  hold_after_rows_ = 4;  // one chunk
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, Inline(12, 7));
  ASSERT_EQ(job_held_.get_future().get(), submitted.job_id);  // held after its first chunk
  rpc::ClaimsJobStatus running;
  client_->claimsJobStatus(running, submitted.job_id);
  EXPECT_EQ(running.state, rpc::JobState::RUNNING);
  EXPECT_EQ(running.done, 4);
  EXPECT_EQ(running.total, 12);
  EXPECT_GT(running.claims_per_s, 0);
  EXPECT_GT(JobMetric(*server_, "txscore_claims_job_running_claims_per_second"), 0);
  const nlohmann::json jobs =
      nlohmann::json::parse(testing::AdminGet(server_->admin_port(), "/api/dashboard").body)["jobs"];
  ASSERT_EQ(jobs.size(), 1u) << jobs;
  EXPECT_GT(jobs[0]["claims_per_s"].get<double>(), 0) << jobs;
  // Cancelled, then submitted again: it answers with the rows it had done, not 0 of 0.
  rpc::ClaimsJobStatus cancelling;
  client_->cancelClaimsJob(cancelling, submitted.job_id);
  release_.set_value();
  released_ = true;
  const rpc::ClaimsJobStatus cancelled = WaitForEnd(submitted.job_id);
  ASSERT_EQ(cancelled.state, rpc::JobState::CANCELLED);
  ASSERT_GE(cancelled.done, 4);
  ASSERT_LT(cancelled.done, 12);
  rpc::ClaimsJobStatus again;
  client_->submitClaimsJob(again, Inline(12, 7));
  EXPECT_EQ(again.state, rpc::JobState::QUEUED);
  EXPECT_EQ(again.done, cancelled.done);
  EXPECT_EQ(again.total, 12);
  EXPECT_EQ(WaitForEnd(again.job_id).done, 12);
}

// Every regular file under `dir` whose bytes contain `needle`.
std::vector<std::string> FilesHolding(const std::string& dir, const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && testing::ReadFile(entry.path().string()).find(needle) != std::string::npos) {
      found.push_back(entry.path().string());
    }
  }
  return found;
}

TEST_F(ClaimsJobsTest, InlineClaimsLeaveNoClaimantIdOrCardNumberOnDisk) {
  hold_first_job_ = true;
  rpc::ClaimsJobRequest request = Inline(10, 5);
  request.claims[0].claimant_id = "CLAIMANT-SECRET-4711";
  request.claims[1].narrative += " They charged my card 4000 0012 3456 7899.";
  request.claims[2].adjuster_notes = "Claimant quoted card 4000-0012-3456-7899.";
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, request);
  job_held_.get_future().get();  // queued and started, not yet run: the inline input is on disk
  std::vector<std::string> inputs;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.file("out"))) {
    if (entry.path().filename().string().rfind("inline-", 0) == 0) inputs.push_back(entry.path().string());
  }
  ASSERT_EQ(inputs.size(), 1u);
  const std::string stored = testing::ReadFile(inputs[0]);
  EXPECT_NE(
      stored.find("\"claimant_token\":\"" +
                  fraud::CardTokenizer::FromKey(testing::TestCardKey())->TokenizeClaimant("CLAIMANT-SECRET-4711")),
      std::string::npos);
  EXPECT_EQ(stored.find("claimant_id"), std::string::npos);
  EXPECT_NE(stored.find("They charged my card [card number redacted]."), std::string::npos);
  release_.set_value();
  released_ = true;
  const rpc::ClaimsJobStatus done = WaitForEnd(submitted.job_id);
  EXPECT_EQ(done.state, rpc::JobState::DONE);
  EXPECT_EQ(done.errors, 0);
  EXPECT_FALSE(std::filesystem::exists(inputs[0]));  // the job is done: its inline input is gone
  server_->Stop();                                   // every byte on disk
  for (const std::string& secret : {std::string("CLAIMANT-SECRET-4711"), std::string("4000001234567899"),
                                    std::string("4000 0012 3456 7899"), std::string("4000-0012-3456-7899")}) {
    EXPECT_EQ(FilesHolding(dir_.path(), secret), std::vector<std::string>{}) << secret;
  }
}

// A refused inline claim's error is built from the caller's values: whatever field held the
// card number and however it was written, neither the refusal, the audit trail (hash-chained:
// a card number there could never be removed) nor any file holds it.
TEST_F(ClaimsJobsTest, ARefusedInlineClaimLeavesItsCardNumberNowhere) {
  const std::vector<std::pair<std::string, std::string>> forms = {
      {"incident_date", "4000 0012 3456 7899"},
      {"report_date", "4000/0012/3456/7899"},
      {"claim_type", "4000\u20130012\u20133456\u20137899"},
      {"incident_date",
       "\uff14\uff10\uff10\uff10\uff10\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff19"},
      {"claim_type", "card 4000  0012  3456  7899"},
  };
  for (const auto& [field, value] : forms) {
    rpc::ClaimsJobRequest request = Inline(2, 6);
    if (field == "incident_date") request.claims[1].incident_date = value;
    if (field == "report_date") request.claims[1].report_date = value;
    if (field == "claim_type") request.claims[1].claim_type = value;
    rpc::ClaimsJobStatus status;
    try {
      client_->submitClaimsJob(status, request);
      ADD_FAILURE() << field << " " << value << " was accepted";
    } catch (const rpc::InvalidRequest& e) {
      EXPECT_EQ(e.reason.find(value), std::string::npos) << e.reason;
      EXPECT_FALSE(ContainsPan(e.reason)) << e.reason;
      EXPECT_NE(e.reason.find("[card number redacted]"), std::string::npos) << e.reason;
    }
  }
  const std::vector<storage::AuditAction> actions = server_->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), forms.size());
  for (const storage::AuditAction& action : actions) {
    EXPECT_EQ(action.outcome, "refused");
    EXPECT_FALSE(ContainsPan(action.detail)) << action.detail;
  }
  server_->Stop();
  for (const auto& [field, value] : forms) {
    EXPECT_EQ(FilesHolding(dir_.path(), value), std::vector<std::string>{}) << value;
  }
  EXPECT_EQ(FilesHolding(dir_.path(), "4000001234567899"), std::vector<std::string>{});
}

TEST_F(ClaimsJobsTest, ServerSideInputMustLieInTheInputDirectory) {
  fraud::SyntheticClaimsOptions data;
  data.claims = 8;
  std::ofstream in(dir_.file("in/night.jsonl"));
  for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) in << fraud::ClaimToJson(c.claim) << "\n";
  in.close();
  rpc::ClaimsJobRequest request;
  request.__set_input_path("night.jsonl");
  rpc::ClaimsJobStatus status;
  client_->submitClaimsJob(status, request);
  EXPECT_EQ(WaitForEnd(status.job_id).done, 8);
  // Links inside the input directory that lead out of it: to a file, and through a directory.
  testing::WriteFile(dir_.file("secret.jsonl"), testing::ReadFile(dir_.file("in/night.jsonl")));
  std::filesystem::create_symlink(dir_.file("secret.jsonl"), dir_.file("in/linked.jsonl"));
  std::filesystem::create_directories(dir_.file("elsewhere"));
  testing::WriteFile(dir_.file("elsewhere/claims.jsonl"), testing::ReadFile(dir_.file("in/night.jsonl")));
  std::filesystem::create_directory_symlink(dir_.file("elsewhere"), dir_.file("in/linked-dir"));
  for (const char* outside :
       {"../pipeline.yaml", "/etc/passwd", "missing.jsonl", "", "linked.jsonl", "linked-dir/claims.jsonl"}) {
    request.__set_input_path(outside);
    try {
      client_->submitClaimsJob(status, request);
      ADD_FAILURE() << outside << " was accepted";
    } catch (const rpc::InvalidRequest& e) {
      EXPECT_EQ(e.field, "input_path") << outside;
    }
  }
  rpc::ClaimsJobRequest both = Inline(2, 1);
  both.__set_input_path("night.jsonl");
  EXPECT_THROW(client_->submitClaimsJob(status, both), rpc::InvalidRequest);
}

TEST_F(ClaimsJobsTest, AFinishedFileJobSubmittedAgainIsToldUnchangedByItsStampOrElseByItsJob) {
  WriteInputFile("night.jsonl", 12, 3);
  rpc::ClaimsJobRequest request;
  request.__set_input_path("night.jsonl");
  rpc::ClaimsJobStatus first;
  client_->submitClaimsJob(first, request);
  const rpc::ClaimsJobStatus done = WaitForEnd(first.job_id);
  ASSERT_EQ(done.state, rpc::JobState::DONE);
  ASSERT_EQ(done.done, 12);
  const auto output_lines = [&] {
    std::ifstream output(done.output_path);
    int lines = 0;
    for (std::string line; std::getline(output, line);) ++lines;
    return lines;
  };
  const int started = jobs_started_.load();
  // Each run that scores counts itself in the job's summary file.
  const auto runs = [&] {
    const std::string summary = testing::ReadFile(done.output_path + ".summary.json");
    const size_t at = summary.find("\"runs\":");
    return at == std::string::npos ? -1 : std::stoi(summary.substr(at + 7));
  };
  ASSERT_EQ(runs(), 1);
  const std::string output_before = testing::ReadFile(done.output_path);

  // Untouched since its job read it: answered with its result at once, and no job runs (the
  // request's thread reads nothing of the file: its stamp says it is the same).
  rpc::ClaimsJobStatus again;
  client_->submitClaimsJob(again, request);
  EXPECT_EQ(again.state, rpc::JobState::DONE);
  EXPECT_EQ(again.done, 12);
  EXPECT_EQ(jobs_started_.load(), started);

  // Touched (the same bytes, a new modification time): the stamp cannot tell, so the job is
  // queued and reads it on its own thread: the same content, done without scoring anything.
  const std::string path = dir_.file("in/night.jsonl");
  std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) + std::chrono::hours(1));
  rpc::ClaimsJobStatus touched;
  client_->submitClaimsJob(touched, request);
  EXPECT_EQ(touched.state, rpc::JobState::QUEUED);
  const rpc::ClaimsJobStatus checked = WaitForEnd(touched.job_id);
  EXPECT_EQ(checked.state, rpc::JobState::DONE);
  EXPECT_EQ(checked.done, 12);
  EXPECT_EQ(jobs_started_.load(), started + 1);
  EXPECT_EQ(output_lines(), 12);
  // Queued again, it resumed at its end (12 of 12 rows): one more run, nothing written.
  EXPECT_EQ(runs(), 2);
  EXPECT_EQ(testing::ReadFile(done.output_path), output_before);
  // Its new stamp is kept: the next submission is answered at once again.
  client_->submitClaimsJob(again, request);
  EXPECT_EQ(again.state, rpc::JobState::DONE);
  EXPECT_EQ(jobs_started_.load(), started + 1);

  // Changed: the job says so and keeps the old output.
  WriteInputFile("night.jsonl", 13, 3);
  rpc::ClaimsJobStatus changed;
  client_->submitClaimsJob(changed, request);
  const rpc::ClaimsJobStatus failed = WaitForEnd(changed.job_id);
  EXPECT_EQ(failed.state, rpc::JobState::FAILED);
  EXPECT_NE(failed.detail.find("its input file has changed since the job began"), std::string::npos) << failed.detail;
  EXPECT_EQ(output_lines(), 12);
}

TEST_F(ClaimsJobsTest, APinnedClaimsPipelineStartsOnlyOnItsFilesAndEachSummaryNamesTheDigest) {
  StopServer();
  const std::string digest =
      pipelines::DigestPipelineBundle(pipelines::LoadPipelineConfig(dir_.file("claims.yaml")).value()).value().digest;
  const std::string settings = testing::ReadFile(settings_);
  const auto pin = [&](const std::string& pinned) {
    std::string pinned_settings = settings;
    const std::string key = "claims_pipeline: claims.yaml,";
    pinned_settings.replace(pinned_settings.find(key), key.size(),
                            key + " claims_pipeline_digest: \"" + pinned + "\",");
    testing::WriteFile(settings_, pinned_settings);
  };
  const std::string other = "sha256:" + std::string(64, '0');
  pin(other);
  auto refused = testing::CreateTestServer(settings_);
  EXPECT_TRUE(testing::IsError(refused, ErrorCode::kFailedPrecondition,
                               "the pipeline's files have digest " + digest + ", not the " + other +
                                   " that jobs.claims_pipeline_digest in " + settings_ +
                                   " pins: a file of the pipeline changed; see each file's digest with: txscore "
                                   "pipeline digest --pipeline " +
                                   dir_.file("claims.yaml")));
  pin(digest);
  StartServer();
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, Inline(8, 3));
  const rpc::ClaimsJobStatus done = WaitForEnd(submitted.job_id);
  ASSERT_EQ(done.state, rpc::JobState::DONE);
  const nlohmann::json summary = nlohmann::json::parse(testing::ReadFile(done.output_path + ".summary.json"));
  EXPECT_EQ(summary["pipeline_digests"], nlohmann::json::array({digest})) << summary;
}

TEST_F(ClaimsJobsTest, UnknownJobIsReported) {
  rpc::ClaimsJobStatus status;
  try {
    client_->claimsJobStatus(status, "0123456789abcdef");
    ADD_FAILURE() << "no UnknownJob";
  } catch (const rpc::UnknownJob& e) {
    EXPECT_EQ(e.job_id, "0123456789abcdef");
  }
  EXPECT_THROW(client_->cancelClaimsJob(status, "0123456789abcdef"), rpc::UnknownJob);
  // A job id is 16 hex digits, as a card number can be: the answer never echoes one.
  try {
    client_->claimsJobStatus(status, "4111111111111111");
    ADD_FAILURE() << "no UnknownJob";
  } catch (const rpc::UnknownJob& e) {
    EXPECT_EQ(e.job_id, "[card number redacted]");
  }
}

TEST_F(ClaimsJobsTest, CancelledJobsStopAndResumeWhenSubmittedAgain) {
  hold_first_job_ = true;
  rpc::ClaimsJobStatus first, second, status;
  client_->submitClaimsJob(first, Inline(12, 5));
  const std::string held = job_held_.get_future().get();  // the worker is in the first job, held
  EXPECT_EQ(held, first.job_id);
  client_->submitClaimsJob(second, Inline(12, 6));
  EXPECT_EQ(second.state, rpc::JobState::QUEUED);
  client_->cancelClaimsJob(status, second.job_id);  // queued: dropped
  EXPECT_EQ(status.state, rpc::JobState::CANCELLED);
  client_->cancelClaimsJob(status, first.job_id);  // running: stops before its first chunk
  EXPECT_EQ(status.state, rpc::JobState::RUNNING);
  release_.set_value();
  released_ = true;
  const rpc::ClaimsJobStatus stopped = WaitForEnd(first.job_id);
  EXPECT_EQ(stopped.state, rpc::JobState::CANCELLED);
  EXPECT_EQ(stopped.done, 0);
  client_->claimsJobStatus(status, second.job_id);
  EXPECT_EQ(status.state, rpc::JobState::CANCELLED);
  // Submitted again, both run to the end.
  client_->submitClaimsJob(status, Inline(12, 5));
  EXPECT_EQ(status.job_id, first.job_id);
  EXPECT_EQ(WaitForEnd(first.job_id).state, rpc::JobState::DONE);
  client_->submitClaimsJob(status, Inline(12, 6));
  EXPECT_EQ(WaitForEnd(second.job_id).done, 12);
}

TEST_F(ClaimsJobsTest, AJobInterruptedByAServerStopResumesWhenTheServerStartsAgain) {
  hold_first_job_ = true;
  release_held_job_on_stop_ = true;
  rpc::ClaimsJobStatus submitted, queued;
  client_->submitClaimsJob(submitted, Inline(12, 8));
  EXPECT_EQ(job_held_.get_future().get(), submitted.job_id);
  client_->submitClaimsJob(queued, Inline(5, 9));  // waits behind the held job
  EXPECT_EQ(queued.state, rpc::JobState::QUEUED);
  // Stopping tells the held job to stop, then releases it: it stops before its first chunk,
  // and its record in the database says "interrupted".
  StopServer();
  StartServer();  // nothing is submitted again
  const rpc::ClaimsJobStatus resumed = WaitForEnd(submitted.job_id);
  EXPECT_EQ(resumed.state, rpc::JobState::DONE);
  EXPECT_EQ(resumed.done, 12);
  std::ifstream output(resumed.output_path);
  int lines = 0;
  for (std::string line; std::getline(output, line);) ++lines;
  EXPECT_EQ(lines, 12);
  // The job that was only queued when the server stopped was queued again, and ran.
  const rpc::ClaimsJobStatus also = WaitForEnd(queued.job_id);
  EXPECT_EQ(also.state, rpc::JobState::DONE);
  EXPECT_EQ(also.done, 5);
}

TEST_F(ClaimsJobsTest, AJobWhoseLlmStageFailedOnMostClaimsEndsDegradedWithTheCountsAndTheWayToRetry) {
  RestartWithAFailingLlmStage(0.5);
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, Inline(6, 21));
  const rpc::ClaimsJobStatus ended = WaitForEnd(submitted.job_id);
  EXPECT_EQ(ended.state, rpc::JobState::DEGRADED);
  EXPECT_EQ(ended.done, 6);
  EXPECT_EQ(ended.llm_selected, 6);
  EXPECT_EQ(ended.llm_shortfalls, (std::map<std::string, int64_t>{{"failed", 6}}));
  EXPECT_EQ(ended.detail,
            "the LLM stage wrote no findings for 6 of the 6 claims it was asked to read (failed 6; \"llm_shortfalls\" "
            "in the output says why); score them again with txscore batch run --retry-llm-shortfalls");
  // A server started again reads the same from the job's record.
  StopServer();
  StartServer();
  rpc::ClaimsJobStatus stored;
  client_->claimsJobStatus(stored, submitted.job_id);
  EXPECT_EQ(stored.state, rpc::JobState::DEGRADED);
  EXPECT_EQ(stored.llm_shortfalls, ended.llm_shortfalls);
}

TEST_F(ClaimsJobsTest, AJobWithFewerLlmShortfallsThanTheShareIsDoneAndSaysSo) {
  RestartWithAFailingLlmStage(1.0);
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, Inline(6, 22));
  const rpc::ClaimsJobStatus ended = WaitForEnd(submitted.job_id);
  EXPECT_EQ(ended.state, rpc::JobState::DONE);
  EXPECT_EQ(ended.llm_shortfalls, (std::map<std::string, int64_t>{{"failed", 6}}));
  EXPECT_NE(ended.detail.find("no findings for 6 of the 6 claims"), std::string::npos) << ended.detail;
}

TEST_F(ClaimsJobsTest, AFailedJobSaysWhyStaysFailedAcrossARestartAndRestartsOverRpc) {
  WriteInputFile("claims.jsonl", 8, 31);
  rpc::ClaimsJobRequest request;
  request.__set_input_path("claims.jsonl");
  rpc::ClaimsJobStatus first;
  client_->submitClaimsJob(first, request);
  ASSERT_EQ(WaitForEnd(first.job_id).state, rpc::JobState::DONE);
  rpc::ClaimsJobStatus again, status;
  client_->submitClaimsJob(again, request);  // unchanged: its result, at once
  EXPECT_EQ(again.state, rpc::JobState::DONE);
  EXPECT_EQ(again.done, 8);
  // The input changes: the job, submitted again, cannot go on over it (and is not answered
  // with the old file's result).
  WriteInputFile("claims.jsonl", 12, 33);
  client_->submitClaimsJob(again, request);
  EXPECT_EQ(again.job_id, first.job_id);
  EXPECT_EQ(again.state, rpc::JobState::QUEUED);
  const rpc::ClaimsJobStatus failed = WaitForEnd(first.job_id);
  EXPECT_EQ(failed.state, rpc::JobState::FAILED);
  EXPECT_EQ(failed.done, 8);  // the progress kept from the run over the old file
  EXPECT_EQ(failed.total, 8);
  EXPECT_EQ(failed.detail,
            "its input file has changed since the job began; to start over on the new file, submit it "
            "again with restart (txscore job submit --input NAME --restart)");
  // Not run again when the server starts (jobs run in order: had it been queued at start, it
  // would have run before the next one); its record says the same.
  StopServer();
  const int started_before = jobs_started_.load();
  StartServer();
  client_->submitClaimsJob(status, Inline(4, 34));
  EXPECT_EQ(WaitForEnd(status.job_id).state, rpc::JobState::DONE);
  EXPECT_EQ(jobs_started_.load(), started_before + 1);
  client_->claimsJobStatus(status, first.job_id);
  EXPECT_EQ(status.state, rpc::JobState::FAILED);
  EXPECT_EQ(status.detail, failed.detail);
  // The way out the detail names.
  request.__set_restart(true);
  client_->submitClaimsJob(again, request);
  const rpc::ClaimsJobStatus restarted = WaitForEnd(first.job_id);
  EXPECT_EQ(restarted.state, rpc::JobState::DONE);
  EXPECT_EQ(restarted.done, 12);
  EXPECT_EQ(restarted.total, 12);
}

TEST_F(ClaimsJobsTest, AJobOfMostlyBadRowsStopsFailedOverItsErrorShare) {
  {
    std::ofstream out(dir_.file("in/bad.jsonl"));
    for (int i = 0; i < 1500; ++i) out << "claim_id,policy_id\n";  // CSV in a file named .jsonl
  }
  rpc::ClaimsJobRequest request;
  request.__set_input_path("bad.jsonl");
  rpc::ClaimsJobStatus submitted;
  client_->submitClaimsJob(submitted, request);
  const rpc::ClaimsJobStatus failed = WaitForEnd(submitted.job_id);
  EXPECT_EQ(failed.state, rpc::JobState::FAILED);
  EXPECT_EQ(failed.done, 1000);  // the first check, at 1,000 rows (chunks of 4)
  EXPECT_EQ(failed.total, 1500);
  EXPECT_EQ(failed.errors, 1000);
  EXPECT_EQ(failed.detail.rfind(
                "stopped after 1000 of 1500 rows: 1000 (100.0 %) are errors, over the maximum error share 0.1; "
                "the reasons are in ",
                0),
            0u)
      << failed.detail;
  EXPECT_NE(failed.detail.find("Is the file in the format its name says"), std::string::npos) << failed.detail;
  EXPECT_NE(failed.detail.find("Fix it and submit it again with restart (txscore job submit --input NAME --restart)"),
            std::string::npos)
      << failed.detail;
}

TEST_F(ClaimsJobsTest, ARestartAskedForAQueuedJobSurvivesAServerStop) {
  WriteInputFile("claims.jsonl", 6, 41);
  rpc::ClaimsJobRequest request;
  request.__set_input_path("claims.jsonl");
  rpc::ClaimsJobStatus first;
  client_->submitClaimsJob(first, request);
  ASSERT_EQ(WaitForEnd(first.job_id).state, rpc::JobState::DONE);
  WriteInputFile("claims.jsonl", 9, 42);  // changed: only a restart can run it
  // Held behind another job, the restart is queued when the server stops...
  hold_first_job_ = true;
  release_held_job_on_stop_ = true;
  rpc::ClaimsJobStatus blocker, queued;
  client_->submitClaimsJob(blocker, Inline(4, 43));
  EXPECT_EQ(job_held_.get_future().get(), blocker.job_id);
  request.__set_restart(true);
  client_->submitClaimsJob(queued, request);
  EXPECT_EQ(queued.state, rpc::JobState::QUEUED);
  StopServer();
  // ...and the server started again runs it as a restart, to the end of the new file.
  StartServer();
  const rpc::ClaimsJobStatus restarted = WaitForEnd(first.job_id);
  EXPECT_EQ(restarted.state, rpc::JobState::DONE) << restarted.detail;
  EXPECT_EQ(restarted.done, 9);
}

TEST_F(ClaimsJobsTest, AReloadSaysWhenTheClaimsPipelineFileChangedAndJobsKeepTheLoadedOne) {
  const ScoringServer::ReloadOutcome unchanged = server_->Reload("test");
  EXPECT_TRUE(unchanged.applied) << unchanged.detail;
  EXPECT_EQ(unchanged.detail.find("claims_pipeline"), std::string::npos) << unchanged.detail;
  testing::WriteFile(dir_.file("claims.yaml"), testing::ReadFile(dir_.file("claims.yaml")) + "# edited\n");
  const ScoringServer::ReloadOutcome changed = server_->Reload("test");
  EXPECT_TRUE(changed.applied) << changed.detail;
  const std::string note = "; note: jobs.claims_pipeline " + dir_.file("claims.yaml") +
                           " has changed since start-up, and claims jobs keep the pipeline they loaded then until a "
                           "restart";
  ASSERT_GE(changed.detail.size(), note.size());
  EXPECT_EQ(changed.detail.substr(changed.detail.size() - note.size()), note) << changed.detail;
}

TEST(ClaimsJobsOff, AServerWithoutAJobsSectionSaysHowToEnableThem) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));
  ASSERT_TRUE(server.ok());
  (*server)->Start();
  std::unique_ptr<RpcConnection> connection = RpcConnection::Open({"127.0.0.1", (*server)->rpc_port()}).value();
  rpc::TxScoreClient& client = connection->client();
  rpc::ClaimsJobStatus status;
  try {
    client.claimsJobStatus(status, "x");
    ADD_FAILURE() << "no ServiceError";
  } catch (const rpc::ServiceError& e) {
    EXPECT_EQ(e.reason,
              "failed precondition: this server runs no claims jobs: add a jobs section (claims_pipeline, "
              "input_dir, output_dir) to its settings file");
  }
  (*server)->Stop();
}

}  // namespace
}  // namespace txscore::service
