// A pipeline file (config/pipeline.yaml), loaded into typed structs: the pipeline's name and
// version, its deadline and its stages. The process's own settings (ports, storage, keys,
// devices, jobs) are not a pipeline's: they are in the service settings file that names the
// pipeline file (service/settings.h).
//
// Loading is strict: an unknown key, a value of the wrong type or out of range, or a file
// that does not exist is an error that names the YAML file, line and column. Relative paths
// in the file are resolved against the directory of the YAML file, so a config works from
// any working directory. Every field has the default written next to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "pipelines/stage_graph.h"
#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct PipelineConfig {
  std::string source_path;  // the YAML file this came from
  std::string source_text;  // its bytes, as parsed (the bundle digest covers them)
  // Not from the file: the bundle digest the service settings pin (`pipeline_digest`), set by
  // whoever loaded the settings; the pipeline is refused before its stages are prepared when its
  // files have another (bundle_digest.h). Default: none.
  std::string pinned_digest;
  std::string pinned_in;                      // the settings file that pins it, for the message
  std::string pinned_by = "pipeline_digest";  // the settings key that pins it, for the message
  // What the pipeline scores, fixed by its source stage: transactions (features; served by
  // `txscore serve`) or claims (claim_features; `txscore batch run` and the job RPCs).
  ItemKind items = ItemKind::kTransaction;
  std::string name = "transactions";
  std::string version = "1";  // reported in every ScoreResult and audit record
  // Default: 1500 ms. The deadline, from a request's arrival, of every stage that sets no
  // budget_ms of its own. A request may ask for less (Transaction.budget_ms): that caps every
  // stage's deadline. What happens at a deadline: see ScoringPipeline.
  int deadline_ms = 1500;
  // The stages as the file declares them, and the DAG they form (stage_graph.h); its sink is
  // the decision stage.
  std::vector<StageDeclaration> stages;
  StageGraph graph;
  // Each stage's kind and its own settings, indexed like `stages`.
  std::vector<const StageKind*> kinds;
  std::vector<std::shared_ptr<const StageSettings>> settings;

  // The settings of the stage named `name`, or null.
  const StageSettings* FindSettings(const std::string& name) const;
};

// `kinds` must outlive the config. Default: the builtin kinds.
Result<PipelineConfig> LoadPipelineConfig(const std::string& path,
                                          const StageKindRegistry& kinds = BuiltinStageKinds());
// For tests: parse YAML text as if it were the file `source_path`.
Result<PipelineConfig> ParsePipelineConfig(const std::string& yaml_text, const std::string& source_path,
                                           const StageKindRegistry& kinds = BuiltinStageKinds());

}  // namespace txscore::pipelines
