#include "accelerator/device.h"

#include <algorithm>

namespace txscore::accelerator {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
    case DeviceKind::kSpyre:
      return "spyre";
    case DeviceKind::kEmulated:
      return "emulated";
  }
  return "?";
}

Result<DeviceKind> ParseDeviceKind(std::string_view name) {
  for (DeviceKind kind : kAllDeviceKinds) {
    if (name == DeviceKindName(kind)) return kind;
  }
  return InvalidArgument("unknown device kind \"" + std::string(name) + "\" (expected cpu, cuda, spyre or emulated)");
}

bool Device::Supports(std::string_view dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

std::string Device::DisplayName() const { return emulated ? name + " (emulated)" : name; }

Device HostCpuDevice(const CostProfile& cost, int64_t memory_bytes) {
  Device cpu;
  cpu.name = "cpu";
  cpu.kind = DeviceKind::kCpu;
  cpu.torch_device = "cpu";
  cpu.memory_bytes = memory_bytes;
  cpu.dtypes = {"float32", "bfloat16"};
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

void DeviceRegistry::ReportAbsent(DeviceKind kind, std::string reason) {
  if (Find(kind) != nullptr) return;
  absent_.push_back({kind, std::move(reason)});
}

void DeviceRegistry::Remove(DeviceKind kind, const std::string& reason) {
  std::erase_if(devices_, [&](const Device& d) { return d.kind == kind; });
  std::erase_if(absent_, [&](const AbsentDevice& a) { return a.kind == kind; });
  absent_.push_back({kind, reason});
}

const Device* DeviceRegistry::Find(DeviceKind kind) const {
  for (const Device& d : devices_) {
    if (d.kind == kind) return &d;
  }
  return nullptr;
}

std::string DeviceRegistry::AbsenceReason(DeviceKind kind) const {
  for (const AbsentDevice& a : absent_) {
    if (a.kind == kind) return a.reason;
  }
  return "";
}

}  // namespace txscore::accelerator
