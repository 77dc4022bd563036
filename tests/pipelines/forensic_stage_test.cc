#include "pipelines/forensic_stage.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "accelerator/emulated_device.h"
#include "common/blocking_wait.h"
#include "common/prepare_counters.h"
#include "fraud/claims_synthetic.h"
#include "fraud/entity_state.h"
#include "llm/checkpoint_maker.h"
#include "llm/model_config.h"
#include "pipelines/claims_job.h"
#include "pipelines/claims_pipeline.h"
#include "pipelines/scoring_pipeline.h"
#include "pipelines/stages/llm_findings_stage.h"
#include "tests/memory_support.h"
#include "tests/pipelines/flat_logits_decoder.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// The forensic stage as outcomes name it: after the test pipeline's features, fraud and decision.
const StageRef kForensicStage{3, "forensic"};

// A pipeline where every decision is REVIEW (thresholds 0 and 1), with a forensic stage on a
// tiny generated checkpoint whose decoder is the double above.
class ForensicPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    llm::CheckpointSpec spec;
    spec.family = "qwen3";
    spec.size = "tiny";
    ASSERT_TRUE(llm::MakeCheckpoint(spec, dir_.file("llm")).ok());
  }

  void CreatePipeline(double review_threshold, int budget_ms = 60000, const std::string& when = "",
                      const std::string& placement = "", const accelerator::DeviceRegistry* devices = nullptr) {
    std::string yaml = testing::ReadFile(testing::WriteTestPipeline(dir_));
    const std::string thresholds = "review_threshold: 0.5";
    yaml.replace(yaml.find(thresholds), thresholds.size(), "review_threshold: " + std::to_string(review_threshold));
    const std::string decline = "decline_threshold: 0.9";
    yaml.replace(yaml.find(decline), decline.size(), "decline_threshold: 1.0");
    yaml += "  - {name: forensic, kind: llm_findings, after: decision, model: llm, budget_ms: " +
            std::to_string(budget_ms) + (when.empty() ? "" : ", when: \"" + when + "\"") +
            (placement.empty() ? "" : ", placement: " + placement) + "}\n";
    testing::WriteFile(dir_.file("forensic.yaml"), yaml);
    auto config = LoadPipelineConfig(dir_.file("forensic.yaml"));
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    auto db = storage::Database::Open(dir_.file("db"), {.durability = storage::Durability::kWal});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    db_ = std::move(db).value();
    PipelineRuntime runtime;
    runtime.devices = devices;
    runtime.shared = shared_;
    runtime.clock = [this] { return std::chrono::steady_clock::now() + clock_ahead_.load(); };
    runtime.load_decoder = [this](const std::string& dir, const llm::DecoderOptions& options) {
      control_.loads.push_back(options);
      Result<llm::ModelConfig> model_config = llm::LoadModelConfig(dir);
      if (!model_config.ok()) return Result<std::unique_ptr<llm::Decoder>>(model_config.error());
      return Result<std::unique_ptr<llm::Decoder>>(
          std::make_unique<FlatLogitsDecoder>(*model_config, &control_, options.device == control_.failing_device));
    };
    auto pipeline = ScoringPipeline::Create(*config, db_.get(), testing::TestCardKeyPath(dir_), runtime);
    ASSERT_TRUE(pipeline.ok()) << pipeline.error().ToString();
    pipeline_ = std::move(pipeline).value();
  }

  uint64_t CardTransactionCount() {
    auto stored = db_->Get(storage::ColumnFamily::kEntityState, ExpectedToken());
    if (!stored.ok() || !stored->has_value()) return 0;
    return fraud::DecodeCardState(**stored)->transaction_count;
  }
  std::string ExpectedToken() const {
    return fraud::CardTokenizer::FromKey(testing::TestCardKey())->Tokenize(testing::kTestPan);
  }

  // The host CPU with a fixed profile, and the emulated device (the forensic stage's
  // "emulated" placement, with the CPU as its fallback).
  static accelerator::DeviceRegistry CpuAndEmulatedDevices() {
    accelerator::DeviceRegistry devices;
    devices.Register(accelerator::HostCpuDevice(
        {.dispatch_us = 3, .flops_per_s = 40e9, .memory_bytes_per_s = 16e9, .copy_bytes_per_s = 0, .source = "test"},
        24LL << 30));
    devices.Register(accelerator::EmulatedDeviceDescription({}));
    return devices;
  }

  // The transaction pipeline's LLM engine.
  ForensicStage* Engine() const { return ForensicStageOf(*pipeline_->FindStage("forensic")); }

  testing::TempDir dir_;
  // How far the pipeline's clock runs ahead of the steady clock (0: the same).
  std::atomic<std::chrono::steady_clock::duration> clock_ahead_{std::chrono::steady_clock::duration::zero()};
  FlatLogitsDecoder::Control control_;
  std::shared_ptr<SharedStageResources> shared_ = std::make_shared<SharedStageResources>();
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<ScoringPipeline> pipeline_;
};

