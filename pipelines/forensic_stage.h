// The llm_findings stage: for a decision its `when` selects (default: REVIEW), an LLM reads
// the transaction and the fraud model's reasons and writes Findings under the findings schema
// (llm/claim_analysis.h).
//
// Concurrent requests share forward passes: a dynamic batcher (pipelines/dynamic_batcher.h)
// collects them into batches of at most max_batch, waiting at most max_wait_us for company,
// and one batch runs at a time. A request waits only until its deadline: if its batch had not
// started it is reported skipped, if it had, cut short (its sequence stops at its deadline;
// the others in the batch go on). Either way the decision stands. Callers of the
// OpenAI-compatible API (service/openai_api.h) join the same batches through Generate, after
// synchronous requests and before batch jobs.
//
// The model is prepared at start on the planned device and on each fallback device. When a
// device fails during a request (an error from the model runtime), the request moves to the
// next device, and the failed one is passed over for `kFailingDevicePause` before it is tried
// again.
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "accelerator/op_adapters.h"
#include "common/blocking_wait.h"
#include "common/clock.h"
#include "common/result.h"
#include "fraud/transaction.h"
#include "llm/claim_analysis.h"
#include "llm/decoder.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"
#include "pipelines/decision.h"
#include "pipelines/dynamic_batcher.h"

namespace txscore::pipelines {

struct ForensicResult {
  enum class Outcome {
    kAnalysed,   // findings written
    kSkipped,    // never started: the deadline passed before its turn came
    kCutShort,   // started, but the deadline came before the findings were complete
    kFailed,     // the model failed; `detail` says how
    kGenerated,  // a Generate request's text is in `generation`
  };
  Outcome outcome = Outcome::kAnalysed;
  std::optional<llm::Findings> findings;            // set for kAnalysed
  std::optional<llm::GenerationResult> generation;  // set for kGenerated
  std::string detail;
  std::string device;                       // where it ran (last tried)
  std::vector<std::string> failed_devices;  // devices that failed first, in the order tried
};

// Where the model runs: the libtorch device and the op adapters it uses there.
struct ForensicTarget {
  std::string name;          // as reported, e.g. "emulated:0 (emulated)"
  std::string torch_device;  // e.g. "privateuseone:0"
  accelerator::Dtype dtype = accelerator::Dtype::kFloat32;
  accelerator::OpAdapters adapters{};
};

struct ForensicStageOptions {
  std::string stage = "forensic";  // its name, for messages
  std::string model_dir;           // required: a Hugging Face checkpoint directory
  int threads = 1;                 // libtorch threads of each engine
  int max_new_tokens = 96;
  int max_batch = 8;        // the dynamic batcher's largest batch
  int max_wait_us = 2000;   // how long it waits after the first request for more
  bool background = false;  // the batcher's thread at the lowest OS priority (jobs inside a server)
  // Applied to the CPU target only (llm::DecoderOptions): other devices run their dtype.
  llm::DecoderOptions::Quantization cpu_quantization = llm::DecoderOptions::Quantization::kNone;
  bool cpu_kernels = true;
  // The planned device first, then fallbacks.
  std::vector<ForensicTarget> targets = {{"cpu", "cpu", accelerator::Dtype::kFloat32}};
  // The clock deadlines are time points of (common/clock.h; the pipeline's). Default:
  // steady_clock. The paused-device interval is measured on it too.
  DeadlineClock clock = SteadyDeadlineClock();
};

class ForensicStage {
 public:
  static constexpr std::chrono::seconds kFailingDevicePause{30};
  // How long Generate waits past its deadline for the step in flight to finish the sequence.
  static constexpr std::chrono::seconds kGenerateGrace{5};

  // Loads the checkpoint in options.model_dir with `load_decoder` on each target, and its
  // tokenizer.
  static Result<std::unique_ptr<ForensicStage>> Create(const ForensicStageOptions& options,
                                                       const llm::DecoderLoader& load_decoder);

  // Thread-safe. Never throws; failures are in the result.
  ForensicResult Analyze(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons,
                         std::chrono::steady_clock::time_point deadline);

  // Analyze without a thread waiting for the answer: `done` is called once, through `host`
  // (on one of its threads, never before this returns), with the findings, or at `deadline`
  // with what Analyze would have answered then (cut short, or skipped if never started).
  void AnalyzeThen(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons,
                   std::chrono::steady_clock::time_point deadline, const std::shared_ptr<ContinuationHost>& host,
                   std::function<void(ForensicResult)> done);

