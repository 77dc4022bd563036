#include "accelerator/discovery.h"

#include <dlfcn.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "accelerator/compute_threads.h"
#include "common/file_io.h"
#include "common/logging.h"

namespace txscore::accelerator {
namespace {

using Clock = std::chrono::steady_clock;

// The median time of `runs` calls of `fn` after one warm-up call, in seconds.
template <typename Fn>
double MedianSeconds(int runs, Fn fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + runs / 2, times.end());
  return times[static_cast<size_t>(runs / 2)];
}

std::string CacheKey(const std::string& device, int threads) {
  return device + "/threads=" + std::to_string(threads) + "/torch=" + TORCH_VERSION;
}

nlohmann::json ReadCache(const std::string& path) {
  if (path.empty()) return nlohmann::json::object();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json::object();  // the first start: calibrate
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "calibration cache");
  if (!text.ok()) {
    Log("device").warn("{}; calibrating again", text.error().message);
    return nlohmann::json::object();
  }
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    Log("device").warn("calibration cache {} is not a JSON object; calibrating again and rewriting it", path);
    return nlohmann::json::object();
  }
  return doc;
}

// Written to a temporary file and renamed, so a reader never sees half a file.
void WriteCache(const std::string& path, const nlohmann::json& doc) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << doc.dump(2) << "\n";
    out.close();
    if (!out) {
      Log("device").warn("cannot write calibration cache {}; the next start calibrates again", tmp);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    Log("device").warn("cannot write calibration cache {}: {}; the next start calibrates again", path, ec.message());
}

// From the cache when present, else measured (and cached).
Result<CostProfile> Profile(const std::string& name, const std::string& torch_device, int threads,
                            nlohmann::json* cache, bool* cache_changed) {
  const std::string key = CacheKey(name, threads);
  if (auto it = cache->find(key); it != cache->end() && it->is_object()) {
    CostProfile p;
    p.dispatch_us = it->value("dispatch_us", 0.0);
    p.flops_per_s = it->value("flops_per_s", 0.0);
    p.memory_bytes_per_s = it->value("memory_bytes_per_s", 0.0);
    p.copy_bytes_per_s = it->value("copy_bytes_per_s", 0.0);
    p.source = "calibration cache";
    if (p.flops_per_s > 0 && p.memory_bytes_per_s > 0) return p;
  }
  Result<CostProfile> measured = CalibrateDevice(torch_device, threads);
  if (!measured.ok()) return measured.error();
  (*cache)[key] = {{"dispatch_us", measured->dispatch_us},
                   {"flops_per_s", measured->flops_per_s},
                   {"memory_bytes_per_s", measured->memory_bytes_per_s},
                   {"copy_bytes_per_s", measured->copy_bytes_per_s}};
  *cache_changed = true;
  return measured;
}

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

Result<CostProfile> CalibrateDevice(const std::string& torch_device, int threads) {
  try {
    const int previous_threads = ComputeThreads();
    SetComputeThreads(threads);
    const torch::Device device(torch_device);
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    auto sync = [&](const torch::Tensor& t) { return t.sum().item<float>(); };  // waits for the device
    CostProfile p;
    torch::Tensor one = torch::ones({1}, options);
    p.dispatch_us = MedianSeconds(51, [&] { sync(one + one); }) * 1e6;
    const int64_t n = 384;
    torch::Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
    const double gemm = MedianSeconds(7, [&] { sync(torch::mm(a, b)); });
    p.flops_per_s = 2.0 * n * n * n / gemm;
    const int64_t rows = 4096;  // 64 MiB of float32: larger than the caches
    torch::Tensor m = torch::randn({rows, rows}, options), v = torch::randn({rows, 1}, options);
    const double gemv = MedianSeconds(7, [&] { sync(torch::mm(m, v)); });
    p.memory_bytes_per_s = static_cast<double>(rows) * rows * 4 / gemv;
    if (device.type() != torch::kCPU) {
      torch::Tensor host = torch::randn({rows, 1024});
      const double copy = MedianSeconds(5, [&] { sync(host.to(device)); });
      p.copy_bytes_per_s = static_cast<double>(host.numel()) * 4 / copy;
    }
    p.source = "calibrated";
    SetComputeThreads(previous_threads);
    return p;
  } catch (const c10::Error& e) {
    return Internal("calibrating " + torch_device + ": " + e.what_without_backtrace());
  }
}

Result<DeviceRegistry> DiscoverDevices(const DiscoveryOptions& options) {
  DeviceRegistry registry;
  nlohmann::json cache = ReadCache(options.calibration_cache);
  bool cache_changed = false;

  Result<CostProfile> cpu_profile = Profile("cpu", "cpu", options.threads, &cache, &cache_changed);
  if (!cpu_profile.ok()) return cpu_profile.error();
  Device cpu = HostCpuDevice(*cpu_profile, HostMemoryBytes());
  cpu.description = "host CPU, " + std::to_string(options.threads) + " libtorch thread(s)";
  registry.Register(std::move(cpu));

  if (!at::globalContext().hasCUDA()) {
    registry.ReportAbsent(kCudaKind, "libtorch was built without CUDA");
  } else if (!torch::cuda::is_available()) {
    registry.ReportAbsent(kCudaKind, "libtorch has CUDA but sees no GPU");
  } else {
    Device gpu;
    gpu.name = "cuda:0";
    gpu.kind = kCudaKind;
    gpu.torch_device = "cuda:0";
    gpu.dtypes = {Dtype::kFloat32, Dtype::kBFloat16, Dtype::kFloat16};
    gpu.native_ops = {ops::kMatmul, ops::kSoftmax, ops::kRmsNorm, ops::kRope, ops::kEmbedding, ops::kActivation};
    gpu.alignment = 8;
    gpu.description = "CUDA GPU (memory not known to this build: not checked)";
    Result<CostProfile> profile = Profile("cuda:0", "cuda:0", options.threads, &cache, &cache_changed);
    if (!profile.ok()) return profile.error();
    gpu.cost = *profile;
    registry.Register(std::move(gpu));
  }

  // The out-of-tree backend: whatever the library and the file say it is. Nothing here names
  // one, so a new backend needs no change in this file.
  if (!options.backend.library.empty()) {
    Result<DescribedBackend> backend = LoadBackend(options.backend);
    if (!backend.ok()) {
      registry.ReportAbsent(AbsentBackendKind(options.backend), backend.error().message);
    } else {
      Device& d = backend->device;
      Result<CostProfile> profile =
          backend->calibrate ? Profile(d.name, d.torch_device, options.threads, &cache, &cache_changed) : d.cost;
      if (!profile.ok()) {
        registry.ReportAbsent(d.kind, "loaded " + options.backend.library + " but " + profile.error().message);
      } else {
        d.cost = *profile;
        registry.Register(std::move(d));
      }
    }
  } else if (!options.backend.kind.empty()) {
    registry.ReportAbsent(options.backend.kind, "no backend library configured: set devices.backend_library");
  }
  if (cache_changed) WriteCache(options.calibration_cache, cache);
  return registry;
}

}  // namespace txscore::accelerator
