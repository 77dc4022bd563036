#include "pipelines/stages/llm_findings_stage.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/logging.h"
#include "llm/model_config.h"
#include "pipelines/claim_fields.h"

namespace txscore::pipelines {
namespace {

StageReport::Outcome OutcomeOf(ForensicResult::Outcome outcome) {
  switch (outcome) {
    case ForensicResult::Outcome::kAnalysed:
      return StageReport::Outcome::kDone;
    case ForensicResult::Outcome::kSkipped:
      return StageReport::Outcome::kSkipped;
    case ForensicResult::Outcome::kCutShort:
      return StageReport::Outcome::kCutShort;
    case ForensicResult::Outcome::kFailed:
    case ForensicResult::Outcome::kGenerated:  // Generate's, never a findings request's
      break;
  }
  return StageReport::Outcome::kFailed;
}

void Report(ForensicResult result, StageOutputs* out, StageReport* report) {
  report->outcome = OutcomeOf(result.outcome);
  report->detail = std::move(result.detail);
  report->device = std::move(result.device);
  report->failed_devices = std::move(result.failed_devices);
  if (report->outcome == StageReport::Outcome::kDone) out->findings = std::move(result.findings);
}

class PreparedLlmFindingsStage : public PreparedStage {
 public:
  // `engine`: the local model (null for a remote stage without a CPU fallback); `remote`: the
  // remote server, tried first when set.
  PreparedLlmFindingsStage(std::shared_ptr<ForensicStage> engine, std::unique_ptr<RemoteLlm> remote,
                           const LlmFindingsStageSettings& settings)
      : engine_(std::move(engine)),
        remote_(std::move(remote)),
        name_(settings.name),
        max_batch_(settings.max_batch),
        model_dir_(settings.model_dir),
        budget_ms_(settings.budget_ms) {}

  // Inputs: score (port 0) and the model's reasons (port 1).
  Status Run(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out, StageReport* report) const override {
    const double score = inputs.Get(0)->score;
    const std::vector<Reason>& reasons = inputs.Get(1)->reasons;
    if (remote_ == nullptr) {
      Report(engine_->Analyze(*item.transaction, score, reasons, item.deadline), out, report);
      return Status::Ok();
    }
    ForensicResult remote = FromRemote(
        llm::TransactionReviewTask::Messages(ForensicStage::CaseFor(*item.transaction, score, reasons)), item.deadline);
    if (remote.outcome == ForensicResult::Outcome::kFailed && engine_ != nullptr) {
      ForensicResult local = engine_->Analyze(*item.transaction, score, reasons, item.deadline);
      local.failed_devices.insert(local.failed_devices.begin(), remote_->name());
      remote = std::move(local);
    }
    Report(std::move(remote), out, report);
    return Status::Ok();
  }

  // The local model answers without a thread waiting; a remote one is called the blocking way.
  bool RunThen(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out, StageReport* report,
               const std::shared_ptr<ContinuationHost>& host, std::function<void()> finished) const override {
    if (remote_ != nullptr) return false;
    engine_->AnalyzeThen(*item.transaction, inputs.Get(0)->score, inputs.Get(1)->reasons, item.deadline, host,
                         [out, report, finished = std::move(finished)](ForensicResult result) {
                           Report(std::move(result), out, report);
                           finished();
                         });
    return true;
  }

  // Claims: submitted together, so they share forward passes; each waited for all of them.
  // Remote: several calls at once, those the remote cannot answer to the local model together.
  Status RunChunk(const std::vector<ChunkItem>& items) const override {
    if (items.empty()) return Status::Ok();
    std::vector<llm::ClaimFields> fields;
    auto deadline = items.front().item.deadline;
    for (const ChunkItem& c : items) {
      fields.push_back(ClaimFieldsFor(*c.item.claim));
      deadline = std::max(deadline, c.item.deadline);
    }
    Log("llm").debug("{}: generating findings for {} claims", name_, fields.size());
    const auto start = std::chrono::steady_clock::now();
    std::vector<ForensicResult> results =
        remote_ != nullptr ? RemoteClaims(fields, deadline) : engine_->AnalyzeClaims(fields, deadline);
    const int64_t elapsed_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
    for (size_t k = 0; k < items.size(); ++k) {
      Report(std::move(results[k]), items[k].out, items[k].report);
      items[k].report->elapsed_us = elapsed_us;
    }
    return Status::Ok();
  }

