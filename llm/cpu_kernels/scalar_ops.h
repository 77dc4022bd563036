// The scalar steps every kernel set shares: bfloat16 conversions, and how a product's sum is
// scaled and stored. One definition, so that every set rounds and scales alike (the int8
// products are bit-identical across sets); called once per output element, so inline.
//
// Every function here is static on purpose: each file that includes this header gets its own
// copy, compiled with that file's flags. An ordinary inline function would be merged by the
// linker into one copy, possibly the one built with AVX-512 in x86_avx512.cc, which would then
// stop a CPU without AVX-512 with SIGILL wherever portable code calls it. For the same reason
// it uses compiler builtins, not <cmath> or <cstring>, whose inline functions are ordinary
// (mergeable) ones.
#pragma once

#include <cstdint>

#include "llm/cpu_kernels/plain_structs.h"

namespace txscore::llm::cpu {

static inline float Bf16ToFloat(Bf16 value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even, as libtorch rounds float32 to bfloat16 (NaN stays NaN).
static inline Bf16 FloatToBf16(float value) {
  uint32_t bits;
  __builtin_memcpy(&bits, &value, sizeof bits);
  if (__builtin_isnan(value)) return static_cast<Bf16>((bits >> 16) | 0x40);  // quiet, sign kept
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<Bf16>((bits + rounding) >> 16);
}

// value rounded to bfloat16 and back: what a libtorch bfloat16 tensor would hold.
static inline float RoundToBf16(float value) { return Bf16ToFloat(FloatToBf16(value)); }

// Writes `value` to out[m][r].
static inline void StoreOutput(const Output& out, int64_t m, int64_t r, float value) {
  if (out.f32 != nullptr) {
    out.f32[m * out.stride + r] = value;
  } else {
    out.bf16[m * out.stride + r] = FloatToBf16(value);
  }
}

// The float value of an int8 product row: `dot` is sum(x_values * w_values) with the
// activations' +128 offset still in; 128 * sum(w) comes back out exactly, in integers.
static inline float ScaleInt8Dot(int32_t dot, int32_t row_sum, float w_scale, float x_scale) {
  return static_cast<float>(dot - 128 * row_sum) * w_scale * x_scale;
}

}  // namespace txscore::llm::cpu
