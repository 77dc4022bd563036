#include "llm/generator.h"

#include <algorithm>
#include <chrono>

#include "common/prepare_counters.h"

namespace txscore::llm {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kSchemaComplete:
      return "schema_complete";
    case FinishReason::kDeadline:
      return "deadline";
  }
  return "unknown";
}
namespace {

int64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::shared_ptr<const JsonConstraint>> Generator::ConstraintFor(const std::string& schema) {
  std::lock_guard<std::mutex> lock(constraints_mutex_);
  auto it = constraints_.find(schema);
  if (it != constraints_.end()) return it->second;
  std::vector<int32_t> eos(decoder_->config().eos_token_ids.begin(), decoder_->config().eos_token_ids.end());
  Result<std::unique_ptr<JsonConstraint>> constraint = JsonConstraint::Create(schema, *tokenizer_, eos);
  if (!constraint.ok()) return constraint.error();
  std::shared_ptr<const JsonConstraint> shared = std::move(constraint).value();
  constraints_[schema] = shared;
  CountGraphBuild();
  return shared;
}

Status Generator::Prepare(const std::string& schema) {
  Result<std::shared_ptr<const JsonConstraint>> constraint = ConstraintFor(schema);
  if (!constraint.ok()) return constraint.error();
  return Status::Ok();
}

Result<GenerationResult> Generator::Generate(const std::vector<int32_t>& prompt, const GenerationOptions& options) {
  Result<std::vector<GenerationResult>> results = Run({prompt}, options, /*single=*/true);
  if (!results.ok()) return results.error();
  return std::move(results->front());
}

Result<std::vector<GenerationResult>> Generator::GenerateBatch(const std::vector<std::vector<int32_t>>& prompts,
                                                               const GenerationOptions& options) {
  return Run(prompts, options, /*single=*/false);
}

Result<std::vector<GenerationResult>> Generator::Run(const std::vector<std::vector<int32_t>>& prompts,
                                                     const GenerationOptions& options, bool single) {
  if (prompts.empty()) return InvalidArgument("no prompts", "prompt");
  for (const auto& prompt : prompts) {
    if (prompt.empty()) return InvalidArgument("the prompt is empty", "prompt");
  }
  if (options.max_new_tokens < 1) return InvalidArgument("must be at least 1", "max_new_tokens");
  std::shared_ptr<const JsonConstraint> constraint;
  if (!options.schema.empty()) {
    Result<std::shared_ptr<const JsonConstraint>> c = ConstraintFor(options.schema);
    if (!c.ok()) return c.error();
    constraint = std::move(c).value();
    const size_t needed = constraint->MinTokensToComplete(constraint->Start());
    if (static_cast<size_t>(options.max_new_tokens) < needed) {
      return InvalidArgument("the schema needs at least " + std::to_string(needed) + " tokens; max_new_tokens is " +
                                 std::to_string(options.max_new_tokens),
                             "max_new_tokens");
    }
  }
  const auto& eos = decoder_->config().eos_token_ids;
  const size_t vocab = static_cast<size_t>(decoder_->config().vocab_size);
  const size_t n = prompts.size();
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  auto cache = decoder_->NewCache(static_cast<int>(n), static_cast<int>(longest) + options.max_new_tokens);

  struct Sequence {
    Sampler sampler;
    JsonState state;
    bool done = false;
  };
  std::vector<Sequence> sequences;
  std::vector<GenerationResult> results(n);
  std::vector<std::vector<int32_t>> step(prompts);
  for (size_t i = 0; i < n; ++i) {
    SamplingOptions sampling = options.sampling;
    sampling.seed += i;
    sequences.push_back({Sampler(sampling), constraint ? constraint->Start() : JsonState{}, false});
    results[i].prompt_ids = prompts[i];
    results[i].finish_reason = FinishReason::kMaxNewTokens;
  }
  std::vector<bool> mask;
  for (int t = 0; t < options.max_new_tokens; ++t) {
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<std::vector<float>>> logits = decoder_->Forward(cache.get(), step);
    if (!logits.ok()) return logits.error();
    size_t active = 0;
    std::vector<bool> ran(n);
    for (size_t i = 0; i < n; ++i) ran[i] = !sequences[i].done;
    for (size_t i = 0; i < n; ++i) {
      step[i].clear();
      Sequence& seq = sequences[i];
      if (seq.done) continue;
      const std::vector<float>& row = (*logits)[i];
      if (single && options.on_logits) options.on_logits(row);
      if (constraint)
        constraint->AllowedTokens(seq.state, vocab, static_cast<size_t>(options.max_new_tokens - t), &mask);
      const int32_t next = seq.sampler.Sample(row, constraint ? &mask : nullptr);
      if (next < 0) return Internal("no token is allowed at step " + std::to_string(t));
      GenerationResult& r = results[i];
      if (std::find(eos.begin(), eos.end(), next) != eos.end() && !options.ignore_eos) {
        r.finish_reason = FinishReason::kEos;
        seq.done = true;
        continue;
      }
      r.generated_ids.push_back(next);
      if (constraint) {
        constraint->Advance(&seq.state, next);
        if (constraint->IsComplete(seq.state)) {
          r.finish_reason = FinishReason::kSchemaComplete;
          seq.done = true;
          continue;
        }
      }
      if (!options.stop.empty()) {
        const std::string text = tokenizer_->Decode(r.generated_ids, {.skip_special = true});
        const auto hit = std::find_if(options.stop.begin(), options.stop.end(),
                                      [&](const std::string& s) { return !s.empty() && EndsWith(text, s); });
        if (hit != options.stop.end()) {
          r.text = text.substr(0, text.size() - hit->size());
          r.finish_reason = FinishReason::kStop;
          seq.done = true;
          continue;
        }
      }
      step[i] = {next};
      ++active;
    }
    // The step's time counts for every sequence that took part in it.
    const int64_t elapsed = MicrosSince(start);
    for (size_t i = 0; i < n; ++i) {
      if (t == 0) {
        results[i].prefill_us = elapsed;
      } else if (ran[i]) {
        results[i].token_us.push_back(elapsed);
      }
    }
    if (active == 0) break;
    if (options.deadline && options.clock() >= *options.deadline) {
      for (size_t i = 0; i < n; ++i) {
        if (!sequences[i].done) results[i].finish_reason = FinishReason::kDeadline;
      }
      break;
    }
  }
  for (GenerationResult& r : results) {
    if (r.finish_reason != FinishReason::kStop) r.text = tokenizer_->Decode(r.generated_ids, {.skip_special = true});
  }
  return results;
}

}  // namespace txscore::llm
