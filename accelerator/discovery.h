// Finding the devices of this process and measuring their cost profiles.
//
//   cpu        always; profile calibrated (a few hundred milliseconds) or read from the cache
//   cuda:0     when libtorch was built with CUDA and sees a GPU; calibrated likewise
//   <kind>:<i> an out-of-tree PyTorch backend (torch-spyre for Spyre, txscore's emulated
//              dataflow device, ...) loaded from the shared library the pipeline file names;
//              it registers itself on PrivateUse1 (one such backend per process) and is
//              described by its own C entry point and/or the file (accelerator/backend.h).
//              Its profile comes from that description, or is calibrated like the others.
//
// An absent device is recorded with the reason, never replaced by another.
#pragma once

#include <string>

#include "accelerator/backend.h"
#include "accelerator/device.h"
#include "common/result.h"

namespace txscore::accelerator {

struct DiscoveryOptions {
  BackendConfig backend;  // Default: no library, no out-of-tree device
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
