#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

const char* ItemKindName(ItemKind kind) { return kind == ItemKind::kTransaction ? "transactions" : "claims"; }

const char* OutcomeName(StageReport::Outcome outcome) {
  switch (outcome) {
    case StageReport::Outcome::kDone:
      return "done";
    case StageReport::Outcome::kSkipped:
      return "skipped";
    case StageReport::Outcome::kCutShort:
      return "cut_short";
    case StageReport::Outcome::kFailed:
      return "failed";
  }
  return "failed";
}

const StageOutputs* StageInputs::Get(size_t port) const {
  const std::vector<int>& from = stage_->inputs[port].stages;
  if (from.empty()) return nullptr;
  const StageOutputs& value = (*values_)[static_cast<size_t>(from[0])];
  return value.ran ? &value : nullptr;
}

Status PreparedStage::RunChunk(const std::vector<ChunkItem>& items) const {
  for (const ChunkItem& c : items) {
    const auto start = std::chrono::steady_clock::now();
    TXSCORE_RETURN_IF_ERROR(Run(c.inputs, c.item, c.out, c.report));
    c.report->elapsed_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
  }
  return Status::Ok();
}

std::shared_ptr<void> SharedStageResources::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : it->second.lock();
}

void SharedStageResources::Put(const std::string& key, std::shared_ptr<void> value) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_[key] = std::move(value);
}

Result<std::optional<accelerator::StageWorkload>> StageKind::Workload(const StageSettings&) const {
  return std::optional<accelerator::StageWorkload>();
}

std::vector<StageFile> StageKind::Files(const StageSettings&) const { return {}; }

Status ReadPlacement(const YamlReader& reader, const YAML::Node& stage, std::string* out) {
  TXSCORE_RETURN_IF_ERROR(reader.ReadString(stage, "placement", false, out));
  // Only the name's form is checked here: which kinds exist is known once devices are
  // discovered, and the planner says then what is absent and why.
  if (*out != "auto" && !accelerator::IsValidKindName(*out)) {
    return reader.ErrorAt(stage["placement"],
                          "placement must be auto or a device kind (cpu, cuda, or an out-of-tree "
                          "backend's kind such as spyre or emulated), not \"" +
                              *out + "\"");
  }
  return Status::Ok();
}

Status StageKindRegistry::Register(std::unique_ptr<StageKind> kind) {
  const std::string name = kind->spec().kind;
  if (!kinds_.emplace(name, std::move(kind)).second) {
    return FailedPrecondition("stage kind \"" + name + "\" is registered twice");
  }
  return Status::Ok();
}

const StageKind* StageKindRegistry::Find(std::string_view kind) const {
  auto it = kinds_.find(kind);
  return it == kinds_.end() ? nullptr : it->second.get();
}

std::vector<std::string> StageKindRegistry::Kinds() const {
  std::vector<std::string> kinds;
  for (const auto& [kind, object] : kinds_) kinds.push_back(kind);
  return kinds;
}

const StageKindRegistry& BuiltinStageKinds() {
  static const StageKindRegistry* const kinds = [] {
    auto* registry = new StageKindRegistry();
    RegisterBuiltinStageKinds(registry);
    return registry;
  }();
  return *kinds;
}

}  // namespace txscore::pipelines