  bool slow() const override { return true; }
  std::optional<uint64_t> device_fallbacks() const override {
    return engine_ != nullptr ? std::optional<uint64_t>(engine_->device_fallbacks()) : std::nullopt;
  }
  std::optional<ModelVersion> model() const override {
    if (engine_ != nullptr) return ModelVersion{engine_->model_id(), engine_->model_version()};
    return ModelVersion{remote_->model(), "remote"};
  }
  // The case's text in, findings out (JSON of ClaimAnalysisTask's schema).
  std::optional<ModelSignature> signature() const override {
    return ModelSignature{.platform = engine_ != nullptr && remote_ == nullptr ? "pytorch_libtorch" : "openai_remote",
                          .inputs = {{"text_input", "BYTES", {-1}}},
                          .outputs = {{"findings", "BYTES", {-1}}}};
  }
  int preferred_chunk() const override { return max_batch_; }
  std::string Describe() const override {
    std::string local;
    if (engine_ != nullptr) {
      local = "findings from " + model_dir_ + " (version " + engine_->model_version() + ") on " +
              engine_->device_name() + " (budget " + std::to_string(budget_ms_) + " ms, batches of up to " +
              std::to_string(max_batch_) + ")";
    }
    if (remote_ == nullptr) return local;
    return "findings from " + remote_->name() + " (budget " + std::to_string(budget_ms_) +
           " ms); when it cannot answer: " + (engine_ != nullptr ? local : "skipped");
  }
  // The engine serves the OpenAI-compatible API and reports its serving state under vLLM's
  // names, by model; a remote stage reports its calls and circuit, by stage.
  ForensicStage* text_generation() const override { return engine_.get(); }
  StageServices Serves() const override {
    StageServices services;
    if (engine_ != nullptr) {
      const std::vector<std::pair<std::string, std::string>> model = {{"model_name", engine_->model_id()}};
      const auto engine_metric = [&](StageMetric::Type type, const char* name, const char* help,
                                     double (*value)(const ForensicStage&)) {
        services.metrics.push_back({type, name, help, model, [value](const PreparedStage& stage) {
                                      const ForensicStage* engine = ForensicStageOf(stage);
                                      return engine != nullptr ? value(*engine) : 0.0;
                                    }});
      };
      engine_metric(StageMetric::Type::kGauge, "vllm:num_requests_running", "Sequences generating now.",
                    [](const ForensicStage& e) { return double(e.running()); });
      engine_metric(StageMetric::Type::kGauge, "vllm:num_requests_waiting", "Requests waiting for a batch place.",
                    [](const ForensicStage& e) { return double(e.queued()); });
      engine_metric(StageMetric::Type::kCounter, "vllm:prompt_tokens_total",
                    "Prompt tokens read by the LLM stage (all its work; since the pipeline was loaded).",
                    [](const ForensicStage& e) { return double(e.prompt_tokens()); });
      engine_metric(StageMetric::Type::kCounter, "vllm:generation_tokens_total",
                    "Tokens generated by the LLM stage (all its work; since the pipeline was loaded).",
                    [](const ForensicStage& e) { return double(e.generated_tokens()); });
      engine_metric(StageMetric::Type::kGauge, "vllm:kv_cache_usage_perc",
                    "KV cache held by the running batch, as a fraction of the stage's most (0 to 1).",
                    [](const ForensicStage& e) { return e.kv_cache_usage(); });
    }
    if (remote_ != nullptr) {
      const auto remote_metric = [&](StageMetric::Type type, const char* name, const char* help,
                                     std::vector<std::pair<std::string, std::string>> labels,
                                     double (*value)(const RemoteLlm&)) {
        services.metrics.push_back({type, name, help, std::move(labels), [value](const PreparedStage& stage) {
                                      const RemoteLlm* remote = RemoteLlmOf(stage);
                                      return remote != nullptr ? value(*remote) : 0.0;
                                    }});
      };
      remote_metric(
          StageMetric::Type::kGauge, "txscore_remote_llm_circuit_open",
          "1 while the circuit to a stage's remote LLM is open or half-open (no calls, or one trial), 0 when closed.",
          {{"stage", name_}},
          [](const RemoteLlm& r) { return r.breaker_state() != CircuitBreaker::State::kClosed ? 1.0 : 0.0; });
      remote_metric(StageMetric::Type::kCounter, "txscore_remote_llm_circuit_opened_total",
                    "Times the circuit to a stage's remote LLM opened (since the pipeline was loaded).",
                    {{"stage", name_}}, [](const RemoteLlm& r) { return double(r.breaker_opened()); });
      const char* calls_help =
          "Calls to a stage's remote LLM, by outcome: ok (valid findings), failed (connection, status, timeout), "
          "invalid (an answer that is not valid findings).";
      remote_metric(StageMetric::Type::kCounter, "txscore_remote_llm_calls_total", calls_help,
                    {{"stage", name_}, {"outcome", "ok"}}, [](const RemoteLlm& r) { return double(r.calls_ok()); });
      remote_metric(StageMetric::Type::kCounter, "txscore_remote_llm_calls_total", calls_help,
                    {{"stage", name_}, {"outcome", "failed"}},
                    [](const RemoteLlm& r) { return double(r.calls_failed()); });
      remote_metric(StageMetric::Type::kCounter, "txscore_remote_llm_calls_total", calls_help,
                    {{"stage", name_}, {"outcome", "invalid"}},
                    [](const RemoteLlm& r) { return double(r.calls_invalid()); });
    }
    return services;
  }

