// Starts a ScoringServer the way `txscore serve` does: the settings file, then the pipeline
// file it names. Header-only: only tests that link txscore_service include it.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "pipelines/config.h"
#include "service/scoring_server.h"
#include "service/settings.h"

namespace txscore::testing {

// `settings_path`: e.g. TestSettingsPath(dir) after WriteTestPipeline(dir). Created, not started.
inline Result<std::unique_ptr<service::ScoringServer>> CreateTestServer(
    const std::string& settings_path, const pipelines::PipelineRuntime& runtime = {},
    const service::ScoringServer::Hooks& hooks = {}) {
  TXSCORE_ASSIGN_OR_RETURN(service::ServiceSettings settings, service::LoadServiceSettings(settings_path));
  TXSCORE_ASSIGN_OR_RETURN(pipelines::PipelineConfig config, pipelines::LoadPipelineConfig(settings.pipeline));
  return service::ScoringServer::Create(settings, config, runtime, hooks);
}

}  // namespace txscore::testing
