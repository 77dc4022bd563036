#include "pipelines/forensic_stage.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/utc_time.h"
#include "llm/model_config.h"

namespace txscore::pipelines {
namespace {

const char* ChannelName(fraud::Channel channel) {
  static const char* kNames[] = {"UNKNOWN",          "CARD_PRESENT", "ECOMMERCE",  "ATM",
                                 "MAIL_PHONE_ORDER", "RECURRING",    "CONTACTLESS"};
  const int i = static_cast<int>(channel);
  return i >= 0 && i < 7 ? kNames[i] : "UNKNOWN";
}

const char* EntryModeName(fraud::EntryMode mode) {
  static const char* kNames[] = {
      "UNKNOWN", "CHIP", "MAGSTRIPE", "CONTACTLESS", "MANUAL_KEYED", "CREDENTIAL_ON_FILE", "TOKENIZED_WALLET"};
  const int i = static_cast<int>(mode);
  return i >= 0 && i < 7 ? kNames[i] : "UNKNOWN";
}

std::string Amount(const fraud::Transaction& tx) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f %s", tx.currency_exponent, tx.amount_major(), tx.currency.c_str());
  return text;
}

}  // namespace

llm::TransactionCase ForensicStage::CaseFor(const fraud::Transaction& tx, double score,
                                            const std::vector<Reason>& reasons) {
  llm::TransactionCase c;
  c.request_id = tx.request_id;
  c.time_utc = FormatUtcTime(tx.timestamp_ms * 1000);
  c.amount = Amount(tx);
  c.merchant_id = tx.merchant_id;
  c.mcc = tx.mcc;
  c.merchant_country = tx.merchant_country;
  c.card_country = tx.card_country.empty() ? "unknown" : tx.card_country;
  c.channel = ChannelName(tx.channel);
  c.entry_mode = EntryModeName(tx.entry_mode);
  c.score = score;
  for (const Reason& r : reasons) {
    char line[160];
    if (std::isnan(r.value)) {
      std::snprintf(line, sizeof line, "%s missing (%+.2f)", r.feature.c_str(), r.contribution);
    } else {
      std::snprintf(line, sizeof line, "%s = %g (%+.2f)", r.feature.c_str(), r.value, r.contribution);
    }
    c.reasons.push_back(line);
  }
  return c;
}

ForensicResult ForensicStage::Failed(std::string detail) const {
  ForensicResult result;
  result.outcome = ForensicResult::Outcome::kFailed;
  result.detail = std::move(detail);
  result.device = device_name();
  return result;
}