  ForensicStage* engine() const { return engine_.get(); }
  const RemoteLlm* remote() const { return remote_.get(); }

 private:
  static constexpr size_t kRemoteCallsAtOnce = 8;

  ForensicResult FromRemote(const llm::TaskMessages& messages, std::chrono::steady_clock::time_point deadline) const {
    ForensicResult result;
    result.device = remote_->name();
    Result<llm::Findings> findings = remote_->Analyze(messages, deadline);
    if (findings.ok()) {
      result.outcome = ForensicResult::Outcome::kAnalysed;
      result.findings = std::move(findings).value();
    } else if (findings.error().code == ErrorCode::kDeadlineExceeded) {
      result.outcome = ForensicResult::Outcome::kCutShort;
      result.detail = findings.error().message;
    } else {
      result.outcome = ForensicResult::Outcome::kFailed;
      result.detail = findings.error().message + (engine_ == nullptr ? " (fallback: skip)" : "");
    }
    return result;
  }

  std::vector<ForensicResult> RemoteClaims(const std::vector<llm::ClaimFields>& claims,
                                           std::chrono::steady_clock::time_point deadline) const {
    std::vector<ForensicResult> results(claims.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> callers;
    for (size_t t = 0; t < std::min(kRemoteCallsAtOnce, claims.size()); ++t) {
      callers.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < claims.size();) {
          results[i] = FromRemote(llm::ClaimAnalysisTask::Messages(claims[i]), deadline);
        }
      });
    }
    for (std::thread& caller : callers) caller.join();
    if (engine_ == nullptr) return results;
    std::vector<llm::ClaimFields> local_claims;
    std::vector<size_t> positions;
    for (size_t i = 0; i < claims.size(); ++i) {
      if (results[i].outcome == ForensicResult::Outcome::kFailed) {
        local_claims.push_back(claims[i]);
        positions.push_back(i);
      }
    }
    if (local_claims.empty()) return results;
    std::vector<ForensicResult> local = engine_->AnalyzeClaims(local_claims, deadline);
    for (size_t k = 0; k < positions.size(); ++k) {
      local[k].failed_devices.insert(local[k].failed_devices.begin(), remote_->name());
      results[positions[k]] = std::move(local[k]);
    }
    return results;
  }

