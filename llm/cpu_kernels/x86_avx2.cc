// The AVX2 + FMA kernel set, for x86 CPUs without AVX-512 BF16/VNNI: bfloat16 is widened to
// float32 (a shift) before each fused multiply-add; int8 products widen both operands to 16
// bits and use vpmaddwd, which is exact for these ranges (255 * 127 * 2 fits 32 bits).
//
// Built with AVX2 enabled: every function here is internal (static) and only plain_structs.h
// and scalar_ops.h are included (see there).
#include <immintrin.h>

#include "llm/cpu_kernels/plain_structs.h"
#include "llm/cpu_kernels/scalar_ops.h"

namespace txscore::llm::cpu {
namespace {

constexpr int kRowsAtOnce = 4;

__m256 Widen8(const Bf16* p) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

float Sum8(__m256 v) {
  const __m128 half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1)));
}

int32_t Sum8(__m256i v) {
  const __m128i half = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i quarter = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, 0xb1)));
}

float ScalarBf16(Bf16 value) {
  const __m128i bits = _mm_cvtsi32_si128(static_cast<int>(static_cast<uint32_t>(value) << 16));
  return _mm_cvtss_f32(_mm_castsi128_ps(bits));
}

// One weight row against one activation row; the vector part, then the tail.
float DotBf16(const Bf16* row, const Bf16* x, int64_t cols) {
  __m256 acc = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) acc = _mm256_fmadd_ps(Widen8(row + k), Widen8(x + k), acc);
  float sum = Sum8(acc);
  for (; k < cols; ++k) sum += ScalarBf16(row[k]) * ScalarBf16(x[k]);
  return sum;
}

void GemvBf16(const Bf16Matrix& w, const Bf16* x, int64_t batch, const Output& out, int64_t row_begin,
              int64_t row_end) {
  const int64_t cols = w.cols, vector_cols = cols / 8 * 8;
  int64_t r = row_begin;
  for (; r + kRowsAtOnce <= row_end; r += kRowsAtOnce) {
    const Bf16* row = w.values + r * cols;
    for (int64_t m = 0; m < batch; ++m) {
      const Bf16* xm = x + m * cols;
      __m256 acc[kRowsAtOnce] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t k = 0; k < vector_cols; k += 8) {
        const __m256 xv = Widen8(xm + k);
        for (int i = 0; i < kRowsAtOnce; ++i) acc[i] = _mm256_fmadd_ps(Widen8(row + i * cols + k), xv, acc[i]);
      }
      for (int i = 0; i < kRowsAtOnce; ++i) {
        float sum = Sum8(acc[i]);
        for (int64_t k = vector_cols; k < cols; ++k) sum += ScalarBf16(row[i * cols + k]) * ScalarBf16(xm[k]);
        StoreOutput(out, m, r + i, sum);
      }
    }
  }
  for (; r < row_end; ++r) {
    for (int64_t m = 0; m < batch; ++m) StoreOutput(out, m, r, DotBf16(w.values + r * cols, x + m * cols, cols));
  }
}

int32_t DotInt8(const int8_t* row, const uint8_t* x, int64_t cols) {
  __m256i acc = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    const __m256i xv = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + k)));
    const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k)));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(xv, wv));
  }
  int32_t dot = Sum8(acc);
  for (; k < cols; ++k) dot += static_cast<int32_t>(x[k]) * row[k];
  return dot;
}

void GemvInt8(const Int8Matrix& w, const QuantizedActivations& x, const Output& out, int64_t row_begin,
              int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t m = 0; m < x.rows; ++m) {
      const int32_t dot = DotInt8(w.values + r * w.cols, x.values + m * x.cols, w.cols);
      StoreOutput(out, m, r, ScaleInt8Dot(dot, w.row_sums[r], w.scales[r], x.scales[m]));
    }
  }
}

void WeightedSumBf16(const float* weights, const Bf16* v, int64_t tokens, int64_t stride, int64_t dims, float* out) {
  int64_t d = 0;
  for (; d + 8 <= dims; d += 8) {
    __m256 acc = _mm256_loadu_ps(out + d);
    for (int64_t t = 0; t < tokens; ++t) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(weights[t]), Widen8(v + t * stride + d), acc);
    }
    _mm256_storeu_ps(out + d, acc);
  }
  for (; d < dims; ++d) {
    for (int64_t t = 0; t < tokens; ++t) out[d] += weights[t] * ScalarBf16(v[t * stride + d]);
  }
}

// Eight floats to bfloat16 bits, rounded to nearest even as FloatToBf16 rounds; a NaN
// becomes quiet.
__m128i RoundToBf16Bits(__m256 value) {
  const __m256i bits = _mm256_castps_si256(value);
  const __m256i upper = _mm256_srli_epi32(bits, 16);
  const __m256i rounding = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(upper, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
  const __m256i quiet = _mm256_or_si256(upper, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(value, value, _CMP_UNORD_Q));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet, nan);
  // Every lane is below 2^16, so the unsigned saturating pack keeps it as it is.
  return _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
}

void DequantizeInt8(const Int8Matrix& w, int64_t row_begin, int64_t row_end, Bf16* out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int8_t* row = w.values + r * w.cols;
    Bf16* dest = out + r * w.cols;
    const float scale = w.scales[r];
    const __m256 scales = _mm256_set1_ps(scale);
    int64_t k = 0;
    for (; k + 8 <= w.cols; k += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k));
      const __m256 values = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dest + k), RoundToBf16Bits(_mm256_mul_ps(values, scales)));
    }
    for (; k < w.cols; ++k) dest[k] = FloatToBf16(static_cast<float>(row[k]) * scale);
  }
}

}  // namespace

extern const KernelSet kAvx2Kernels;
const KernelSet kAvx2Kernels = {
    .isa = Isa::kAvx2,
    .gemv_bf16 = GemvBf16,
    .gemv_int8 = GemvInt8,
    .weighted_sum_bf16 = WeightedSumBf16,
    .dequantize_int8 = DequantizeInt8,
};

}  // namespace txscore::llm::cpu
