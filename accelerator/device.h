// What txscore knows about a device it may place a stage on: its kind, memory, dtypes, the
// ops it runs natively, and a cost profile. This header has no torch include; the code that
// discovers devices and measures their profiles lives in accelerator/discovery.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::accelerator {

// A device kind is a name, not an enum case: the kinds of a process are whatever its
// DeviceRegistry holds. Two are in PyTorch's tree and found by discovery itself; every other
// kind (Spyre, Trainium, txscore's emulated dataflow device, ...) is an out-of-tree backend on
// the PrivateUse1 dispatch key, named by its own description or by the pipeline file
// (accelerator/backend.h). A pipeline's `placement:` names a kind; whether a device of that
// kind exists is the registry's answer when the pipeline is placed.
inline constexpr char kCpuKind[] = "cpu";
inline constexpr char kCudaKind[] = "cuda";

// A kind name is 1-32 characters of [a-z0-9_], starting with a letter ("spyre", "emulated"):
// it is printed in plans, metrics and `name:index` device names, and written in YAML.
bool IsValidKindName(std::string_view name);
// InvalidArgument naming `what` and the rule, or Ok.
Status CheckKindName(std::string_view name, const std::string& what);

// The op vocabulary that stages declare and devices claim. Coarse on purpose: it is what
// placement and the op adapters reason about, not an ATen op list.
namespace ops {
inline constexpr char kMatmul[] = "matmul";
inline constexpr char kSoftmax[] = "softmax";
inline constexpr char kRmsNorm[] = "rms_norm";
inline constexpr char kRope[] = "rope";
inline constexpr char kEmbedding[] = "embedding";
inline constexpr char kActivation[] = "activation";  // SiLU / GELU
inline constexpr char kTreeWalk[] = "tree_walk";     // branchy tree-ensemble traversal
}  // namespace ops

// Whether `op` is in the vocabulary above, and the vocabulary as "matmul, softmax, ..." for
// error messages: a backend's description may claim only these.
bool IsKnownOp(std::string_view op);
std::string KnownOpNames();
// The element types stages and devices speak of; files, plans and logs name them float32,
// bfloat16, float16.
enum class Dtype { kFloat32, kBFloat16, kFloat16 };
const char* DtypeName(Dtype dtype);
std::optional<Dtype> ParseDtype(std::string_view name);  // nullopt for any other name
inline constexpr char kKnownDtypeNames[] = "float32, bfloat16, float16";
int DtypeBytes(Dtype dtype);  // 4 for float32, 2 for the others

// The numbers placement predicts with. Units are in the names.
struct CostProfile {
  double dispatch_us = 0;         // fixed cost of one stage call on the device
  double flops_per_s = 0;         // sustained matrix-product rate for the stage's dtype
  double memory_bytes_per_s = 0;  // device memory bandwidth
  double copy_bytes_per_s = 0;    // host <-> device transfers; 0 for the host (nothing to copy)
  std::string source;             // where the numbers came from: "calibrated", "cache", "config", ...
  bool operator==(const CostProfile&) const = default;
};

struct Device {
  std::string name;  // "cpu", "cuda:0", "spyre:0", "emulated:0": the kind and, but for the host, the index
  std::string kind = kCpuKind;
  int index = 0;
  std::string torch_device;  // how libtorch names it: "cpu", "cuda:0", "privateuseone:0"
  int64_t memory_bytes = 0;
  std::vector<Dtype> dtypes;
  std::set<std::string> native_ops;  // from accelerator::ops
  int alignment = 1;                 // preferred multiple for head_dim and vocabulary (op adapters pad to it)
  CostProfile cost;
  bool emulated = false;  // an emulator: every plan, log line and metric says so
  std::string description;

  bool Supports(Dtype dtype) const;
  // "emulated:0 (emulated)" for emulators, else the name: what plans and logs print.
  std::string DisplayName() const;
};

// The host CPU as the planner sees it: every op natively, float32 and bfloat16 (libtorch 1.13
// has no float16 matmul on the CPU), no copies. Discovery fills in the measured profile; tests
// pass their own.
Device HostCpuDevice(const CostProfile& cost, int64_t memory_bytes);

struct AbsentDevice {
  std::string kind;
  std::string reason;  // why it is not available, e.g. "libtorch was built without CUDA"
};

// The devices of this process, built by explicit calls at start-up (DiscoverDevices) or by a
// test. Not thread-safe to modify; read-only once built.
class DeviceRegistry {
 public:
  void Register(Device device);
  void ReportAbsent(std::string kind, std::string reason);
  // For tests and operators' "what if": drops every device of `kind`, recording `reason`.
  void Remove(const std::string& kind, const std::string& reason);

  // The first device of `kind`, or null.
  const Device* Find(std::string_view kind) const;
  // Why `kind` is absent; empty when present or never looked for.
  std::string AbsenceReason(std::string_view kind) const;
  // Every kind looked for, present ones first, each once, in registry order: what error
  // messages list as the known kinds.
  std::vector<std::string> Kinds() const;
  const std::vector<Device>& devices() const { return devices_; }
  const std::vector<AbsentDevice>& absent() const { return absent_; }

 private:
  std::vector<Device> devices_;
  std::vector<AbsentDevice> absent_;
};

}  // namespace txscore::accelerator