TEST_F(ForensicPipelineTest, ReviewDecisionGetsFindingsInTheResultAndTheAuditRecord) {
  CreatePipeline(/*review_threshold=*/0.0);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kReview);
  ASSERT_TRUE(outcome->findings.has_value());
  EXPECT_FALSE(outcome->findings->flags.empty());
  EXPECT_EQ(outcome->findings->model_id, "llm");
  // The stage names its checkpoint by directory and content version (what /readyz shows).
  const std::optional<ModelVersion> checkpoint = pipeline_->FindStage("forensic")->model();
  ASSERT_TRUE(checkpoint.has_value());
  EXPECT_EQ(checkpoint->id, "llm");
  EXPECT_EQ(checkpoint->version, llm::CheckpointVersion(dir_.file("llm")).value());
  EXPECT_TRUE(outcome->degraded_stages.empty());
  EXPECT_TRUE(outcome->skipped_stages.empty());
  std::vector<std::string> stages;
  for (const auto& t : outcome->timings) stages.push_back(t.stage);
  EXPECT_EQ(stages,
            (std::vector<std::string>{"validate", "state", "features", "fraud", "decision", "forensic", "persist"}));
  EXPECT_GT(control_.forward_calls.load(), 1);
  // The stage counts its tokens (the vLLM-named token counters read them).
  EXPECT_GT(Engine()->prompt_tokens(), 100u);
  EXPECT_GT(Engine()->generated_tokens(), 5u);

  auto audit = pipeline_->audit_log().ReadLast(1);
  ASSERT_TRUE(audit.ok());
  ASSERT_TRUE((*audit)[0].findings.has_value());
  EXPECT_EQ((*audit)[0].findings->risk_level, llm::RiskLevelName(outcome->findings->risk_level));
  EXPECT_EQ((*audit)[0].findings->flags, outcome->findings->flags);
  EXPECT_EQ((*audit)[0].findings->summary, outcome->findings->summary);
  EXPECT_EQ((*audit)[0].findings->model_id, "llm");
  EXPECT_EQ((*audit)[0].placement, "fraud@cpu,forensic@cpu");
  EXPECT_EQ(outcome->devices.back(), (std::pair<std::string, std::string>{"forensic", "cpu"}));
  EXPECT_EQ(CardTransactionCount(), 1u);
}

TEST_F(ForensicPipelineTest, TheCpuEnginesQuantizationAndKernelsComeFromTheStagesKeys) {
  CreatePipeline(0.0, 60000, "", "cpu, dtype: bfloat16, quantization: int8, cpu_kernels: false");
  ASSERT_EQ(control_.loads.size(), 1u);
  EXPECT_EQ(control_.loads[0].quantization, llm::DecoderOptions::Quantization::kInt8);
  EXPECT_FALSE(control_.loads[0].cpu_kernels);
  EXPECT_EQ(control_.loads[0].dtype, accelerator::Dtype::kBFloat16);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-int8"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_TRUE(outcome->findings.has_value());
}

TEST_F(ForensicPipelineTest, ByDefaultTheCpuEngineRunsUnquantizedOnTheKernels) {
  CreatePipeline(0.0);
  ASSERT_EQ(control_.loads.size(), 1u);
  EXPECT_EQ(control_.loads[0].quantization, llm::DecoderOptions::Quantization::kNone);
  EXPECT_TRUE(control_.loads[0].cpu_kernels);
}

// Nothing listens on port 1 of loopback: a remote pool that is down.
const char kDownPool[] =
    "remote, remote: {base_url: \"http://127.0.0.1:1/v1\", model: pool, retries: 0, breaker_failures: 2";

TEST_F(ForensicPipelineTest, ARemoteStageWhosePoolIsDownIsSkippedAsDegradedAndTheDecisionStands) {
  CreatePipeline(0.0, 60000, "", std::string(kDownPool) + "}");
  const PreparedStage& stage = *pipeline_->FindStage("forensic");
  EXPECT_EQ(Engine(), nullptr);  // fallback: skip loads no local model
  ASSERT_NE(RemoteLlmOf(stage), nullptr);
  EXPECT_EQ(stage.model()->id, "pool");
  EXPECT_EQ(stage.model()->version, "remote");
  for (int i = 0; i < 3; ++i) {
    ::testing::internal::CaptureStderr();
    auto outcome = pipeline_->Score(testing::ValidTransaction("req-" + std::to_string(i)));
    const std::string logged = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
    EXPECT_EQ(outcome->decision, Decision::kReview);
    EXPECT_FALSE(outcome->findings.has_value());
    EXPECT_EQ(outcome->degraded_stages, std::vector<StageRef>{kForensicStage});
    // The log says why: the pool's failure, then (once the circuit is open) the open circuit.
    EXPECT_NE(logged.find("stage forensic failed for request req-" + std::to_string(i)), std::string::npos) << logged;
    EXPECT_NE(logged.find(i < 2 ? "the call failed at connect" : "is open"), std::string::npos) << logged;
    EXPECT_NE(logged.find("(fallback: skip)"), std::string::npos) << logged;
  }
  // Two failed calls opened the circuit: the third request made none.
  EXPECT_EQ(RemoteLlmOf(stage)->calls_failed(), 2u);
  EXPECT_EQ(RemoteLlmOf(stage)->breaker_state(), CircuitBreaker::State::kOpen);
  EXPECT_EQ(CardTransactionCount(), 3u);
}

