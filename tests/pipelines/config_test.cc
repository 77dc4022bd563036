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
    testing::WriteFile(dir_.file("card.key"), std::string(32, 'k'));
    testing::WriteFile(dir_.file("model.ubj"), "x");
  }
  Result<PipelineConfig> Parse(const std::string& yaml) { return ParsePipelineConfig(yaml, dir_.file("p.yaml")); }
  std::string Where(int line, int column) {
    return dir_.file("p.yaml") + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  }

  static constexpr char kValid[] =
      "storage:\n"
      "  path: db\n"
      "security:\n"
      "  card_key_file: card.key\n"
      "stages:\n"
      "  - {name: features, kind: features}\n"
      "  - {name: fraud, kind: xgboost, after: features, model: model.ubj}\n"
      "  - {name: decision, kind: decision, after: fraud}\n";
  testing::TempDir dir_;
};

TEST_F(ConfigTest, MinimalFileGetsDefaultsAndResolvedPaths) {
  auto config = Parse(kValid);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->server.port, 9090);
  EXPECT_EQ(config->server.workers, 8);
  EXPECT_EQ(config->server.io_threads, 1);
  EXPECT_EQ(config->server.max_connections, 4096);
  EXPECT_EQ(config->server.max_queued_requests, 1024);
  EXPECT_EQ(config->server.frame_timeout_ms, 5000);
  EXPECT_EQ(config->server.idle_timeout_ms, 600000);
  EXPECT_EQ(config->server.limits.max_string_bytes, 65536);
  EXPECT_EQ(config->admin.host, "127.0.0.1");
  EXPECT_EQ(config->storage.path, dir_.file("db"));
  EXPECT_EQ(config->storage.durability, storage::Durability::kSync);
  EXPECT_EQ(SettingsOf<Model>(*config, "fraud").model_path, dir_.file("model.ubj"));
  EXPECT_EQ(SettingsOf<DecisionStageSettings>(*config, "decision").thresholds.review, 0.5);
  EXPECT_EQ(SettingsOf<DecisionStageSettings>(*config, "decision").thresholds.decline, 0.9);
}

TEST_F(ConfigTest, TheShippedDemoPipelineParses) {
  // config/pipeline.yaml names var/ files that only exist after set-up; check its shape by
  // pointing the paths at this test's files.
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/pipeline.yaml");
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"../var/card.key", "card.key"},
        {"../var/models/fraud.ubj", "model.ubj"},
        {"../var/models/llm-tiny", "."},
        {"lists/deny-merchants.txt", std::string(TXSCORE_SOURCE_DIR) + "/config/lists/deny-merchants.txt"},
        {"claims_pipeline: claims.yaml", "claims_pipeline: card.key"}}) {
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
  EXPECT_EQ(config->jobs.claims_pipeline, dir_.file("card.key"));
  EXPECT_EQ(config->jobs.priority, JobsConfig::Priority::kIdle);
}

TEST_F(ConfigTest, TheShippedClaimsPipelineParses) {
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/claims.yaml");
  for (auto [from, to] : {std::pair<std::string, std::string>{"../var/card.key", "card.key"},
                          {"../var/models/claims.ubj", "model.ubj"},
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
  EXPECT_EQ(mixed.error().message, Where(9, 5) +
                                       "a pipeline scores transactions or claims, not both: stage \"features\" reads "
                                       "transactions, \"claim_features\" (claim_features) claims");
}

TEST_F(ConfigTest, UnknownKeyIsRejectedWithLineAndColumn) {
  auto config = Parse(std::string("server:\n  prot: 9090\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message,
            Where(2, 3) +
                "unknown key \"prot\" in server (expected one of: frame_timeout_ms, host, idle_timeout_ms, io_threads, "
                "limits, max_connections, max_queued_requests, port, workers)");
}

TEST_F(ConfigTest, ServerTransportSettingsAreReadAndBounded) {
  auto config = Parse(std::string("server:\n  io_threads: 3\n  max_connections: 50\n  max_queued_requests: 7\n"
                                  "  frame_timeout_ms: 250\n  idle_timeout_ms: 9000\n") +
                      kValid);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->server.io_threads, 3);
  EXPECT_EQ(config->server.max_connections, 50);
  EXPECT_EQ(config->server.max_queued_requests, 7);
  EXPECT_EQ(config->server.frame_timeout_ms, 250);
  EXPECT_EQ(config->server.idle_timeout_ms, 9000);
  auto zero = Parse(std::string("server:\n  max_connections: 0\n") + kValid);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message, Where(2, 20) + "\"max_connections\" must be between 1 and 1000000");
}

TEST_F(ConfigTest, AModelPathMustNameARegularFileAndACheckpointADirectory) {
  std::filesystem::create_directories(dir_.file("adir"));
  std::string yaml = kValid;
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: adir");
  auto directory = Parse(yaml);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.error().message,
            Where(7, 58) + "\"model\": " + dir_.file("adir") + " is not a regular file (it is a directory)");
  yaml = kValid;
  yaml.replace(yaml.find("model: model.ubj"), 16, "model: /proc/self/mem");  // "regular", unreadable at 0
  auto special = Parse(yaml);
  ASSERT_FALSE(special.ok());
  EXPECT_EQ(special.error().message, Where(7, 58) + "\"model\": /proc/self/mem cannot be read: Input/output error");
  auto checkpoint =
      Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: model.ubj}\n");
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_EQ(checkpoint.error().message.substr(checkpoint.error().message.find('"')),
            "\"model\": " + dir_.file("model.ubj") + " is not a directory");
}

