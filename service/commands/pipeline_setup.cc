#include "service/commands/pipeline_setup.h"

#include "accelerator/compute_threads.h"
#include "accelerator/discovery.h"
#include "llm/decoder.h"
#include "pipelines/placement.h"

namespace txscore::service {

pipelines::PipelineRuntime LoadedPipeline::Runtime() const {
  pipelines::PipelineRuntime runtime;
  runtime.load_decoder = llm::Decoder::Load;
  runtime.devices = devices.get();
  return runtime;
}

Result<LoadedPipeline> LoadPipelineAndDevices(const std::string& settings_path) {
  Result<ServiceSettings> settings = LoadServiceSettings(settings_path);
  if (!settings.ok()) {
    Error e = settings.error();
    e.message = "invalid settings file: " + e.message;
    return e;
  }
  Result<pipelines::PipelineConfig> config = pipelines::LoadPipelineConfig(settings->pipeline);
  if (!config.ok()) {
    Error e = config.error();
    e.message = "invalid pipeline file: " + e.message;
    return e;
  }
  config->pinned_digest = settings->pipeline_digest;
  config->pinned_in = settings->source_path;
  accelerator::DiscoveryOptions discovery;
  discovery.backend = settings->devices.backend;
  discovery.calibration_cache = settings->devices.calibration_cache;
  // The process-wide thread counts (OpenBLAS's pool, libtorch's count for new threads), set once
  // here from the pipeline: the most threads any stage asks for (default 1). Each decoder sets
  // its own stage's count on its own thread for its own work (llm::DecoderOptions::threads).
  discovery.threads = pipelines::MostComputeThreads(*config);
  accelerator::SetComputeThreads(discovery.threads);
  Result<accelerator::DeviceRegistry> devices = accelerator::DiscoverDevices(discovery);
  if (!devices.ok()) {
    Error e = devices.error();
    e.message = "device discovery failed: " + e.message;
    return e;
  }
  LoadedPipeline loaded;
  loaded.settings = std::move(settings).value();
  loaded.config = std::move(config).value();
  loaded.devices = std::make_unique<accelerator::DeviceRegistry>(std::move(devices).value());
  return loaded;
}

}  // namespace txscore::service