  std::shared_ptr<ForensicStage> engine_;
  std::unique_ptr<RemoteLlm> remote_;
  std::string name_;
  int max_batch_;
  std::string model_dir_;
  int budget_ms_;
};

Result<accelerator::DecoderShape> ShapeOf(const std::string& model_dir) {
  TXSCORE_ASSIGN_OR_RETURN(llm::ModelConfig llm, llm::LoadModelConfig(model_dir));
  return accelerator::DecoderShape{llm.num_hidden_layers,   llm.hidden_size,         llm.intermediate_size,
                                   llm.num_attention_heads, llm.num_key_value_heads, llm.head_dim,
                                   llm.vocab_size,          llm.tie_word_embeddings};
}

class LlmFindingsStageKind : public StageKind {
 public:
  LlmFindingsStageKind() {
    spec_.kind = "llm_findings";
    spec_.inputs = {{"score", ValueType::kNumber}, {"reasons", ValueType::kReasons}};
    spec_.outputs = {{"findings", ValueType::kFindings}};
    spec_.keys = {"model",     "dtype",          "threads",         "max_new_tokens", "budget_ms",
                  "placement", "expected_batch", "expected_tokens", "max_batch",      "max_wait_us",
                  "remote",    "quantization",   "cpu_kernels"};
    spec_.best_effort = true;
    spec_.default_when = "$sink.decision == REVIEW";
  }
  const StageKindSpec& spec() const override { return spec_; }

