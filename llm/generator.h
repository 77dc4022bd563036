// Text generation: prompt ids in, tokens out, with greedy or seeded sampling, stop strings,
// a token budget, optional JSON-schema constraint, and per-token timings.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "llm/decoder.h"
#include "llm/json_constraint.h"
#include "llm/sampler.h"
#include "llm/tokenizer.h"

namespace txscore::llm {

struct GenerationOptions {
  int max_new_tokens = 128;       // Default: 128
  SamplingOptions sampling;       // Default: greedy
  std::vector<std::string> stop;  // generation ends when the text ends with one (it is cut off)
  std::string schema;             // JSON schema text; empty = unconstrained
  bool ignore_eos = false;        // keep going past end-of-sequence tokens (tests, benchmarks)
  // Stop after the step that passes this time (FinishReason::kDeadline). Checked between
  // steps, so a step already running finishes. Default: none.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // The clock `deadline` is a time point of (common/clock.h). Default: steady_clock.
  DeadlineClock clock = SteadyDeadlineClock();
  // Called with each step's logits before sampling (tests compare them with a reference).
  std::function<void(const std::vector<float>&)> on_logits;
};

// Why a sequence stopped.
enum class FinishReason {
  kMaxNewTokens,    // it used all of max_new_tokens
  kEos,             // the model wrote an end-of-sequence token
  kStop,            // the text ended with one of `stop` (cut off)
  kSchemaComplete,  // the constrained output is a complete JSON value
  kDeadline,        // options.deadline passed
};
// "max_new_tokens", "eos", "stop", "schema_complete", "deadline" (as OpenAI-style APIs and
// `txscore generate --json` print them).
const char* FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kMaxNewTokens;
  int64_t prefill_us = 0;
  std::vector<int64_t> token_us;  // each decode step after the first token
};

class Generator {
 public:
  // Neither pointer is owned; both must outlive the generator.
  Generator(const Decoder* decoder, const Tokenizer* tokenizer) : decoder_(decoder), tokenizer_(tokenizer) {}

  // Compiles the constraint for `schema` now (a per-vocabulary precomputation), so that the
  // first request using it does not pay for it.
  Status Prepare(const std::string& schema);

  Result<GenerationResult> Generate(const std::vector<int32_t>& prompt, const GenerationOptions& options);
  // Several prompts of any lengths through one batched forward pass per step; each sequence
  // stops on its own (finished ones ride along with no new tokens). Sequence i samples with
  // seed options.sampling.seed + i. on_logits is not called in batch mode.
  Result<std::vector<GenerationResult>> GenerateBatch(const std::vector<std::vector<int32_t>>& prompts,
                                                      const GenerationOptions& options);

 private:
  Result<std::shared_ptr<const JsonConstraint>> ConstraintFor(const std::string& schema);
  Result<std::vector<GenerationResult>> Run(const std::vector<std::vector<int32_t>>& prompts,
                                            const GenerationOptions& options, bool single);

  const Decoder* decoder_;
  const Tokenizer* tokenizer_;
  std::mutex constraints_mutex_;
  std::map<std::string, std::shared_ptr<const JsonConstraint>> constraints_;  // by schema text
};

}  // namespace txscore::llm
