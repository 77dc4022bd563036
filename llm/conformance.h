// Conformance of a decoder on some device and dtype against a reference (CPU, float32): the
// same prompt, then N greedy steps in which both are fed the reference's tokens (teacher
// forcing), so each step compares like with like. Per step: cosine similarity of the logits
// and their largest absolute difference; overall: how often both pick the same next token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "llm/decoder.h"

namespace txscore::llm {

struct ConformanceThresholds {
  double min_cosine = 0.999;   // every step; Default: 0.999 (reduced precision)
  double min_agreement = 0.0;  // fraction of greedy tokens equal to the reference's; Default: not checked
};

// Default thresholds by dtype: float32 must agree everywhere (cosine >= 0.99999, every token);
// bfloat16/float16 keep cosine >= 0.999 at every step.
ConformanceThresholds ThresholdsFor(accelerator::Dtype dtype);
// int8 weights (DecoderOptions::Quantization::kInt8, bfloat16 activations): cosine >= 0.99 at
// every step; greedy agreement is reported, not required (the quantization's cost).
ConformanceThresholds Int8Thresholds();

struct ConformanceReport {
  std::vector<double> cosine;              // per step
  std::vector<double> max_abs_difference;  // per step
  int steps = 0;
  int same_tokens = 0;
  double min_cosine = 1;
  double max_abs = 0;
  bool passed = false;
  std::string failure;  // why it failed, when it did
};

// Runs `prompt` and `steps` teacher-forced steps on both decoders (same vocabulary required).
Result<ConformanceReport> CompareDecoders(const Decoder& reference, const Decoder& candidate,
                                          const std::vector<int32_t>& prompt, int steps,
                                          const ConformanceThresholds& thresholds);

}  // namespace txscore::llm
