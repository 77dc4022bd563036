// The decode path's CPU kernels: matrix-vector products over bfloat16 or int8 weights with
// float32 accumulation, in the spirit of llama.cpp's ggml-cpu. One set of kernels per
// instruction set, chosen at run time from what the CPU reports; the portable set (plain C++,
// any CPU, any byte order) is what the s390x build and CPUs without AVX2 run.
//
// No libtorch here, and nothing but plain pointers: the decoder hands in its tensors' memory
// (llm/cpu_kernels/decode_step.h). Each kernel works on a range of output rows, so callers
// split a product across threads by rows; no kernel starts threads of its own.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "llm/cpu_kernels/plain_structs.h"
#include "llm/cpu_kernels/scalar_ops.h"

namespace txscore::llm::cpu {

std::string_view IsaName(Isa isa);

// Bf16ToFloat, FloatToBf16 and RoundToBf16 are in scalar_ops.h.

// The kernels of `isa`, or null when this build or this CPU has no such set.
const KernelSet* KernelsFor(Isa isa);
// The best set this build and CPU run.
const KernelSet& BestKernels();
// Every set this build and CPU run, portable first: the equivalence tests check each.
std::vector<const KernelSet*> AvailableKernels();

// Quantizes rows of float weights per row (scale max|w| / 127, round to nearest): values
// rows x cols, scales and row_sums rows each. An all-zero row gets scale 0.
void QuantizeInt8Rows(const float* w, int64_t rows, int64_t cols, int8_t* values, float* scales, int32_t* row_sums);
// Back from int8 to bfloat16: KernelSet::dequantize_int8.
// Quantizes `rows` activation rows (bfloat16) per row for gemv_int8: values rows x cols, scales rows.
void QuantizeActivations(const Bf16* x, int64_t rows, int64_t cols, uint8_t* values, float* scales);

}  // namespace txscore::llm::cpu
