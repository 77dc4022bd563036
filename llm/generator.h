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
  // Not called by GenerateBatch and GenerateEach.
  std::function<void(const std::vector<float>&)> on_logits;
  // Default: none. Streaming: called with each new piece of the text as it becomes final (a
  // character still being written, or text that may yet turn out to start a stop string, is
  // held back), in order; the pieces join up to GenerationResult::text. Returning false
  // stops this sequence (FinishReason::kCancelled: the caller has gone).
  std::function<bool(const std::string& piece)> on_text;
};

// Why a sequence stopped.
enum class FinishReason {
  kMaxNewTokens,    // it used all of max_new_tokens
  kEos,             // the model wrote an end-of-sequence token
  kStop,            // the text ended with one of `stop` (cut off)
  kSchemaComplete,  // the constrained output is a complete JSON value
  kDeadline,        // options.deadline passed
  kCancelled,       // on_text returned false
};
// "max_new_tokens", "eos", "stop", "schema_complete", "deadline", "cancelled" (as
// `txscore generate --json` prints them).
const char* FinishReasonName(FinishReason reason);

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kMaxNewTokens;
  int64_t prefill_us = 0;
  std::vector<int64_t> token_us;  // each decode step after the first token
  // When the first token was sampled (time to first token, with the caller's arrival time).
  std::chrono::steady_clock::time_point first_token_at{};
};

class Generator {
 public:
  // Neither pointer is owned; both must outlive the generator.
  Generator(const Decoder* decoder, const Tokenizer* tokenizer) : decoder_(decoder), tokenizer_(tokenizer) {}

  // At most this many constraints of schemas that were not prepared are kept (a caller of the
  // OpenAI-compatible API may send a new schema with every request); the least recently used
  // is compiled again when it comes back.
  static constexpr size_t kMaxRequestConstraints = 16;

  // Compiles the constraint for `schema` now (a per-vocabulary precomputation), so that the
  // first request using it does not pay for it, and keeps it.
  Status Prepare(const std::string& schema);

  // What Generate would refuse in `options` (a budget under 1, a schema that does not compile
  // or needs more tokens than the budget), found without generating: a request that joins a
  // batch is checked first, so that it cannot fail the batch. Compiles and keeps the schema.
  Status Check(const GenerationOptions& options);

  Result<GenerationResult> Generate(const std::vector<int32_t>& prompt, const GenerationOptions& options);
  // Several prompts of any lengths through one batched forward pass per step; each sequence
  // stops on its own (finished ones ride along with no new tokens). Sequence i samples with
  // seed options.sampling.seed + i. on_logits is not called in batch mode.
  Result<std::vector<GenerationResult>> GenerateBatch(const std::vector<std::vector<int32_t>>& prompts,
                                                      const GenerationOptions& options);
  // As GenerateBatch, with options of its own for each prompt (budget, sampling and seed,
  // stop strings, schema, deadline, streaming): requests of different callers in one batch.
  // `between_steps` (if set) is called after each step while sequences remain: the batcher
  // runs more urgent work there (pipelines/dynamic_batcher.h).
  Result<std::vector<GenerationResult>> GenerateEach(const std::vector<std::vector<int32_t>>& prompts,
                                                     const std::vector<GenerationOptions>& options,
                                                     const std::function<void()>& between_steps = nullptr);

 private:
  // The compiled constraint for `schema`, compiled now if it is not kept. `pin`: keep it for
  // the generator's life (Prepare's schemas).
  Result<std::shared_ptr<const JsonConstraint>> ConstraintFor(const std::string& schema, bool pin = false);
  // The constraint of `o.schema` (null without one), after the checks of Check.
  Result<std::shared_ptr<const JsonConstraint>> CheckedConstraint(const GenerationOptions& o);
  Result<std::vector<GenerationResult>> Run(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<GenerationOptions>& options,
                                            const std::function<void()>& between_steps = nullptr);

  const Decoder* decoder_;
  const Tokenizer* tokenizer_;
  std::mutex constraints_mutex_;
  struct KeptConstraint {
    std::shared_ptr<const JsonConstraint> constraint;
    bool pinned = false;
    uint64_t last_use = 0;
  };
  std::map<std::string, KeptConstraint> constraints_;  // by schema text
  uint64_t constraint_uses_ = 0;
};

}  // namespace txscore::llm
