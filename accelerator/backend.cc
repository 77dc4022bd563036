#include "accelerator/backend.h"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <sstream>

namespace txscore::accelerator {
namespace {

std::vector<std::string> SplitCommas(const char* text) {
  std::vector<std::string> parts;
  if (text == nullptr) return parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

Result<DescribedBackend> DescribeBackend(const TxscoreBackendDescription* described, const BackendConfig& config) {
  const std::string from = config.library.empty() ? "the backend" : config.library;
  DescribedBackend out;
  Device& d = out.device;
  d.kind.clear();  // no kind until the library or the file gives one
  bool has_dtypes = false, has_ops = false;
  int device_count = 0;  // 0: not said
  if (described != nullptr) {
    if (described->kind != nullptr) d.kind = described->kind;
    device_count = described->device_count;
    d.index = described->device_index;
    for (const std::string& name : SplitCommas(described->dtypes)) {
      const std::optional<Dtype> dtype = ParseDtype(name);
      if (!dtype) {
        return InvalidArgument(from + ": unknown dtype \"" + name + "\" (known: " + kKnownDtypeNames + ")");
      }
      d.dtypes.push_back(*dtype);
    }
    has_dtypes = described->dtypes != nullptr;
    for (std::string& op : SplitCommas(described->native_ops)) d.native_ops.insert(std::move(op));
    has_ops = described->native_ops != nullptr;
    d.memory_bytes = described->memory_bytes;
    d.alignment = described->alignment > 1 ? described->alignment : 1;
    d.emulated = described->is_emulator != 0;
    if (described->has_cost_profile != 0) {
      d.cost = {described->dispatch_us, described->flops_per_s, described->memory_bytes_per_s,
                described->copy_bytes_per_s, "described by " + from};
    }
    if (described->description != nullptr) d.description = described->description;
  }
  if (!config.kind.empty()) d.kind = config.kind;
  if (config.index) d.index = *config.index;
  if (config.dtypes) {
    d.dtypes = *config.dtypes;
    has_dtypes = true;
  }
  if (config.native_ops) {
    d.native_ops = *config.native_ops;
    has_ops = true;
  }
  if (config.memory_bytes) d.memory_bytes = *config.memory_bytes;
  if (config.alignment) d.alignment = *config.alignment;
  if (config.emulator) d.emulated = *config.emulator;
  if (config.cost) {
    d.cost = *config.cost;
    d.cost.source = "config";
  }

  const std::string how = described == nullptr ? from + " exports no " TXSCORE_DESCRIBE_BACKEND_SYMBOL
                                                        " and devices.backend does not give its "
                                               : from + " does not describe its ";
  std::vector<std::string> lacking;
  if (d.kind.empty()) lacking.push_back("kind");
  if (!has_dtypes || d.dtypes.empty()) lacking.push_back("dtypes");
  if (!has_ops || d.native_ops.empty()) lacking.push_back("native_ops");
  if (!lacking.empty()) {
    return InvalidArgument(how + JoinNames(lacking) + " (set devices.backend." + lacking.front() + ")");
  }
  TXSCORE_RETURN_IF_ERROR(CheckKindName(d.kind, from + ": kind"));
  if (d.kind == kCpuKind || d.kind == kCudaKind) {
    return InvalidArgument(from + ": kind \"" + d.kind + "\" is PyTorch's own; an out-of-tree backend needs another");
  }
  for (const std::string& op : d.native_ops) {
    if (!IsKnownOp(op)) return InvalidArgument(from + ": unknown op \"" + op + "\" (known: " + KnownOpNames() + ")");
  }
  if (d.index < 0 || (device_count > 0 && d.index >= device_count)) {
    return InvalidArgument(from + ": device index " + std::to_string(d.index) + " is not one of its " +
                           std::to_string(device_count > 0 ? device_count : 1) + " device(s)");
  }
  d.name = d.kind + ":" + std::to_string(d.index);
  d.torch_device = "privateuseone:" + std::to_string(d.index);
  if (d.description.empty()) d.description = "out-of-tree PyTorch backend from " + from;
  out.calibrate = d.cost.source.empty();
  return out;
}

Result<DescribedBackend> LoadBackend(const BackendConfig& config) {
  // RTLD_GLOBAL: the backend's kernels and allocator register with the libtorch this process
  // already has loaded.
  void* handle = dlopen(config.library.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) return NotFound("cannot load " + config.library + ": " + dlerror());
  auto describe = reinterpret_cast<TxscoreDescribeBackendFn>(dlsym(handle, TXSCORE_DESCRIBE_BACKEND_SYMBOL));
  if (describe == nullptr) return DescribeBackend(nullptr, config);

  std::vector<TxscoreBackendOption> options;
  for (const auto& [key, value] : config.options) options.push_back({key.c_str(), value.c_str()});
  TxscoreBackendDescription described;
  std::memset(&described, 0, sizeof described);
  described.abi_version = TXSCORE_BACKEND_ABI_VERSION;
  described.struct_size = sizeof described;
  char error[512] = {0};
  if (describe(options.data(), options.size(), &described, error, sizeof error) != 0) {
    error[sizeof error - 1] = '\0';
    return FailedPrecondition(config.library + " refused to start: " + (error[0] != '\0' ? error : "no reason given"));
  }
  return DescribeBackend(&described, config);
}

std::string AbsentBackendKind(const BackendConfig& config) {
  if (!config.kind.empty()) return config.kind;
  return std::filesystem::path(config.library).filename().string();
}

}  // namespace txscore::accelerator