TEST_F(ForensicPipelineTest, ARemoteStageFallsBackToItsOwnModelOnTheCpu) {
  CreatePipeline(0.0, 60000, "", std::string(kDownPool) + ", fallback: cpu}");
  ASSERT_NE(Engine(), nullptr);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  ASSERT_TRUE(outcome->findings.has_value());
  EXPECT_EQ(outcome->findings->model_id, "llm");
  EXPECT_TRUE(outcome->degraded_stages.empty());
  EXPECT_EQ(outcome->devices.back(), (std::pair<std::string, std::string>{"forensic", "cpu"}));
  // A claims chunk: each claim tried on the pool, then all of them on the local model together.
  testing::WriteClaimsPipelineWithLlmStage(dir_, "claims_model.score >= 0");
  std::string yaml = testing::ReadFile(dir_.file("claims.yaml"));
  const std::string stage = "model: llm, ";
  yaml.replace(yaml.find(stage), stage.size(),
               "model: llm, placement: " + std::string(kDownPool) + ", fallback: cpu}, ");
  testing::WriteFile(dir_.file("claims.yaml"), yaml);
  auto config = LoadPipelineConfig(dir_.file("claims.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  PipelineRuntime runtime;
  runtime.shared = shared_;
  runtime.load_decoder = [](const std::string&, const llm::DecoderOptions&) {
    return Result<std::unique_ptr<llm::Decoder>>(Internal("a shared stage loads no model"));
  };
  auto claims = ClaimsPipeline::Create(*config, testing::TestCardKeyPath(dir_), runtime);
  ASSERT_TRUE(claims.ok()) << claims.error().ToString();
  fraud::SyntheticClaimsOptions data;
  data.claims = 4;
  std::vector<fraud::Claim> chunk;
  for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) {
    chunk.push_back(fraud::ValidateClaim(c.claim, (*claims)->tokenizer()).value());
  }
  auto outcomes = (*claims)->ScoreChunk(chunk, {1, 1, 1, 1});
  ASSERT_TRUE(outcomes.ok()) << outcomes.error().ToString();
  for (const ClaimOutcome& o : *outcomes) {
    ASSERT_TRUE(o.findings.has_value()) << o.claim_id;
    EXPECT_EQ(o.devices.back(), (std::pair<std::string, std::string>{"analysis", "cpu"}));
  }
  EXPECT_GE(RemoteLlmOf(*(*claims)->FindStage("analysis"))->calls_failed(), 2u);
}

TEST_F(ForensicPipelineTest, ARemoteStageFallsBackToItsOwnModelOnTheDeviceKindItNames) {
  const accelerator::DeviceRegistry devices = CpuAndEmulatedDevices();
  CreatePipeline(0.0, 60000, "", std::string(kDownPool) + ", fallback: emulated}", &devices);
  ASSERT_NE(Engine(), nullptr);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  ASSERT_TRUE(outcome->findings.has_value());
  EXPECT_TRUE(outcome->degraded_stages.empty());
  EXPECT_EQ(outcome->devices.back(), (std::pair<std::string, std::string>{"forensic", "emulated:0 (emulated)"}));
}

TEST_F(ForensicPipelineTest, AChatTemplateThatRefusesTheTaskConversationIsRefusedWhenTheStageLoads) {
  nlohmann::json config = nlohmann::json::parse(testing::ReadFile(dir_.file("llm/tokenizer_config.json")));
  config["chat_template"] =
      "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}";
  testing::WriteFile(dir_.file("llm/tokenizer_config.json"), config.dump());
  ForensicStageOptions options;
  options.model_dir = dir_.file("llm");
  auto stage = ForensicStage::Create(options, [](const std::string&, const llm::DecoderOptions&) {
    return Result<std::unique_ptr<llm::Decoder>>(Internal("not reached: the prompt is checked first"));
  });
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.error().message, "stage forensic: the checkpoint's chat template cannot render its prompt: " +
                                       dir_.file("llm/tokenizer_config.json") +
                                       " chat_template:1: the template raised: System role not supported");
}

