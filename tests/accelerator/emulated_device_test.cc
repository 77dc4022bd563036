#include "accelerator/emulated_device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace txscore::accelerator {
namespace {

const torch::Device kEmulated("privateuseone:0");

class EmulatedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterEmulatedDevice().ok());
    ResetEmulatedDeviceStats();
    torch::manual_seed(7);
  }
};

TEST_F(EmulatedDeviceTest, TensorsLiveOnThePrivateUse1Device) {
  torch::Tensor t = torch::ones({2, 3}, torch::TensorOptions().dtype(torch::kBFloat16).device(kEmulated));
  EXPECT_EQ(t.device().str(), "privateuseone:0");
  EXPECT_EQ(t.sum().item<float>(), 6.0f);
  EXPECT_TRUE(torch::equal(t.to(torch::kCPU), torch::ones({2, 3}, torch::kBFloat16)));
}

TEST_F(EmulatedDeviceTest, Bfloat16MatmulIsTheFloat32ProductRoundedOnce) {
  torch::Tensor a = torch::randn({5, 64}).to(torch::kBFloat16);
  torch::Tensor b = torch::randn({64, 7}).to(torch::kBFloat16);
  torch::Tensor on_device = torch::matmul(a.to(kEmulated), b.to(kEmulated)).to(torch::kCPU);
  torch::Tensor reference = torch::matmul(a.to(torch::kFloat), b.to(torch::kFloat)).to(torch::kBFloat16);
  EXPECT_EQ(on_device.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(on_device, reference));
}

TEST_F(EmulatedDeviceTest, Float16MatmulWorksThoughTheHostHasNoFloat16Matmul) {
  torch::Tensor a = torch::randn({3, 4, 32}).to(torch::kHalf);
  torch::Tensor b = torch::randn({3, 32, 6}).to(torch::kHalf);
  torch::Tensor on_device = torch::bmm(a.to(kEmulated), b.to(kEmulated)).to(torch::kCPU);
  torch::Tensor reference = torch::bmm(a.to(torch::kFloat), b.to(torch::kFloat)).to(torch::kHalf);
  EXPECT_TRUE(torch::equal(on_device, reference));
}

TEST_F(EmulatedDeviceTest, SoftmaxAndElementwiseOpsMatchTheCpu) {
  torch::Tensor x = torch::randn({4, 10});
  torch::Tensor on_device = torch::softmax(x.to(kEmulated) * 2.0 + 1.0, -1).to(torch::kCPU);
  EXPECT_TRUE(torch::equal(on_device, torch::softmax(x * 2.0 + 1.0, -1)));
}

TEST_F(EmulatedDeviceTest, OpsOutsideTheNativeListAreCountedAsHostFallbacks) {
  torch::Tensor table = torch::randn({10, 4}).to(kEmulated);
  torch::Tensor ids = torch::tensor({1, 3, 3}, torch::kLong).to(kEmulated);
  ResetEmulatedDeviceStats();
  torch::Tensor rows = torch::index_select(table, 0, ids);  // an embedding lookup: not native
  torch::Tensor scaled = rows * 3.0;                        // native
  EmulatedDeviceStats stats = EmulatedDeviceStatsSnapshot();
  EXPECT_EQ(stats.fallback_by_op, (std::map<std::string, int64_t>{{"aten::index_select", 1}}));
  EXPECT_EQ(stats.fallback_ops, 1);
  EXPECT_EQ(stats.native_ops, 1);
  EXPECT_TRUE(
      torch::equal(scaled.to(torch::kCPU), torch::index_select(table.to(torch::kCPU), 0, ids.to(torch::kCPU)) * 3.0));
}

