// Placement of a pipeline's model stages: each stage's work, sized from its model, put to the
// planner (accelerator/placement_planner.h) against the devices of this process.
#pragma once

#include <string>
#include <vector>

#include "accelerator/device.h"
#include "accelerator/discovery.h"
#include "accelerator/placement_planner.h"
#include "common/result.h"
#include "pipelines/config.h"

namespace txscore::pipelines {

struct PipelinePlan {
  std::vector<accelerator::Placement> stages;  // the xgboost stages in file order, then the llm_findings stage if any

  const accelerator::Placement* Find(const std::string& stage) const;
};

// Loads each fraud model to size its ensemble and reads the LLM checkpoint's config.json.
// Errors: a model that cannot be read, or a stage whose explicit placement cannot be met.
Result<PipelinePlan> PlanPipeline(const PipelineConfig& config, const accelerator::DeviceRegistry& devices);

// The plan for `config` on `devices` (null: no discovery ran; then every stage must be placed
// on cpu or auto, and the plan is empty), and the findings stage's settings with the device,
// dtype, adapters and fallbacks the plan chose for it.
struct PlacedStages {
  PipelinePlan plan;
  FindingsStageConfig findings;
};
Result<PlacedStages> PlaceStages(const PipelineConfig& config, const accelerator::DeviceRegistry* devices);

// What to look for, from the pipeline file's devices section; profiles per the LLM stage's threads.
accelerator::DiscoveryOptions DiscoveryOptionsFor(const PipelineConfig& config);

// The workloads PlanPipeline places, for tests and `txscore plan`.
accelerator::StageWorkload FindingsWorkload(const FindingsStageConfig& stage, const accelerator::DecoderShape& shape);

// What `txscore plan` prints: the devices (emulated ones marked), then per stage every
// candidate with its predicted time and why it was or was not chosen.
std::string FormatPlan(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices);
std::string PlanToJson(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices);

}  // namespace txscore::pipelines