TEST_F(ForensicPipelineTest, ATokenizerWithIdsPastTheModelsVocabularyIsRefusedWhenTheStageLoads) {
  const int64_t model_vocab = llm::LoadModelConfig(dir_.file("llm")).value().vocab_size;
  const std::string original = testing::ReadFile(dir_.file("llm/tokenizer.json"));
  // The checkpoint's tokenizer with one more special token of this id.
  const auto with_token_id = [&](int64_t id) {
    nlohmann::json tokenizer = nlohmann::json::parse(original);
    tokenizer["added_tokens"].push_back({{"id", id},
                                         {"content", "<|added|>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}});
    testing::WriteFile(dir_.file("llm/tokenizer.json"), tokenizer.dump());
  };
  ForensicStageOptions options;
  options.model_dir = dir_.file("llm");
  const auto load = [&] {
    return ForensicStage::Create(options, [](const std::string&, const llm::DecoderOptions&) {
      return Result<std::unique_ptr<llm::Decoder>>(Internal("the decoder was asked for"));
    });
  };
  // A tokenizer that fills the vocabulary exactly is this model's: the decoder is loaded.
  with_token_id(model_vocab - 1);
  auto fits = load();
  ASSERT_FALSE(fits.ok());
  EXPECT_EQ(fits.error().message, "the decoder was asked for");
  with_token_id(model_vocab);
  auto stage = load();
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.error().message, "stage forensic: the tokenizer has " + std::to_string(model_vocab + 1) +
                                       " token ids, more than the model's vocab_size of " +
                                       std::to_string(model_vocab) +
                                       " (config.json): the tokenizer is not this model's");
}

// Refused reloads leave no memory behind: a 150,000-token tokenizer past the model's
// vocabulary (a few MB of JSON, tens of MB parsed), refused again and again on four threads
// that live on, as the admin port's do (each once kept about 40 MB, measured with the 0.5B
// checkpoint's tokenizer).
TEST_F(ForensicPipelineTest, RefusedTokenizerLoadsLeaveNoMemoryBehind) {
  nlohmann::json tokenizer = nlohmann::json::parse(testing::ReadFile(dir_.file("llm/tokenizer.json")));
  int64_t next_id = 0;
  for (const auto& [token, id] : tokenizer["model"]["vocab"].items())
    next_id = std::max<int64_t>(next_id, id.get<int64_t>() + 1);
  for (int i = 0; i < 150000; ++i) tokenizer["model"]["vocab"]["extra-token-" + std::to_string(i)] = next_id++;
  testing::WriteFile(dir_.file("llm/tokenizer.json"), tokenizer.dump());
  tokenizer = nullptr;
  ForensicStageOptions options;
  options.model_dir = dir_.file("llm");
  const auto load_refused = [&] {
    auto stage = ForensicStage::Create(options, [](const std::string&, const llm::DecoderOptions&) {
      return Result<std::unique_ptr<llm::Decoder>>(Internal("the decoder was asked for"));
    });
    ASSERT_FALSE(stage.ok());
    EXPECT_NE(stage.error().message.find("the tokenizer is not this model's"), std::string::npos)
        << stage.error().message;
  };
  std::vector<std::unique_ptr<testing::LongLivedThread>> threads;
  for (int i = 0; i < 4; ++i) threads.push_back(std::make_unique<testing::LongLivedThread>());
  for (auto& thread : threads) thread->Run(load_refused);  // each thread's heap has held one
  const size_t resident_before = testing::ResidentBytes();
  for (int round = 0; round < 5; ++round) {
    for (auto& thread : threads) thread->Run(load_refused);
  }
  testing::ExpectResidentGrowthBelow(resident_before, 16u << 20);
}

TEST_F(ForensicPipelineTest, AClaimsPipelineCanShareTheTransactionPipelinesLlmStage) {
  CreatePipeline(0.5);
  testing::WriteClaimsPipelineWithLlmStage(dir_, "claims_model.score >= 0");
  auto config = LoadPipelineConfig(dir_.file("claims.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  PipelineRuntime runtime;
  runtime.shared = shared_;  // what the transaction pipeline published: its LLM engine
  runtime.load_decoder = [](const std::string&, const llm::DecoderOptions&) {
    return Result<std::unique_ptr<llm::Decoder>>(Internal("a shared stage loads no model"));
  };
  auto claims = ClaimsPipeline::Create(*config, testing::TestCardKeyPath(dir_), runtime);
  ASSERT_TRUE(claims.ok()) << claims.error().ToString();
  EXPECT_EQ(ForensicStageOf(*(*claims)->FindStage("analysis")), Engine());
  fraud::SyntheticClaimsOptions data;
  data.claims = 3;
  std::vector<fraud::Claim> chunk;
  for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) {
    chunk.push_back(fraud::ValidateClaim(c.claim, (*claims)->tokenizer()).value());
  }
  auto outcomes = (*claims)->ScoreChunk(chunk, {1, 1, 1});
  ASSERT_TRUE(outcomes.ok()) << outcomes.error().ToString();
  for (const ClaimOutcome& o : *outcomes) {
    ASSERT_TRUE(o.findings.has_value()) << o.claim_id;
    EXPECT_EQ(o.devices.back(), (std::pair<std::string, std::string>{"analysis", "cpu"}));
  }
  // The chunk's claims went through the transaction stage's batcher, as one batch.
  EXPECT_EQ(Engine()->batch_sizes(), std::vector<int>{3});
}

TEST_F(ForensicPipelineTest, AClaimsJobCountsLogsAndListsEveryClaimTheLlmWroteNoFindingsFor) {
  control_.failing_device = "cpu";   // the LLM stage's only device fails every forward pass
  testing::WriteTestPipeline(dir_);  // the card key
  testing::WriteClaimsPipelineWithLlmStage(dir_, "claims_model.score >= 0.5");
  auto config = LoadPipelineConfig(dir_.file("claims.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  PipelineRuntime runtime;
  runtime.load_decoder = [this](const std::string& dir, const llm::DecoderOptions& options) {
    Result<llm::ModelConfig> model_config = llm::LoadModelConfig(dir);
    if (!model_config.ok()) return Result<std::unique_ptr<llm::Decoder>>(model_config.error());
    return Result<std::unique_ptr<llm::Decoder>>(
        std::make_unique<FlatLogitsDecoder>(*model_config, &control_, options.device == control_.failing_device));
  };
  auto claims = ClaimsPipeline::Create(*config, testing::TestCardKeyPath(dir_), runtime);
  ASSERT_TRUE(claims.ok()) << claims.error().ToString();
  db_ = storage::Database::Open(dir_.file("jobs-db"), {.durability = storage::Durability::kWal}).value();
  fraud::SyntheticClaimsOptions data;
  data.claims = 40;
  data.seed = 3;
  std::string input;
  for (const fraud::LabeledClaim& c : fraud::GenerateClaims(data)) input += fraud::ClaimToJson(c.claim) + "\n";
  testing::WriteFile(dir_.file("claims.jsonl"), input);

  ClaimsJobOptions options;
  options.input_path = dir_.file("claims.jsonl");
  options.output_path = dir_.file("out.jsonl");
  options.chunk_size = 16;
  std::vector<ClaimsJobProgress> progress;
  options.progress = [&](const ClaimsJobProgress& p) { progress.push_back(p); };
  ::testing::internal::CaptureStderr();  // what the job logs
  auto summary = RunClaimsJob(**claims, *db_, options);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(summary.ok()) << summary.error().ToString();
  EXPECT_EQ(summary->state, ClaimsJobState::kDone);
  ASSERT_GT(summary->llm_selected, 0);
  EXPECT_EQ(summary->analysed, 0);
  EXPECT_EQ(summary->llm_shortfalls, (std::map<std::string, int64_t>{{"failed", summary->llm_selected}}));
  EXPECT_EQ(summary->LlmShortfallShare(), 1.0);
  EXPECT_NE(summary->ToText().find("LLM findings for 0 of " + std::to_string(summary->llm_selected) +
                                   " claims it was asked to read (no findings: failed " +
                                   std::to_string(summary->llm_selected)),
            std::string::npos)
      << summary->ToText();
  EXPECT_EQ(progress.back().llm_shortfalls, summary->llm_shortfalls);
  // Each chunk with a shortfall is logged, with the counts and the first claim's reason.
  EXPECT_NE(logged.find(" warning claims: job " + summary->job_id + " chunk 0: the LLM stage wrote no findings for "),
            std::string::npos)
      << logged;
  EXPECT_NE(logged.find("(failed "), std::string::npos) << logged;
  EXPECT_NE(logged.find(": failed: the device stopped responding"), std::string::npos) << logged;
  EXPECT_EQ(progress.back().llm_selected, summary->llm_selected);

  // Each line the LLM stage was asked for says so, and why; the others list nothing.
  int64_t listed = 0;
  std::ifstream out(dir_.file("out.jsonl"));
  for (std::string text; std::getline(out, text);) {
    const nlohmann::json line = nlohmann::json::parse(text);
    const nlohmann::json& shortfalls = line.at("llm_shortfalls");
    if (line.at("stage_scores").at("claims_model").get<double>() < 0.5) {
      EXPECT_TRUE(shortfalls.empty()) << text;
      continue;
    }
    ++listed;
    EXPECT_EQ(shortfalls,
              nlohmann::json::parse(
                  R"([{"stage": "analysis", "reason": "failed", "detail": "the device stopped responding"}])"))
        << text;
    EXPECT_TRUE(line.at("findings").is_null());
  }
  EXPECT_EQ(listed, summary->llm_selected);
  const nlohmann::json saved = nlohmann::json::parse(testing::ReadFile(dir_.file("out.jsonl.summary.json")));
  EXPECT_EQ(saved.at("llm_shortfalls").at("failed"), summary->llm_selected);
  // The counts survive in the job's record (a server's status reads them there).
  auto record = ReadClaimsJob(*db_, summary->job_id);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->llm_selected, summary->llm_selected);
  EXPECT_EQ((*record)->llm_shortfalls, summary->llm_shortfalls);
}

TEST_F(ForensicPipelineTest, ScoringBuildsNoConstraintOrModel) {
  CreatePipeline(/*review_threshold=*/0.0);
  const PrepareSnapshot before = PrepareCountersNow();
  for (int i = 0; i < 3; ++i) {
    fraud::RawTransaction tx = testing::ValidTransaction("req-" + std::to_string(i));
    tx.timestamp_ms += i * 1000;
    auto outcome = pipeline_->Score(tx);
    ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
    ASSERT_TRUE(outcome->findings.has_value());
  }
  const PrepareSnapshot during = PrepareCountersNow() - before;
  EXPECT_EQ(during.graph_builds, 0u);  // the findings constraint was compiled when the stage was created
  EXPECT_EQ(during.model_builds, 0u);
  EXPECT_EQ(during.weight_bytes_moved, 0u);
}

TEST_F(ForensicPipelineTest, AFailingDeviceHandsTheRequestToTheNextOneAndIsPassedOverAfterwards) {
  const accelerator::DeviceRegistry devices = CpuAndEmulatedDevices();
  control_.failing_device = "privateuseone:0";
  CreatePipeline(/*review_threshold=*/0.0, 60000, "", "emulated", &devices);
  EXPECT_EQ(pipeline_->plan().Find("forensic")->device, "emulated:0");
  EXPECT_EQ(pipeline_->plan().Find("forensic")->fallback, std::vector<std::string>{"cpu"});

  auto first = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_TRUE(first->findings.has_value());  // written on the CPU
  EXPECT_EQ(first->devices.back(), (std::pair<std::string, std::string>{"forensic", "cpu"}));
  EXPECT_EQ(pipeline_->audit_log().ReadLast(1)->at(0).placement, "fraud@cpu,forensic@cpu");
  EXPECT_TRUE(first->degraded_stages.empty());
  EXPECT_EQ(control_.failed_calls.load(), 1);
  EXPECT_EQ(*pipeline_->FindStage("forensic")->device_fallbacks(), 1u);

  fraud::RawTransaction second_tx = testing::ValidTransaction("req-2");
  second_tx.timestamp_ms += 1000;
  auto second = pipeline_->Score(second_tx);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->findings.has_value());
  EXPECT_EQ(control_.failed_calls.load(), 1);  // the failing device was passed over
  EXPECT_EQ(*pipeline_->FindStage("forensic")->device_fallbacks(), 1u);
}

TEST_F(ForensicPipelineTest, AnInternalErrorIsNotRetriedOnTheNextDevice) {
  const accelerator::DeviceRegistry devices = CpuAndEmulatedDevices();
  control_.failing_device = "privateuseone:0";
  control_.failure = ErrorCode::kInternal;  // not the device's fault: the CPU would fail the same way
  CreatePipeline(/*review_threshold=*/0.0, 60000, "", "emulated", &devices);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_FALSE(outcome->findings.has_value());
  EXPECT_EQ(outcome->degraded_stages, std::vector<StageRef>{kForensicStage});
  EXPECT_EQ(control_.failed_calls.load(), 1);
  EXPECT_EQ(*pipeline_->FindStage("forensic")->device_fallbacks(), 0u);
}

TEST_F(ForensicPipelineTest, ConcurrentRequestsShareABatch) {
  CreatePipeline(/*review_threshold=*/0.0);
  control_.block_first_call = true;
  std::future<void> entered = control_.entered.get_future();
  std::vector<std::thread> requests;
  requests.emplace_back(
      [&] { EXPECT_TRUE(pipeline_->Score(testing::ValidTransaction("first"))->findings.has_value()); });
  entered.wait();  // the first request's batch holds the decoder
  for (int i = 0; i < 3; ++i) {
    requests.emplace_back([&, i] {
      fraud::RawTransaction tx = testing::ValidTransaction("queued-" + std::to_string(i));
      tx.card_number = std::nullopt;
      tx.card_token = "tok-" + std::to_string(i) + std::string(40, 'a');  // other cards: no wait on the card lock
      auto outcome = pipeline_->Score(tx);
      ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
      EXPECT_TRUE(outcome->findings.has_value());
    });
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Engine()->queued() < 3 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  control_.Release();
  for (std::thread& t : requests) t.join();
  EXPECT_EQ(Engine()->batch_sizes(), (std::vector<int>{1, 3}));
}

TEST_F(ForensicPipelineTest, AnApiGenerationMakesWayForAReviewBetweenItsSteps) {
  CreatePipeline(/*review_threshold=*/0.0);
  // The API generation's second step waits (a minute at most) until the review has its
  // findings: it can only have them if the generation made way after its first step.
  std::mutex mutex;
  std::condition_variable changed;
  const llm::DecoderCache* api_cache = nullptr;
  bool review_answered = false, waited_in_vain = false;
  std::promise<void> api_started;
  control_.on_forward = [&](const llm::DecoderCache* cache) {
    std::unique_lock<std::mutex> lock(mutex);
    if (api_cache == nullptr) {  // the generation's first step ends once the review is queued
      api_cache = cache;
      api_started.set_value();
      lock.unlock();
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (Engine()->queued() == 0 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
      return;
    }
    if (cache != api_cache || review_answered || waited_in_vain) return;
    waited_in_vain = !changed.wait_for(lock, std::chrono::seconds(60), [&] { return review_answered; });
  };
  llm::GenerationOptions options;
  options.max_new_tokens = 8;
  options.ignore_eos = true;
  std::future<Result<llm::GenerationResult>> api = std::async(std::launch::async, [&] {
    return Engine()->Generate({1, 2, 3}, options, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  });
  api_started.get_future().wait();
  auto review = pipeline_->Score(testing::ValidTransaction("under-review"));
  {
    std::lock_guard<std::mutex> lock(mutex);
    review_answered = true;
    changed.notify_all();
  }
  ASSERT_TRUE(review.ok()) << review.error().ToString();
  EXPECT_TRUE(review->findings.has_value());
  Result<llm::GenerationResult> generated = api.get();
  ASSERT_TRUE(generated.ok()) << generated.error().ToString();
  EXPECT_EQ(generated->generated_ids.size(), 8u);  // the generation went on to its end
  EXPECT_FALSE(waited_in_vain);
  EXPECT_EQ(Engine()->batch_sizes(), (std::vector<int>{1, 1}));
}

// Counts the waits the scoring thread announces (common/blocking_wait.h), as the RPC server's
// threads do to lend their worker slot.
class CountingWaitObserver : public BlockingWaitObserver {
 public:
  Answer Begin() override {
    ++begun;
    return answer;
  }
  Answer answer = Answer::kCounted;
  void End() override { ++ended; }
  int begun = 0, ended = 0;
};

TEST_F(ForensicPipelineTest, TheScoringThreadAnnouncesItsWaitForTheLlmStageAndNothingElse) {
  CreatePipeline(/*review_threshold=*/0.0);
  CountingWaitObserver observer;
  BlockingWaitObserver* previous = SetThreadBlockingWaitObserver(&observer);
  auto review = pipeline_->Score(testing::ValidTransaction("review"));
  SetThreadBlockingWaitObserver(previous);
  ASSERT_TRUE(review.ok()) << review.error().ToString();
  EXPECT_TRUE(review->findings.has_value());
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 1);
}

TEST_F(ForensicPipelineTest, ARefusedWaitSkipsTheLlmStageAndTheDecisionStandsWithoutFindings) {
  CreatePipeline(/*review_threshold=*/0.0);
  CountingWaitObserver observer;
  observer.answer = BlockingWaitObserver::Answer::kRefused;  // as the RPC server with every waiting thread taken
  BlockingWaitObserver* previous = SetThreadBlockingWaitObserver(&observer);
  auto review = pipeline_->Score(testing::ValidTransaction("review"));
  SetThreadBlockingWaitObserver(previous);
  ASSERT_TRUE(review.ok()) << review.error().ToString();
  EXPECT_EQ(review->decision, Decision::kReview);
  EXPECT_FALSE(review->findings.has_value());
  ASSERT_EQ(review->skipped_stages.size(), 1u);
  EXPECT_EQ(review->skipped_stages[0].name, "forensic");
  EXPECT_EQ(control_.forward_calls.load(), 0);  // the model never ran
  EXPECT_EQ(observer.begun, 1);
  EXPECT_EQ(observer.ended, 0);
}

TEST_F(ForensicPipelineTest, AnApprovedTransactionAnnouncesNoWait) {
  CreatePipeline(/*review_threshold=*/0.999);
  CountingWaitObserver observer;
  BlockingWaitObserver* previous = SetThreadBlockingWaitObserver(&observer);
  auto approved = pipeline_->Score(testing::ValidTransaction("approved"));
  SetThreadBlockingWaitObserver(previous);
  ASSERT_TRUE(approved.ok()) << approved.error().ToString();
  EXPECT_EQ(approved->decision, Decision::kApprove);
  EXPECT_EQ(observer.begun, 0);
}

TEST_F(ForensicPipelineTest, ApprovedTransactionsDoNotRunTheStage) {
  CreatePipeline(/*review_threshold=*/0.999);
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kApprove);
  EXPECT_FALSE(outcome->findings.has_value());
  EXPECT_TRUE(outcome->degraded_stages.empty());
  EXPECT_TRUE(outcome->skipped_stages.empty());
  EXPECT_EQ(control_.forward_calls.load(), 0);
  EXPECT_FALSE(pipeline_->audit_log().ReadLast(1)->at(0).findings.has_value());
}

TEST_F(ForensicPipelineTest, AConditionOnTheScoreSelectsApprovedTransactionsToo) {
  CreatePipeline(/*review_threshold=*/0.999, 60000, "fraud.score >= 0.0");
  auto outcome = pipeline_->Score(testing::ValidTransaction("req-1"));
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kApprove);
  EXPECT_TRUE(outcome->findings.has_value());
}

TEST_F(ForensicPipelineTest, TheRequestsBudgetCutsTheStageShortAndTheDecisionStands) {
  CreatePipeline(/*review_threshold=*/0.0);
  control_.pause_per_step = std::chrono::milliseconds(20);  // 50+ steps would take over a second
  fraud::RawTransaction tx = testing::ValidTransaction("req-1");
  tx.budget_ms = 300;
  auto outcome = pipeline_->Score(tx);
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kReview);
  EXPECT_FALSE(outcome->findings.has_value());
  EXPECT_EQ(outcome->degraded_stages, std::vector<StageRef>{kForensicStage});
  EXPECT_TRUE(outcome->skipped_stages.empty());
  auto audit = pipeline_->audit_log().ReadLast(1);
  EXPECT_EQ((*audit)[0].degraded_stages, std::vector<std::string>{"forensic"});
  EXPECT_FALSE((*audit)[0].findings.has_value());
  EXPECT_EQ(CardTransactionCount(), 1u);
}

TEST_F(ForensicPipelineTest, TheStageReadsItsDeadlineOnThePipelinesClock) {
  CreatePipeline(/*review_threshold=*/0.0);
  const fraud::Transaction tx = fraud::ValidateTransaction(testing::ValidTransaction("req-1")).value();
  const auto in_a_minute = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  ForensicResult analysed = Engine()->Analyze(tx, 0.7, {}, in_a_minute);
  EXPECT_EQ(analysed.outcome, ForensicResult::Outcome::kAnalysed) << analysed.detail;
  // By the pipeline's clock an hour has passed: the same deadline is gone, though the steady
  // clock has not reached it.
  clock_ahead_ = std::chrono::hours(1);
  ForensicResult late = Engine()->Analyze(tx, 0.7, {}, in_a_minute);
  EXPECT_EQ(late.outcome, ForensicResult::Outcome::kSkipped);
  EXPECT_EQ(late.detail, "the deadline passed before the stage could start");
}

TEST_F(ForensicPipelineTest, ARequestThatCannotGetItsTurnInTimeIsSkippedAndNoUpdateIsLost) {
  CreatePipeline(/*review_threshold=*/0.0);
  control_.block_first_call = true;
  std::future<void> entered = control_.entered.get_future();
  std::thread first([&] {
    auto outcome = pipeline_->Score(testing::ValidTransaction("first"));
    ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
    EXPECT_TRUE(outcome->findings.has_value());
  });
  entered.wait();  // "first" is inside the stage, outside the card lock
  fraud::RawTransaction second_tx = testing::ValidTransaction("second");
  second_tx.timestamp_ms += 1000;
  second_tx.budget_ms = 1;
  auto second = pipeline_->Score(second_tx);  // same card: must not wait for "first"'s stage
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_EQ(second->skipped_stages, std::vector<StageRef>{kForensicStage});
  EXPECT_FALSE(second->findings.has_value());
  EXPECT_EQ(CardTransactionCount(), 1u);
  control_.Release();
  first.join();
  // "first" re-read the card after its stage and added itself to what "second" wrote.
  EXPECT_EQ(CardTransactionCount(), 2u);
}

// A ContinuationHost of one thread, as the RPC server is one of several (common/blocking_wait.h):
// work runs in the order of its time, timers included; on destruction, work not yet due is
// dropped, as the server drops it. Its last owner may be work it runs (a request's closure holds
// the host it goes on on): the thread then ends on its own, its state kept by the thread.
class OneThreadHost : public ContinuationHost {
 public:
  OneThreadHost() : state_(std::make_shared<State>()), thread_([state = state_] { Work(*state); }) {}
  ~OneThreadHost() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->stopping = true;
    }
    state_->wake.notify_all();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  void Post(std::function<void()> work) override { PostAt(std::chrono::steady_clock::now(), std::move(work)); }
  void PostAt(std::chrono::steady_clock::time_point when, std::function<void()> work) override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->queue.emplace(when, std::move(work));
    }
    state_->wake.notify_all();
  }
  std::thread::id id() const { return thread_.get_id(); }
  // The test's clock for timers: every work queued now is due at once (a deadline has come).
  void FireTimersNow() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due;
      for (auto& [when, work] : state_->queue)
        due.emplace(std::chrono::steady_clock::time_point::min(), std::move(work));
      state_->queue.swap(due);
    }
    state_->wake.notify_all();
  }
  // Waits until no work runs and none is due.
  void Drain() {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->idle.wait(lock, [this] {
      return !state_->running &&
             (state_->queue.empty() || state_->queue.begin()->first > std::chrono::steady_clock::now());
    });
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable wake, idle;
    std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> queue;
    bool stopping = false;
    bool running = false;
  };
  static void Work(State& state) {
    std::unique_lock<std::mutex> lock(state.mutex);
    for (;;) {
      if (state.stopping) return;
      if (state.queue.empty()) {
        state.idle.notify_all();
        state.wake.wait(lock);
        continue;
      }
      const auto due = state.queue.begin()->first;
      if (due > std::chrono::steady_clock::now()) {
        state.idle.notify_all();
        state.wake.wait_until(lock, due);
        continue;
      }
      std::function<void()> work = std::move(state.queue.begin()->second);
      state.queue.erase(state.queue.begin());
      state.running = true;
      lock.unlock();
      work();
      work = nullptr;  // its captures go here, with the lock free (the host may be one of them)
      lock.lock();
      state.running = false;
    }
  }
  std::shared_ptr<State> state_;
  std::thread thread_;  // last: starts after the state exists
};

