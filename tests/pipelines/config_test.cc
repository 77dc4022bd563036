#include "pipelines/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "pipelines/stages/blend_stage.h"
#include "pipelines/stages/decision_stage.h"
#include "pipelines/stages/llm_findings_stage.h"
#include "pipelines/stages/rules_stage.h"
#include "pipelines/stages/xgboost_stage.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// The settings a stage's kind read, as that kind's type.
template <typename T>
const T& SettingsOf(const PipelineConfig& config, const std::string& stage) {
  return dynamic_cast<const T&>(*config.FindSettings(stage));
}
using Model = XGBoostStageSettings;
using Findings = LlmFindingsStageSettings;

// The condition the graph runs stage `name` under ("" when none).
std::string WhenOf(const PipelineConfig& config, const std::string& name) {
  const GraphStage& stage = config.graph.stage(config.graph.Find(name));
  return stage.when ? stage.when->text() : "";
}

// A valid file whose relative paths resolve inside `dir`.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.file("card.key"), testing::TestCardKey());
    testing::WriteFile(dir_.file("model.ubj"), "x");
  }
  Result<PipelineConfig> Parse(const std::string& yaml) { return ParsePipelineConfig(yaml, dir_.file("p.yaml")); }
  std::string Where(int line, int column) {
    return dir_.file("p.yaml") + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  }

  static constexpr char kValid[] =
      "stages:\n"
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: model.ubj}\n"
      "  - {name: decision, kind: decision, after: fraud}\n";
  testing::TempDir dir_;
};

TEST_F(ConfigTest, ATabInTheIndentationIsNamedWithItsLineAndColumn) {
  auto config = Parse(
      "stages:\n"
      "  - {name: features, kind: features}\n"
      "  - name: fraud\n"
      "    kind: xgboost\n"
      "  \tafter: features\n"
      "    model: model.ubj\n"
      "  - {name: decision, kind: decision, after: fraud}\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message.rfind(
                Where(5, 3) + "a tab in the indentation (YAML indents with spaces only; yaml-cpp said at ", 0),
            0u)
      << config.error().message;
}

TEST_F(ConfigTest, MinimalFileGetsDefaultsAndResolvedPaths) {
  auto config = Parse(kValid);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->name, "transactions");
  EXPECT_EQ(config->version, "1");
  EXPECT_EQ(config->deadline_ms, 1500);
  EXPECT_EQ(config->items, ItemKind::kTransaction);
  EXPECT_EQ(SettingsOf<Model>(*config, "fraud").model_path, dir_.file("model.ubj"));
  EXPECT_EQ(SettingsOf<DecisionStageSettings>(*config, "decision").thresholds.review, 0.5);
  EXPECT_EQ(SettingsOf<DecisionStageSettings>(*config, "decision").thresholds.decline, 0.9);
}

TEST_F(ConfigTest, TheShippedDemoPipelineParses) {
  // config/pipeline.yaml names var/ files that only exist after set-up; check its shape by
  // pointing the paths at this test's files.
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/pipeline.yaml");
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"../var/models/fraud.ubj", "model.ubj"},
        {"../var/models/llm-tiny", "."},
        {"lists/deny-merchants.txt", std::string(TXSCORE_SOURCE_DIR) + "/config/lists/deny-merchants.txt"}}) {
    yaml.replace(yaml.find(from), from.size(), to);
  }
  auto config = Parse(yaml);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->version, "2026.11");
  EXPECT_EQ(SettingsOf<Findings>(*config, "forensic").budget_ms, 1500);
  const auto& rules = SettingsOf<RulesStageSettings>(*config, "rules");
  ASSERT_EQ(rules.rules.size(), 3u);
  EXPECT_EQ(rules.rules[1].id, "R20");
  EXPECT_EQ(rules.rules[1].decision, Decision::kDecline);
  // The decision reads the rules' verdict.
  const StageGraph& graph = config->graph;
  EXPECT_EQ(graph.InputStage(graph.sink(), kDecisionVerdict), graph.Find("rules"));
}

