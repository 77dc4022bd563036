// The portable kernel set (any CPU, any byte order), what is shared by every set, and the
// choice of set at run time.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "llm/cpu_kernels/kernels.h"

namespace txscore::llm::cpu {

#if defined(TXSCORE_X86_KERNELS)
// x86_avx2.cc and x86_avx512.cc, built with those instructions enabled.
extern const KernelSet kAvx2Kernels;
extern const KernelSet kAvx512Kernels;
#endif

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

namespace {

void PortableGemvBf16(const Bf16Matrix& w, const Bf16* x, int64_t batch, const Output& out, int64_t row_begin,
                      int64_t row_end) {
  std::vector<float> x32(static_cast<size_t>(batch * w.cols));
  for (size_t i = 0; i < x32.size(); ++i) x32[i] = Bf16ToFloat(x[i]);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const Bf16* row = w.values + r * w.cols;
    for (int64_t m = 0; m < batch; ++m) {
      const float* xm = x32.data() + m * w.cols;
      float sum = 0;
      for (int64_t k = 0; k < w.cols; ++k) sum += Bf16ToFloat(row[k]) * xm[k];
      StoreOutput(out, m, r, sum);
    }
  }
}

void PortableGemvInt8(const Int8Matrix& w, const QuantizedActivations& x, const Output& out, int64_t row_begin,
                      int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int8_t* row = w.values + r * w.cols;
    for (int64_t m = 0; m < x.rows; ++m) {
      const uint8_t* xm = x.values + m * x.cols;
      int32_t dot = 0;
      for (int64_t k = 0; k < w.cols; ++k) dot += static_cast<int32_t>(xm[k]) * row[k];
      StoreOutput(out, m, r, ScaleInt8Dot(dot, w.row_sums[r], w.scales[r], x.scales[m]));
    }
  }
}

void PortableWeightedSumBf16(const float* weights, const Bf16* v, int64_t tokens, int64_t stride, int64_t dims,
                             float* out) {
  for (int64_t t = 0; t < tokens; ++t) {
    const Bf16* row = v + t * stride;
    for (int64_t d = 0; d < dims; ++d) out[d] += weights[t] * Bf16ToFloat(row[d]);
  }
}

void PortableDequantizeInt8(const Int8Matrix& w, int64_t row_begin, int64_t row_end, Bf16* out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int8_t* row = w.values + r * w.cols;
    Bf16* dest = out + r * w.cols;
    for (int64_t k = 0; k < w.cols; ++k) dest[k] = FloatToBf16(static_cast<float>(row[k]) * w.scales[r]);
  }
}

const KernelSet kPortableKernels = {
    .isa = Isa::kPortable,
    .gemv_bf16 = PortableGemvBf16,
    .gemv_int8 = PortableGemvInt8,
    .weighted_sum_bf16 = PortableWeightedSumBf16,
    .dequantize_int8 = PortableDequantizeInt8,
};

bool CpuRuns(Isa isa) {
#if defined(TXSCORE_X86_KERNELS)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == Isa::kPortable;
#endif
}

}  // namespace

const KernelSet* KernelsFor(Isa isa) {
  if (!CpuRuns(isa)) return nullptr;
  switch (isa) {
    case Isa::kPortable:
      return &kPortableKernels;
#if defined(TXSCORE_X86_KERNELS)
    case Isa::kAvx2:
      return &kAvx2Kernels;
    case Isa::kAvx512:
      return &kAvx512Kernels;
#endif
    default:
      return nullptr;
  }
}

std::vector<const KernelSet*> AvailableKernels() {
  std::vector<const KernelSet*> sets;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512}) {
    if (const KernelSet* set = KernelsFor(isa)) sets.push_back(set);
  }
  return sets;
}

const KernelSet& BestKernels() {
  static const KernelSet* const best = AvailableKernels().back();
  return *best;
}

void QuantizeInt8Rows(const float* w, int64_t rows, int64_t cols, int8_t* values, float* scales, int32_t* row_sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float max_abs = 0;
    for (int64_t k = 0; k < cols; ++k) max_abs = std::max(max_abs, std::fabs(row[k]));
    const float scale = max_abs / 127.0f;
    int32_t sum = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const float q = scale > 0 ? std::nearbyint(row[k] / scale) : 0.0f;
      const auto value = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
      values[r * cols + k] = value;
      sum += value;
    }
    scales[r] = scale;
    row_sums[r] = sum;
  }
}

void QuantizeActivations(const Bf16* x, int64_t rows, int64_t cols, uint8_t* values, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const Bf16* row = x + r * cols;
    float max_abs = 0;
    for (int64_t k = 0; k < cols; ++k) max_abs = std::max(max_abs, std::fabs(Bf16ToFloat(row[k])));
    const float scale = max_abs / 127.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t k = 0; k < cols; ++k) {
      float q = std::clamp(Bf16ToFloat(row[k]) * inverse, -127.0f, 127.0f);
      if (std::isnan(q)) q = 0;  // a NaN activation (a broken model) must not reach the cast
      // Round half to even, as nearbyint in the default rounding mode, without its library
      // call (x86-64's baseline has no rounding instruction): adding 1.5 * 2^23 leaves no
      // fraction bits for |q| <= 127, and subtracting it gives the rounded value back.
      q = (q + 12582912.0f) - 12582912.0f;
      values[r * cols + k] = static_cast<uint8_t>(static_cast<int32_t>(q) + 128);
    }
    scales[r] = scale;
  }
}

}  // namespace txscore::llm::cpu
