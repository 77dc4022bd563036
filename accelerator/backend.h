// An out-of-tree PyTorch backend as txscore sees it: a shared library (torch-spyre's, or
// txscore's own emulated device, libtxscore_emulated_device.so) that registers itself on the
// PrivateUse1 dispatch key, plus a description of its device: kind, index, dtypes, native ops,
// memory, alignment, whether it is an emulator, and optionally a cost profile.
//
// The description comes from the library itself, through the C entry point of
// accelerator/backend_abi.h, and from the settings file's `devices.backend` section; what the
// file says overrides what the library says, field by field. A library that does not describe
// itself must be described by the file (kind, dtypes, native_ops at least). Adding a backend
// is a library and configuration: nothing here or in discovery names a particular one.
//
// This header has no torch include: loading and describing need only dlopen.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "accelerator/backend_abi.h"
#include "accelerator/device.h"
#include "common/result.h"

namespace txscore::accelerator {

// What the settings file says of the backend (devices.backend_library and devices.backend).
// An unset field leaves the library's own description in force.
struct BackendConfig {
  std::string library;  // Default: none, and no out-of-tree device. Path of the backend's .so
  // Default: the library's own. Required when the library does not describe itself.
  std::string kind;
  std::optional<int> index;                                  // Default: the library's, else 0
  std::optional<std::vector<Dtype>> dtypes;                  // Default: the library's; required without
  std::optional<std::set<std::string>> native_ops;           // Default: the library's; required without
  std::optional<int64_t> memory_bytes;                       // Default: the library's, else 0 (not checked)
  std::optional<int> alignment;                              // Default: the library's, else 1 (no padding)
  std::optional<bool> emulator;                              // Default: the library's, else false
  std::optional<CostProfile> cost;                           // Default: the library's, else calibrated
  std::vector<std::pair<std::string, std::string>> options;  // Default: none. Passed to the library
  bool operator==(const BackendConfig&) const = default;
};

struct DescribedBackend {
  Device device;
  bool calibrate = false;  // no cost profile from the library or the file: measure one
};

// The device of a backend: `described` (what the library filled in; null when it exports no
// entry point) merged with `config`. InvalidArgument when the result lacks a kind, dtypes or
// native ops, or names an unknown dtype or op, or a bad kind name.
Result<DescribedBackend> DescribeBackend(const TxscoreBackendDescription* described, const BackendConfig& config);

// Loads config.library (dlopen), calls its txscore_describe_backend when it exports one, and
// describes the device. The error's message is the reason the device is absent: the loader's
// error, the library's own refusal, or what the description lacks. The library stays loaded
// for the life of the process: its kernels are registered with libtorch.
Result<DescribedBackend> LoadBackend(const BackendConfig& config);

// The kind a backend that could not be loaded or described is reported absent under: the
// configured kind, else the library's file name (no kind is known without a description).
std::string AbsentBackendKind(const BackendConfig& config);

}  // namespace txscore::accelerator