TEST_F(ConfigTest, TheShippedClaimsPipelineParses) {
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/claims.yaml");
  for (auto [from, to] : {std::pair<std::string, std::string>{"../var/models/claims.ubj", "model.ubj"},
                          {"../var/models/llm-tiny", "."}}) {
    yaml.replace(yaml.find(from), from.size(), to);
  }
  auto config = Parse(yaml);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->items, ItemKind::kClaim);
  EXPECT_EQ(WhenOf(*config, "analysis"), "claims_model.score >= 0.5");
  const StageGraph& graph = config->graph;
  EXPECT_EQ(graph.InputStage(graph.sink(), kDecisionFindings), graph.Find("analysis"));
  EXPECT_FALSE(graph.stage(graph.Find("analysis")).required);
  EXPECT_TRUE(SettingsOf<DecisionStageSettings>(*config, "decision").escalate_high_risk);
}

TEST_F(ConfigTest, APipelineScoresTransactionsOrClaimsNotBoth) {
  auto mixed = Parse(std::string(kValid) + "  - {name: claim_features, kind: claim_features}\n");
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.error().message, Where(5, 5) +
                                       "a pipeline scores transactions or claims, not both: stage \"features\" reads "
                                       "transactions, \"claim_features\" (claim_features) claims");
}

TEST_F(ConfigTest, AModelPathMustNameARegularFileAndACheckpointADirectory) {
  std::filesystem::create_directories(dir_.file("adir"));
  std::string yaml = kValid;
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: adir");
  auto directory = Parse(yaml);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().message,
            Where(3, 58) + "\"model\": " + dir_.file("adir") + " is not a regular file (it is a directory)");
  yaml = kValid;
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: /proc/self/mem");  // "regular", unreadable at 0
  auto special = Parse(yaml);
  ASSERT_FALSE(special.ok());
  EXPECT_EQ(special.error().message, Where(3, 58) + "\"model\": /proc/self/mem cannot be read: Input/output error");
  auto checkpoint =
      Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: model.ubj}\n");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().message.substr(checkpoint.error().message.find('"')),
            "\"model\": " + dir_.file("model.ubj") + " is not a directory");
}

TEST_F(ConfigTest, MissingModelFileIsRejectedWithItsPath) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("model.ubj"), 9, "absent.ubj");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(3, 58) + "\"model\": file " + dir_.file("absent.ubj") + " does not exist");
}

TEST_F(ConfigTest, ThresholdsMustBeOrdered) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("after: fraud}"), 13, "after: fraud, review_threshold: 0.95, decline_threshold: 0.9}");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(4, 70) + "review_threshold must not exceed decline_threshold");
}

TEST_F(ConfigTest, StagesThatFormACycleAreRejected) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("after: features"), 15, "after: decision");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(3, 41) + "the stages form a cycle: fraud -> decision -> fraud");
}

TEST_F(ConfigTest, StagesMayFanOutAndJoin) {
  const std::string yaml = std::string(kValid).substr(0, std::string(kValid).find("  - {name: decision")) +
                           "  - {name: shadow, kind: xgboost, after: features, model: model.ubj, budget_ms: 5}\n"
                           "  - {name: blend, kind: blend, after: [fraud, shadow], weights: [2, 1]}\n"
                           "  - {name: decision, kind: decision, after: blend}\n";
  auto config = Parse("pipeline: {deadline_ms: 40}\n" + yaml);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->deadline_ms, 40);
  ASSERT_EQ(config->settings.size(), 5u);
  EXPECT_EQ(config->settings[2]->budget_ms, 5);
  EXPECT_EQ(config->settings[1]->budget_ms, 0);  // the pipeline's deadline
  EXPECT_EQ(SettingsOf<BlendStageSettings>(*config, "blend").weights, (std::vector<double>{2, 1}));
  EXPECT_EQ(config->stages[3].after, (std::vector<std::string>{"fraud", "shadow"}));
  EXPECT_EQ(config->graph.stage(config->graph.sink()).name, "decision");

  std::string bad = yaml;
  bad.replace(bad.find("weights: [2, 1]"), 15, "weights: [2]");
  EXPECT_EQ(Parse(bad).error().message, Where(5, 65) + "weights: must be a list of 2 numbers, one per stage in after:");
  bad = yaml;
  bad.replace(bad.find("after: [fraud, shadow]"), 22, "after: [fraud, shadow], inputs: {score: fraud.score}");
  EXPECT_EQ(Parse(bad).error().message,
            Where(5, 64) + "stage \"blend\": input \"score\" joins every stage it comes after; it cannot be named");
}

