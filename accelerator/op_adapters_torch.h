// The tensor code of the op adapters (accelerator/op_adapters.h). Includes libtorch: only
// .cc files under llm/ and accelerator/ include this header.
#pragma once

#include <torch/torch.h>

namespace txscore::accelerator {

// P with x @ P == cat(-x[..., d/2:], x[..., :d/2]) for the last dimension d (rotate_half).
torch::Tensor RotateHalfMatrix(int64_t head_dim, const torch::TensorOptions& options);
torch::Tensor RotateHalfByMatmul(const torch::Tensor& x, const torch::Tensor& rotate_half_matrix);
// The native form, for comparison: slicing and concatenation.
torch::Tensor RotateHalfBySlicing(const torch::Tensor& x);

// sum(x^2) over the last dimension, keeping it, in float32: (x*x) @ ones.
torch::Tensor SumOfSquaresByMatmul(const torch::Tensor& x32);

// table[ids] computed on the host (table and ids in host memory), then moved to `device`.
torch::Tensor EmbeddingOnHost(const torch::Tensor& host_table, const torch::Tensor& host_ids,
                              const torch::Device& device);

}  // namespace txscore::accelerator
