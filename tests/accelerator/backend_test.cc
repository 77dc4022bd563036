#include "accelerator/backend.h"

#include <gtest/gtest.h>

#include <cstring>

namespace txscore::accelerator {
namespace {

// What a library's txscore_describe_backend might fill in.
TxscoreBackendDescription Described() {
  TxscoreBackendDescription d;
  std::memset(&d, 0, sizeof d);
  d.abi_version = TXSCORE_BACKEND_ABI_VERSION;
  d.struct_size = sizeof d;
  d.kind = "dataflow";
  d.device_count = 2;
  d.device_index = 1;
  d.dtypes = "bfloat16,float16";
  d.native_ops = "matmul,softmax,activation";
  d.memory_bytes = 16LL << 30;
  d.alignment = 64;
  d.is_emulator = 1;
  d.has_cost_profile = 1;
  d.dispatch_us = 100;
  d.flops_per_s = 20e12;
  d.memory_bytes_per_s = 300e9;
  d.copy_bytes_per_s = 12e9;
  d.description = "a dataflow card";
  return d;
}

BackendConfig Library() {
  BackendConfig config;
  config.library = "/opt/lib/libdataflow.so";
  return config;
}

TEST(DescribeBackend, TakesTheLibrarysOwnDescription) {
  const TxscoreBackendDescription described = Described();
  auto backend = DescribeBackend(&described, Library());
  ASSERT_TRUE(backend.ok()) << backend.error().ToString();
  const Device& d = backend->device;
  EXPECT_EQ(d.name, "dataflow:1");
  EXPECT_EQ(d.kind, "dataflow");
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.torch_device, "privateuseone:1");
  EXPECT_EQ(d.dtypes, (std::vector<Dtype>{Dtype::kBFloat16, Dtype::kFloat16}));
  EXPECT_EQ(d.native_ops, (std::set<std::string>{"activation", "matmul", "softmax"}));
  EXPECT_EQ(d.memory_bytes, 16LL << 30);
  EXPECT_EQ(d.alignment, 64);
  EXPECT_TRUE(d.emulated);
  EXPECT_EQ(d.DisplayName(), "dataflow:1 (emulated)");
  EXPECT_EQ(d.cost.dispatch_us, 100);
  EXPECT_EQ(d.cost.flops_per_s, 20e12);
  EXPECT_EQ(d.cost.memory_bytes_per_s, 300e9);
  EXPECT_EQ(d.cost.copy_bytes_per_s, 12e9);
  EXPECT_EQ(d.cost.source, "described by /opt/lib/libdataflow.so");
  EXPECT_EQ(d.description, "a dataflow card");
  EXPECT_FALSE(backend->calibrate);
}

TEST(DescribeBackend, WhatTheFileSaysOverridesTheLibraryFieldByField) {
  const TxscoreBackendDescription described = Described();
  BackendConfig config = Library();
  config.kind = "dataflow_b";
  config.index = 0;
  config.dtypes = std::vector<Dtype>{Dtype::kFloat16};
  config.memory_bytes = 8LL << 30;
  config.emulator = true;
  config.cost = CostProfile{
      .dispatch_us = 50, .flops_per_s = 1e12, .memory_bytes_per_s = 1e9, .copy_bytes_per_s = 1e9, .source = ""};
  auto backend = DescribeBackend(&described, config);
  ASSERT_TRUE(backend.ok()) << backend.error().ToString();
  const Device& d = backend->device;
  EXPECT_EQ(d.name, "dataflow_b:0");
  EXPECT_EQ(d.torch_device, "privateuseone:0");
  EXPECT_EQ(d.dtypes, std::vector<Dtype>{Dtype::kFloat16});
  EXPECT_EQ(d.native_ops, (std::set<std::string>{"activation", "matmul", "softmax"}));  // the library's
  EXPECT_EQ(d.memory_bytes, 8LL << 30);
  EXPECT_EQ(d.alignment, 64);  // the library's
  EXPECT_EQ(d.cost.dispatch_us, 50);
  EXPECT_EQ(d.cost.source, "config");
}

TEST(DescribeBackend, ALibraryWithoutTheEntryPointIsDescribedByTheFileAlone) {
  BackendConfig config = Library();
  config.kind = "spyre";
  config.dtypes = std::vector<Dtype>{Dtype::kFloat16, Dtype::kBFloat16};
  config.native_ops = std::set<std::string>{"matmul", "softmax", "activation"};
  auto backend = DescribeBackend(nullptr, config);
  ASSERT_TRUE(backend.ok()) << backend.error().ToString();
  const Device& d = backend->device;
  EXPECT_EQ(d.name, "spyre:0");
  EXPECT_EQ(d.memory_bytes, 0);  // not known: not checked
  EXPECT_EQ(d.alignment, 1);
  EXPECT_FALSE(d.emulated);
  EXPECT_EQ(d.description, "out-of-tree PyTorch backend from /opt/lib/libdataflow.so");
  EXPECT_TRUE(backend->calibrate);  // no profile from anyone: measured at start
}

TEST(DescribeBackend, ALibraryWithoutTheEntryPointOrADescriptionSaysWhatToSet) {
  BackendConfig config = Library();
  config.dtypes = std::vector<Dtype>{Dtype::kFloat16};
  auto backend = DescribeBackend(nullptr, config);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(backend.error().message,
            "/opt/lib/libdataflow.so exports no txscore_describe_backend and devices.backend does not give its kind, "
            "native_ops (set devices.backend.kind)");
}

TEST(DescribeBackend, ADescriptionWithAnUnknownDtypeOrOpOrAnInTreeKindIsRefused) {
  TxscoreBackendDescription described = Described();
  described.dtypes = "bfloat16,int8";
  EXPECT_EQ(DescribeBackend(&described, Library()).error().message,
            "/opt/lib/libdataflow.so: unknown dtype \"int8\" (known: float32, bfloat16, float16)");
  described = Described();
  described.native_ops = "matmul,conv2d";
  EXPECT_EQ(DescribeBackend(&described, Library()).error().message,
            "/opt/lib/libdataflow.so: unknown op \"conv2d\" (known: matmul, softmax, rms_norm, rope, embedding, "
            "activation, tree_walk)");
  described = Described();
  described.kind = "cuda";
  EXPECT_EQ(DescribeBackend(&described, Library()).error().message,
            "/opt/lib/libdataflow.so: kind \"cuda\" is PyTorch's own; an out-of-tree backend needs another");
  described.kind = "Data Flow";
  EXPECT_EQ(DescribeBackend(&described, Library()).error().message,
            "/opt/lib/libdataflow.so: kind \"Data Flow\" is not a device kind name (1-32 characters of a-z, 0-9 and "
            "_, starting with a letter)");
}

TEST(DescribeBackend, AnIndexBeyondTheLibrarysDevicesIsRefused) {
  const TxscoreBackendDescription described = Described();  // 2 devices
  BackendConfig config = Library();
  config.index = 2;
  EXPECT_EQ(DescribeBackend(&described, config).error().message,
            "/opt/lib/libdataflow.so: device index 2 is not one of its 2 device(s)");
}

TEST(DescribeBackend, ALibraryThatGivesNoKindNeedsOneFromTheFile) {
  TxscoreBackendDescription described = Described();
  described.kind = nullptr;
  EXPECT_EQ(DescribeBackend(&described, Library()).error().message,
            "/opt/lib/libdataflow.so does not describe its kind (set devices.backend.kind)");
}

}  // namespace
}  // namespace txscore::accelerator
