#include "accelerator/emulated_device.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>

namespace txscore::accelerator {
namespace {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
const c10::Device kDevice(kDeviceType, 0);

struct State {
  std::mutex mutex;
  EmulatedDeviceOptions options;
  EmulatedDeviceStats stats;
};
State& GlobalState() {
  static State* state = new State();  // lives as long as the registered kernels
  return *state;
}

// A native op the kernels below ran: counted, and its modeled time added.
void RecordNativeOp(double us) {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mutex);
  ++s.stats.native_ops;
  s.stats.modeled_us += us;
}

// Per-op cost of native work on the card.
double NativeOpMicros(double flops, double bytes) {
  const EmulatedDeviceOptions& o = GlobalState().options;
  return o.op_dispatch_us + std::max(flops / o.flops_per_s, bytes / o.memory_bytes_per_s) * 1e6;
}

// Host memory, aligned for vector loads, counted as device memory.
class EmulatedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    void* data = nullptr;
    if (bytes > 0) {
      data = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
      TORCH_CHECK(data != nullptr, "emulated device: out of host memory allocating ", bytes, " bytes");
      State& s = GlobalState();
      std::lock_guard<std::mutex> lock(s.mutex);
      s.stats.bytes_in_use += static_cast<int64_t>(bytes);
    }
    auto* context = new Allocation{data, bytes};
    return {data, context, &Free, kDevice};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  struct Allocation {
    void* data;
    size_t bytes;
  };
  static void Free(void* context) {
    auto* a = static_cast<Allocation*>(context);
    if (a->data != nullptr) {
      std::free(a->data);
      State& s = GlobalState();
      std::lock_guard<std::mutex> lock(s.mutex);
      s.stats.bytes_in_use -= static_cast<int64_t>(a->bytes);
    }
    delete a;
  }
};

EmulatedAllocator& Allocator() {
  static EmulatedAllocator* allocator = new EmulatedAllocator();
  return *allocator;
}

// One device, index 0.
struct EmulatedGuard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device) const override { return kDevice; }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.index() <= 0, "the emulated device has one device, index 0");
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, kDevice); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return c10::Stream(c10::Stream::DEFAULT, kDevice); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {
    TORCH_CHECK(false, "the emulated device has no events");
  }
  void block(void*, const c10::Stream&) const override { TORCH_CHECK(false, "the emulated device has no events"); }
  bool queryEvent(void*) const override { TORCH_CHECK(false, "the emulated device has no events"); }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
};

const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

at::Tensor Empty(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype, c10::optional<at::Layout>,
                 c10::optional<at::Device>, c10::optional<bool>, c10::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &Allocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor EmptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                        c10::optional<at::Layout>, c10::optional<at::Device>, c10::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &Allocator(), kKeys, c10::dtype_or_default(dtype));
}

// A CPU tensor over the same bytes as an emulated one: both live in host memory.
at::Tensor HostAlias(const at::Tensor& t) {
  if (t.device().type() != kDeviceType) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor CopyFrom(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "emulated device: _copy_from between different shapes");
  HostAlias(dst).copy_(HostAlias(self));
  const bool to_device = dst.device().type() == kDeviceType && self.device().type() != kDeviceType;
  const bool to_host = self.device().type() == kDeviceType && dst.device().type() != kDeviceType;
  if (to_device || to_host) {
    const double bytes = static_cast<double>(dst.numel()) * dst.element_size();
    State& s = GlobalState();
    std::lock_guard<std::mutex> lock(s.mutex);
    (to_device ? s.stats.bytes_to_device : s.stats.bytes_to_host) += static_cast<int64_t>(bytes);
    s.stats.modeled_us += bytes / s.options.copy_bytes_per_s * 1e6;
  }
  return dst;
}

at::Tensor CopyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return CopyFrom(self, dst, false);
}

