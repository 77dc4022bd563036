// The C entry point of libtxscore_emulated_device.so (accelerator/backend_abi.h): how txscore
// loads its own emulated dataflow device exactly as it loads any out-of-tree backend, through
// `devices.backend_library`. The call registers the PrivateUse1 backend with the latency model
// the settings file passes in `devices.backend.options`, and describes the device, always as an
// emulator.
//
// Options (all optional; defaults and meaning in emulated_device.h, EmulatedDeviceOptions):
//   stage_dispatch_us, op_dispatch_us, tflops, memory_gbps, copy_gbps, memory_gib, alignment
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "accelerator/backend_abi.h"
#include "accelerator/emulated_device.h"

namespace txscore::accelerator {
namespace {

// A number in [min, max], or an error naming the option.
Status ParseNumber(const char* key, const char* text, double min, double max, double* out) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(value)) {
    return InvalidArgument(std::string("option ") + key + ": \"" + text + "\" is not a number");
  }
  if (value < min || value > max) {
    return InvalidArgument(std::string("option ") + key + ": " + text + " is outside [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  *out = value;
  return Status::Ok();
}

Result<EmulatedDeviceOptions> ParseOptions(const TxscoreBackendOption* options, size_t count) {
  EmulatedDeviceOptions m;
  double tflops = m.flops_per_s / 1e12, memory_gbps = m.memory_bytes_per_s / 1e9, copy_gbps = m.copy_bytes_per_s / 1e9;
  double memory_gib = static_cast<double>(m.memory_bytes) / (1LL << 30);
  double alignment = m.alignment;
  for (size_t i = 0; i < count; ++i) {
    const char* key = options[i].key;
    const char* value = options[i].value;
    const std::string k = key;
    Status parsed = k == "stage_dispatch_us" ? ParseNumber(key, value, 0, 1e6, &m.stage_dispatch_us)
                    : k == "op_dispatch_us"  ? ParseNumber(key, value, 0, 1e6, &m.op_dispatch_us)
                    : k == "tflops"          ? ParseNumber(key, value, 0.001, 1e4, &tflops)
                    : k == "memory_gbps"     ? ParseNumber(key, value, 0.001, 1e5, &memory_gbps)
                    : k == "copy_gbps"       ? ParseNumber(key, value, 0.001, 1e5, &copy_gbps)
                    : k == "memory_gib"      ? ParseNumber(key, value, 0.001, 1e6, &memory_gib)
                    : k == "alignment"
                        ? ParseNumber(key, value, 1, 4096, &alignment)
                        : Status(InvalidArgument("unknown option \"" + k +
                                                 "\" (known: stage_dispatch_us, op_dispatch_us, tflops, memory_gbps, "
                                                 "copy_gbps, memory_gib, alignment)"));
    TXSCORE_RETURN_IF_ERROR(parsed);
  }
  if (alignment != std::floor(alignment)) return InvalidArgument("option alignment: must be a whole number");
  m.flops_per_s = tflops * 1e12;
  m.memory_bytes_per_s = memory_gbps * 1e9;
  m.copy_bytes_per_s = copy_gbps * 1e9;
  m.memory_bytes = static_cast<int64_t>(memory_gib * (1LL << 30));
  m.alignment = static_cast<int>(alignment);
  return m;
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// The strings handed to txscore live as long as the library (backend_abi.h, "Ownership"):
// they do not depend on the options, so they are built once.
struct DescriptionText {
  std::string kind;
  std::string dtypes;
  std::string native_ops;
  std::string description;
};
const DescriptionText& Text() {
  static const DescriptionText* text = [] {
    const Device d = EmulatedDeviceDescription({});
    std::vector<std::string> dtypes;
    for (Dtype dtype : d.dtypes) dtypes.push_back(DtypeName(dtype));
    return new DescriptionText{d.kind, Joined(dtypes), Joined({d.native_ops.begin(), d.native_ops.end()}),
                               d.description};
  }();
  return *text;
}

int Fail(const std::string& message, char* error, size_t capacity) {
  if (error != nullptr && capacity > 0) std::snprintf(error, capacity, "%s", message.c_str());
  return 1;
}

}  // namespace
}  // namespace txscore::accelerator

extern "C" __attribute__((visibility("default"))) int txscore_describe_backend(const TxscoreBackendOption* options,
                                                                               size_t option_count,
                                                                               TxscoreBackendDescription* out,
                                                                               char* error, size_t error_capacity) {
  using namespace txscore::accelerator;
  if (out == nullptr) return Fail("no description to fill", error, error_capacity);
  if (out->abi_version / 100 != TXSCORE_BACKEND_ABI_VERSION / 100 ||
      out->struct_size < sizeof(TxscoreBackendDescription)) {
    return Fail("backend ABI " + std::to_string(out->abi_version) + " (struct of " + std::to_string(out->struct_size) +
                    " bytes) is not the 1.x this library implements",
                error, error_capacity);
  }
  txscore::Result<EmulatedDeviceOptions> model = ParseOptions(options, option_count);
  if (!model.ok()) return Fail(model.error().message, error, error_capacity);
  txscore::Status registered = RegisterEmulatedDevice(*model);
  if (!registered.ok()) return Fail(registered.error().message, error, error_capacity);

  const Device d = EmulatedDeviceDescription(*model);
  out->kind = Text().kind.c_str();
  out->device_count = 1;
  out->device_index = 0;
  out->dtypes = Text().dtypes.c_str();
  out->native_ops = Text().native_ops.c_str();
  out->memory_bytes = d.memory_bytes;
  out->alignment = d.alignment;
  out->is_emulator = 1;
  out->has_cost_profile = 1;
  out->dispatch_us = d.cost.dispatch_us;
  out->flops_per_s = d.cost.flops_per_s;
  out->memory_bytes_per_s = d.cost.memory_bytes_per_s;
  out->copy_bytes_per_s = d.cost.copy_bytes_per_s;
  out->description = Text().description.c_str();
  return 0;
}
