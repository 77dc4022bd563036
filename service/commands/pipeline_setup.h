// What `txscore serve`, `batch run` and `plan` all do first: load the pipeline file, set the
// process-wide compute thread counts from it and find this process's devices. Errors are Results; each command reports
// them in its own way.
#pragma once

#include <memory>
#include <string>

#include "accelerator/device.h"
#include "common/result.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"

namespace txscore::service {

struct LoadedPipeline {
  pipelines::PipelineConfig config;
  std::unique_ptr<accelerator::DeviceRegistry> devices;  // stable address: the runtime points at it
  // What the pipelines get beyond the file: libtorch's decoder loader and these devices.
  pipelines::PipelineRuntime Runtime() const;
};

// kInvalidArgument / kNotFound for the file ("invalid pipeline file: ..."), the discovery's
// error otherwise ("device discovery failed: ...").
Result<LoadedPipeline> LoadPipelineAndDevices(const std::string& config_path);

}  // namespace txscore::service
