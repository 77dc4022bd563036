// Backends loaded the way `txscore serve` loads them: discovery dlopens the library named by
// devices.backend_library. This binary does not link the emulated device; everything it knows
// of it comes through dlopen and the C entry point (accelerator/backend_abi.h). PrivateUse1
// can hold one backend per process, so every test here loads the same library with the same
// latency model (ctest also runs each test in a process of its own).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerator/discovery.h"

namespace txscore::accelerator {
namespace {

DiscoveryOptions EmulatedLibrary() {
  DiscoveryOptions options;
  options.backend.library = TXSCORE_EMULATED_DEVICE_LIBRARY;
  return options;
}

TEST(BackendLibrary, TheEmulatedDeviceLoadsFromItsLibraryAndDescribesItselfAsAnEmulator) {
  auto registry = DiscoverDevices(EmulatedLibrary());
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  const Device* d = registry->Find("emulated");
  ASSERT_NE(d, nullptr) << registry->AbsenceReason("emulated");
  EXPECT_EQ(d->name, "emulated:0");
  EXPECT_EQ(d->DisplayName(), "emulated:0 (emulated)");
  EXPECT_TRUE(d->emulated);
  EXPECT_EQ(d->torch_device, "privateuseone:0");
  EXPECT_EQ(d->dtypes, (std::vector<Dtype>{Dtype::kBFloat16, Dtype::kFloat16}));
  EXPECT_EQ(d->native_ops, (std::set<std::string>{"activation", "matmul", "softmax"}));
  EXPECT_EQ(d->memory_bytes, 32LL << 30);
  EXPECT_EQ(d->alignment, 64);
  EXPECT_EQ(d->cost.dispatch_us, 150);
  EXPECT_EQ(d->cost.flops_per_s, 50e12);
  EXPECT_EQ(d->cost.memory_bytes_per_s, 200e9);
  EXPECT_EQ(d->cost.copy_bytes_per_s, 16e9);
  EXPECT_EQ(d->cost.source, std::string("described by ") + TXSCORE_EMULATED_DEVICE_LIBRARY);
  EXPECT_EQ(d->description, "txscore's emulated dataflow device (PrivateUse1 backend; runs on the host CPU)");
}

TEST(BackendLibrary, TensorsRunOnTheLoadedBackend) {
  auto registry = DiscoverDevices(EmulatedLibrary());
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  ASSERT_NE(registry->Find("emulated"), nullptr) << registry->AbsenceReason("emulated");
  const torch::Device device(registry->Find("emulated")->torch_device);
  torch::Tensor a = torch::tensor({{1.0f, 2.0f}, {3.0f, 4.0f}}, torch::kBFloat16);
  torch::Tensor product = torch::mm(a.to(device), a.to(device));
  EXPECT_EQ(product.device().type(), c10::DeviceType::PrivateUse1);
  torch::Tensor host = product.to(torch::kCPU).to(torch::kFloat32);
  EXPECT_EQ(host[0][0].item<float>(), 7.0f);
  EXPECT_EQ(host[0][1].item<float>(), 10.0f);
  EXPECT_EQ(host[1][0].item<float>(), 15.0f);
  EXPECT_EQ(host[1][1].item<float>(), 22.0f);
}

TEST(BackendLibrary, TheFilesKindNameReplacesTheLibrarysOwn) {
  DiscoveryOptions options = EmulatedLibrary();
  options.backend.kind = "dataflow_b";
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  EXPECT_EQ(registry->Find("emulated"), nullptr);
  const Device* d = registry->Find("dataflow_b");
  ASSERT_NE(d, nullptr) << registry->AbsenceReason("dataflow_b");
  EXPECT_EQ(d->DisplayName(), "dataflow_b:0 (emulated)");  // still an emulator, whatever its name
}

TEST(BackendLibrary, ALibraryThatRefusesItsOptionsIsAbsentWithItsReason) {
  DiscoveryOptions options = EmulatedLibrary();
  options.backend.options = {{"tflops", "fast"}};
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  EXPECT_EQ(registry->Find("emulated"), nullptr);
  EXPECT_EQ(
      registry->AbsenceReason("libtxscore_emulated_device.so"),
      std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) + " refused to start: option tflops: \"fast\" is not a number");
  options.backend.options = {{"latency", "1"}};
  EXPECT_EQ(DiscoverDevices(options)->AbsenceReason("libtxscore_emulated_device.so"),
            std::string(TXSCORE_EMULATED_DEVICE_LIBRARY) +
                " refused to start: unknown option \"latency\" (known: stage_dispatch_us, op_dispatch_us, tflops, "
                "memory_gbps, copy_gbps, memory_gib, alignment)");
}

TEST(BackendLibrary, ALoadableLibraryWithNeitherEntryPointNorDescriptionIsAbsentWithTheReason) {
  DiscoveryOptions options;
  options.backend.library = "libm.so.6";  // loads, and is no backend at all
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  EXPECT_EQ(registry->AbsenceReason("libm.so.6"),
            "libm.so.6 exports no txscore_describe_backend and devices.backend does not give its kind, dtypes, "
            "native_ops (set devices.backend.kind)");
}

}  // namespace
}  // namespace txscore::accelerator
