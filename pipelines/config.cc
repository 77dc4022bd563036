#include "pipelines/config.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "common/file_io.h"

namespace txscore::pipelines {
namespace {

namespace fs = std::filesystem;

using Reader = YamlReader;

SourceLocation LocationOf(const YAML::Node& node) { return YamlReader::LocationOf(node); }

// The keys every stage may have; each kind adds its own.
const std::set<std::string>& CommonStageKeys() {
  static const std::set<std::string> keys = {"name", "kind", "after", "inputs", "when"};
  return keys;
}

Status ExpectStageKeys(const Reader& r, const YAML::Node& stage, const std::string& name,
                       const std::set<std::string>& kind_keys) {
  std::set<std::string> allowed = CommonStageKeys();
  allowed.insert(kind_keys.begin(), kind_keys.end());
  return r.ExpectMap(stage, "stage " + name, allowed);
}

// name, kind, after (one name or a list), inputs ({input: stage.output}), when.
Status ParseStageDeclaration(const Reader& r, const YAML::Node& stage, StageDeclaration* d) {
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "name", true, &d->name));
  TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "kind", true, &d->kind));
  d->at = LocationOf(stage);
  if (const YAML::Node after = stage["after"]) {
    d->after_at = LocationOf(after);
    if (after.IsScalar() && !after.Scalar().empty()) {
      d->after.push_back(after.Scalar());
    } else if (after.IsSequence() && after.size() > 0) {
      for (const YAML::Node& item : after) {
        if (!item.IsScalar() || item.Scalar().empty()) return r.ErrorAt(item, "after: each entry must be a stage name");
        d->after.push_back(item.Scalar());
      }
    } else {
      return r.ErrorAt(after, "after: must be a stage name or a list of stage names");
    }
  }
  if (const YAML::Node inputs = stage["inputs"]) {
    d->inputs_at = LocationOf(inputs);
    if (!inputs.IsMap()) return r.ErrorAt(inputs, "inputs: must be a mapping from input to STAGE.OUTPUT");
    for (const auto& entry : inputs) {
      if (!entry.second.IsScalar() || entry.second.Scalar().find('.') == std::string::npos) {
        return r.ErrorAt(entry.second, "inputs: " + entry.first.Scalar() + " must name STAGE.OUTPUT");
      }
      d->inputs[entry.first.Scalar()] = entry.second.Scalar();
    }
  }
  if (const YAML::Node when = stage["when"]) {
    TXSCORE_RETURN_IF_ERROR(r.ReadString(stage, "when", false, &d->when));
    d->when_at = LocationOf(when);
  }
  return Status::Ok();
}

// The stages: each kind reads its own keys, then the DAG they form is checked as a whole.
Status ParseStages(const Reader& r, const YAML::Node& node, const StageKindRegistry& kinds, PipelineConfig* out) {
  if (!node.IsSequence() || node.size() == 0) return r.ErrorAt(node, "stages must be a list of stages");
  std::vector<YAML::Node> entries;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node stage = node[i];
    if (!stage.IsMap()) return r.ErrorAt(stage, "a stage must be a mapping");
    StageDeclaration d;
    TXSCORE_RETURN_IF_ERROR(ParseStageDeclaration(r, stage, &d));
    out->stages.push_back(std::move(d));
    entries.push_back(stage);
  }
  // The graph first: an unknown kind is reported with the known ones, before its keys are read.
  Result<StageGraph> graph = StageGraph::Build(out->stages, kinds, r.source());
  if (!graph.ok()) return graph.error();
  out->graph = std::move(graph).value();

  std::optional<ItemKind> items;  // what the pipeline scores, from the first stage that says
  std::string items_stage;
  for (size_t i = 0; i < out->stages.size(); ++i) {
    const StageDeclaration& d = out->stages[i];
    const StageKind* kind = kinds.Find(d.kind);
    const StageKindSpec& spec = kind->spec();
    TXSCORE_RETURN_IF_ERROR(ExpectStageKeys(r, entries[i], d.name, spec.keys));
    TXSCORE_ASSIGN_OR_RETURN(std::shared_ptr<const StageSettings> parsed, kind->Parse(r, entries[i], d));
    // The kind filled its own fields; the name and location are the declaration's.
    auto settings = std::const_pointer_cast<StageSettings>(parsed);
    settings->name = d.name;
    settings->at = d.at;
    out->kinds.push_back(kind);
    out->settings.push_back(std::move(settings));
    if (spec.transactions == spec.claims) continue;
    const ItemKind stage_items = spec.transactions ? ItemKind::kTransaction : ItemKind::kClaim;
    if (items && *items != stage_items) {
      return r.ErrorAt(entries[i], "a pipeline scores transactions or claims, not both: stage \"" + items_stage +
                                       "\" reads " + ItemKindName(*items) + ", \"" + d.name + "\" (" + d.kind + ") " +
                                       ItemKindName(stage_items));
    }
    items = stage_items;
    items_stage = d.name;
  }
  if (!items) {
    std::string sources;
    for (const std::string& k : kinds.Kinds()) {
      const StageKindSpec& spec = kinds.Find(k)->spec();
      if (spec.transactions != spec.claims) sources += (sources.empty() ? "" : " or ") + k;
    }
    return r.ErrorAt(node, "a pipeline needs a stage that reads what it scores (" + sources + ")");
  }
  out->items = *items;
  return Status::Ok();
}

