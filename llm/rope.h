// Rotary position embedding (RoPE) in the "rotate half" layout Hugging Face's Llama, Qwen and
// Gemma use: a head's dimension i and i + d/2 form one pair, rotated by position x frequency i.
// Split out of the decoder so that one rotation can be checked against values computed by hand
// (tests/llm/decoder_test.cc). Needs libtorch: include only from the torch targets.
#pragma once

#include <torch/torch.h>

#include "llm/model_config.h"

namespace txscore::llm {

// 1 / theta^(2i/d) for i < d/2, float32, with Llama 3's frequency-dependent scaling or linear
// scaling applied as `rope` says.
torch::Tensor RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim);

// cos and sin of positions x inverse frequencies, each frequency twice (for both halves),
// stacked: [2, batch, 1, positions, head_dim], float32. `positions`: [batch, positions].
torch::Tensor RopeTables(const torch::Tensor& inv_freq, const torch::Tensor& positions);

// x rotated: x * cos + rotate_half(x) * sin, where `x_rotated_half` is rotate_half(x), i.e.
// [-x2, x1] for x = [x1, x2] (accelerator/op_adapters.h computes it, by slicing or by a matmul).
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& x_rotated_half);

}  // namespace txscore::llm
