#include "accelerator/discovery.h"

#include <gtest/gtest.h>

#include "tests/test_support.h"

namespace txscore::accelerator {
namespace {

TEST(DiscoverDevices, FindsTheCpuAndSaysWhyCudaIsAbsent) {
  auto registry = DiscoverDevices({});
  ASSERT_TRUE(registry.ok()) << registry.error().ToString();
  const Device* cpu = registry->Find(kCpuKind);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->cost.source, "calibrated");
  EXPECT_GT(cpu->cost.flops_per_s, 0);
  EXPECT_GT(cpu->cost.memory_bytes_per_s, 0);
  EXPECT_GT(cpu->cost.dispatch_us, 0);
  EXPECT_EQ(cpu->cost.copy_bytes_per_s, 0);  // the host copies nothing to itself
  if (registry->Find(kCudaKind) == nullptr) {
    const std::string why = registry->AbsenceReason(kCudaKind);
    EXPECT_TRUE(why == "libtorch was built without CUDA" || why == "libtorch has CUDA but sees no GPU") << why;
  }
  // No backend library configured: no out-of-tree device, and none reported absent.
  EXPECT_EQ(registry->devices().size(), registry->Find(kCudaKind) == nullptr ? 1u : 2u);
}

TEST(DiscoverDevices, AConfiguredKindWithoutALibraryIsAbsentWithTheKeyToSet) {
  DiscoveryOptions options;
  options.backend.kind = "spyre";
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ(registry->AbsenceReason("spyre"), "no backend library configured: set devices.backend_library");
}

TEST(DiscoverDevices, ReusesCachedProfiles) {
  testing::TempDir dir;
  DiscoveryOptions options;
  options.calibration_cache = dir.file("profiles.json");
  auto first = DiscoverDevices(options);
  ASSERT_TRUE(first.ok());
  auto second = DiscoverDevices(options);
  ASSERT_TRUE(second.ok());
  const CostProfile& measured = first->Find(kCpuKind)->cost;
  const CostProfile& cached = second->Find(kCpuKind)->cost;
  EXPECT_EQ(measured.source, "calibrated");
  EXPECT_EQ(cached.source, "calibration cache");
  EXPECT_EQ(cached.flops_per_s, measured.flops_per_s);
  EXPECT_EQ(cached.memory_bytes_per_s, measured.memory_bytes_per_s);
  EXPECT_EQ(cached.dispatch_us, measured.dispatch_us);
}

TEST(DiscoverDevices, ABackendThatCannotBeLoadedIsAbsentWithTheLoadersReason) {
  DiscoveryOptions options;
  options.backend.library = "/nonexistent/libtorch_spyre.so";
  options.backend.kind = "spyre";
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ(registry->Find("spyre"), nullptr);
  EXPECT_EQ(registry->AbsenceReason("spyre"),
            "cannot load /nonexistent/libtorch_spyre.so: /nonexistent/libtorch_spyre.so: cannot open shared object "
            "file: No such file or directory");
}

TEST(DiscoverDevices, ABackendWithoutAKindIsAbsentUnderItsLibrarysFileName) {
  DiscoveryOptions options;
  options.backend.library = "/nonexistent/libtorch_spyre.so";
  auto registry = DiscoverDevices(options);
  ASSERT_TRUE(registry.ok());
  EXPECT_EQ(registry->Kinds(), (std::vector<std::string>{"cpu", "cuda", "libtorch_spyre.so"}));
}

}  // namespace
}  // namespace txscore::accelerator