TEST_F(ConfigTest, AKeyGivenTwiceIsRefusedWithBothLines) {
  auto config = Parse(std::string("server:\n  port: 9090\n  workers: 4\n  port: 9191\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(4, 3) + "\"port\" is given twice in server (first on line 2)");
}

TEST_F(ConfigTest, WrongTypeIsRejectedWithLineAndColumn) {
  auto config = Parse(std::string("server:\n  workers: many\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(2, 12) + "\"workers\" must be an integer");
}

TEST_F(ConfigTest, OutOfRangeIsRejected) {
  auto config = Parse(std::string("server:\n  port: 70000\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(2, 9) + "\"port\" must be between 0 and 65535");
}

TEST_F(ConfigTest, MissingModelFileIsRejectedWithItsPath) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("model.ubj"), 9, "absent.ubj");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(7, 58) + "\"model\": file " + dir_.file("absent.ubj") + " does not exist");
}

TEST_F(ConfigTest, ThresholdsMustBeOrdered) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("after: fraud}"), 13, "after: fraud, review_threshold: 0.95, decline_threshold: 0.9}");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(8, 70) + "review_threshold must not exceed decline_threshold");
}

TEST_F(ConfigTest, StagesThatFormACycleAreRejected) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("after: features"), 15, "after: decision");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(7, 41) + "the stages form a cycle: fraud -> decision -> fraud");
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
  EXPECT_EQ(Parse(bad).error().message, Where(9, 65) + "weights: must be a list of 2 numbers, one per stage in after:");
  bad = yaml;
  bad.replace(bad.find("after: [fraud, shadow]"), 22, "after: [fraud, shadow], inputs: {score: fraud.score}");
  EXPECT_EQ(Parse(bad).error().message,
            Where(9, 64) + "stage \"blend\": input \"score\" joins every stage it comes after; it cannot be named");
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
  EXPECT_EQ(Parse(yaml).error().message, Where(7, 80) +
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
  EXPECT_EQ(Parse(yaml).error().message, Where(7, 80) + "evaluator must be \"fast\" or \"xgboost\", not \"magic\"");
}

TEST_F(ConfigTest, FindingsStageIsOptionalAndGetsDefaults) {
  EXPECT_EQ(Parse(kValid)->FindSettings("forensic"), nullptr);
  std::filesystem::create_directory(dir_.file("llm"));
  auto config = Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: llm}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  const Findings& f = SettingsOf<Findings>(*config, "forensic");
  EXPECT_EQ(f.name, "forensic");
  EXPECT_EQ(f.model_dir, dir_.file("llm"));
  EXPECT_EQ(f.dtype, "float32");
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
  EXPECT_EQ(bad.error().message, Where(9, 77) + "when: fraud.score is a number; \"REVIEW\" is not");
}

TEST_F(ConfigTest, FindingsStageOptionsAreChecked) {
  std::filesystem::create_directory(dir_.file("llm"));
  const std::string stage = "  - {name: forensic, kind: llm_findings, after: decision, model: llm, ";
  EXPECT_EQ(Parse(kValid + stage + "dtype: float16}\n").error().message,
            Where(9, 78) + "dtype must be \"float32\" or \"bfloat16\", not \"float16\"");
  EXPECT_EQ(Parse(kValid + stage + "placement: Tpu}\n").error().message,
            Where(9, 82) +
                "placement must be auto or a device kind (cpu, cuda, or an out-of-tree backend's kind such as spyre or "
                "emulated), not \"Tpu\"");
  EXPECT_EQ(Parse(kValid + stage + "max_new_tokens: 10}\n").error().message,
            Where(9, 87) + "\"max_new_tokens\" must be between 50 and 4096");
  EXPECT_EQ(Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: fraud, model: llm}\n")
                .error()
                .message,
            Where(9, 5) +
                "stage \"forensic\" needs a when: (its default, <decision>.decision == REVIEW, needs the "
                "decision stage upstream of it), e.g. when: \"model.score >= 0.5\"");
  EXPECT_TRUE(Parse(std::string(kValid) +
                    "  - {name: forensic, kind: llm_findings, after: fraud, model: llm, when: \"fraud.score > 0.5\"}\n")
                  .ok());
  EXPECT_EQ(Parse(std::string(kValid) + "  - {name: forensic, kind: llm_findings, after: decision, model: nowhere}\n")
                .error()
                .message,
            Where(9, 66) + "\"model\": file " + dir_.file("nowhere") + " does not exist");
}

