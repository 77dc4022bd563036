// The plain types the CPU kernels work on (llm/cpu_kernels/kernels.h has the functions;
// scalar_ops.h the static helpers every set shares).
//
// Included by the files built with AVX2 or AVX-512 enabled, so it holds no inline function
// and no template: a function compiled there with wider instructions could otherwise be the
// copy the linker keeps for every caller, and stop a CPU without them with SIGILL.
#pragma once

#include <cstdint>

namespace txscore::llm::cpu {

// The kernel sets, best last. A set needs every feature named; a CPU with AVX-512F but no
// AVX512_BF16/VNNI runs kAvx2.
enum class Isa {
  kPortable,  // plain C++
  kAvx2,      // AVX2 + FMA: bfloat16 widened to float32, int8 products through 16-bit madd
  kAvx512,    // AVX-512 F/BW/VL + AVX512_BF16 (vdpbf16ps) + AVX512_VNNI (vpdpbusd)
};

// bfloat16 as stored: the top 16 bits of a float32, in the host's byte order.
using Bf16 = uint16_t;

// A row-major bfloat16 matrix: rows x cols, row r at values + r * cols.
struct Bf16Matrix {
  const Bf16* values = nullptr;
  int64_t rows = 0, cols = 0;
};

// A row-major int8 matrix quantized per output row (per channel): w[r][k] ~= values[r][k] *
// scales[r], symmetric, values in [-127, 127]. row_sums[r] = sum over k of values[r][k]
// (the integer kernels need it; QuantizeInt8Rows fills it).
struct Int8Matrix {
  const int8_t* values = nullptr;
  const float* scales = nullptr;
  const int32_t* row_sums = nullptr;
  int64_t rows = 0, cols = 0;
};

// Activations quantized for the int8 product: per row m, x[m][k] ~= (values[m][k] - 128) *
// scales[m], values in [1, 255] (int8 offset by 128, so that one operand of the CPU's
// unsigned-by-signed byte product is unsigned; the offset comes back out through row_sums).
struct QuantizedActivations {
  const uint8_t* values = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0;
};

// Where a product's outputs go: out[m * stride + r] for activation row m and weight row r,
// as float32 or rounded to bfloat16; exactly one of the two pointers is set.
struct Output {
  float* f32 = nullptr;
  Bf16* bf16 = nullptr;
  int64_t stride = 0;
};

struct KernelSet {
  Isa isa = Isa::kPortable;
  // out[m][r] = sum over k of x[m][k] * w[r][k], float32 accumulation, for every activation
  // row m < batch and weight rows [row_begin, row_end). x: batch rows of w.cols, contiguous.
  void (*gemv_bf16)(const Bf16Matrix& w, const Bf16* x, int64_t batch, const Output& out, int64_t row_begin,
                    int64_t row_end) = nullptr;
  // The same over int8: the integer dot product is exact (int32), then scaled by the weight
  // row's and the activation row's scales; every set gives bit-identical results.
  void (*gemv_int8)(const Int8Matrix& w, const QuantizedActivations& x, const Output& out, int64_t row_begin,
                    int64_t row_end) = nullptr;
  // out[d] += sum over t < tokens of weights[t] * v[t * stride + d], d < dims: attention's
  // weighted sum of cached values (bfloat16), in float32.
  void (*weighted_sum_bf16)(const float* weights, const Bf16* v, int64_t tokens, int64_t stride, int64_t dims,
                            float* out) = nullptr;
  // Rows [row_begin, row_end) of w back to bfloat16: values * scale, rounded to nearest even
  // as libtorch rounds (a NaN stays NaN); row r at out + r * w.cols. What a CPU prefill with
  // int8 weights multiplies by (the whole matrix at every prefill group); every set gives
  // bit-identical results.
  void (*dequantize_int8)(const Int8Matrix& w, int64_t row_begin, int64_t row_end, Bf16* out) = nullptr;
};

}  // namespace txscore::llm::cpu
