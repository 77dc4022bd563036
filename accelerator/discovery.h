// Finding the devices of this process and measuring their cost profiles.
//
//   cpu        always; profile calibrated (a few hundred milliseconds) or read from the cache
//   cuda:0     when libtorch was built with CUDA and sees a GPU; calibrated likewise
//   <kind>:0   an out-of-tree PyTorch backend (torch-spyre for Spyre, ...) loaded from the
//              shared library named in the pipeline file; it registers itself on PrivateUse1
//   emulated:0 txscore's emulated dataflow device, unless an out-of-tree backend holds
//              PrivateUse1 (there is one such key per process)
//
// An absent device is recorded with the reason, never replaced by another.
#pragma once

#include <string>

#include "accelerator/device.h"
#include "accelerator/emulated_device.h"
#include "common/result.h"

namespace txscore::accelerator {

struct DiscoveryOptions {
  bool emulated = true;                          // Default: register the emulated device
  EmulatedDeviceOptions emulated_model;          // its latency model
  std::string backend_library;                   // Default: none. An out-of-tree backend's shared library
  DeviceKind backend_kind = DeviceKind::kSpyre;  // what that backend is
  // Profiles measured before are read from here (keyed by device and thread count) and new
  // measurements written back. Default: none, calibrate at every start.
  std::string calibration_cache;
  int threads = 1;  // Default: 1, the libtorch threads a stage gets; profiles are per thread count
};

Result<DeviceRegistry> DiscoverDevices(const DiscoveryOptions& options);

// Measures dispatch latency (a one-element op), matrix-product FLOP/s (a float32 GEMM) and
// memory bandwidth (a float32 GEMV over a matrix larger than the caches) on `torch_device`.
// Copy bandwidth is measured for devices other than the CPU. Takes a few hundred milliseconds.
Result<CostProfile> CalibrateDevice(const std::string& torch_device, int threads);

}  // namespace txscore::accelerator
