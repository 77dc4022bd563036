#include "llm/generator.h"

#include <algorithm>
#include <chrono>

namespace txscore::llm {
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
  return shared;
}

Result<GenerationResult> Generator::Generate(const std::vector<int32_t>& prompt, const GenerationOptions& options) {
  if (prompt.empty()) return InvalidArgument("the prompt is empty", "prompt");
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
  auto cache = decoder_->NewCache(1, static_cast<int>(prompt.size()) + options.max_new_tokens);
  Sampler sampler(options.sampling);
  JsonState state = constraint ? constraint->Start() : JsonState{};
  std::vector<bool> mask;

  GenerationResult result;
  result.prompt_ids = prompt;
  result.finish_reason = "max_new_tokens";
  std::vector<int32_t> step = prompt;
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<std::vector<float>>> logits = decoder_->Forward(cache.get(), {step});
    if (!logits.ok()) return logits.error();
    const std::vector<float>& row = (*logits)[0];
    if (options.on_logits) options.on_logits(row);
    if (constraint) {
      constraint->AllowedTokens(state, vocab, static_cast<size_t>(options.max_new_tokens - n), &mask);
    }
    const int32_t next = sampler.Sample(row, constraint ? &mask : nullptr);
    if (n == 0) {
      result.prefill_us = MicrosSince(start);
    } else {
      result.token_us.push_back(MicrosSince(start));
    }
    if (next < 0) return Internal("no token is allowed at step " + std::to_string(n));
    const bool is_eos = std::find(eos.begin(), eos.end(), next) != eos.end();
    if (is_eos && !options.ignore_eos) {
      result.finish_reason = "eos";
      break;
    }
    result.generated_ids.push_back(next);
    if (constraint) {
      constraint->Advance(&state, next);
      if (constraint->IsComplete(state)) {
        result.finish_reason = "schema_complete";
        break;
      }
    }
    if (!options.stop.empty()) {
      const std::string text = tokenizer_->Decode(result.generated_ids, {.skip_special = true});
      const auto hit = std::find_if(options.stop.begin(), options.stop.end(),
                                    [&](const std::string& s) { return !s.empty() && EndsWith(text, s); });
      if (hit != options.stop.end()) {
        result.text = text.substr(0, text.size() - hit->size());
        result.finish_reason = "stop";
        return result;
      }
    }
    step = {next};
  }
  result.text = tokenizer_->Decode(result.generated_ids, {.skip_special = true});
  return result;
}

}  // namespace txscore::llm