  // A batch job's claims (the claim-analysis task), queued together at batch-job priority
  // (dynamic_batcher.h): they share forward passes, and take only the batch places that
  // synchronous requests leave. Blocks until every claim is answered or `deadline`. One result
  // per claim, in order.
  std::vector<ForensicResult> AnalyzeClaims(const std::vector<llm::ClaimFields>& claims,
                                            std::chrono::steady_clock::time_point deadline);

  // Text generation with options of its own (an OpenAI-compatible request), in the same
  // batches at BatchPriority::kApi. `options.deadline` is replaced by `deadline`. Blocks until
  // the text is complete or `deadline`: kDeadlineExceeded when it never started, and a
  // result with FinishReason::kDeadline when it was cut short. options.on_text, if set, is
  // called on the batcher's thread and may be called after this returns with a deadline
  // error; it must stay valid for that.
  Result<llm::GenerationResult> Generate(std::vector<int32_t> prompt, llm::GenerationOptions options,
                                         std::chrono::steady_clock::time_point deadline);
  const llm::Tokenizer& tokenizer() const { return *tokenizer_; }
  // The most tokens a prompt plus its completion may hold (config.json's max_position_embeddings).
  int context_length() const;

  const std::string& model_id() const { return model_id_; }
  const std::string& model_version() const { return model_version_; }  // llm::CheckpointVersion
  const std::string& model_dir() const { return options_.model_dir; }
  const std::string& device_name() const { return options_.targets.front().name; }
  // Requests that moved to another device because one failed.
  uint64_t device_fallbacks() const { return device_fallbacks_.load(); }
  // The dynamic batcher's view: requests waiting, and the sizes of the batches run so far.
  size_t queued() const;
  std::vector<int> batch_sizes() const;
  // Tokens of all the stage's work so far (scoring requests, API calls, batch jobs): prompts
  // read, tokens generated.
  uint64_t prompt_tokens() const { return prompt_tokens_.load(); }
  uint64_t generated_tokens() const { return generated_tokens_.load(); }
  // Sequences in the batches generating now (0 between batches; a batch of requests may run
  // inside another's make_way, dynamic_batcher.h).
  int running() const { return running_.load(); }
  // The KV cache the running batch holds, as a fraction of the most the stage may hold
  // (max_batch sequences of the model's full context): each batch allocates room for its
  // sequences' longest prompt plus their largest token budget. 0 between batches; both batches'
  // while one runs inside another, capped at 1.
  double kv_cache_usage() const;

  // The prompt's view of a transaction (exposed for tests).
  static llm::TransactionCase CaseFor(const fraud::Transaction& tx, double score, const std::vector<Reason>& reasons);

 private:
  ForensicStage() = default;

  ForensicStageOptions options_;
  std::string model_id_, model_version_;
  struct Engine {
    std::string device;  // display name
    std::unique_ptr<llm::Decoder> decoder;
    std::unique_ptr<llm::Generator> generator;
    std::chrono::steady_clock::time_point failing_until{};  // used by the batcher's thread only
  };
  struct Item {
    std::vector<int32_t> prompt;
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<std::atomic<bool>> started;
    // Set for a Generate request: its own options. Null: the findings task.
    std::shared_ptr<const llm::GenerationOptions> generation;
  };
  // The answer, or what became of the item when `deadline` came first.
  ForensicResult Await(std::future<ForensicResult> answer, const std::atomic<bool>& started,
                       std::chrono::steady_clock::time_point deadline) const;
  // What an item whose deadline came before its answer is reported as.
  static ForensicResult NotAnsweredInTime(bool started);
  ForensicResult Failed(std::string detail) const;
  // Runs one batch on the first healthy engine, moving to the next when one fails.
  std::vector<ForensicResult> RunBatch(const std::vector<Item>& items, const std::function<void()>& make_way);

  std::unique_ptr<llm::Tokenizer> tokenizer_;
  std::vector<Engine> engines_;  // the planned device first, then the fallbacks
  std::atomic<uint64_t> device_fallbacks_{0};
  std::atomic<int> running_{0};
  std::atomic<uint64_t> prompt_tokens_{0}, generated_tokens_{0};
  std::atomic<int64_t> kv_tokens_{0};                              // positions the running batch's cache holds
  std::unique_ptr<DynamicBatcher<Item, ForensicResult>> batcher_;  // last: its thread uses the above
};

}  // namespace txscore::pipelines