// Installs `host` on the calling thread while it lives.
struct ScopedHost {
  explicit ScopedHost(std::shared_ptr<ContinuationHost> host) : previous(SetThreadContinuationHost(std::move(host))) {}
  ~ScopedHost() { SetThreadContinuationHost(std::move(previous)); }
  std::shared_ptr<ContinuationHost> previous;
};

// What ScoreThen answered, and on which thread.
struct Answered {
  std::promise<Result<ScoreOutcome>> outcome;
  std::atomic<int> calls{0};
  std::thread::id thread;
  std::function<void(Result<ScoreOutcome>)> Done() {
    return [this](Result<ScoreOutcome> result) {
      thread = std::this_thread::get_id();
      if (calls.fetch_add(1) == 0) outcome.set_value(std::move(result));
    };
  }
};

// Releases the held LLM step when a test ends, whatever failed, so that the pipeline's batcher
// can stop.
struct ReleaseOnExit {
  FlatLogitsDecoder::Control* control;
  ~ReleaseOnExit() { control->Release(); }
};

TEST_F(ForensicPipelineTest, AReviewThroughAHostHoldsNoThreadNorItsCardWhileTheLlmWritesAndGoesOnOnTheHost) {
  CreatePipeline(/*review_threshold=*/0.0);
  control_.block_first_call = true;
  const ReleaseOnExit release_on_exit{&control_};
  std::future<void> entered = control_.entered.get_future();
  auto host = std::make_shared<OneThreadHost>();
  Answered review;
  std::future<void> returned = std::async(std::launch::async, [&] {
    const ScopedHost on_this_thread(host);
    pipeline_->ScoreThen(testing::ValidTransaction("parked"), review.Done());
  });
  // ScoreThen returns with the LLM held inside its first step: nothing waits on its thread (a
  // ScoreThen that waited would be released after a minute, far beyond any machine's need).
  entered.wait();
  if (returned.wait_for(std::chrono::minutes(1)) != std::future_status::ready) {
    ADD_FAILURE() << "ScoreThen waited for the LLM";
    control_.Release();
  }
  returned.get();
  std::future<Result<ScoreOutcome>> parked = review.outcome.get_future();
  EXPECT_EQ(parked.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  // The card is not locked meanwhile: its next transaction is scored now (its own LLM stage
  // cannot get a turn within its 1 ms budget, and is skipped).
  fraud::RawTransaction next = testing::ValidTransaction("next");
  next.timestamp_ms += 1000;
  next.budget_ms = 1;
  auto scored = pipeline_->Score(next);
  ASSERT_TRUE(scored.ok()) << scored.error().ToString();
  EXPECT_EQ(CardTransactionCount(), 1u);

  control_.Release();
  ASSERT_EQ(parked.wait_for(std::chrono::minutes(1)), std::future_status::ready);
  Result<ScoreOutcome> outcome = parked.get();
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(review.thread, host->id());  // the rest of the request ran on the host
  EXPECT_EQ(outcome->decision, Decision::kReview);
  ASSERT_TRUE(outcome->findings.has_value());
  EXPECT_TRUE(outcome->degraded_stages.empty());
  std::vector<std::string> stages;
  for (const auto& t : outcome->timings) stages.push_back(t.stage);
  EXPECT_EQ(stages,
            (std::vector<std::string>{"validate", "state", "features", "fraud", "decision", "forensic", "persist"}));
  auto audit = pipeline_->audit_log().ReadLast(1);
  ASSERT_TRUE(audit.ok());
  EXPECT_EQ((*audit)[0].request_id, "parked");
  ASSERT_TRUE((*audit)[0].findings.has_value());
  // It read the card again when it went on, and added itself to what "next" wrote.
  EXPECT_EQ(CardTransactionCount(), 2u);
  // Its deadline's timer, still queued, comes after the findings: it answers nothing more.
  host->FireTimersNow();
  host->Drain();
  EXPECT_EQ(review.calls.load(), 1);
}

TEST_F(ForensicPipelineTest, AParkedReviewIsAnsweredAtItsDeadlineThoughTheLlmIsStillHeldAndOnlyOnce) {
  CreatePipeline(/*review_threshold=*/0.0);
  control_.block_first_call = true;  // held until the end of the test
  const ReleaseOnExit release_on_exit{&control_};
  std::future<void> entered = control_.entered.get_future();
  auto host = std::make_shared<OneThreadHost>();
  Answered review;
  {
    const ScopedHost on_this_thread(host);
    pipeline_->ScoreThen(testing::ValidTransaction("cut-short"), review.Done());
  }
  entered.wait();  // the LLM has started on it, and is held
  std::future<Result<ScoreOutcome>> answered = review.outcome.get_future();
  // The stage's deadline comes (the host's timers are the test's to fire): answered at once,
  // started but unfinished, so cut short.
  host->FireTimersNow();
  ASSERT_EQ(answered.wait_for(std::chrono::minutes(1)), std::future_status::ready);
  Result<ScoreOutcome> outcome = answered.get();
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_EQ(outcome->decision, Decision::kReview);
  EXPECT_FALSE(outcome->findings.has_value());
  EXPECT_EQ(outcome->degraded_stages, std::vector<StageRef>{kForensicStage});
  EXPECT_EQ(CardTransactionCount(), 1u);
  // The held step ends and the batch answers late: that answer is dropped. A request through
  // the same batcher after it shows the batch is over, and the host has run all it was given.
  control_.Release();
  auto after = pipeline_->Score(testing::ValidTransaction("after"));
  ASSERT_TRUE(after.ok()) << after.error().ToString();
  host->Drain();
  EXPECT_EQ(review.calls.load(), 1);
  EXPECT_EQ(CardTransactionCount(), 2u);
}

TEST_F(ForensicPipelineTest, ScoreThenWithoutAHostAnswersBeforeItReturns) {
  CreatePipeline(/*review_threshold=*/0.0);
  Answered review;
  pipeline_->ScoreThen(testing::ValidTransaction("inline"), review.Done());
  EXPECT_EQ(review.calls.load(), 1);
  EXPECT_EQ(review.thread, std::this_thread::get_id());
  Result<ScoreOutcome> outcome = review.outcome.get_future().get();
  ASSERT_TRUE(outcome.ok()) << outcome.error().ToString();
  EXPECT_TRUE(outcome->findings.has_value());
}

TEST_F(ForensicPipelineTest, WithoutTheLlmRuntimeThePipelineDoesNotStart) {
  std::string yaml = testing::ReadFile(testing::WriteTestPipeline(dir_));
  yaml += "  - {name: forensic, kind: llm_findings, after: decision, model: llm}\n";
  testing::WriteFile(dir_.file("forensic.yaml"), yaml);
  auto config = LoadPipelineConfig(dir_.file("forensic.yaml"));
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  auto db = storage::Database::Open(dir_.file("db"), {});
  ASSERT_TRUE(db.ok());
  auto pipeline = ScoringPipeline::Create(*config, db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_FALSE(pipeline.ok());
  EXPECT_EQ(pipeline.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(pipeline.error().message, "stage forensic needs the LLM runtime, which this program does not include");
}

TEST(ForensicStageCase, ShowsTheTransactionWithoutTheCardAndTheReasonsWithTheirValues) {
  fraud::Transaction tx;
  tx.request_id = "r-9";
  tx.timestamp_ms = 1767261600000;
  tx.amount_minor = 4250;
  tx.currency = "USD";
  tx.currency_exponent = 2;
  tx.card_token = "tok";
  tx.merchant_id = "m-1";
  tx.mcc = "5411";
  tx.merchant_country = "US";
  tx.channel = fraud::Channel::kEcommerce;
  tx.entry_mode = fraud::EntryMode::kManualKeyed;
  const llm::TransactionCase c =
      ForensicStage::CaseFor(tx, 0.71, {{"amount_zscore", 2.3046, 6.1}, {"device_age_days", 0.5, std::nan("")}});
  EXPECT_EQ(c.request_id, "r-9");
  EXPECT_EQ(c.time_utc, "2026-01-01T10:00:00Z");
  EXPECT_EQ(c.amount, "42.50 USD");
  EXPECT_EQ(c.card_country, "unknown");
  EXPECT_EQ(c.channel, "ECOMMERCE");
  EXPECT_EQ(c.entry_mode, "MANUAL_KEYED");
  EXPECT_EQ(c.reasons, (std::vector<std::string>{"amount_zscore = 6.1 (+2.30)", "device_age_days missing (+0.50)"}));
}

}  // namespace
}  // namespace txscore::pipelines
