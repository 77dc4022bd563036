#include "accelerator/device.h"

#include <algorithm>

namespace txscore::accelerator {

bool IsValidKindName(std::string_view name) {
  if (name.empty() || name.size() > 32 || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

Status CheckKindName(std::string_view name, const std::string& what) {
  if (IsValidKindName(name)) return Status::Ok();
  return InvalidArgument(what + " \"" + std::string(name) +
                         "\" is not a device kind name (1-32 characters of a-z, 0-9 and _, starting with a letter)");
}

namespace {
constexpr const char* kKnownOps[] = {ops::kMatmul,    ops::kSoftmax,    ops::kRmsNorm, ops::kRope,
                                     ops::kEmbedding, ops::kActivation, ops::kTreeWalk};
}  // namespace

bool IsKnownOp(std::string_view op) {
  return std::any_of(std::begin(kKnownOps), std::end(kKnownOps), [&](const char* known) { return op == known; });
}

std::string KnownOpNames() {
  std::string names;
  for (const char* op : kKnownOps) names += (names.empty() ? "" : ", ") + std::string(op);
  return names;
}

const char* DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kBFloat16:
      return "bfloat16";
    case Dtype::kFloat16:
      return "float16";
  }
  return "unknown";
}

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (Dtype dtype : {Dtype::kFloat32, Dtype::kBFloat16, Dtype::kFloat16}) {
    if (name == DtypeName(dtype)) return dtype;
  }
  return std::nullopt;
}

int DtypeBytes(Dtype dtype) { return dtype == Dtype::kFloat32 ? 4 : 2; }

bool Device::Supports(Dtype dtype) const { return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end(); }

std::string Device::DisplayName() const { return emulated ? name + " (emulated)" : name; }

Device HostCpuDevice(const CostProfile& cost, int64_t memory_bytes) {
  Device cpu;
  cpu.name = "cpu";
  cpu.kind = kCpuKind;
  cpu.torch_device = "cpu";
  cpu.memory_bytes = memory_bytes;
  cpu.dtypes = {Dtype::kFloat32, Dtype::kBFloat16};
  cpu.native_ops = {ops::kMatmul,    ops::kSoftmax,    ops::kRmsNorm, ops::kRope,
                    ops::kEmbedding, ops::kActivation, ops::kTreeWalk};
  cpu.cost = cost;
  cpu.description = "host CPU";
  return cpu;
}

void DeviceRegistry::Register(Device device) {
  std::erase_if(absent_, [&](const AbsentDevice& a) { return a.kind == device.kind; });
  devices_.push_back(std::move(device));
}

void DeviceRegistry::ReportAbsent(std::string kind, std::string reason) {
  if (Find(kind) != nullptr) return;
  absent_.push_back({std::move(kind), std::move(reason)});
}

void DeviceRegistry::Remove(const std::string& kind, const std::string& reason) {
  std::erase_if(devices_, [&](const Device& d) { return d.kind == kind; });
  std::erase_if(absent_, [&](const AbsentDevice& a) { return a.kind == kind; });
  absent_.push_back({kind, reason});
}

const Device* DeviceRegistry::Find(std::string_view kind) const {
  for (const Device& d : devices_) {
    if (d.kind == kind) return &d;
  }
  return nullptr;
}

std::string DeviceRegistry::AbsenceReason(std::string_view kind) const {
  for (const AbsentDevice& a : absent_) {
    if (a.kind == kind) return a.reason;
  }
  return "";
}

std::vector<std::string> DeviceRegistry::Kinds() const {
  std::vector<std::string> kinds;
  auto add = [&](const std::string& kind) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  };
  for (const Device& d : devices_) add(d.kind);
  for (const AbsentDevice& a : absent_) add(a.kind);
  return kinds;
}

}  // namespace txscore::accelerator
