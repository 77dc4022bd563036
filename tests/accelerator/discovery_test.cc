#include "accelerator/discovery.h"

#include <gtest/gtest.h>

#include "tests/test_support.h"

namespace txscore::accelerator {
namespace {

TEST(DiscoverDevices, FindsTheCpuAndTheEmulatedDeviceAndSaysWhyOthersAreAbsent) {
  auto registry = DiscoverDevices({});
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  const Device* cpu = registry->Find(DeviceKind::kCpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->cost.source, "calibrated");
  EXPECT_GT(cpu->cost.flops_per_s, 0);
  EXPECT_GT(cpu->cost.memory_bytes_per_s, 0);
  EXPECT_GT(cpu->cost.dispatch_us, 0);
  EXPECT_EQ(cpu->cost.copy_bytes_per_s, 0);  // the host copies nothing to itself
  const Device* emulated = registry->Find(DeviceKind::kEmulated);
  ASSERT_NE(emulated, nullptr);
  EXPECT_TRUE(emulated->emulated);
  EXPECT_EQ(registry->AbsenceReason(DeviceKind::kSpyre), "no backend library configured: set devices.backend_library");
  if (registry->Find(DeviceKind::kCuda) == nullptr) {
    const std::string why = registry->AbsenceReason(DeviceKind::kCuda);
    EXPECT_TRUE(why == "libtorch was built without CUDA" || why == "libtorch has CUDA but sees no GPU") << why;
  }
}

TEST(DiscoverDevices, ReusesCachedProfiles) {
  testing::TempDir dir;
  DiscoveryOptions options;
  options.calibration_cache = dir.file("profiles.json");
  auto first = DiscoverDevices(options);
  ASSERT_TRUE(first.ok());
  auto second = DiscoverDevices(options);
  ASSERT_TRUE(second.ok());
  const CostProfile& measured = first->Find(DeviceKind::kCpu)->cost;
  const CostProfile& cached = second->Find(DeviceKind::kCpu)->cost;
  EXPECT_EQ(measured.source, "calibrated");
  EXPECT_EQ(cached.source, "calibration cache");
  EXPECT_EQ(cached.flops_per_s, measured.flops_per_s);
  EXPECT_EQ(cached.memory_bytes_per_s, measured.memory_bytes_per_s);
  EXPECT_EQ(cached.dispatch_us, measured.dispatch_us);
}

TEST(DiscoverDevices, ABackendThatCannotBeLoadedIsAbsentWithTheLoadersReason) {
  DiscoveryOptions options;
  options.backend_library = "/nonexistent/libtorch_spyre.so";
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ(registry->Find(DeviceKind::kSpyre), nullptr);
  EXPECT_EQ(registry->AbsenceReason(DeviceKind::kSpyre).rfind("cannot load /nonexistent/libtorch_spyre.so: ", 0), 0u)
      << registry->AbsenceReason(DeviceKind::kSpyre);
  EXPECT_NE(registry->Find(DeviceKind::kEmulated), nullptr);  // PrivateUse1 is still free
}

TEST(DiscoverDevices, TheEmulatedDeviceCanBeTurnedOff) {
  DiscoveryOptions options;
  options.emulated = false;
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ(registry->Find(DeviceKind::kEmulated), nullptr);
  EXPECT_EQ(registry->AbsenceReason(DeviceKind::kEmulated),
            "disabled in the pipeline file (devices.emulated.enabled: false)");
}

}  // namespace
}  // namespace txscore::accelerator
