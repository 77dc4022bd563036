// The AVX-512 kernel set: AVX512_BF16's vdpbf16ps multiplies pairs of bfloat16 and adds them
// to float32 lanes, AVX512_VNNI's vpdpbusd multiplies groups of four bytes and adds them to
// int32 lanes; masked loads take the last partial vector, so any width works.
//
// Built with AVX-512 enabled: every function here is internal (static) and only
// plain_structs.h and scalar_ops.h are included (see there), so nothing compiled here is
// called on a CPU that portable.cc's check has not admitted.
#include <immintrin.h>

#include "llm/cpu_kernels/plain_structs.h"
#include "llm/cpu_kernels/scalar_ops.h"

namespace txscore::llm::cpu {
namespace {

constexpr int kRowsAtOnce = 4;  // weight rows sharing each activation load

__mmask32 Bf16Mask(int64_t remaining) {
  return remaining >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << remaining) - 1);
}

__mmask64 ByteMask(int64_t remaining) {
  return remaining >= 64 ? ~__mmask64{0} : static_cast<__mmask64>((uint64_t{1} << remaining) - 1);
}

__m512bh LoadBf16(const Bf16* p, __mmask32 mask) { return (__m512bh)_mm512_maskz_loadu_epi16(mask, p); }

// Four weight rows against N activation rows (N <= 4): each weight vector loaded once serves
// all N rows, so a batch reads its weights from memory or cache once per four sequences
// instead of once per sequence (4 x 4 accumulators, 4 weight vectors and one activation
// vector fit the 32 vector registers). Whole vectors, then one masked vector for the tail
// (a masked load in the main loop costs more than the product on some CPUs).
template <int N>
void Dot4xNBf16(const Bf16* row, int64_t cols, const Bf16* x, float (*sums)[kRowsAtOnce]) {
  __m512 acc[N][kRowsAtOnce];
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) acc[n][i] = _mm512_setzero_ps();
  }
  const auto step = [&](int64_t k, auto load) {
    __m512bh w[kRowsAtOnce];
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) w[i] = load(row + i * cols + k);
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) {
      const __m512bh xv = load(x + n * cols + k);
#pragma GCC unroll 4
      for (int i = 0; i < kRowsAtOnce; ++i) acc[n][i] = _mm512_dpbf16_ps(acc[n][i], w[i], xv);
    }
  };
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(row + (kRowsAtOnce + i) * cols + k), _MM_HINT_T0);
    step(k, [](const Bf16* p) { return (__m512bh)_mm512_loadu_si512(p); });
  }
  if (k < cols) {
    const __mmask32 mask = Bf16Mask(cols - k);
    step(k, [mask](const Bf16* p) { return LoadBf16(p, mask); });
  }
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) sums[n][i] = _mm512_reduce_add_ps(acc[n][i]);
  }
}

float DotBf16(const Bf16* row, int64_t cols, const Bf16* x) {
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(row + k), (__m512bh)_mm512_loadu_si512(x + k));
  }
  if (k < cols) {
    const __mmask32 mask = Bf16Mask(cols - k);
    acc = _mm512_dpbf16_ps(acc, LoadBf16(row + k, mask), LoadBf16(x + k, mask));
  }
  return _mm512_reduce_add_ps(acc);
}

// Calls fn.template operator()<N>(m) for blocks of N <= 4 activation rows covering [0, batch).
template <typename Fn>
void ForActivationBlocks(int64_t batch, Fn&& fn) {
  int64_t m = 0;
  for (; m + 4 <= batch; m += 4) fn.template operator()<4>(m);
  switch (batch - m) {
    case 3:
      fn.template operator()<3>(m);
      break;
    case 2:
      fn.template operator()<2>(m);
      break;
    case 1:
      fn.template operator()<1>(m);
      break;
    default:
      break;
  }
}

void GemvBf16(const Bf16Matrix& w, const Bf16* x, int64_t batch, const Output& out, int64_t row_begin,
              int64_t row_end) {
  const int64_t cols = w.cols;
  int64_t r = row_begin;
  float sums[4][kRowsAtOnce];
  for (; r + kRowsAtOnce <= row_end; r += kRowsAtOnce) {
    ForActivationBlocks(batch, [&]<int N>(int64_t m) {
      Dot4xNBf16<N>(w.values + r * cols, cols, x + m * cols, sums);
      for (int n = 0; n < N; ++n) {
        for (int i = 0; i < kRowsAtOnce; ++i) StoreOutput(out, m + n, r + i, sums[n][i]);
      }
    });
  }
  for (; r < row_end; ++r) {
    for (int64_t m = 0; m < batch; ++m) StoreOutput(out, m, r, DotBf16(w.values + r * cols, cols, x + m * cols));
  }
}

