// Picks the next token from logits: greedy, or seeded temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <vector>

namespace txscore::llm {

struct SamplingOptions {
  double temperature = 0.0;  // Default: 0 = greedy (argmax)
  int top_k = 0;             // Default: 0 = no top-k cut
  double top_p = 1.0;        // Default: 1 = no nucleus cut
  uint64_t seed = 0;         // the same seed, logits and options give the same tokens
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // `allowed`, when given, masks the vocabulary (constrained decoding); at least one entry
  // must be true. Ties in greedy mode go to the lowest id.
  int32_t Sample(const std::vector<float>& logits, const std::vector<bool>* allowed = nullptr);

 private:
  double NextUniform();  // [0, 1)
  SamplingOptions options_;
  uint64_t state_;
};

}  // namespace txscore::llm
