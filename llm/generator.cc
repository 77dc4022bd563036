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
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}
namespace {

int64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<std::shared_ptr<const JsonConstraint>> Generator::ConstraintFor(const std::string& schema, bool pin) {
  std::lock_guard<std::mutex> lock(constraints_mutex_);
  const uint64_t now = ++constraint_uses_;
  auto it = constraints_.find(schema);
  if (it != constraints_.end()) {
    it->second.last_use = now;
    it->second.pinned = it->second.pinned || pin;
    return it->second.constraint;
  }
  std::vector<int32_t> eos(decoder_->config().eos_token_ids.begin(), decoder_->config().eos_token_ids.end());
  Result<std::unique_ptr<JsonConstraint>> constraint = JsonConstraint::Create(schema, *tokenizer_, eos);
  if (!constraint.ok()) return constraint.error();
  std::shared_ptr<const JsonConstraint> shared = std::move(constraint).value();
  // Schemas from requests (the OpenAI-compatible API) are kept up to kMaxRequestConstraints,
  // the least recently used going first; prepared ones stay.
  size_t unpinned = 0;
  auto oldest = constraints_.end();
  for (auto c = constraints_.begin(); c != constraints_.end(); ++c) {
    if (c->second.pinned) continue;
    ++unpinned;
    if (oldest == constraints_.end() || c->second.last_use < oldest->second.last_use) oldest = c;
  }
  if (!pin && unpinned >= kMaxRequestConstraints) constraints_.erase(oldest);
  constraints_[schema] = {shared, pin, now};
  CountGraphBuild();
  return shared;
}

Status Generator::Prepare(const std::string& schema) {
  Result<std::shared_ptr<const JsonConstraint>> constraint = ConstraintFor(schema, /*pin=*/true);
  if (!constraint.ok()) return constraint.error();
  return Status::Ok();
}

Result<std::shared_ptr<const JsonConstraint>> Generator::CheckedConstraint(const GenerationOptions& o) {
  if (o.max_new_tokens < 1) return InvalidArgument("must be at least 1", "max_new_tokens");
  if (o.schema.empty()) return std::shared_ptr<const JsonConstraint>();
  Result<std::shared_ptr<const JsonConstraint>> constraint = ConstraintFor(o.schema);
  if (!constraint.ok()) return constraint.error();
  const size_t needed = (*constraint)->MinTokensToComplete((*constraint)->Start());
  if (static_cast<size_t>(o.max_new_tokens) < needed) {
    return InvalidArgument("the schema needs at least " + std::to_string(needed) + " tokens; max_new_tokens is " +
                               std::to_string(o.max_new_tokens),
                           "max_new_tokens");
  }
  return constraint;
}

Status Generator::Check(const GenerationOptions& options) {
  Result<std::shared_ptr<const JsonConstraint>> constraint = CheckedConstraint(options);
  if (!constraint.ok()) return constraint.error();
  return Status::Ok();
}

Result<GenerationResult> Generator::Generate(const std::vector<int32_t>& prompt, const GenerationOptions& options) {
  Result<std::vector<GenerationResult>> results = Run({prompt}, {options});
  if (!results.ok()) return results.error();
  return std::move(results->front());
}

Result<std::vector<GenerationResult>> Generator::GenerateBatch(const std::vector<std::vector<int32_t>>& prompts,
                                                               const GenerationOptions& options) {
  std::vector<GenerationOptions> each(prompts.size(), options);
  for (size_t i = 0; i < each.size(); ++i) {
    each[i].sampling.seed += i;
    each[i].on_logits = nullptr;
  }
  return Run(prompts, each);
}

Result<std::vector<GenerationResult>> Generator::GenerateEach(const std::vector<std::vector<int32_t>>& prompts,
                                                              const std::vector<GenerationOptions>& options,
                                                              const std::function<void()>& between_steps) {
  if (options.size() != prompts.size()) return InvalidArgument("one set of options per prompt", "options");
  std::vector<GenerationOptions> each(options);
  for (GenerationOptions& o : each) o.on_logits = nullptr;
  return Run(prompts, each, between_steps);
}

namespace {

// The length of `text` that is final while generation goes on: not a trailing replacement
// character (a UTF-8 sequence still being written), nor an end that could grow into a stop
// string (which would be cut off).
size_t SettledLength(const std::string& text, const std::vector<std::string>& stop) {
  static const std::string kReplacement = "\xef\xbf\xbd";
  size_t settled = text.size();
  while (settled >= kReplacement.size() &&
         text.compare(settled - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
    settled -= kReplacement.size();
  }
  const size_t text_end = settled;
  for (const std::string& s : stop) {
    if (s.empty()) continue;
    for (size_t k = std::min(s.size() - 1, text_end); k > 0; --k) {
      if (text.compare(text_end - k, k, s, 0, k) == 0) {
        settled = std::min(settled, text_end - k);
        break;
      }
    }
  }
  return settled;
}

}  // namespace

Result<std::vector<GenerationResult>> Generator::Run(const std::vector<std::vector<int32_t>>& prompts,
                                                     const std::vector<GenerationOptions>& options,
                                                     const std::function<void()>& between_steps) {
  if (prompts.empty()) return InvalidArgument("no prompts", "prompt");
  for (const auto& prompt : prompts) {
    if (prompt.empty()) return InvalidArgument("the prompt is empty", "prompt");
  }
  const size_t n = prompts.size();
  struct Sequence {
    const GenerationOptions* options;
    std::shared_ptr<const JsonConstraint> constraint;
    Sampler sampler;
    JsonState state;
    bool done = false;
    size_t streamed = 0;   // bytes of text given to on_text
    size_t text_size = 0;  // bytes of text after the previous step (where a stop string may start)
  };
  std::vector<Sequence> sequences;
  int longest_budget = 0;
  for (size_t i = 0; i < n; ++i) {
    const GenerationOptions& o = options[i];
    Result<std::shared_ptr<const JsonConstraint>> constraint = CheckedConstraint(o);
    if (!constraint.ok()) return constraint.error();
    longest_budget = std::max(longest_budget, o.max_new_tokens);
    JsonState start = *constraint ? (*constraint)->Start() : JsonState{};
    sequences.push_back({&o, std::move(constraint).value(), Sampler(o.sampling), std::move(start), false, 0, 0});
  }
  const auto& eos = decoder_->config().eos_token_ids;
  const size_t vocab = static_cast<size_t>(decoder_->config().vocab_size);
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  auto cache = decoder_->NewCache(static_cast<int>(n), static_cast<int>(longest) + longest_budget);

  std::vector<GenerationResult> results(n);
  std::vector<std::vector<int32_t>> step(prompts);
  for (size_t i = 0; i < n; ++i) {
    results[i].prompt_ids = prompts[i];
    results[i].finish_reason = FinishReason::kMaxNewTokens;
  }
  // Ends sequence i with `reason`; its remaining text goes to on_text.
  const auto finish = [&](size_t i, FinishReason reason) {
    Sequence& seq = sequences[i];
    GenerationResult& r = results[i];
    seq.done = true;
    r.finish_reason = reason;
    if (reason != FinishReason::kStop) r.text = tokenizer_->Decode(r.generated_ids, {.skip_special = true});
    if (seq.options->on_text && r.text.size() > seq.streamed && reason != FinishReason::kCancelled) {
      seq.options->on_text(r.text.substr(seq.streamed));
      seq.streamed = r.text.size();
    }
  };
  std::vector<bool> mask;
  for (int t = 0; t < longest_budget; ++t) {
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
      const GenerationOptions& o = *seq.options;
      const std::vector<float>& row = (*logits)[i];
      if (o.on_logits) o.on_logits(row);
      if (seq.constraint) {
        seq.constraint->AllowedTokens(seq.state, vocab, static_cast<size_t>(o.max_new_tokens - t), &mask);
      }
      const int32_t next = seq.sampler.Sample(row, seq.constraint ? &mask : nullptr);
      if (next < 0) return Internal("no token is allowed at step " + std::to_string(t));
      GenerationResult& r = results[i];
      if (std::find(eos.begin(), eos.end(), next) != eos.end() && !o.ignore_eos) {
        finish(i, FinishReason::kEos);
        continue;
      }
      r.generated_ids.push_back(next);
      if (seq.constraint) {
        seq.constraint->Advance(&seq.state, next);
        if (seq.constraint->IsComplete(seq.state)) {
          finish(i, FinishReason::kSchemaComplete);
          continue;
        }
      }
      if (!o.stop.empty() || o.on_text) {
        const std::string text = tokenizer_->Decode(r.generated_ids, {.skip_special = true});
        // A stop string may end inside the new token, and may have begun in earlier ones: the
        // text is cut where the first one found starts.
        size_t cut = std::string::npos;
        for (const std::string& stop : o.stop) {
          if (stop.empty()) continue;
          const size_t from = seq.text_size >= stop.size() - 1 ? seq.text_size - (stop.size() - 1) : 0;
          cut = std::min(cut, text.find(stop, from));
        }
        seq.text_size = text.size();
        if (cut != std::string::npos) {
          r.text = text.substr(0, cut);
          finish(i, FinishReason::kStop);
          continue;
        }
        if (o.on_text) {
          const size_t settled = SettledLength(text, o.stop);
          if (settled > seq.streamed) {
            if (!o.on_text(text.substr(seq.streamed, settled - seq.streamed))) {
              finish(i, FinishReason::kCancelled);
              continue;
            }
            seq.streamed = settled;
          }
        }
      }
      if (static_cast<int>(r.generated_ids.size()) >= o.max_new_tokens) {
        finish(i, FinishReason::kMaxNewTokens);
        continue;
      }
      step[i] = {next};
      ++active;
    }
    // The step's time counts for every sequence that took part in it.
    const int64_t elapsed = MicrosSince(start);
    for (size_t i = 0; i < n; ++i) {
      if (t == 0) {
        results[i].prefill_us = elapsed;
        results[i].first_token_at = std::chrono::steady_clock::now();
      } else if (ran[i]) {
        results[i].token_us.push_back(elapsed);
      }
    }
    if (active == 0) break;
    bool any_left = false;
    for (size_t i = 0; i < n; ++i) {
      const GenerationOptions& o = *sequences[i].options;
      if (!sequences[i].done && o.deadline && o.clock() >= *o.deadline) finish(i, FinishReason::kDeadline);
      any_left = any_left || !sequences[i].done;
    }
    if (!any_left) break;
    if (between_steps) between_steps();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!sequences[i].done) finish(i, FinishReason::kMaxNewTokens);
  }
  return results;
}

}  // namespace txscore::llm