const at::Tensor& Resize(const at::Tensor& self, c10::IntArrayRef size, c10::optional<at::MemoryFormat>) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const int64_t needed = impl->numel() * static_cast<int64_t>(self.element_size()) +
                         impl->storage_offset() * static_cast<int64_t>(self.element_size());
  if (needed > static_cast<int64_t>(impl->storage().nbytes())) {
    c10::DataPtr fresh = Allocator().allocate(static_cast<size_t>(needed));
    if (impl->storage().nbytes() > 0) std::memcpy(fresh.get(), impl->storage().data(), impl->storage().nbytes());
    impl->storage().set_data_ptr_noswap(std::move(fresh));
    impl->storage().set_nbytes(static_cast<size_t>(needed));
  }
  return self;
}

// Matrix products in reduced precision: inputs in float16/bfloat16, products accumulated in
// float32 (the host computes them in float32 and rounds once, which libtorch 1.13 on CPU also
// needs for float16), output rounded to the input dtype.
at::Tensor ReducedPrecisionProduct(const at::Tensor& result_on_host, const at::Tensor& like) {
  at::Tensor out = at::empty(result_on_host.sizes(), like.options());
  CopyFrom(result_on_host.to(like.scalar_type()), out, false);
  return out;
}

at::Tensor Float32OnHost(const at::Tensor& t) { return HostAlias(t).to(at::kFloat); }

double Bytes(const at::Tensor& t) { return static_cast<double>(t.numel()) * t.element_size(); }

at::Tensor Mm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor host = at::mm(Float32OnHost(a), Float32OnHost(b));
  RecordNativeOp(
      NativeOpMicros(2.0 * a.size(0) * a.size(1) * b.size(1), Bytes(a) + Bytes(b) + host.numel() * a.element_size()));
  return ReducedPrecisionProduct(host, a);
}

at::Tensor Bmm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor host = at::bmm(Float32OnHost(a), Float32OnHost(b));
  RecordNativeOp(NativeOpMicros(2.0 * a.size(0) * a.size(1) * a.size(2) * b.size(2),
                                Bytes(a) + Bytes(b) + host.numel() * a.element_size()));
  return ReducedPrecisionProduct(host, a);
}

at::Tensor Addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  at::Tensor host = at::addmm(Float32OnHost(bias), Float32OnHost(a), Float32OnHost(b), beta, alpha);
  RecordNativeOp(NativeOpMicros(2.0 * a.size(0) * a.size(1) * b.size(1),
                                Bytes(a) + Bytes(b) + Bytes(bias) + host.numel() * a.element_size()));
  return ReducedPrecisionProduct(host, a);
}

// Everything else: native ops are computed on the host and costed as card work; the rest is
// a host fallback, costed as copies out and back plus the host's own time.
void Fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& overload = op.schema().overload_name();
  const std::string name = overload.empty() ? op.schema().name() : op.schema().name() + "." + overload;
  double bytes = 0;
  double elements = 0;
  for (const c10::IValue& v : *stack) {
    if (v.isTensor() && v.toTensor().defined()) {
      bytes += Bytes(v.toTensor());
      elements += static_cast<double>(v.toTensor().numel());
    }
  }
  const bool native = EmulatedNativeOps().count(op.schema().name()) > 0;  // any overload
  const auto start = std::chrono::steady_clock::now();
  at::native::cpu_fallback(op, stack);
  const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  double out_bytes = 0;
  for (const c10::IValue& v : *stack) {
    if (v.isTensor() && v.toTensor().defined()) out_bytes += Bytes(v.toTensor());
  }
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (native) {
    ++s.stats.native_ops;
    s.stats.modeled_us +=
        s.options.op_dispatch_us +
        std::max(elements / s.options.flops_per_s, (bytes + out_bytes) / s.options.memory_bytes_per_s) * 1e6;
  } else {
    ++s.stats.fallback_ops;
    ++s.stats.fallback_by_op[name];
    s.stats.modeled_us += (bytes + out_bytes) / s.options.copy_bytes_per_s * 1e6 + host_us;
  }
}

std::once_flag registered_once;
std::atomic<bool> registered{false};

