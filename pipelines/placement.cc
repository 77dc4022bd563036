#include "pipelines/placement.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fraud/xgboost_model.h"
#include "llm/model_config.h"

namespace txscore::pipelines {
namespace {

std::string Time(double us) {
  char text[32];
  if (us >= 1e6) {
    std::snprintf(text, sizeof text, "%.2f s", us / 1e6);
  } else if (us >= 1e3) {
    std::snprintf(text, sizeof text, "%.2f ms", us / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.1f us", us);
  }
  return text;
}

std::string Rate(double per_s, const char* unit) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f G%s", per_s / 1e9, unit);
  return text;
}

}  // namespace

const accelerator::Placement* PipelinePlan::Find(const std::string& stage) const {
  for (const accelerator::Placement& p : stages) {
    if (p.stage == stage) return &p;
  }
  return nullptr;
}

accelerator::DiscoveryOptions DiscoveryOptionsFor(const PipelineConfig& config) {
  accelerator::DiscoveryOptions options;
  options.emulated = config.devices.emulated;
  options.emulated_model = config.devices.emulated_model;
  options.backend_library = config.devices.backend_library;
  options.backend_kind = accelerator::ParseDeviceKind(config.devices.backend_kind).value();  // checked at load
  options.calibration_cache = config.devices.calibration_cache;
  options.threads = config.findings.enabled && config.findings.threads > 0 ? config.findings.threads : 1;
  return options;
}

accelerator::StageWorkload FindingsWorkload(const FindingsStageConfig& stage, const accelerator::DecoderShape& shape) {
  accelerator::StageWorkload work = accelerator::DecoderWorkload(stage.name, shape);
  // The configured dtype first; a device without it may still run the other.
  work.dtypes = {stage.dtype, stage.dtype == "float32" ? "bfloat16" : "float32"};
  work.expected_batch = stage.expected_batch;
  work.expected_tokens = stage.expected_tokens;
  return work;
}

Result<PipelinePlan> PlanPipeline(const PipelineConfig& config, const accelerator::DeviceRegistry& devices) {
  PipelinePlan plan;
  for (const ModelStageConfig& stage : config.models) {
    fraud::XGBoostModelOptions model_options;
    model_options.schema_path = stage.schema_path;
    model_options.fast_evaluator = true;  // to size the ensemble
    Result<std::unique_ptr<fraud::XGBoostModel>> model = fraud::XGBoostModel::Load(stage.model_path, model_options);
    if (!model.ok()) return model.error();
    const int trees = static_cast<int>((*model)->num_trees());
    accelerator::StageWorkload tree_work = accelerator::TreeEnsembleWorkload(
        stage.name, trees > 0 ? trees : 1, (*model)->max_depth() > 0 ? (*model)->max_depth() : 6,
        static_cast<int>((*model)->schema().size()));
    Result<accelerator::Placement> tree_plan = accelerator::PlaceStage(tree_work, stage.placement, devices);
    if (!tree_plan.ok()) return tree_plan.error();
    plan.stages.push_back(std::move(tree_plan).value());
  }

  if (config.findings.enabled) {
    Result<llm::ModelConfig> llm = llm::LoadModelConfig(config.findings.model_dir);
    if (!llm.ok()) return llm.error();
    const accelerator::DecoderShape shape{llm->num_hidden_layers,   llm->hidden_size,         llm->intermediate_size,
                                          llm->num_attention_heads, llm->num_key_value_heads, llm->head_dim,
                                          llm->vocab_size,          llm->tie_word_embeddings};
    Result<accelerator::Placement> llm_plan =
        accelerator::PlaceStage(FindingsWorkload(config.findings, shape), config.findings.placement, devices);
    if (!llm_plan.ok()) return llm_plan.error();
    plan.stages.push_back(std::move(llm_plan).value());
  }
  return plan;
}

Result<PlacedStages> PlaceStages(const PipelineConfig& config, const accelerator::DeviceRegistry* devices) {
  PlacedStages placed;
  FindingsStageConfig& findings = placed.findings;
  findings = config.findings;
  if (devices == nullptr) {
    std::vector<std::pair<std::string, std::string>> placements;
    for (const ModelStageConfig& m : config.models) placements.emplace_back(m.name, m.placement);
    if (findings.enabled) placements.emplace_back(findings.name, findings.placement);
    for (const auto& [stage, placement] : placements) {
      if (placement != "cpu" && placement != "auto") {
        return FailedPrecondition("stage " + stage + ": placement \"" + placement +
                                  "\" needs device discovery, which this program did not run");
      }
    }
    return placed;
  }
  Result<PipelinePlan> plan = PlanPipeline(config, *devices);
  if (!plan.ok()) return plan.error();
  placed.plan = std::move(plan).value();
  if (const accelerator::Placement* p = placed.plan.Find(findings.name); p != nullptr && findings.enabled) {
    findings.device = devices->Find(p->kind)->torch_device;
    findings.device_name = devices->Find(p->kind)->DisplayName();
    findings.dtype = p->dtype;
    findings.adapters = p->adapters;
    for (const accelerator::Candidate& c : p->fallback_candidates) {
      findings.fallback.push_back({c.device, devices->Find(c.kind)->torch_device, c.dtype, c.op_adapters});
    }
  }
  return placed;
}

std::string FormatPlan(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices) {
  std::ostringstream out;
  out << "devices:\n";
  for (const accelerator::Device& d : devices.devices()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-22s dispatch %s, %s, memory %s, copy %s (%s)\n", d.DisplayName().c_str(),
                  Time(d.cost.dispatch_us).c_str(), Rate(d.cost.flops_per_s, "FLOP/s").c_str(),
                  Rate(d.cost.memory_bytes_per_s, "B/s").c_str(),
                  d.cost.copy_bytes_per_s > 0 ? Rate(d.cost.copy_bytes_per_s, "B/s").c_str() : "none",
                  d.cost.source.c_str());
    out << line;
  }
  for (const accelerator::AbsentDevice& a : devices.absent()) {
    out << "  " << accelerator::DeviceKindName(a.kind) << ": absent (" << a.reason << ")\n";
  }
  for (const accelerator::Placement& p : plan.stages) {
    out << "\nstage " << p.stage << " (placement: " << p.requested << ")\n";
    char header[256];
    std::snprintf(header, sizeof header, "  %-22s %-9s %10s %10s %10s %10s %10s  %s\n", "device", "dtype", "predicted",
                  "dispatch", "compute", "memory", "transfer", "note");
    out << header;
    for (const accelerator::Candidate& c : p.candidates) {
      char line[512];
      if (c.able) {
        std::string note;
        for (const std::string& a : c.adapters) note += (note.empty() ? "adapters: " : "; ") + a;
        std::snprintf(line, sizeof line, "  %-22s %-9s %10s %10s %10s %10s %10s  %s\n", c.device.c_str(),
                      c.dtype.c_str(), Time(c.predicted_us).c_str(), Time(c.dispatch_us).c_str(),
                      Time(c.compute_us).c_str(), Time(c.memory_us).c_str(), Time(c.transfer_us).c_str(), note.c_str());
      } else {
        std::snprintf(line, sizeof line, "  %-22s %-9s %10s %10s %10s %10s %10s  %s\n", c.device.c_str(), "-", "-", "-",
                      "-", "-", "-", c.why_not.c_str());
      }
      out << line;
    }
    out << "  -> " << p.device << (p.emulated ? " (emulated)" : "") << ", " << p.dtype << ": " << p.reason << "\n";
    if (!p.fallback.empty()) {
      out << "     fallback order:";
      for (const std::string& f : p.fallback) out << " " << f;
      out << "\n";
    }
  }
  return out.str();
}

