// Placement of a pipeline's stages: each stage whose kind describes its work (StageKind::
// Workload, sized from its model) is put to the planner (accelerator/placement_planner.h)
// against the devices of this process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "accelerator/device.h"
#include "accelerator/discovery.h"
#include "accelerator/placement_planner.h"
#include "common/result.h"
#include "pipelines/config.h"

namespace txscore::pipelines {

struct PipelinePlan {
  std::vector<accelerator::Placement> stages;  // the placed stages, in file order

  const accelerator::Placement* Find(const std::string& stage) const;
};

// Sizes each placed stage's work (loading its model or reading its checkpoint's config.json)
// and places it. Errors: a model that cannot be read, or an explicit placement that cannot
// be met.
Result<PipelinePlan> PlanPipeline(const PipelineConfig& config, const accelerator::DeviceRegistry& devices);

// The plan for `config` on `devices`; null: no discovery ran, every stage must be placed on
// cpu or auto, and the plan is empty.
Result<PipelinePlan> PlaceStages(const PipelineConfig& config, const accelerator::DeviceRegistry* devices);

// Each stage of `config` prepared by its kind (models loaded, rules compiled), indexed like
// config.graph; `plan` says where the placed ones run.
Result<std::vector<std::unique_ptr<PreparedStage>>> PrepareStages(const PipelineConfig& config,
                                                                  const PipelinePlan& plan,
                                                                  const PipelineRuntime& runtime);

// The most compute threads any stage asks for (at least 1): the count the process's devices
// are profiled with (accelerator::DiscoveryOptions::threads).
int MostComputeThreads(const PipelineConfig& config);

// What `txscore plan` prints: the devices (emulated ones marked), then per stage every
// candidate with its predicted time and why it was or was not chosen.
std::string FormatPlan(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices);
std::string PlanToJson(const PipelinePlan& plan, const accelerator::DeviceRegistry& devices);

}  // namespace txscore::pipelines
