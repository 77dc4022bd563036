// txscore plan --config SETTINGS: where each model stage of a pipeline would run, and why.
#include <iostream>

#include "accelerator/discovery.h"
#include "pipelines/config.h"
#include "pipelines/placement.h"
#include "service/commands/commands.h"
#include "service/commands/pipeline_setup.h"

namespace txscore::service {
namespace {

struct PlanOptions {
  std::string config_path = "config/txscore.yaml";
  bool json = false;
};

int RunPlan(const PlanOptions& options) {
  Result<LoadedPipeline> loaded = LoadPipelineAndDevices(options.config_path);
  if (!loaded.ok()) {
    std::cerr << loaded.error().ToString() << "\n";
    return 1;
  }
  const pipelines::PipelineConfig* config = &loaded->config;
  const accelerator::DeviceRegistry* devices = loaded->devices.get();
  Result<pipelines::PipelinePlan> plan = pipelines::PlanPipeline(*config, *devices);
  if (!plan.ok()) {
    std::cerr << "cannot place the pipeline: " << plan.error().ToString() << "\n";
    return 1;
  }
  std::cout << (options.json ? pipelines::PlanToJson(*plan, *devices) + "\n" : pipelines::FormatPlan(*plan, *devices));
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Show where each stage of a pipeline runs: every device, its predicted time, the choice and why");
  cmd->add_option("--config", options->config_path,
                  "Service settings file: its devices, and the pipeline file it names")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print the plan as JSON");
  cmd->callback([options, exit_code] { *exit_code = RunPlan(*options); });
}

}  // namespace txscore::service
