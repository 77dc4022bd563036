#include "pipelines/placement.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "accelerator/emulated_device.h"
#include "llm/checkpoint_maker.h"
#include "pipelines/scoring_pipeline.h"
#include "tests/test_support.h"

namespace txscore::pipelines {
namespace {

// A registry written out by hand, so the plans do not depend on this machine's calibration.
accelerator::DeviceRegistry Devices() {
  accelerator::DeviceRegistry registry;
  const accelerator::Device cpu = accelerator::HostCpuDevice(
      {.dispatch_us = 3, .flops_per_s = 40e9, .memory_bytes_per_s = 16e9, .copy_bytes_per_s = 0, .source = "test"},
      24LL << 30);
  registry.Register(cpu);
  registry.Register(accelerator::EmulatedDeviceDescription({}));
  registry.ReportAbsent(accelerator::kCudaKind, "libtorch was built without CUDA");
  return registry;
}

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(llm::MakeCheckpoint({.family = "qwen3", .size = "small"}, dir_.file("small")).ok());
    ASSERT_TRUE(llm::MakeCheckpoint({.family = "qwen3", .size = "tiny"}, dir_.file("tiny")).ok());
  }

  PipelineConfig Config(const std::string& forensic_options, const std::string& model = "small") {
    std::string yaml = testing::ReadFile(testing::WriteTestPipeline(dir_));
    yaml += "  - {name: forensic, kind: llm_findings, after: decision, model: " + model + forensic_options + "}\n";
    testing::WriteFile(dir_.file("p.yaml"), yaml);
    auto config = LoadPipelineConfig(dir_.file("p.yaml"));
    EXPECT_TRUE(config.ok()) << config.error().ToString();
    return *config;
  }

  testing::TempDir dir_;
};

TEST_F(PlacementTest, TreeModelOnTheCpuAndABigLlmBatchOnTheEmulatedDevice) {
  auto plan = PlanPipeline(Config(", placement: auto, expected_batch: 16, expected_tokens: 1024"), Devices());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(plan->stages[0].stage, "fraud");
  EXPECT_EQ(plan->stages[0].device, "cpu");
  EXPECT_EQ(plan->Find("forensic")->device, "emulated:0");
  EXPECT_EQ(plan->Find("forensic")->dtype, accelerator::Dtype::kBFloat16);  // the emulated device has no float32
  EXPECT_TRUE(plan->Find("forensic")->emulated);
}

TEST_F(PlacementTest, OneShortPromptOnATinyModelStaysOnTheCpu) {
  auto plan = PlanPipeline(Config(", placement: auto, expected_batch: 1, expected_tokens: 4", "tiny"), Devices());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->Find("forensic")->device, "cpu");
  EXPECT_EQ(plan->Find("forensic")->dtype, accelerator::Dtype::kFloat32);
}

TEST_F(PlacementTest, RemovingTheEmulatedDeviceMovesTheLlmToTheCpu) {
  accelerator::DeviceRegistry devices = Devices();
  devices.Remove(accelerator::kEmulatedKind, "disabled in the settings file");
  auto plan = PlanPipeline(Config(", placement: auto, expected_batch: 16, expected_tokens: 1024"), devices);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->Find("forensic")->device, "cpu");
}

TEST_F(PlacementTest, AnExplicitPlacementOnAnAbsentDeviceStopsTheStart) {
  const PipelineConfig config = Config(", placement: cuda");
  auto db = storage::Database::Open(dir_.file("db"), {});
  ASSERT_TRUE(db.ok());
  const accelerator::DeviceRegistry devices = Devices();
  PipelineRuntime runtime;
  runtime.devices = &devices;
  auto pipeline = ScoringPipeline::Create(config, db->get(), testing::TestCardKeyPath(dir_), runtime);
  ASSERT_FALSE(pipeline.ok());
  EXPECT_EQ(pipeline.error().message,
            "stage forensic: placement \"cuda\" names a device that is not available: libtorch was built without CUDA");
  // Without discovery only the CPU exists, and a placement naming another device says so.
  auto undiscovered =
      ScoringPipeline::Create(Config(", placement: emulated"), db->get(), testing::TestCardKeyPath(dir_));
  ASSERT_FALSE(undiscovered.ok());
  EXPECT_EQ(undiscovered.error().message,
            "stage forensic: placement \"emulated\" needs device discovery, which this program did not run");
}

TEST_F(PlacementTest, ThePrintedPlanShowsEveryCandidateAndTheChoice) {
  const accelerator::DeviceRegistry devices = Devices();
  auto plan = PlanPipeline(Config(", placement: auto, expected_batch: 16, expected_tokens: 1024"), devices);
  ASSERT_TRUE(plan.ok());
  const std::string text = FormatPlan(*plan, devices);
  EXPECT_NE(text.find("  cuda: absent (libtorch was built without CUDA)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("stage fraud (placement: cpu)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cannot run op tree_walk"), std::string::npos) << text;
  EXPECT_NE(text.find("  -> emulated:0 (emulated), bfloat16: least predicted time"), std::string::npos) << text;
  EXPECT_NE(text.find("     fallback order: cpu\n"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(PlanToJson(*plan, devices));
  EXPECT_EQ(json["stages"][1]["device"], "emulated:0");
  EXPECT_EQ(json["stages"][1]["emulated"], true);
  EXPECT_EQ(json["stages"][1]["candidates"].size(), 3u);
}

}  // namespace
}  // namespace txscore::pipelines
