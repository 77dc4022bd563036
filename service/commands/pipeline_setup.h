// What `txscore serve`, `batch run` and `plan` all do first: load the service settings and the
// pipeline file they name, set the process-wide compute thread counts from the pipeline and find
// this process's devices. Errors are Results; each command reports them in its own way.
#pragma once

#include <memory>
#include <string>

#include "accelerator/device.h"
#include "common/result.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "service/settings.h"

namespace txscore::service {

struct LoadedPipeline {
  ServiceSettings settings;
  pipelines::PipelineConfig config;                      // the pipeline settings.pipeline names
  std::unique_ptr<accelerator::DeviceRegistry> devices;  // stable address: the runtime points at it
  // What the pipelines get beyond the file: libtorch's decoder loader and these devices.
  pipelines::PipelineRuntime Runtime() const;
};

// kInvalidArgument / kNotFound for either file ("invalid settings file: ...", "invalid
// pipeline file: ..."), the discovery's error otherwise ("device discovery failed: ...").
Result<LoadedPipeline> LoadPipelineAndDevices(const std::string& settings_path);

}  // namespace txscore::service