  // The checkpoint (weights, config, tokenizer, chat template), when the stage has one of its
  // own; a remote model's files are the remote server's.
  std::vector<StageFile> Files(const StageSettings& settings) const override {
    const auto& f = static_cast<const LlmFindingsStageSettings&>(settings);
    if (f.model_dir.empty()) return {};
    return {{"model", f.model_dir}};
  }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration&) const override {
    auto f = std::make_shared<LlmFindingsStageSettings>();
    std::string placement;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "placement", false, &placement));
    if (placement == "remote") {
      TXSCORE_RETURN_IF_ERROR(ParseRemote(r, stage, f.get()));
    } else if (stage["remote"]) {
      return r.ErrorAt(stage["remote"], "remote: needs placement: remote");
    }
    const bool needs_model = !f->remote || f->remote_fallback_local;
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "model", needs_model, YamlReader::PathMustBe::kDirectory, &f->model_dir));
    std::string dtype = "float32";
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "dtype", false, &dtype));
    if (dtype != "float32" && dtype != "bfloat16") {
      return r.ErrorAt(stage["dtype"], "dtype must be \"float32\" or \"bfloat16\", not \"" + dtype + "\"");
    }
    f->dtype = *accelerator::ParseDtype(dtype);
    std::string quantization = "none";
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "quantization", false, &quantization));
    if (quantization != "none" && quantization != "int8") {
      return r.ErrorAt(stage["quantization"],
                       "quantization must be \"none\" or \"int8\", not \"" + quantization + "\"");
    }
    if (quantization == "int8") {
      if (f->dtype != accelerator::Dtype::kBFloat16) {
        return r.ErrorAt(stage["quantization"], "quantization: int8 needs dtype: bfloat16 (its activations)");
      }
      f->quantization = llm::DecoderOptions::Quantization::kInt8;
    }
    TXSCORE_RETURN_IF_ERROR(r.ReadBool(stage, "cpu_kernels", &f->cpu_kernels));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "threads", 0, 256, &f->compute_threads));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_new_tokens", 50, 4096, &f->max_new_tokens));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "budget_ms", 1, 600000, &f->budget_ms));
    if (!f->remote) TXSCORE_RETURN_IF_ERROR(ReadPlacement(r, stage, &f->placement));
    if (f->remote) f->remote->max_tokens = f->max_new_tokens;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_batch", 1, 4096, &f->expected_batch));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_tokens", 1, 1 << 20, &f->expected_tokens));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_batch", 1, 1024, &f->max_batch));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_wait_us", 0, 10000000, &f->max_wait_us));
    return std::shared_ptr<const StageSettings>(std::move(f));
  }

  // The `remote:` map of placement: remote (pipelines/remote_llm.h).
  static Status ParseRemote(const YamlReader& r, const YAML::Node& stage, LlmFindingsStageSettings* f) {
    const YAML::Node remote = stage["remote"];
    if (!remote) return r.ErrorAt(stage["placement"], "placement: remote needs a remote: map (base_url, model, ...)");
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(remote, "remote",
                                        {"base_url", "model", "call_timeout_ms", "retries", "backoff_ms",
                                         "breaker_failures", "breaker_open_ms", "fallback", "tls"}));
    RemoteLlmOptions o;
    TXSCORE_RETURN_IF_ERROR(r.ReadString(remote, "base_url", true, &o.base_url));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(remote, "model", true, &o.model));
    int call_timeout_ms = 2000, backoff_ms = 50, breaker_open_ms = 10000;
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(remote, "call_timeout_ms", 1, 600000, &call_timeout_ms));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(remote, "retries", 0, 10, &o.retries));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(remote, "backoff_ms", 0, 60000, &backoff_ms));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(remote, "breaker_failures", 1, 1000, &o.breaker_failures));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(remote, "breaker_open_ms", 1, 3600000, &breaker_open_ms));
    o.call_timeout = std::chrono::milliseconds(call_timeout_ms);
    o.backoff = std::chrono::milliseconds(backoff_ms);
    o.breaker_open = std::chrono::milliseconds(breaker_open_ms);
    // The local fallback is placed like any stage: `fallback` is its placement.
    std::string fallback = "skip";
    TXSCORE_RETURN_IF_ERROR(r.ReadString(remote, "fallback", false, &fallback));
    if (fallback != "skip" && fallback != "auto" && !accelerator::IsValidKindName(fallback)) {
      return r.ErrorAt(
          remote["fallback"],
          "fallback must be skip, auto or a device kind (cpu, cuda, emulated, ...), not \"" + fallback + "\"");
    }
    f->remote_fallback_local = fallback != "skip";
    if (f->remote_fallback_local) f->placement = fallback;
    if (const YAML::Node tls = remote["tls"]) {
      TXSCORE_RETURN_IF_ERROR(r.ExpectMap(tls, "remote.tls", {"ca", "certificate", "private_key"}));
      TXSCORE_RETURN_IF_ERROR(r.ReadPath(tls, "ca", true, YamlReader::PathMustBe::kRegularFile, &o.ca_file));
      TXSCORE_RETURN_IF_ERROR(
          r.ReadPath(tls, "certificate", true, YamlReader::PathMustBe::kRegularFile, &o.certificate_file));
      TXSCORE_RETURN_IF_ERROR(
          r.ReadPath(tls, "private_key", true, YamlReader::PathMustBe::kRegularFile, &o.private_key_file));
    } else if (o.base_url.rfind("https://", 0) == 0) {
      return r.ErrorAt(remote, "an https base_url needs remote.tls (ca, certificate, private_key)");
    }
    if (o.base_url.rfind("https://", 0) != 0 && o.base_url.rfind("http://", 0) != 0) {
      return r.ErrorAt(remote["base_url"], "base_url must start with https:// or http://");
    }
    f->remote = std::move(o);
    return Status::Ok();
  }

  Result<std::optional<accelerator::StageWorkload>> Workload(const StageSettings& settings) const override {
    const auto& f = static_cast<const LlmFindingsStageSettings&>(settings);
    if (f.remote && !f.remote_fallback_local) return std::optional<accelerator::StageWorkload>();  // nothing local
    TXSCORE_ASSIGN_OR_RETURN(accelerator::DecoderShape shape, ShapeOf(f.model_dir));
    return std::optional<accelerator::StageWorkload>(FindingsWorkload(f, shape));
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings,
                                                 const PrepareContext& context) const override {
    const auto& f = static_cast<const LlmFindingsStageSettings&>(settings);
    const PipelineRuntime& runtime = *context.runtime;
    std::unique_ptr<RemoteLlm> remote;
    if (f.remote) {
      RemoteLlmOptions options = *f.remote;
      options.stage = f.name;
      if (runtime.clock) options.clock = runtime.clock;
      TXSCORE_ASSIGN_OR_RETURN(remote, RemoteLlm::Create(options));
      if (!f.remote_fallback_local) {
        return std::unique_ptr<PreparedStage>(new PreparedLlmFindingsStage(nullptr, std::move(remote), f));
      }
    }
    // One engine per checkpoint per process where that helps: on an accelerator the device is
    // what requests and jobs compete for (one engine, one batcher, requests first, and the
    // first pipeline's settings apply). On the CPU a background pipeline (jobs at idle
    // priority) gets its own engine, whose thread the OS runs only on cores requests leave.
    const std::string key = "llm_findings:" + f.model_dir;
    if (runtime.shared != nullptr) {
      auto shared = std::static_pointer_cast<ForensicStage>(runtime.shared->Find(key));
      if (shared != nullptr && (shared->device_name() != "cpu" || !runtime.background)) {
        return std::unique_ptr<PreparedStage>(new PreparedLlmFindingsStage(std::move(shared), std::move(remote), f));
      }
    }
    ForensicStageOptions options;
    options.stage = f.name;
    options.model_dir = f.model_dir;
    options.threads = f.compute_threads;
    options.max_new_tokens = f.max_new_tokens;
    options.max_batch = f.max_batch;
    options.max_wait_us = f.max_wait_us;
    options.cpu_quantization = f.quantization;
    options.cpu_kernels = f.cpu_kernels;
    options.background = runtime.background;
    if (runtime.clock) options.clock = runtime.clock;
    options.targets = {{"cpu", "cpu", f.dtype}};
    if (const accelerator::Placement* p = context.placement; p != nullptr && runtime.devices != nullptr) {
      const accelerator::Device* device = runtime.devices->Find(p->kind);
      options.targets = {{device->DisplayName(), device->torch_device, p->dtype, p->adapters}};
      for (const accelerator::Candidate& c : p->fallback_candidates) {
        options.targets.push_back({c.device, runtime.devices->Find(c.kind)->torch_device, *c.dtype, c.op_adapters});
      }
    }
    TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<ForensicStage> created,
                             ForensicStage::Create(options, runtime.load_decoder));
    std::shared_ptr<ForensicStage> engine = std::move(created);
    if (runtime.shared != nullptr && runtime.shared->Find(key) == nullptr) runtime.shared->Put(key, engine);
    return std::unique_ptr<PreparedStage>(new PreparedLlmFindingsStage(std::move(engine), std::move(remote), f));
  }

 private:
  StageKindSpec spec_;
};

}  // namespace

std::unique_ptr<StageKind> MakeLlmFindingsStageKind() { return std::make_unique<LlmFindingsStageKind>(); }

accelerator::StageWorkload FindingsWorkload(const LlmFindingsStageSettings& stage,
                                            const accelerator::DecoderShape& shape) {
  accelerator::StageWorkload work = accelerator::DecoderWorkload(stage.name, shape);
  // The configured dtype first; a device without it may still run the other.
  work.dtypes = {stage.dtype, stage.dtype == accelerator::Dtype::kFloat32 ? accelerator::Dtype::kBFloat16
                                                                          : accelerator::Dtype::kFloat32};
  work.expected_batch = stage.expected_batch;
  work.expected_tokens = stage.expected_tokens;
  return work;
}

ForensicStage* ForensicStageOf(const PreparedStage& stage) {
  const auto* llm = dynamic_cast<const PreparedLlmFindingsStage*>(&stage);
  return llm == nullptr ? nullptr : llm->engine();
}

const RemoteLlm* RemoteLlmOf(const PreparedStage& stage) {
  const auto* llm = dynamic_cast<const PreparedLlmFindingsStage*>(&stage);
  return llm == nullptr ? nullptr : llm->remote();
}

}  // namespace txscore::pipelines
