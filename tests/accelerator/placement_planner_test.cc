#include "accelerator/placement_planner.h"

#include <gtest/gtest.h>

namespace txscore::accelerator {
namespace {

// Profiles written out so the expected plans can be checked by hand. The CPU's resemble what
// calibration measures on a 2-core build machine; the emulated device's are its model of a
// PCIe dataflow card.
Device Cpu() {
  return HostCpuDevice(
      {.dispatch_us = 5, .flops_per_s = 100e9, .memory_bytes_per_s = 20e9, .copy_bytes_per_s = 0, .source = "test"},
      24LL << 30);
}

Device Emulated() {
  Device d;
  d.name = "emulated:0";
  d.kind = "emulated";
  d.torch_device = "privateuseone:0";
  d.memory_bytes = 32LL << 30;
  d.dtypes = {Dtype::kBFloat16, Dtype::kFloat16};
  d.native_ops = {ops::kMatmul, ops::kSoftmax, ops::kActivation};
  d.cost = {.dispatch_us = 150,
            .flops_per_s = 50e12,
            .memory_bytes_per_s = 200e9,
            .copy_bytes_per_s = 16e9,
            .source = "test"};
  d.emulated = true;
  return d;
}

DeviceRegistry CpuAndEmulated() {
  DeviceRegistry registry;
  registry.Register(Cpu());
  registry.Register(Emulated());
  registry.ReportAbsent(kCudaKind, "libtorch was built without CUDA");
  return registry;
}

// Qwen2.5-0.5B's dimensions.
DecoderShape HalfBillion() { return {24, 896, 4864, 14, 2, 64, 151936, true}; }
// The tests' tiny checkpoint.
DecoderShape Tiny() { return {2, 64, 128, 4, 2, 16, 512, true}; }

TEST(PlaceStage, TreeEnsembleLandsOnTheCpu) {
  auto plan = PlaceStage(TreeEnsembleWorkload("fraud", 300, 6, 19), "auto", CpuAndEmulated());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->device, "cpu");
  ASSERT_EQ(plan->candidates.size(), 3u);
  EXPECT_EQ(plan->candidates[1].device, "emulated:0 (emulated)");
  EXPECT_FALSE(plan->candidates[1].able);
  EXPECT_EQ(plan->candidates[1].why_not, "cannot run op tree_walk");
  EXPECT_EQ(plan->candidates[2].device, "cuda");
  EXPECT_EQ(plan->candidates[2].why_not, "absent: libtorch was built without CUDA");
  EXPECT_TRUE(plan->fallback.empty());
}

TEST(PlaceStage, LlmLandsOnTheEmulatedAcceleratorAtBatch16And1024Tokens) {
  StageWorkload work = DecoderWorkload("forensic", HalfBillion());
  work.expected_batch = 16;
  work.expected_tokens = 1024;
  auto plan = PlaceStage(work, "auto", CpuAndEmulated());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->device, "emulated:0");
  EXPECT_TRUE(plan->emulated);
  EXPECT_EQ(plan->dtype, Dtype::kBFloat16);
  EXPECT_EQ(plan->fallback, std::vector<std::string>{"cpu"});
  const Candidate& emulated = plan->candidates[1];
  EXPECT_EQ(emulated.adapters, (std::vector<std::string>{"embedding lookup on the host",
                                                         "rms_norm's sum of squares as a matmul, fp32 accumulator",
                                                         "rope's rotate_half as a matmul with a signed permutation"}));
  EXPECT_TRUE(plan->adapters.rope_as_matmul && plan->adapters.rms_norm_by_matmul && plan->adapters.embedding_on_host);
  EXPECT_LT(emulated.predicted_us * 10, plan->candidates[0].predicted_us);
}

TEST(PlaceStage, TinyWorkStaysOnTheCpuWhereDispatchWouldDominate) {
  StageWorkload work = DecoderWorkload("forensic", Tiny());
  work.expected_batch = 1;
  work.expected_tokens = 8;
  auto plan = PlaceStage(work, "auto", CpuAndEmulated());
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->device, "cpu");
  EXPECT_EQ(plan->dtype, Dtype::kBFloat16);
  EXPECT_GT(plan->candidates[1].dispatch_us, plan->candidates[0].predicted_us);
  EXPECT_EQ(plan->fallback, std::vector<std::string>{"emulated:0 (emulated)"});
}

TEST(PlaceStage, RemovingADeviceChangesThePlan) {
  StageWorkload work = DecoderWorkload("forensic", HalfBillion());
  work.expected_batch = 16;
  work.expected_tokens = 1024;
  DeviceRegistry registry = CpuAndEmulated();
  EXPECT_EQ(PlaceStage(work, "auto", registry)->device, "emulated:0");
  registry.Remove("emulated", "disabled in the pipeline file");
  auto plan = PlaceStage(work, "auto", registry);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->device, "cpu");
  EXPECT_EQ(plan->candidates.back().why_not, "absent: disabled in the pipeline file");
}

TEST(PlaceStage, ExplicitPlacementOnAnAbsentDeviceIsAnErrorThatSaysWhy) {
  auto plan = PlaceStage(DecoderWorkload("forensic", Tiny()), "cuda", CpuAndEmulated());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(plan.error().message,
            "stage forensic: placement \"cuda\" names a device that is not available: libtorch was built without CUDA");
}

