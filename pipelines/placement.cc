#include "pipelines/placement.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

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

int MostComputeThreads(const PipelineConfig& config) {
  int threads = 1;
  for (const auto& stage : config.settings) threads = std::max(threads, stage->compute_threads);
  return threads;
}

Result<PipelinePlan> PlanPipeline(const PipelineConfig& config, const accelerator::DeviceRegistry& devices) {
  PipelinePlan plan;
  for (size_t i = 0; i < config.settings.size(); ++i) {
    const StageSettings& settings = *config.settings[i];
    TXSCORE_ASSIGN_OR_RETURN(std::optional<accelerator::StageWorkload> work, config.kinds[i]->Workload(settings));
    if (!work) continue;
    TXSCORE_ASSIGN_OR_RETURN(accelerator::Placement placed,
                             accelerator::PlaceStage(*work, settings.placement, devices));
    plan.stages.push_back(std::move(placed));
  }
  return plan;
}

Result<PipelinePlan> PlaceStages(const PipelineConfig& config, const accelerator::DeviceRegistry* devices) {
  if (devices != nullptr) return PlanPipeline(config, *devices);
  for (const auto& stage : config.settings) {
    if (stage->placement != "cpu" && stage->placement != "auto") {
      return FailedPrecondition("stage " + stage->name + ": placement \"" + stage->placement +
                                "\" needs device discovery, which this program did not run");
    }
  }
  return PipelinePlan{};
}

Result<std::vector<std::unique_ptr<PreparedStage>>> PrepareStages(const PipelineConfig& config,
                                                                  const PipelinePlan& plan,
                                                                  const PipelineRuntime& runtime) {
  std::vector<std::unique_ptr<PreparedStage>> stages;
  for (size_t i = 0; i < config.settings.size(); ++i) {
    PrepareContext context;
    context.items = config.items;
    context.stage = &config.graph.stage(static_cast<int>(i));
    context.placement = plan.Find(config.settings[i]->name);
    context.runtime = &runtime;
    TXSCORE_ASSIGN_OR_RETURN(std::unique_ptr<PreparedStage> prepared,
                             config.kinds[i]->Prepare(*config.settings[i], context));
    stages.push_back(std::move(prepared));
  }
  return stages;
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
    out << "  " << a.kind << ": absent (" << a.reason << ")\n";
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
                      accelerator::DtypeName(*c.dtype), Time(c.predicted_us).c_str(), Time(c.dispatch_us).c_str(),
                      Time(c.compute_us).c_str(), Time(c.memory_us).c_str(), Time(c.transfer_us).c_str(), note.c_str());
      } else {
        std::snprintf(line, sizeof line, "  %-22s %-9s %10s %10s %10s %10s %10s  %s\n", c.device.c_str(), "-", "-", "-",
                      "-", "-", "-", c.why_not.c_str());
      }
      out << line;
    }
    out << "  -> " << p.device << (p.emulated ? " (emulated)" : "") << ", " << accelerator::DtypeName(p.dtype) << ": "
        << p.reason << "\n";
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
    std::vector<std::string> dtypes;
    for (accelerator::Dtype dtype : d.dtypes) dtypes.push_back(accelerator::DtypeName(dtype));
    doc["devices"].push_back({{"name", d.name},
                              {"kind", d.kind},
                              {"index", d.index},
                              {"emulated", d.emulated},
                              {"description", d.description},
                              {"dtypes", dtypes},
                              {"native_ops", d.native_ops},
                              {"memory_bytes", d.memory_bytes},
                              {"alignment", d.alignment},
                              {"dispatch_us", d.cost.dispatch_us},
                              {"flops_per_s", d.cost.flops_per_s},
                              {"memory_bytes_per_s", d.cost.memory_bytes_per_s},
                              {"copy_bytes_per_s", d.cost.copy_bytes_per_s},
                              {"profile_source", d.cost.source}});
  }
  doc["absent"] = nlohmann::json::array();
  for (const accelerator::AbsentDevice& a : devices.absent()) {
    doc["absent"].push_back({{"kind", a.kind}, {"reason", a.reason}});
  }
  doc["stages"] = nlohmann::json::array();
  for (const accelerator::Placement& p : plan.stages) {
    nlohmann::json candidates = nlohmann::json::array();
    for (const accelerator::Candidate& c : p.candidates) {
      nlohmann::json j = {{"device", c.device}, {"able", c.able}};
      if (c.able) {
        j.update({{"dtype", accelerator::DtypeName(*c.dtype)},
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
                             {"dtype", accelerator::DtypeName(p.dtype)},
                             {"reason", p.reason},
                             {"fallback", p.fallback},
                             {"candidates", std::move(candidates)}});
  }
  return doc.dump(2);
}

}  // namespace txscore::pipelines