TEST_F(ConfigTest, PlacementTakesAnyKindNameAndRejectsAMalformedOne) {
  std::string yaml = kValid;
  // Whether a device of the kind exists and can run the stage is decided at start-up by the
  // planner: any backend's kind name is accepted here.
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: model.ubj, placement: tpu");
  auto config = Parse(yaml);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->settings[1]->placement, "tpu");
  yaml.replace(yaml.find("placement: tpu"), 14, "placement: Tpu");
  EXPECT_EQ(Parse(yaml).error().message, Where(3, 80) +
                                             "placement must be auto or a device kind (cpu, cuda, or an out-of-tree "
                                             "backend's kind such as spyre or emulated), not \"Tpu\"");
}

TEST_F(ConfigTest, EvaluatorChoosesFastOrXGBoost) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: model.ubj, evaluator: xgboost");
  auto config = Parse(yaml);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_FALSE(SettingsOf<Model>(*config, "fraud").fast_evaluator);
  EXPECT_TRUE(SettingsOf<Model>(*Parse(kValid), "fraud").fast_evaluator);
  yaml.replace(yaml.find("evaluator: xgboost"), 18, "evaluator: magic");
  EXPECT_EQ(Parse(yaml).error().message, Where(3, 80) + "evaluator must be \"fast\" or \"xgboost\", not \"magic\"");
}

TEST_F(ConfigTest, FindingsStageIsOptionalAndGetsDefaults) {
  EXPECT_EQ(Parse(kValid)->FindSettings("forensic"), nullptr);
  std::filesystem::create_directory(dir_.file("llm"));
  auto config = Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: llm}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  const Findings& f = SettingsOf<Findings>(*config, "forensic");
  EXPECT_EQ(f.name, "forensic");
  EXPECT_EQ(f.model_dir, dir_.file("llm"));
  EXPECT_EQ(f.dtype, accelerator::Dtype::kFloat32);
  EXPECT_EQ(f.compute_threads, 1);
  EXPECT_EQ(f.max_new_tokens, 96);
  EXPECT_EQ(f.budget_ms, 1500);
  EXPECT_EQ(WhenOf(*config, "forensic"), "decision.decision == REVIEW");
}

