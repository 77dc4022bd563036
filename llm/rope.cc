#include "llm/rope.h"

#include <cmath>

namespace txscore::llm {

torch::Tensor RopeInverseFrequencies(const RopeConfig& rope, int64_t head_dim) {
  torch::Tensor inv = 1.0 / torch::pow(rope.theta, torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) /
                                                       static_cast<double>(head_dim));
  if (rope.type == "linear") return inv / rope.factor;
  if (rope.type == "llama3") {
    const double old_context = static_cast<double>(rope.original_max_position_embeddings);
    const double low_freq_wavelen = old_context / rope.low_freq_factor;
    const double high_freq_wavelen = old_context / rope.high_freq_factor;
    const torch::Tensor wavelen = 2 * M_PI / inv;
    torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv / rope.factor, inv);
    const torch::Tensor smooth =
        (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
    const torch::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
    const torch::Tensor medium = (wavelen <= low_freq_wavelen) & (wavelen >= high_freq_wavelen);
    return torch::where(medium, smoothed, scaled);
  }
  return inv;
}

torch::Tensor RopeTables(const torch::Tensor& inv_freq, const torch::Tensor& positions) {
  const torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq.view({1, 1, -1});
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
  return torch::stack({angles.cos(), angles.sin()});
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& x_rotated_half) {
  return x * cos + x_rotated_half * sin;
}

}  // namespace txscore::llm