Result<PipelineConfig> Parse(const YAML::Node& root, const Reader& r, const std::string& source_path,
                             const StageKindRegistry& kinds) {
  // A pipeline file of earlier versions held the service's settings too: say where they went.
  if (root.IsMap()) {
    for (const char* section : {"server", "admin", "storage", "security", "devices", "jobs"}) {
      if (const YAML::Node node = root[section]) {
        return r.ErrorAt(node, std::string("\"") + section +
                                   "\" is a service setting, not a pipeline's: move it to the settings file that "
                                   "names this pipeline (config/txscore.yaml: `pipeline: FILE`; service/settings.h)");
      }
    }
  }
  TXSCORE_RETURN_IF_ERROR(r.ExpectMap(root, "the pipeline file", {"pipeline", "stages"}));
  PipelineConfig config;
  config.source_path = source_path;
  if (const YAML::Node p = root["pipeline"]) {
    TXSCORE_RETURN_IF_ERROR(r.ExpectMap(p, "pipeline", {"name", "version", "deadline_ms"}));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(p, "name", false, &config.name));
    TXSCORE_RETURN_IF_ERROR(r.ReadInt(p, "deadline_ms", 1, 600000, &config.deadline_ms));
    TXSCORE_RETURN_IF_ERROR(r.ReadString(p, "version", false, &config.version));
  }
  const YAML::Node stages = root["stages"];
  if (!stages) return r.ErrorAt(root, "missing required key \"stages\"");
  TXSCORE_RETURN_IF_ERROR(ParseStages(r, stages, kinds, &config));
  return config;
}

}  // namespace

const StageSettings* PipelineConfig::FindSettings(const std::string& stage_name) const {
  for (const auto& s : settings) {
    if (s->name == stage_name) return s.get();
  }
  return nullptr;
}

Result<PipelineConfig> ParsePipelineConfig(const std::string& yaml_text, const std::string& source_path,
                                           const StageKindRegistry& kinds) {
  Reader reader(source_path, fs::path(source_path).parent_path());
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsDefined() || root.IsNull()) return InvalidArgument(source_path + ": the file is empty");
    TXSCORE_ASSIGN_OR_RETURN(PipelineConfig config, Parse(root, reader, source_path, kinds));
    config.source_text = yaml_text;
    return config;
  } catch (const YAML::Exception& e) {
    return reader.ParseFailure(yaml_text, e);
  }
}

Result<PipelineConfig> LoadPipelineConfig(const std::string& path, const StageKindRegistry& kinds) {
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "pipeline file");
  if (!text.ok()) return text.error();
  return ParsePipelineConfig(*text, path, kinds);
}

}  // namespace txscore::pipelines