std::string PlanToJson(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices) {
  nlohmann::json doc;
  doc["devices"] = nlohmann::json::array();
  for (const accelerator::Device& d : devices.devices()) {
    doc["devices"].push_back({{"name", d.name},
                              {"kind", accelerator::DeviceKindName(d.kind)},
                              {"emulated", d.emulated},
                              {"dtypes", d.dtypes},
                              {"memory_bytes", d.memory_bytes},
                              {"dispatch_us", d.cost.dispatch_us},
                              {"flops_per_s", d.cost.flops_per_s},
                              {"memory_bytes_per_s", d.cost.memory_bytes_per_s},
                              {"copy_bytes_per_s", d.cost.copy_bytes_per_s},
                              {"profile_source", d.cost.source}});
  }
  doc["absent"] = nlohmann::json::array();
  for (const accelerator::AbsentDevice& a : devices.absent()) {
    doc["absent"].push_back({{"kind", accelerator::DeviceKindName(a.kind)}, {"reason", a.reason}});
  }
  doc["stages"] = nlohmann::json::array();
  for (const accelerator::Placement& p : plan.stages) {
    nlohmann::json candidates = nlohmann::json::array();
    for (const accelerator::Candidate& c : p.candidates) {
      nlohmann::json j = {{"device", c.device}, {"able", c.able}};
      if (c.able) {
        j.update({{"dtype", c.dtype},
                  {"predicted_us", c.predicted_us},
                  {"dispatch_us", c.dispatch_us},
                  {"compute_us", c.compute_us},
                  {"memory_us", c.memory_us},
                  {"transfer_us", c.transfer_us},
                  {"adapters", c.adapters}});
      } else {
        j["why_not"] = c.why_not;
      }
      candidates.push_back(std::move(j));
    }
    doc["stages"].push_back({{"stage", p.stage},
                             {"requested", p.requested},
                             {"device", p.device},
                             {"emulated", p.emulated},
                             {"dtype", p.dtype},
                             {"reason", p.reason},
                             {"fallback", p.fallback},
                             {"candidates", std::move(candidates)}});
  }
  return doc.dump(2);
}

}  // namespace txscore::pipelines
