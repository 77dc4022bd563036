// The emulated device as the registry and the planner see it: no libtorch needed (the backend
// itself is in emulated_device.cc; its library hands this description to txscore through
// emulated_device_backend.cc).
#include "accelerator/emulated_device.h"

namespace txscore::accelerator {

Device EmulatedDeviceDescription(const EmulatedDeviceOptions& options) {
  Device d;
  d.name = "emulated:0";
  d.kind = kEmulatedKind;
  d.torch_device = "privateuseone:0";
  d.memory_bytes = options.memory_bytes;
  d.dtypes = {Dtype::kBFloat16, Dtype::kFloat16};
  d.native_ops = {ops::kMatmul, ops::kSoftmax, ops::kActivation};
  d.alignment = options.alignment;
  d.cost = {options.stage_dispatch_us, options.flops_per_s, options.memory_bytes_per_s, options.copy_bytes_per_s,
            "emulator latency model"};
  d.emulated = true;
  d.description = "txscore's emulated dataflow device (PrivateUse1 backend; runs on the host CPU)";
  return d;
}

}  // namespace txscore::accelerator