TEST(PlaceStage, AKindNoBackendRegisteredIsNotAvailableAndTheKnownKindsAreNamed) {
  auto spyre = PlaceStage(DecoderWorkload("forensic", Tiny()), "spyre", CpuAndEmulated());
  ASSERT_FALSE(spyre.ok());
  EXPECT_EQ(spyre.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(spyre.error().message,
            "stage forensic: placement \"spyre\" names a device that is not available: no device of that kind was "
            "registered (known kinds: cpu, emulated, cuda)");
}

TEST(PlaceStage, AnyRegisteredKindCanBeNamed) {
  DeviceRegistry registry = CpuAndEmulated();
  Device other = Emulated();
  other.kind = "dataflow_b";
  other.name = "dataflow_b:0";
  other.emulated = false;
  registry.Register(other);
  auto plan = PlaceStage(DecoderWorkload("forensic", Tiny()), "dataflow_b", registry);
  ASSERT_TRUE(plan.ok()) << plan.error().ToString();
  EXPECT_EQ(plan->device, "dataflow_b:0");
  EXPECT_EQ(plan->kind, "dataflow_b");
  EXPECT_EQ(plan->reason, "placement names dataflow_b");
}

TEST(PlaceStage, ExplicitPlacementOnADeviceThatCannotRunTheStageIsAnError) {
  auto plan = PlaceStage(TreeEnsembleWorkload("fraud", 300, 6, 19), "emulated", CpuAndEmulated());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().message, "stage fraud: placement \"emulated\": emulated:0 (emulated) cannot run op tree_walk");
  // An explicit placement that can run is taken even when another device would be faster.
  auto tiny = PlaceStage(DecoderWorkload("forensic", Tiny()), "emulated", CpuAndEmulated());
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->device, "emulated:0");
  EXPECT_EQ(tiny->reason, "placement names emulated");
}

TEST(PlaceStage, ADeviceWithoutTheMemoryIsNotAble) {
  DeviceRegistry registry;
  Device small = Emulated();
  small.memory_bytes = 100'000'000;
  registry.Register(small);
  StageWorkload work = DecoderWorkload("forensic", HalfBillion());
  auto plan = PlaceStage(work, "auto", registry);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error().message, "stage forensic: no available device can run it");
  auto explicit_plan = PlaceStage(work, "emulated", registry);
  EXPECT_EQ(explicit_plan.error().message,
            "stage forensic: placement \"emulated\": emulated:0 (emulated) needs 987.9 MB of memory, has 100.0 MB");
}

TEST(PlaceStage, PredictionIsDispatchPlusTheSlowerOfComputeAndMemoryPlusTransfers) {
  StageWorkload work;
  work.stage = "s";
  work.dtypes = {Dtype::kBFloat16};
  work.ops = {ops::kMatmul};
  work.estimate = [](int batch, int tokens, int dtype_bytes) {
    EXPECT_EQ(dtype_bytes, 2);
    return WorkEstimate{
        .flops = 1e12 * batch, .memory_bytes = 1e9 * tokens, .transfer_bytes = 16e6, .resident_bytes = 1};
  };
  work.expected_batch = 2;
  work.expected_tokens = 3;
  DeviceRegistry registry;
  registry.Register(Emulated());
  auto plan = PlaceStage(work, "auto", registry);
  ASSERT_TRUE(plan.ok());
  const Candidate& c = plan->candidates[0];
  EXPECT_DOUBLE_EQ(c.compute_us, 40000);  // 2e12 / 50e12 s
  EXPECT_DOUBLE_EQ(c.memory_us, 15000);   // 3e9 / 200e9 s
  EXPECT_DOUBLE_EQ(c.transfer_us, 1000);  // 16e6 / 16e9 s
  EXPECT_DOUBLE_EQ(c.predicted_us, 150 + 40000 + 1000);
  EXPECT_EQ(plan->reason, "least predicted time (41.1 ms) at batch 2, 3 tokens");
}

TEST(ChooseAdapters, PadsTheVocabularyOnlyWhenTheAlignmentDoesNotDivideIt) {
  std::vector<std::string> missing;
  const std::set<std::string> stage_ops = {ops::kMatmul};
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1000, 64).vocab_alignment, 64);
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1024, 64).vocab_alignment, 0);
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1000, 1).vocab_alignment, 0);
  EXPECT_TRUE(missing.empty());
  OpAdapters padded;
  padded.vocab_alignment = 64;
  EXPECT_EQ(padded.Describe(), std::vector<std::string>{"vocabulary padded to a multiple of 64"});
}

TEST(ChooseAdapters, PadsHeadDimOnlyWhenTheAlignmentDoesNotDivideIt) {
  std::vector<std::string> missing;
  const std::set<std::string> stage_ops = {ops::kMatmul};
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1024, 64, 80).head_dim_alignment, 64);
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1024, 64, 128).head_dim_alignment, 0);
  EXPECT_EQ(ChooseAdapters(stage_ops, {ops::kMatmul}, &missing, 1024, 64, 0).head_dim_alignment, 0);
  EXPECT_EQ(PaddedHeadDim(80, 64), 128);
  EXPECT_EQ(PaddedHeadDim(16, 24), 24);
  EXPECT_EQ(PaddedHeadDim(14, 5), 20);  // 15 would be odd: both halves must grow alike
  EXPECT_EQ(PaddedHeadDim(16, 1), 16);
  OpAdapters padded;
  padded.head_dim_alignment = 64;
  EXPECT_EQ(padded.Describe(), std::vector<std::string>{"head_dim padded to a multiple of 64"});
}

TEST(DecoderParameters, MatchesQwen25HalfBillion) {
  // Qwen2.5-0.5B has 494 M parameters (q/k/v biases, a few thousand, are left out here).
  EXPECT_NEAR(DecoderParameters(HalfBillion()), 494.0e6, 0.1e6);
}

}  // namespace
}  // namespace txscore::accelerator