Result<std::unique_ptr<ForensicStage>> ForensicStage::Create(const ForensicStageOptions& config,
                                                             const llm::DecoderLoader& load_decoder) {
  if (!load_decoder) {
    return FailedPrecondition("stage " + config.stage + " needs the LLM runtime, which this program does not include");
  }
  if (config.targets.empty()) return InvalidArgument("stage " + config.stage + ": no device to run on");
  std::unique_ptr<ForensicStage> stage(new ForensicStage());
  stage->options_ = config;
  stage->model_id_ = std::filesystem::path(config.model_dir).filename().string();
  TXSCORE_ASSIGN_OR_RETURN(stage->model_version_, llm::CheckpointVersion(config.model_dir));
  Result<std::unique_ptr<llm::Tokenizer>> tokenizer = llm::Tokenizer::FromDirectory(config.model_dir);
  if (!tokenizer.ok()) return tokenizer.error();
  stage->tokenizer_ = std::move(tokenizer).value();
  // A token id past the model's embedding rows would fail every generation (each answered 503
  // by the OpenAI API, each review degraded): refuse the checkpoint when it loads instead.
  TXSCORE_ASSIGN_OR_RETURN(const llm::ModelConfig model_config, llm::LoadModelConfig(config.model_dir));
  if (stage->tokenizer_->vocab_size() > model_config.vocab_size) {
    return InvalidArgument(
        "stage " + config.stage + ": the tokenizer has " + std::to_string(stage->tokenizer_->vocab_size()) +
        " token ids, more than the model's vocab_size of " + std::to_string(model_config.vocab_size) +
        " (config.json): the tokenizer is not this model's");
  }
  // A chat template that refuses the tasks' conversation (system turn, user turn) is found
  // now, not on the first request.
  for (const Result<std::vector<int32_t>>& probe :
       {llm::TransactionReviewTask::PromptIds(*stage->tokenizer_, llm::TransactionCase{}),
        llm::ClaimAnalysisTask::PromptIds(*stage->tokenizer_, llm::ClaimFields{})}) {
    if (!probe.ok()) {
      return InvalidArgument("stage " + config.stage +
                             ": the checkpoint's chat template cannot render its prompt: " + probe.error().message);
    }
  }
  for (const ForensicTarget& target : config.targets) {
    llm::DecoderOptions options;
    options.dtype = target.dtype;
    options.threads = config.threads;
    options.device = target.torch_device;
    options.adapters = target.adapters;
    options.cpu_kernels = config.cpu_kernels;
    if (target.torch_device == "cpu") options.quantization = config.cpu_quantization;
    Result<std::unique_ptr<llm::Decoder>> decoder = load_decoder(config.model_dir, options);
    if (!decoder.ok()) return decoder.error();
    Engine engine;
    engine.device = target.name;
    engine.decoder = std::move(decoder).value();
    engine.generator = std::make_unique<llm::Generator>(engine.decoder.get(), stage->tokenizer_.get());
    // Compile the findings constraint now: requests only run it.
    TXSCORE_RETURN_IF_ERROR(engine.generator->Prepare(llm::ClaimAnalysisTask::Schema()));
    stage->engines_.push_back(std::move(engine));
  }
  ForensicStage* self = stage.get();
  ForensicResult expired;
  expired.outcome = ForensicResult::Outcome::kSkipped;
  expired.detail = "the deadline passed before the stage could start";
  stage->batcher_ = std::make_unique<DynamicBatcher<Item, ForensicResult>>(
      DynamicBatcherOptions{config.max_batch, config.max_wait_us, config.background, config.clock},
      [self](const std::vector<Item>& items, const std::function<void()>& make_way) {
        return self->RunBatch(items, make_way);
      },
      std::move(expired));
  return stage;
}

ForensicResult ForensicStage::Analyze(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons,
                                      std::chrono::steady_clock::time_point deadline) {
  ForensicResult result;
  if (options_.clock() >= deadline) {
    result.outcome = ForensicResult::Outcome::kSkipped;
    result.detail = "the deadline passed before the stage could start";
    return result;
  }
  Result<std::vector<int32_t>> prompt = llm::TransactionReviewTask::PromptIds(*tokenizer_, CaseFor(tx, score, reasons));
  if (!prompt.ok()) return Failed("the prompt could not be built: " + prompt.error().message);
  Item item{std::move(prompt).value(), deadline, std::make_shared<std::atomic<bool>>(false), nullptr};
  std::shared_ptr<std::atomic<bool>> started = item.started;
  return Await(batcher_->Submit(std::move(item), deadline), *started, deadline);
}

void ForensicStage::AnalyzeThen(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons,
                                std::chrono::steady_clock::time_point deadline,
                                const std::shared_ptr<ContinuationHost>& host,
                                std::function<void(ForensicResult)> done) {
  // The answer and the deadline race; the first one through `over` calls `done`.
  struct Race {
    std::atomic<bool> over{false};
    std::function<void(ForensicResult)> done;  // moved out by the winner: the loser holds nothing of the request
    std::shared_ptr<std::atomic<bool>> started = std::make_shared<std::atomic<bool>>(false);
    void Finish(ForensicResult result) { std::exchange(done, nullptr)(std::move(result)); }
  };
  auto race = std::make_shared<Race>();
  race->done = std::move(done);
  if (options_.clock() >= deadline) {
    race->over = true;
    host->Post([race] { race->Finish(NotAnsweredInTime(false)); });
    return;
  }
  Result<std::vector<int32_t>> prompt = llm::TransactionReviewTask::PromptIds(*tokenizer_, CaseFor(tx, score, reasons));
  if (!prompt.ok()) {
    host->Post([race, failed = Failed("the prompt could not be built: " + prompt.error().message)]() mutable {
      race->Finish(std::move(failed));
    });
    return;
  }
  // The host's clock is real time; the deadline is on options_.clock (a test's may differ).
  host->PostAt(std::chrono::steady_clock::now() + TimeLeft(options_.clock, deadline), [race] {
    if (!race->over.exchange(true)) race->Finish(NotAnsweredInTime(race->started->load()));
  });
  // The deadline's timer holds the race until it fires; the batcher only looks for it, so its
  // thread never holds the last hold on the request (and through it on this stage).
  batcher_->SubmitThen(Item{std::move(prompt).value(), deadline, race->started, nullptr}, deadline,
                       BatchPriority::kInteractive, [weak = std::weak_ptr<Race>(race), host](ForensicResult result) {
                         // On the batcher's thread: the request goes on on one of the host's.
                         std::shared_ptr<Race> race = weak.lock();
                         if (race == nullptr || race->over.exchange(true)) return;
                         host->Post([race, result = std::move(result)]() mutable { race->Finish(std::move(result)); });
                       });
}