void RegisterBackend() {
#if defined(__SANITIZE_ADDRESS__)
  // What is registered here stays registered with torch's dispatcher for the life of the
  // process, as an out-of-tree backend's kernels do; LeakSanitizer (scripts/asan.sh) is told
  // that these allocations, and torch's for them, are not leaks.
  __lsan::ScopedDisabler registrations_live_until_exit;
#endif
  c10::SetAllocator(kDeviceType, &Allocator());
  static c10::impl::DeviceGuardImplRegistrar guard(kDeviceType, new EmulatedGuard());
  static torch::Library* kernels = [] {
    auto* m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    m->impl("empty.memory_format", TORCH_FN(Empty));
    m->impl("empty_strided", TORCH_FN(EmptyStrided));
    m->impl("_copy_from", TORCH_FN(CopyFrom));
    m->impl("_copy_from_and_resize", TORCH_FN(CopyFromAndResize));
    m->impl("resize_", TORCH_FN(Resize));
    // Views share storage: the CPU's implementations work on any host-memory tensor.
    m->impl("view", TORCH_FN(at::native::view));
    m->impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m->impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m->impl("mm", TORCH_FN(Mm));
    m->impl("bmm", TORCH_FN(Bmm));
    m->impl("addmm", TORCH_FN(Addmm));
    return m;
  }();
  static torch::Library* fallback = [] {
    auto* m = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    m->fallback(torch::CppFunction::makeFromBoxedFunction<&Fallback>());
    return m;
  }();
  (void)kernels;
  (void)fallback;
  registered = true;
}

bool SameOptions(const EmulatedDeviceOptions& a, const EmulatedDeviceOptions& b) {
  return a.stage_dispatch_us == b.stage_dispatch_us && a.op_dispatch_us == b.op_dispatch_us &&
         a.flops_per_s == b.flops_per_s && a.memory_bytes_per_s == b.memory_bytes_per_s &&
         a.copy_bytes_per_s == b.copy_bytes_per_s && a.memory_bytes == b.memory_bytes && a.alignment == b.alignment;
}

}  // namespace

const std::set<std::string>& EmulatedNativeOps() {
  // Matrix products (kernels above), softmax, elementwise arithmetic and the reductions an
  // RMSNorm decomposes into. Not native: gather/index ops (embedding lookup), rotary slicing
  // and concatenation, comparisons, sorting: those go to the host, as on a real dataflow card.
  static const std::set<std::string> kOps = {
      "aten::mm",   "aten::bmm", "aten::addmm", "aten::_softmax", "aten::add",   "aten::sub",   "aten::mul",
      "aten::div",  "aten::exp", "aten::silu",  "aten::gelu",     "aten::tanh",  "aten::rsqrt", "aten::pow",
      "aten::mean", "aten::sum", "aten::neg",   "aten::fill_",    "aten::zero_", "aten::clone", "aten::copy_"};
  return kOps;
}

Status RegisterEmulatedDevice(const EmulatedDeviceOptions& options) {
  {
    State& s = GlobalState();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (registered && !SameOptions(s.options, options)) {
      return FailedPrecondition("the emulated device is already registered with a different latency model");
    }
    s.options = options;
  }
  try {
    std::call_once(registered_once, RegisterBackend);
  } catch (const c10::Error& e) {  // e.g. another backend already holds PrivateUse1
    return FailedPrecondition(std::string("cannot register the emulated device: ") + e.what_without_backtrace());
  }
  return Status::Ok();
}

bool EmulatedDeviceRegistered() { return registered; }

EmulatedDeviceStats EmulatedDeviceStatsSnapshot() {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

void ResetEmulatedDeviceStats() {
  State& s = GlobalState();
  std::lock_guard<std::mutex> lock(s.mutex);
  const int64_t in_use = s.stats.bytes_in_use;
  s.stats = EmulatedDeviceStats();
  s.stats.bytes_in_use = in_use;  // live tensors are still there
}

}  // namespace txscore::accelerator
