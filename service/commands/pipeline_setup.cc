#include "service/commands/pipeline_setup.h"

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

Result<LoadedPipeline> LoadPipelineAndDevices(const std::string& config_path) {
  Result<pipelines::PipelineConfig> config = pipelines::LoadPipelineConfig(config_path);
  if (!config.ok()) {
    Error e = config.error();
    e.message = "invalid pipeline file: " + e.message;
    return e;
  }
  Result<accelerator::DeviceRegistry> devices = accelerator::DiscoverDevices(pipelines::DiscoveryOptionsFor(*config));
  if (!devices.ok()) {
    Error e = devices.error();
    e.message = "device discovery failed: " + e.message;
    return e;
  }
  LoadedPipeline loaded;
  loaded.config = std::move(config).value();
  loaded.devices = std::make_unique<accelerator::DeviceRegistry>(std::move(devices).value());
  return loaded;
}

}  // namespace txscore::service
