// The AVX-512 kernel set: AVX512_BF16's vdpbf16ps multiplies pairs of bfloat16 and adds them
// to float32 lanes, AVX512_VNNI's vpdpbusd multiplies groups of four bytes and adds them to
// int32 lanes; masked loads take the last partial vector, so any width works.
//
// Built with AVX-512 enabled: every function here is internal (static) and only
// plain_structs.h is included (see there), so nothing compiled here is called on a CPU that
// portable.cc's check has not admitted.
#include <immintrin.h>

#include "llm/cpu_kernels/plain_structs.h"

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

// Four weight rows against one activation row: whole vectors, then one masked vector for the
// tail (a masked load in the main loop costs more than the product on some CPUs).
void Dot4Bf16(const Bf16* row, int64_t cols, const Bf16* x, float* sums) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + k);
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(row + k), xv);
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(row + cols + k), xv);
    acc2 = _mm512_dpbf16_ps(acc2, (__m512bh)_mm512_loadu_si512(row + 2 * cols + k), xv);
    acc3 = _mm512_dpbf16_ps(acc3, (__m512bh)_mm512_loadu_si512(row + 3 * cols + k), xv);
  }
  if (k < cols) {
    const __mmask32 mask = Bf16Mask(cols - k);
    const __m512bh xv = LoadBf16(x + k, mask);
    acc0 = _mm512_dpbf16_ps(acc0, LoadBf16(row + k, mask), xv);
    acc1 = _mm512_dpbf16_ps(acc1, LoadBf16(row + cols + k, mask), xv);
    acc2 = _mm512_dpbf16_ps(acc2, LoadBf16(row + 2 * cols + k, mask), xv);
    acc3 = _mm512_dpbf16_ps(acc3, LoadBf16(row + 3 * cols + k, mask), xv);
  }
  sums[0] = _mm512_reduce_add_ps(acc0);
  sums[1] = _mm512_reduce_add_ps(acc1);
  sums[2] = _mm512_reduce_add_ps(acc2);
  sums[3] = _mm512_reduce_add_ps(acc3);
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

void GemvBf16(const Bf16Matrix& w, const Bf16* x, int64_t batch, const Output& out, int64_t row_begin,
              int64_t row_end) {
  const int64_t cols = w.cols;
  int64_t r = row_begin;
  float sums[kRowsAtOnce];
  for (; r + kRowsAtOnce <= row_end; r += kRowsAtOnce) {
    for (int64_t m = 0; m < batch; ++m) {
      Dot4Bf16(w.values + r * cols, cols, x + m * cols, sums);
      for (int i = 0; i < kRowsAtOnce; ++i) StoreOutput(out, m, r + i, sums[i]);
    }
  }
  for (; r < row_end; ++r) {
    for (int64_t m = 0; m < batch; ++m) StoreOutput(out, m, r, DotBf16(w.values + r * cols, cols, x + m * cols));
  }
}

void Dot4Int8(const int8_t* row, int64_t cols, const uint8_t* x, int32_t* dots) {
  __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512(), acc2 = _mm512_setzero_si512(),
          acc3 = _mm512_setzero_si512();
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    const __m512i xv = _mm512_loadu_si512(x + k);
    acc0 = _mm512_dpbusd_epi32(acc0, xv, _mm512_loadu_si512(row + k));
    acc1 = _mm512_dpbusd_epi32(acc1, xv, _mm512_loadu_si512(row + cols + k));
    acc2 = _mm512_dpbusd_epi32(acc2, xv, _mm512_loadu_si512(row + 2 * cols + k));
    acc3 = _mm512_dpbusd_epi32(acc3, xv, _mm512_loadu_si512(row + 3 * cols + k));
  }
  if (k < cols) {
    const __mmask64 mask = ByteMask(cols - k);
    const __m512i xv = _mm512_maskz_loadu_epi8(mask, x + k);
    acc0 = _mm512_dpbusd_epi32(acc0, xv, _mm512_maskz_loadu_epi8(mask, row + k));
    acc1 = _mm512_dpbusd_epi32(acc1, xv, _mm512_maskz_loadu_epi8(mask, row + cols + k));
    acc2 = _mm512_dpbusd_epi32(acc2, xv, _mm512_maskz_loadu_epi8(mask, row + 2 * cols + k));
    acc3 = _mm512_dpbusd_epi32(acc3, xv, _mm512_maskz_loadu_epi8(mask, row + 3 * cols + k));
  }
  dots[0] = _mm512_reduce_add_epi32(acc0);
  dots[1] = _mm512_reduce_add_epi32(acc1);
  dots[2] = _mm512_reduce_add_epi32(acc2);
  dots[3] = _mm512_reduce_add_epi32(acc3);
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
  int32_t dots[kRowsAtOnce];
  for (; r + kRowsAtOnce <= row_end; r += kRowsAtOnce) {
    for (int64_t m = 0; m < x.rows; ++m) {
      Dot4Int8(w.values + r * cols, cols, x.values + m * cols, dots);
      for (int i = 0; i < kRowsAtOnce; ++i) {
        StoreOutput(out, m, r + i, ScaleInt8Dot(dots[i], w.row_sums[r + i], w.scales[r + i], x.scales[m]));
      }
    }
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

}  // namespace

extern const KernelSet kAvx512Kernels;
const KernelSet kAvx512Kernels = {
    .isa = Isa::kAvx512,
    .gemv_bf16 = GemvBf16,
    .gemv_int8 = GemvInt8,
    .weighted_sum_bf16 = WeightedSumBf16,
};

}  // namespace txscore::llm::cpu