TEST_F(ConfigTest, FindingsStageConditionIsCheckedAgainstEarlierStagesOutputs) {
  std::filesystem::create_directory(dir_.file("llm"));
  auto config =
      Parse(std::string(kValid) +
            "  - {name: forensic, kind: llm_findings, after: decision, model: llm, when: \"fraud.score >= 0.6\"}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(WhenOf(*config, "forensic"), "fraud.score >= 0.6");
  auto bad =
      Parse(std::string(kValid) +
            "  - {name: forensic, kind: llm_findings, after: decision, model: llm, when: \"fraud.score == REVIEW\"}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, Where(5, 77) + "when: fraud.score is a number; \"REVIEW\" is not");
}

TEST_F(ConfigTest, ARemoteFindingsStageReadsItsRemoteMapAndNeedsAModelOnlyToFallBack) {
  testing::WriteFile(dir_.file("ca.crt"), "x");
  testing::WriteFile(dir_.file("tls.crt"), "x");
  testing::WriteFile(dir_.file("tls.key"), "x");
  auto config = Parse(std::string(kValid) +
                      "  - name: forensic\n"
                      "    kind: llm_findings\n"
                      "    after: decision\n"
                      "    placement: remote\n"
                      "    remote:\n"
                      "      base_url: https://pool:8443/v1\n"
                      "      model: big\n"
                      "      call_timeout_ms: 900\n"
                      "      retries: 1\n"
                      "      breaker_failures: 4\n"
                      "      breaker_open_ms: 5000\n"
                      "      tls: {ca: ca.crt, certificate: tls.crt, private_key: tls.key}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  const Findings& f = SettingsOf<Findings>(*config, "forensic");
  ASSERT_TRUE(f.remote.has_value());
  EXPECT_EQ(f.remote->base_url, "https://pool:8443/v1");
  EXPECT_EQ(f.remote->model, "big");
  EXPECT_EQ(f.remote->call_timeout, std::chrono::milliseconds(900));
  EXPECT_EQ(f.remote->retries, 1);
  EXPECT_EQ(f.remote->backoff, std::chrono::milliseconds(50));
  EXPECT_EQ(f.remote->breaker_failures, 4);
  EXPECT_EQ(f.remote->breaker_open, std::chrono::milliseconds(5000));
  EXPECT_EQ(f.remote->ca_file, dir_.file("ca.crt"));
  EXPECT_EQ(f.remote->max_tokens, 96);
  EXPECT_FALSE(f.remote_fallback_local);
  EXPECT_EQ(f.model_dir, "");  // fallback: skip needs no local model

  const std::string stage = std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, ";
  EXPECT_EQ(Parse(stage + "placement: remote}\n").error().message,
            Where(5, 70) + "placement: remote needs a remote: map (base_url, model, ...)");
  EXPECT_EQ(Parse(stage + "placement: remote, remote: {base_url: \"https://p/v1\", model: m}}\n").error().message,
            Where(5, 86) + "an https base_url needs remote.tls (ca, certificate, private_key)");
  EXPECT_EQ(Parse(stage + "placement: remote, remote: {base_url: \"ftp://p\", model: m}}\n").error().message,
            Where(5, 97) + "base_url must start with https:// or http://");
  EXPECT_EQ(Parse(stage + "placement: remote, remote: {base_url: \"http://p\", model: m, fallback: \"no such\"}}\n")
                .error()
                .message,
            Where(5, 129) + "fallback must be skip, auto or a device kind (cpu, cuda, emulated, ...), not \"no such\"");
  EXPECT_EQ(
      Parse(stage + "placement: remote, remote: {base_url: \"http://p\", model: m, fallback: cpu}}\n").error().message,
      Where(5, 5) + "missing required key \"model\"");
  std::filesystem::create_directory(dir_.file("llm"));
  EXPECT_TRUE(
      Parse(stage + "model: llm, placement: remote, remote: {base_url: \"http://p\", model: m, fallback: cpu}}\n")
          .ok());
  EXPECT_EQ(Parse(stage + "model: llm, remote: {base_url: \"http://p\", model: m}}\n").error().message,
            Where(5, 79) + "remote: needs placement: remote");
  auto emulated =
      Parse(stage + "model: llm, placement: remote, remote: {base_url: \"http://p\", model: m, fallback: emulated}}\n");
  ASSERT_TRUE(emulated.ok()) << emulated.error().ToString();
  EXPECT_TRUE(SettingsOf<Findings>(*emulated, "forensic").remote_fallback_local);
  EXPECT_EQ(SettingsOf<Findings>(*emulated, "forensic").placement, "emulated");  // placed as a local stage would be
  const std::string unknown_key =
      Parse(stage + "placement: remote, remote: {base_url: \"http://p\", model: m, retry: 3}}\n").error().message;
  EXPECT_NE(unknown_key.find("retry"), std::string::npos) << unknown_key;
}

TEST_F(ConfigTest, FindingsStageOptionsAreChecked) {
  std::filesystem::create_directory(dir_.file("llm"));
  const std::string stage = "  - {name: forensic, kind: llm_findings, after: decision, model: llm, ";
  EXPECT_EQ(Parse(kValid + stage + "dtype: float16}\n").error().message,
            Where(5, 78) + "dtype must be \"float32\" or \"bfloat16\", not \"float16\"");
  EXPECT_EQ(Parse(kValid + stage + "quantization: int8}\n").error().message,
            Where(5, 85) + "quantization: int8 needs dtype: bfloat16 (its activations)");
  EXPECT_EQ(Parse(kValid + stage + "dtype: bfloat16, quantization: int4}\n").error().message,
            Where(5, 102) + "quantization must be \"none\" or \"int8\", not \"int4\"");
  auto int8 = Parse(kValid + stage + "dtype: bfloat16, quantization: int8, cpu_kernels: false}\n");
  ASSERT_TRUE(int8.ok()) << int8.error().ToString();
  EXPECT_EQ(SettingsOf<Findings>(*int8, "forensic").quantization, llm::DecoderOptions::Quantization::kInt8);
  EXPECT_FALSE(SettingsOf<Findings>(*int8, "forensic").cpu_kernels);
  EXPECT_EQ(Parse(kValid + stage + "cpu_kernels: sometimes}\n").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(Parse(kValid + stage + "placement: Tpu}\n").error().message,
            Where(5, 82) +
                "placement must be auto or a device kind (cpu, cuda, or an out-of-tree backend's kind such as spyre or "
                "emulated), not \"Tpu\"");
  EXPECT_EQ(Parse(kValid + stage + "max_new_tokens: 10}\n").error().message,
            Where(5, 87) + "\"max_new_tokens\" must be between 50 and 4096");
  EXPECT_EQ(Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: fraud, model: llm}\n")
                .error()
                .message,
            Where(5, 5) +
                "stage \"forensic\" needs a when: (its default, <decision>.decision == REVIEW, needs the "
                "decision stage upstream of it), e.g. when: \"model.score >= 0.5\"");
  EXPECT_TRUE(Parse(std::string(kValid) +
                    "  - {name: forensic, kind: llm_findings, after: fraud, model: llm, when: \"fraud.score > 0.5\"}\n")
                  .ok());
  EXPECT_EQ(Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: nowhere}\n")
                .error()
                .message,
            Where(5, 66) + "\"model\": file " + dir_.file("nowhere") + " does not exist");
}

TEST_F(ConfigTest, TheServicesSettingsInAPipelineFileSayWhereTheyGo) {
  for (const char* section : {"server", "admin", "storage", "security", "devices", "jobs"}) {
    EXPECT_EQ(Parse(std::string(section) + ":\n  x: 1\n" + kValid).error().message,
              Where(2, 3) + "\"" + section +
                  "\" is a service setting, not a pipeline's: move it to the settings file that names this pipeline "
                  "(config/txscore.yaml: `pipeline: FILE`; service/settings.h)")
        << section;
  }
}

TEST_F(ConfigTest, UnknownTopLevelKeyIsRejectedWithLineAndColumn) {
  EXPECT_EQ(Parse(std::string("pipline: {name: x}\n") + kValid).error().message,
            Where(1, 1) + "unknown key \"pipline\" in the pipeline file (expected one of: pipeline, stages)");
}

TEST_F(ConfigTest, YamlSyntaxErrorHasLineAndColumn) {
  auto config = Parse("stages: [unclosed\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message.rfind(dir_.file("p.yaml") + ":", 0), 0u) << config.error().message;
}

TEST(LoadPipelineConfig, MissingFileIsNotFound) {
  auto config = LoadPipelineConfig("/nonexistent/p.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(config.error().message, "pipeline file /nonexistent/p.yaml does not exist or cannot be read");
}

}  // namespace
}  // namespace txscore::pipelines