TEST_F(EmulatedDeviceTest, TheLatencyModelCostsAMatmulByItsFlopsAndBytes) {
  const int64_t n = 256;
  torch::Tensor a = torch::ones({n, n}, torch::TensorOptions().dtype(torch::kBFloat16).device(kEmulated));
  torch::Tensor b = torch::ones({n, n}, torch::TensorOptions().dtype(torch::kBFloat16).device(kEmulated));
  ResetEmulatedDeviceStats();
  torch::Tensor c = torch::mm(a, b);
  const EmulatedDeviceOptions model;
  const double flops = 2.0 * n * n * n;
  const double bytes = 3.0 * n * n * 2;
  const double expected_us =
      model.op_dispatch_us + std::max(flops / model.flops_per_s, bytes / model.memory_bytes_per_s) * 1e6;
  // The product is computed on the host and copied onto the card-side output: count that copy.
  const double copy_us = static_cast<double>(n * n * 2) / model.copy_bytes_per_s * 1e6;
  EXPECT_NEAR(EmulatedDeviceStatsSnapshot().modeled_us, expected_us + copy_us, 1e-9);
  EXPECT_EQ(c.to(torch::kCPU)[0][0].item<float>(), 256.0f);
}

TEST_F(EmulatedDeviceTest, DeviceMemoryIsCountedUntilTheTensorIsFreed) {
  const int64_t before = EmulatedDeviceStatsSnapshot().bytes_in_use;
  {
    torch::Tensor t = torch::empty({1024}, torch::TensorOptions().dtype(torch::kHalf).device(kEmulated));
    EXPECT_EQ(EmulatedDeviceStatsSnapshot().bytes_in_use, before + 2048);
  }
  EXPECT_EQ(EmulatedDeviceStatsSnapshot().bytes_in_use, before);
}

TEST_F(EmulatedDeviceTest, ReregisteringWithAnotherLatencyModelIsRefused) {
  EmulatedDeviceOptions other;
  other.flops_per_s = 1e12;
  Status status = RegisterEmulatedDevice(other);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "the emulated device is already registered with a different latency model");
  EXPECT_TRUE(RegisterEmulatedDevice().ok());
}

TEST(EmulatedDeviceDescription, SaysItIsAnEmulator) {
  Device d = EmulatedDeviceDescription({});
  EXPECT_EQ(d.DisplayName(), "emulated:0 (emulated)");
  EXPECT_TRUE(d.emulated);
  EXPECT_EQ(d.torch_device, "privateuseone:0");
  EXPECT_EQ(d.cost.source, "emulator latency model");
}

}  // namespace
}  // namespace txscore::accelerator

#include "accelerator/op_adapters_torch.h"

namespace txscore::accelerator {
namespace {

TEST(OpAdapters, RotateHalfAsAMatmulIsExact) {
  torch::manual_seed(3);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor x = torch::randn({2, 4, 5, 16}).to(dtype);
    torch::Tensor p = RotateHalfMatrix(16, torch::TensorOptions().dtype(dtype));
    EXPECT_TRUE(torch::equal(RotateHalfByMatmul(x, p), RotateHalfBySlicing(x)));
  }
}

TEST(OpAdapters, SumOfSquaresAsAMatmulIsWithinOneMillionthOfTheReduction) {
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({3, 7, 896});
  torch::Tensor native = x.pow(2).sum(-1, true);
  torch::Tensor adapted = SumOfSquaresByMatmul(x);
  EXPECT_LE(((adapted - native).abs() / native).max().item<float>(), 1e-6f);
}

TEST(OpAdapters, EmbeddingOnTheHostIsExactAndNeedsNoGatherOnTheDevice) {
  ASSERT_TRUE(RegisterEmulatedDevice().ok());
  torch::Tensor table = torch::randn({50, 8}).to(torch::kBFloat16);
  torch::Tensor ids = torch::tensor({{3, 7, 7}, {0, 49, 1}}, torch::kLong);
  ResetEmulatedDeviceStats();
  torch::Tensor rows = EmbeddingOnHost(table, ids, torch::Device("privateuseone:0"));
  EXPECT_EQ(rows.device().str(), "privateuseone:0");
  EXPECT_TRUE(torch::equal(rows.to(torch::kCPU), torch::embedding(table, ids)));
  EXPECT_EQ(EmulatedDeviceStatsSnapshot().fallback_ops, 0);
}

}  // namespace
}  // namespace txscore::accelerator