TEST_F(ConfigTest, DevicesSectionNamesTheBackendLibraryAndDescribesIt) {
  EXPECT_EQ(Parse(kValid)->devices.backend.library, "");
  auto config = Parse(std::string(kValid) +
                      "devices:\n"
                      "  calibration_cache: profiles.json\n"
                      "  backend_library: lib/libtorch_spyre.so\n"
                      "  backend:\n"
                      "    kind: spyre\n"
                      "    index: 1\n"
                      "    dtypes: [float16, bfloat16]\n"
                      "    native_ops: [matmul, softmax]\n"
                      "    memory_gib: 64\n"
                      "    alignment: 128\n"
                      "    emulator: false\n"
                      "    cost: {dispatch_us: 80, tflops: 100, memory_gbps: 400, copy_gbps: 32}\n"
                      "    options: {cards: 2, mode: fast}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  const DevicesConfig& d = config->devices;
  EXPECT_EQ(d.calibration_cache, dir_.file("profiles.json"));
  EXPECT_EQ(d.backend.library, dir_.file("lib/libtorch_spyre.so"));  // relative to the file
  EXPECT_EQ(d.backend.kind, "spyre");
  EXPECT_EQ(d.backend.index, 1);
  EXPECT_EQ(d.backend.dtypes, (std::vector<std::string>{"float16", "bfloat16"}));
  EXPECT_EQ(d.backend.native_ops, (std::set<std::string>{"matmul", "softmax"}));
  EXPECT_EQ(d.backend.memory_bytes, 64LL << 30);
  EXPECT_EQ(d.backend.alignment, 128);
  EXPECT_EQ(d.backend.emulator, false);
  ASSERT_TRUE(d.backend.cost.has_value());
  EXPECT_EQ(d.backend.cost->dispatch_us, 80);
  EXPECT_EQ(d.backend.cost->flops_per_s, 100e12);
  EXPECT_EQ(d.backend.cost->memory_bytes_per_s, 400e9);
  EXPECT_EQ(d.backend.cost->copy_bytes_per_s, 32e9);
  using Options = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(d.backend.options, (Options{{"cards", "2"}, {"mode", "fast"}}));
}

TEST_F(ConfigTest, BackendDescriptionKeysAreChecked) {
  const std::string devices = std::string(kValid) + "devices:\n  backend:\n";
  EXPECT_EQ(
      Parse(devices + "    kind: Spyre-1\n").error().message,
      Where(11, 11) +
          "kind \"Spyre-1\" is not a device kind name (1-32 characters of a-z, 0-9 and _, starting with a letter)");
  EXPECT_EQ(Parse(devices + "    kind: cuda\n").error().message,
            Where(11, 11) + "kind \"cuda\" is PyTorch's own; an out-of-tree backend needs another");
  EXPECT_EQ(Parse(devices + "    dtypes: [bfloat16, int8]\n").error().message,
            Where(11, 24) + "unknown dtype \"int8\" (known: float32, bfloat16, float16)");
  EXPECT_EQ(Parse(devices + "    native_ops: [matmul, conv2d]\n").error().message,
            Where(11, 26) +
                "unknown op \"conv2d\" (known: matmul, softmax, rms_norm, rope, embedding, activation, tree_walk)");
  EXPECT_EQ(Parse(devices + "    native_ops: []\n").error().message,
            Where(11, 17) + "\"native_ops\" must be a non-empty list");
  EXPECT_EQ(Parse(devices + "    cost: {dispatch_us: 80}\n").error().message,
            Where(11, 11) + "devices.backend.cost needs tflops");
  EXPECT_EQ(Parse(devices + "    options: {latency: [1, 2]}\n").error().message,
            Where(11, 24) + "devices.backend.options: latency must be a single value");
}

TEST_F(ConfigTest, TheOldEmulatedSectionSaysWhereItsKeysWent) {
  EXPECT_EQ(Parse(std::string(kValid) + "devices:\n  emulated: {tflops: 100}\n").error().message,
            Where(10, 13) +
                "devices.emulated is no longer read: the emulated device is a backend library now; load it with "
                "devices.backend_library (e.g. ../build/libtxscore_emulated_device.so) and put its latency model "
                "under devices.backend.options");
  EXPECT_EQ(Parse(std::string(kValid) + "devices:\n  backend_kind: spyre\n").error().message,
            Where(10, 17) + "devices.backend_kind is now devices.backend.kind");
}

TEST_F(ConfigTest, MissingStorageSectionIsNamed) {
  auto config = Parse("security:\n  card_key_file: card.key\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(1, 1) + "missing required key \"storage\"");
}

TEST_F(ConfigTest, BadDurabilityIsRejected) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("path: db"), 8, "path: db\n  durability: maybe");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(3, 15) + "durability must be \"sync\" or \"wal\", not \"maybe\"");
}

TEST_F(ConfigTest, YamlSyntaxErrorHasLineAndColumn) {
  auto config = Parse("storage: [unclosed\n");
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
