// Workload-fit placement: which device should run a stage, and why.
//
// A stage declares its work (FLOPs, memory traffic, host<->device transfers and resident bytes
// as a function of batch size and tokens), the dtypes it can run in and the ops it needs. For
// each device the planner predicts
//
//   dispatch_us + max(flops / flops_per_s, memory_bytes / memory_bytes_per_s) + transfer_bytes / copy_bytes_per_s
//
// at the stage's expected batch and tokens, after checking that the device has every op
// (natively or through an op adapter, accelerator/op_adapters.h), a usable dtype and the memory. `auto` takes the least
// predicted time; an explicit kind must be present and able, or the plan is an error that
// says why. The remaining able devices, fastest first, are the fallback order.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "accelerator/device.h"
#include "accelerator/op_adapters.h"
#include "common/result.h"

namespace txscore::accelerator {

struct WorkEstimate {
  double flops = 0;
  double memory_bytes = 0;    // device-memory traffic: weights streamed, caches read and written
  double transfer_bytes = 0;  // inputs in and outputs out, host <-> device
  double resident_bytes = 0;  // what must fit in device memory at once
};

struct StageWorkload {
  std::string stage;
  std::vector<Dtype> dtypes;  // what the stage can run in, preferred first
  std::set<std::string> ops;  // from accelerator::ops
  // Work of one call at `batch` items of `tokens` tokens each; `dtype_bytes` is the size of
  // the dtype chosen for the device (4 for float32, 2 for bfloat16/float16).
  std::function<WorkEstimate(int batch, int tokens, int dtype_bytes)> estimate;
  int64_t vocab = 0;        // for the vocabulary-padding adapter; 0: not a language model
  int64_t head_dim = 0;     // for the head_dim-padding adapter; 0: no attention
  int expected_batch = 1;   // Default: 1
  int expected_tokens = 1;  // Default: 1
};

// A tree ensemble: branchy, tiny, and only the CPU walks trees natively.
StageWorkload TreeEnsembleWorkload(const std::string& stage, int trees, int max_depth, int features);

// A decoder-only transformer processing `tokens` tokens per sequence (prefill) for `batch`
// sequences. Shapes as in config.json.
struct DecoderShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool tied_embeddings = true;
};
StageWorkload DecoderWorkload(const std::string& stage, const DecoderShape& shape);
double DecoderParameters(const DecoderShape& shape);

struct Candidate {
  std::string device;  // display name ("emulated:0 (emulated)"), or the kind when absent
  std::string kind = kCpuKind;
  bool able = false;
  std::string why_not;                // when not able: absent, no dtype, missing op, not enough memory
  std::optional<Dtype> dtype;         // the first of the stage's dtypes the device supports
  OpAdapters op_adapters;             // op adapters the stage would use there
  std::vector<std::string> adapters;  // the same, described
  double dispatch_us = 0, compute_us = 0, memory_us = 0, transfer_us = 0;
  double predicted_us = 0;
};

struct Placement {
  std::string stage;
  std::string requested;  // "auto" or a device kind
  std::string device;     // the chosen device's name, e.g. "cpu"
  std::string kind = kCpuKind;
  Dtype dtype = Dtype::kFloat32;
  OpAdapters adapters;  // what the stage must use on the chosen device
  bool emulated = false;
  std::string reason;
  std::vector<Candidate> candidates;           // present devices in registry order, then absent kinds
  std::vector<std::string> fallback;           // other able devices, fastest first
  std::vector<Candidate> fallback_candidates;  // the same, with dtype and adapters
};

// `requested` is "auto" or a device kind name. Errors (kFailedPrecondition) name the stage, the
// requested device and why it cannot be used: the registry's absence reason, or, for a kind
// nobody registered or looked for, the kinds the registry knows.
Result<Placement> PlaceStage(const StageWorkload& work, std::string_view requested, const DeviceRegistry& devices);

}  // namespace txscore::accelerator
