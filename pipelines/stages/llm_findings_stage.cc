#include "pipelines/stages/llm_findings_stage.h"

#include <algorithm>
#include <cstdio>

#include "common/logging.h"
#include "llm/model_config.h"

namespace txscore::pipelines {
namespace {

std::string Money(double amount) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f", amount);
  return text;
}

StageReport::Outcome OutcomeOf(ForensicResult::Outcome outcome) {
  switch (outcome) {
    case ForensicResult::Outcome::kAnalysed:
      return StageReport::Outcome::kDone;
    case ForensicResult::Outcome::kSkipped:
      return StageReport::Outcome::kSkipped;
    case ForensicResult::Outcome::kCutShort:
      return StageReport::Outcome::kCutShort;
    case ForensicResult::Outcome::kFailed:
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
  PreparedLlmFindingsStage(std::shared_ptr<ForensicStage> engine, const LlmFindingsStageSettings& settings)
      : engine_(std::move(engine)),
        name_(settings.name),
        max_batch_(settings.max_batch),
        model_dir_(settings.model_dir),
        budget_ms_(settings.budget_ms) {}

  // Inputs: score (port 0) and the model's reasons (port 1).
  Status Run(const StageInputs& inputs, const ScoredItem& item, StageOutputs* out, StageReport* report) const override {
    Report(engine_->Analyze(*item.transaction, inputs.Get(0)->score, inputs.Get(1)->reasons, item.deadline), out,
           report);
    return Status::Ok();
  }

  // Claims: submitted together, so they share forward passes; each waited for all of them.
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
    std::vector<ForensicResult> results = engine_->AnalyzeClaims(fields, deadline);
    const int64_t elapsed_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
    for (size_t k = 0; k < items.size(); ++k) {
      Report(std::move(results[k]), items[k].out, items[k].report);
      items[k].report->elapsed_us = elapsed_us;
    }
    return Status::Ok();
  }

  bool slow() const override { return true; }
  std::optional<uint64_t> device_fallbacks() const override { return engine_->device_fallbacks(); }
  std::optional<ModelVersion> model() const override {
    return ModelVersion{engine_->model_id(), engine_->model_version()};
  }
  int preferred_chunk() const override { return max_batch_; }
  std::string Describe() const override {
    return "findings from " + model_dir_ + " (version " + engine_->model_version() + ") on " + engine_->device_name() +
           " (budget " + std::to_string(budget_ms_) + " ms, batches of up to " + std::to_string(max_batch_) + ")";
  }
  ForensicStage* engine() const { return engine_.get(); }

 private:
  std::shared_ptr<ForensicStage> engine_;
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
                  "placement", "expected_batch", "expected_tokens", "max_batch",      "max_wait_us"};
    spec_.best_effort = true;
    spec_.default_when = "$sink.decision == REVIEW";
  }
  const StageKindSpec& spec() const override { return spec_; }

  Result<std::shared_ptr<const StageSettings>> Parse(const YamlReader& r, const YAML::Node& stage,
                                                     const StageDeclaration&) const override {
    auto f = std::make_shared<LlmFindingsStageSettings>();
    TXSCORE_RETURN_IF_ERROR(r.ReadPath(stage, "model", true, YamlReader::PathMustBe::kDirectory, &f->model_dir));
    std::string dtype = "float32";
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "dtype", false, &dtype));
    if (dtype != "float32" && dtype != "bfloat16") {
      return r.ErrorAt(stage["dtype"], "dtype must be \"float32\" or \"bfloat16\", not \"" + dtype + "\"");
    }
    f->dtype = *accelerator::ParseDtype(dtype);
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "threads", 0, 256, &f->compute_threads));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_new_tokens", 50, 4096, &f->max_new_tokens));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "budget_ms", 1, 600000, &f->budget_ms));
    TXSCORE_RETURN_IF_ERROR(ReadPlacement(r, stage, &f->placement));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_batch", 1, 4096, &f->expected_batch));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "expected_tokens", 1, 1 << 20, &f->expected_tokens));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_batch", 1, 1024, &f->max_batch));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(stage, "max_wait_us", 0, 10000000, &f->max_wait_us));
    return std::shared_ptr<const StageSettings>(std::move(f));
  }

  Result<std::optional<accelerator::StageWorkload>> Workload(const StageSettings& settings) const override {
    const auto& f = static_cast<const LlmFindingsStageSettings&>(settings);
    TXSCORE_ASSIGN_OR_RETURN(accelerator::DecoderShape shape, ShapeOf(f.model_dir));
    return std::optional<accelerator::StageWorkload>(FindingsWorkload(f, shape));
  }

  Result<std::unique_ptr<PreparedStage>> Prepare(const StageSettings& settings,
                                                 const PrepareContext& context) const override {
    const auto& f = static_cast<const LlmFindingsStageSettings&>(settings);
    const PipelineRuntime& runtime = *context.runtime;
    // One engine per checkpoint per process where that helps: on an accelerator the device is
    // what requests and jobs compete for (one engine, one batcher, requests first, and the
    // first pipeline's settings apply). On the CPU a background pipeline (jobs at idle
    // priority) gets its own engine, whose thread the OS runs only on cores requests leave.
    const std::string key = "llm_findings:" + f.model_dir;
    if (runtime.shared != nullptr) {
      auto shared = std::static_pointer_cast<ForensicStage>(runtime.shared->Find(key));
      if (shared != nullptr && (shared->device_name() != "cpu" || !runtime.background)) {
        return std::unique_ptr<PreparedStage>(new PreparedLlmFindingsStage(std::move(shared), f));
      }
    }
    ForensicStageOptions options;
    options.stage = f.name;
    options.model_dir = f.model_dir;
    options.threads = f.compute_threads;
    options.max_new_tokens = f.max_new_tokens;
    options.max_batch = f.max_batch;
    options.max_wait_us = f.max_wait_us;
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
    return std::unique_ptr<PreparedStage>(new PreparedLlmFindingsStage(std::move(engine), f));
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

llm::ClaimFields ClaimFieldsFor(const fraud::Claim& claim) {
  llm::ClaimFields f;
  f.claim_id = claim.claim_id;
  f.policy_id = claim.policy_id;
  f.claim_type = fraud::ClaimTypes()[static_cast<size_t>(claim.claim_type)];
  f.incident_date = claim.incident_date;
  f.report_date = claim.report_date;
  f.amount_claimed = Money(claim.amount_claimed);
  f.policy_limit = Money(claim.policy_limit);
  f.prior_claims = static_cast<int>(claim.prior_claims);
  f.provider_id = claim.provider_id;
  f.narrative = claim.narrative;
  f.adjuster_notes = claim.adjuster_notes;
  return f;
}

}  // namespace txscore::pipelines