// The int8 form of Dot4xNBf16: four weight rows against N quantized activation rows.
template <int N>
void Dot4xNInt8(const int8_t* row, int64_t cols, const uint8_t* x, int32_t (*dots)[kRowsAtOnce]) {
  __m512i acc[N][kRowsAtOnce];
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) acc[n][i] = _mm512_setzero_si512();
  }
  const auto step = [&](int64_t k, auto load) {
    __m512i w[kRowsAtOnce];
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) w[i] = load(row + i * cols + k);
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) {
      const __m512i xv = load(x + n * cols + k);
#pragma GCC unroll 4
      for (int i = 0; i < kRowsAtOnce; ++i) acc[n][i] = _mm512_dpbusd_epi32(acc[n][i], xv, w[i]);
    }
  };
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    // The next block of four rows, at the same column: the hardware prefetcher follows one
    // stream well but these four rows' streams are short (a row of 896 bytes is 14 lines).
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(row + (kRowsAtOnce + i) * cols + k), _MM_HINT_T0);
    step(k, [](const void* p) { return _mm512_loadu_si512(p); });
  }
  if (k < cols) {
    const __mmask64 mask = ByteMask(cols - k);
    step(k, [mask](const void* p) { return _mm512_maskz_loadu_epi8(mask, p); });
  }
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
#pragma GCC unroll 4
    for (int i = 0; i < kRowsAtOnce; ++i) dots[n][i] = _mm512_reduce_add_epi32(acc[n][i]);
  }
}

int32_t DotInt8(const int8_t* row, int64_t cols, const uint8_t* x) {
  __m512i acc = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64)
    acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(x + k), _mm512_loadu_si512(row + k));
  if (k < cols) {
    const __mmask64 mask = ByteMask(cols - k);
    acc = _mm512_dpbusd_epi32(acc, _mm512_maskz_loadu_epi8(mask, x + k), _mm512_maskz_loadu_epi8(mask, row + k));
  }
  return _mm512_reduce_add_epi32(acc);
}

void GemvInt8(const Int8Matrix& w, const QuantizedActivations& x, const Output& out, int64_t row_begin,
              int64_t row_end) {
  const int64_t cols = w.cols;
  int64_t r = row_begin;
  int32_t dots[4][kRowsAtOnce];
  for (; r + kRowsAtOnce <= row_end; r += kRowsAtOnce) {
    ForActivationBlocks(x.rows, [&]<int N>(int64_t m) {
      Dot4xNInt8<N>(w.values + r * cols, cols, x.values + m * cols, dots);
      for (int n = 0; n < N; ++n) {
        for (int i = 0; i < kRowsAtOnce; ++i) {
          StoreOutput(out, m + n, r + i, ScaleInt8Dot(dots[n][i], w.row_sums[r + i], w.scales[r + i], x.scales[m + n]));
        }
      }
    });
  }
  for (; r < row_end; ++r) {
    for (int64_t m = 0; m < x.rows; ++m) {
      const int32_t dot = DotInt8(w.values + r * cols, cols, x.values + m * cols);
      StoreOutput(out, m, r, ScaleInt8Dot(dot, w.row_sums[r], w.scales[r], x.scales[m]));
    }
  }
}

__m512 WidenBf16(const Bf16* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

void WeightedSumBf16(const float* weights, const Bf16* v, int64_t tokens, int64_t stride, int64_t dims, float* out) {
  for (int64_t d = 0; d < dims; d += 16) {
    const __mmask16 mask =
        dims - d >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (dims - d)) - 1);
    __m512 acc = _mm512_maskz_loadu_ps(mask, out + d);
    for (int64_t t = 0; t < tokens; ++t) {
      acc = _mm512_fmadd_ps(_mm512_set1_ps(weights[t]), WidenBf16(v + t * stride + d, mask), acc);
    }
    _mm512_mask_storeu_ps(out + d, mask, acc);
  }
}

// Sixteen floats to bfloat16 bits, rounded to nearest even as FloatToBf16 rounds (integer
// arithmetic, not vcvtneps2bf16, which flushes subnormals to zero); a NaN becomes quiet.
__m256i RoundToBf16Bits(__m512 value) {
  const __m512i bits = _mm512_castps_si512(value);
  const __m512i upper = _mm512_srli_epi32(bits, 16);
  const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(upper, _mm512_set1_epi32(1)));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, upper, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(rounded);
}

void DequantizeInt8(const Int8Matrix& w, int64_t row_begin, int64_t row_end, Bf16* out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int8_t* row = w.values + r * w.cols;
    Bf16* dest = out + r * w.cols;
    const __m512 scale = _mm512_set1_ps(w.scales[r]);
    int64_t k = 0;
    for (; k + 16 <= w.cols; k += 16) {
      const __m512 values =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dest + k), RoundToBf16Bits(_mm512_mul_ps(values, scale)));
    }
    if (k < w.cols) {
      const auto mask = static_cast<__mmask16>((1u << (w.cols - k)) - 1);
      const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, row + k)));
      _mm256_mask_storeu_epi16(dest + k, mask, RoundToBf16Bits(_mm512_mul_ps(values, scale)));
    }
  }
}

}  // namespace

extern const KernelSet kAvx512Kernels;
const KernelSet kAvx512Kernels = {
    .isa = Isa::kAvx512,
    .gemv_bf16 = GemvBf16,
    .gemv_int8 = GemvInt8,
    .weighted_sum_bf16 = WeightedSumBf16,
    .dequantize_int8 = DequantizeInt8,
};

}  // namespace txscore::llm::cpu