std::vector<ForensicResult> ForensicStage::AnalyzeClaims(const std::vector<llm::ClaimFields>& claims,
                                                         std::chrono::steady_clock::time_point deadline) {
  std::vector<ForensicResult> results(claims.size());
  std::vector<Item> items;
  std::vector<size_t> positions;  // of the claims whose prompt was built
  for (size_t i = 0; i < claims.size(); ++i) {
    Result<std::vector<int32_t>> prompt = llm::ClaimAnalysisTask::PromptIds(*tokenizer_, claims[i]);
    if (!prompt.ok()) {
      results[i] = Failed("the prompt could not be built: " + prompt.error().message);
      continue;
    }
    items.push_back({std::move(prompt).value(), deadline, std::make_shared<std::atomic<bool>>(false), nullptr});
    positions.push_back(i);
  }
  std::vector<std::shared_ptr<std::atomic<bool>>> started;
  for (const Item& item : items) started.push_back(item.started);
  std::vector<std::future<ForensicResult>> answers =
      batcher_->SubmitAll(std::move(items), deadline, BatchPriority::kBatchJob);
  for (size_t i = 0; i < answers.size(); ++i) {
    results[positions[i]] = Await(std::move(answers[i]), *started[i], deadline);
  }
  return results;
}

Result<llm::GenerationResult> ForensicStage::Generate(std::vector<int32_t> prompt, llm::GenerationOptions options,
                                                      std::chrono::steady_clock::time_point deadline) {
  if (options_.clock() >= deadline) return DeadlineExceeded("the deadline passed before generation could start");
  // Refused here rather than in the batch, where it would fail the other requests with it.
  TXSCORE_RETURN_IF_ERROR(engines_.front().generator->Check(options));
  options.deadline = deadline;
  Item item{std::move(prompt), deadline, std::make_shared<std::atomic<bool>>(false),
            std::make_shared<const llm::GenerationOptions>(std::move(options))};
  std::shared_ptr<std::atomic<bool>> started = item.started;
  std::future<ForensicResult> answer = batcher_->Submit(std::move(item), deadline, BatchPriority::kApi);
  // A sequence stops at its deadline, so its answer follows soon after; wait a little past it
  // (a step in flight) rather than report cut short a text that is complete.
  ForensicResult result = Await(std::move(answer), *started, deadline + kGenerateGrace);
  switch (result.outcome) {
    case ForensicResult::Outcome::kGenerated:
      return std::move(result.generation).value();
    case ForensicResult::Outcome::kFailed:
      return Unavailable("generation failed on " + result.device + ": " + result.detail);
    default:
      return DeadlineExceeded(result.detail);
  }
}

double ForensicStage::kv_cache_usage() const {
  const double capacity = static_cast<double>(options_.max_batch) * context_length();
  return capacity > 0 ? std::min(1.0, static_cast<double>(kv_tokens_.load()) / capacity) : 0.0;
}

int ForensicStage::context_length() const {
  return static_cast<int>(engines_.front().decoder->config().max_position_embeddings);
}

ForensicResult ForensicStage::Await(std::future<ForensicResult> answer, const std::atomic<bool>& started,
                                    std::chrono::steady_clock::time_point deadline) const {
  if (answer.wait_for(TimeLeft(options_.clock, deadline)) == std::future_status::ready) return answer.get();
  return NotAnsweredInTime(started.load());
}

ForensicResult ForensicStage::NotAnsweredInTime(bool started) {
  ForensicResult result;
  if (started) {
    result.outcome = ForensicResult::Outcome::kCutShort;
    result.detail = "the deadline came before the findings were complete";
  } else {
    result.outcome = ForensicResult::Outcome::kSkipped;
    result.detail = "the deadline passed before the stage could start";
  }
  return result;
}

