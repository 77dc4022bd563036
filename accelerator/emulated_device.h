// txscore's emulated dataflow device: an out-of-tree PyTorch backend of our own, registered on
// the PrivateUse1 dispatch key the way torch-spyre, TorchNeuron and TorchTPU register theirs.
// libtorch 1.13 has no API to rename the key, so libtorch calls its tensors "privateuseone:0";
// txscore names it "emulated:0 (emulated)" everywhere it reports it.
//
// It is built as its own shared library, libtxscore_emulated_device.so, and txscore loads it
// like any out-of-tree backend: `devices.backend_library` names it, and its C entry point
// (emulated_device_backend.cc, accelerator/backend_abi.h) registers the backend with the
// latency model from `devices.backend.options` and describes the device as an emulator. Tests
// and benchmarks that drive it in-process link the library and call the functions below.
//
// What it is: host memory behind its own allocator, a device guard, the kernels a backend
// must provide (empty.memory_format, empty_strided, _copy_from, _copy_from_and_resize,
// resize_, plus the view ops), float16/bfloat16 storage and compute (matrix products in
// reduced precision with an fp32 accumulator, as dataflow accelerators do), a restricted list
// of ops it runs "natively", and the boxed CPU fallback for everything else, counted per op as
// a host fallback, as a real out-of-tree device would. A latency model adds up what the work
// would cost on a dataflow card (per-op dispatch, max(FLOPs / rate, bytes / bandwidth), and
// host copies for fallbacks), so its timings describe such a device rather than this host.
//
// What it is not: an accelerator. Every op still runs on the host CPU.
//
// This header has no torch include.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "accelerator/device.h"
#include "common/result.h"

namespace txscore::accelerator {

// The kind name the library describes the device under (a pipeline file may rename it with
// devices.backend.kind).
inline constexpr char kEmulatedKind[] = "emulated";

// The latency model. These are assumptions for a generic PCIe dataflow card, not a measurement
// of any product; the settings file may override them in devices.backend.options (the same names,
// with flops, bandwidths and memory as tflops, memory_gbps, copy_gbps and memory_gib).
struct EmulatedDeviceOptions {
  double stage_dispatch_us = 150;     // Default: 150 us to launch one stage call (host -> card round trip)
  double op_dispatch_us = 2;          // Default: 2 us per op inside a call
  double flops_per_s = 50e12;         // Default: 50 TFLOP/s in float16/bfloat16
  double memory_bytes_per_s = 200e9;  // Default: 200 GB/s device memory
  double copy_bytes_per_s = 16e9;     // Default: 16 GB/s host <-> card (PCIe Gen4 x8, effective)
  int64_t memory_bytes = 32LL << 30;  // Default: 32 GiB
  int alignment = 64;                 // Default: pad head_dim and vocabulary to 64
};

struct EmulatedDeviceStats {
  int64_t native_ops = 0;                         // ops the emulated device ran itself
  int64_t fallback_ops = 0;                       // ops sent to the host through the CPU fallback
  std::map<std::string, int64_t> fallback_by_op;  // with overload, e.g. "aten::index_select" -> 3
  double modeled_us = 0;                          // what the latency model says the work took
  int64_t bytes_in_use = 0;                       // device memory held by live tensors
  int64_t bytes_to_device = 0;
  int64_t bytes_to_host = 0;
};

// Registers the backend (allocator, guard, kernels, fallback). Idempotent for the same options.
// FailedPrecondition when the options differ from the first registration.
Status RegisterEmulatedDevice(const EmulatedDeviceOptions& options = {});
bool EmulatedDeviceRegistered();

// The device as the registry and the planner see it.
Device EmulatedDeviceDescription(const EmulatedDeviceOptions& options);

// Counters since the last reset; thread-safe.
EmulatedDeviceStats EmulatedDeviceStatsSnapshot();
void ResetEmulatedDeviceStats();

// The aten ops the emulated device runs natively, by schema name without overload ("aten::mul"
// covers mul.Tensor and mul.out).
const std::set<std::string>& EmulatedNativeOps();

}  // namespace txscore::accelerator
