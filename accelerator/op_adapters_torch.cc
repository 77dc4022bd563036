#include "accelerator/op_adapters_torch.h"

namespace txscore::accelerator {

torch::Tensor RotateHalfMatrix(int64_t head_dim, const torch::TensorOptions& options) {
  const int64_t half = head_dim / 2;
  torch::Tensor p = torch::zeros({head_dim, head_dim}, torch::kFloat32);
  for (int64_t i = 0; i < half; ++i) {
    p[i + half][i] = -1.0f;  // output i      = -x[i + half]
    p[i][i + half] = 1.0f;   // output i + half = x[i]
  }
  return p.to(options.device(), options.dtype().toScalarType());
}

torch::Tensor RotateHalfByMatmul(const torch::Tensor& x, const torch::Tensor& rotate_half_matrix) {
  return torch::matmul(x, rotate_half_matrix);
}

torch::Tensor RotateHalfBySlicing(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor SumOfSquaresByMatmul(const torch::Tensor& x32) {
  const torch::Tensor ones = torch::ones({x32.size(-1), 1}, x32.options());
  return torch::matmul(x32 * x32, ones);
}

torch::Tensor EmbeddingOnHost(const torch::Tensor& host_table, const torch::Tensor& host_ids,
                              const torch::Device& device) {
  return torch::embedding(host_table, host_ids).to(device);
}

}  // namespace txscore::accelerator