size_t ForensicStage::queued() const { return batcher_->queued(); }
std::vector<int> ForensicStage::batch_sizes() const { return batcher_->batch_sizes(); }

std::vector<ForensicResult> ForensicStage::RunBatch(const std::vector<Item>& items,
                                                    const std::function<void()>& make_way) {
  std::vector<std::vector<int32_t>> prompts;
  auto latest = items.front().deadline;
  for (const Item& item : items) {
    item.started->store(true);
    prompts.push_back(item.prompt);
    latest = std::max(latest, item.deadline);
  }
  // Each sequence stops at its own deadline; a Generate request brings its own options.
  std::vector<llm::GenerationOptions> each;
  for (const Item& item : items) {
    llm::GenerationOptions o;
    if (item.generation) {
      o = *item.generation;
    } else {
      o.max_new_tokens = options_.max_new_tokens;
      o.schema = llm::ClaimAnalysisTask::Schema();
    }
    o.deadline = item.deadline;
    o.clock = options_.clock;
    each.push_back(std::move(o));
  }
  // What the batch holds while it runs (metrics): its sequences, and the cache positions the
  // generator allocates for them.
  size_t longest_prompt = 0;
  int largest_budget = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    longest_prompt = std::max(longest_prompt, items[i].prompt.size());
    largest_budget = std::max(largest_budget, each[i].max_new_tokens);
  }
  // Added, not set: a batch may run inside another one's make_way, and both hold their cache.
  const int sequences = static_cast<int>(items.size());
  const auto kv_tokens = static_cast<int64_t>(items.size() * (longest_prompt + static_cast<size_t>(largest_budget)));
  running_.fetch_add(sequences);
  kv_tokens_.fetch_add(kv_tokens);
  struct Done {
    ForensicStage* stage;
    int sequences;
    int64_t kv_tokens;
    ~Done() {
      stage->running_.fetch_sub(sequences);
      stage->kv_tokens_.fetch_sub(kv_tokens);
    }
  } done{this, sequences, kv_tokens};
  std::vector<ForensicResult> results(items.size());
  const auto now = options_.clock();
  // Devices paused after a failure are passed over, unless every device is paused.
  std::vector<Engine*> order;
  for (Engine& e : engines_) {
    if (e.failing_until <= now) order.push_back(&e);
  }
  if (order.empty()) order.push_back(&engines_.front());
  std::vector<std::string> failed_devices;
  for (Engine* engine : order) {
    Result<std::vector<llm::GenerationResult>> generated = engine->generator->GenerateEach(prompts, each, make_way);
    if (!generated.ok() && generated.error().code == ErrorCode::kUnavailable && options_.clock() < latest &&
        engine != order.back()) {
      // The model runtime failed on this device: pause it and move the batch to the next one.
      engine->failing_until = options_.clock() + kFailingDevicePause;
      failed_devices.push_back(engine->device);
      continue;
    }
    if (generated.ok()) {  // counted before the results are moved out
      for (const llm::GenerationResult& g : *generated) {
        prompt_tokens_.fetch_add(g.prompt_ids.size());
        generated_tokens_.fetch_add(g.generated_ids.size());
      }
    }
    for (size_t i = 0; i < items.size(); ++i) {
      ForensicResult& r = results[i];
      r.device = engine->device;
      r.failed_devices = failed_devices;
      if (!generated.ok()) {
        r.outcome = ForensicResult::Outcome::kFailed;
        r.detail = generated.error().message;
        continue;
      }
      if (items[i].generation) {
        r.outcome = ForensicResult::Outcome::kGenerated;
        r.generation = std::move((*generated)[i]);
        continue;
      }
      Result<llm::Findings> findings = llm::ClaimAnalysisTask::FindingsFrom((*generated)[i], model_id_);
      if (!findings.ok()) {
        r.outcome = findings.error().code == ErrorCode::kDeadlineExceeded ? ForensicResult::Outcome::kCutShort
                                                                          : ForensicResult::Outcome::kFailed;
        r.detail = findings.error().message;
        continue;
      }
      r.outcome = ForensicResult::Outcome::kAnalysed;
      r.findings = std::move(findings).value();
    }
    if (generated.ok() && !failed_devices.empty()) device_fallbacks_.fetch_add(items.size());
    return results;
  }
  return results;  // not reached: the last engine always answers
}

}  // namespace txscore::pipelines
