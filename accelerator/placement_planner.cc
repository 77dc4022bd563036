#include "accelerator/placement_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace txscore::accelerator {
namespace {

std::string Megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

// Fills in the prediction for an able device, or why_not.
Candidate Evaluate(const StageWorkload& work, const Device& device) {
  Candidate c;
  c.device = device.DisplayName();
  c.kind = device.kind;
  std::vector<std::string> missing;
  c.op_adapters = ChooseAdapters(work.ops, device.native_ops, &missing, work.vocab, device.alignment, work.head_dim);
  if (!missing.empty()) {
    c.why_not = "cannot run op " + missing.front();
    return c;
  }
  c.adapters = c.op_adapters.Describe();
  for (Dtype dtype : work.dtypes) {
    if (device.Supports(dtype)) {
      c.dtype = dtype;
      break;
    }
  }
  if (!c.dtype) {
    c.why_not = "supports none of the stage's dtypes";
    return c;
  }
  const WorkEstimate w = work.estimate(work.expected_batch, work.expected_tokens, DtypeBytes(*c.dtype));
  if (device.memory_bytes > 0 && w.resident_bytes > static_cast<double>(device.memory_bytes)) {
    c.why_not = "needs " + Megabytes(w.resident_bytes) + " of memory, has " +
                Megabytes(static_cast<double>(device.memory_bytes));
    return c;
  }
  const CostProfile& p = device.cost;
  c.dispatch_us = p.dispatch_us;
  c.compute_us = p.flops_per_s > 0 ? w.flops / p.flops_per_s * 1e6 : 0;
  c.memory_us = p.memory_bytes_per_s > 0 ? w.memory_bytes / p.memory_bytes_per_s * 1e6 : 0;
  c.transfer_us = p.copy_bytes_per_s > 0 ? w.transfer_bytes / p.copy_bytes_per_s * 1e6 : 0;
  c.predicted_us = c.dispatch_us + std::max(c.compute_us, c.memory_us) + c.transfer_us;
  c.able = true;
  return c;
}

std::string Microseconds(double us) {
  char text[32];
  if (us >= 1e4) {
    std::snprintf(text, sizeof text, "%.1f ms", us / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.1f us", us);
  }
  return text;
}

}  // namespace

StageWorkload TreeEnsembleWorkload(const std::string& stage, int trees, int max_depth, int features) {
  StageWorkload w;
  w.stage = stage;
  w.dtypes = {Dtype::kFloat32};
  w.ops = {ops::kTreeWalk};
  // One comparison per level per tree; the nodes visited are the memory traffic.
  w.estimate = [trees, max_depth, features](int batch, int, int) {
    WorkEstimate e;
    e.flops = static_cast<double>(batch) * trees * max_depth;
    e.memory_bytes = static_cast<double>(batch) * trees * max_depth * 16.0;  // ~16 bytes per node
    e.transfer_bytes = static_cast<double>(batch) * (features + 1) * 4.0;
    e.resident_bytes = static_cast<double>(trees) * ((1 << std::min(max_depth, 20)) * 2) * 16.0;
    return e;
  };
  return w;
}

double DecoderParameters(const DecoderShape& s) {
  const double attention = static_cast<double>(s.hidden) * s.heads * s.head_dim * 2 +    // q, o
                           static_cast<double>(s.hidden) * s.kv_heads * s.head_dim * 2;  // k, v
  const double mlp = 3.0 * static_cast<double>(s.hidden) * s.intermediate;
  const double embeddings = static_cast<double>(s.vocab) * s.hidden * (s.tied_embeddings ? 1 : 2);
  return static_cast<double>(s.layers) * (attention + mlp) + embeddings;
}

StageWorkload DecoderWorkload(const std::string& stage, const DecoderShape& shape) {
  StageWorkload w;
  w.stage = stage;
  w.dtypes = {Dtype::kBFloat16, Dtype::kFloat32};
  w.ops = {ops::kMatmul, ops::kSoftmax, ops::kRmsNorm, ops::kRope, ops::kEmbedding, ops::kActivation};
  w.vocab = shape.vocab;
  w.head_dim = shape.head_dim;
  w.estimate = [shape](int batch, int tokens, int dtype_bytes) {
    const double b = batch, t = tokens;
    const double per_token_weights = DecoderParameters(shape) - static_cast<double>(shape.vocab) * shape.hidden;
    WorkEstimate e;
    // Matrix products: 2 FLOPs per weight per token, plus the LM head for the last token of
    // each sequence, plus causal attention (QK^T and AV, half the T x T square).
    e.flops = 2.0 * per_token_weights * b * t + 2.0 * shape.vocab * shape.hidden * b +
              2.0 * shape.layers * b * t * t * shape.heads * shape.head_dim;
    const double kv_bytes = 2.0 * shape.layers * b * t * shape.kv_heads * shape.head_dim * dtype_bytes;
    const double weight_bytes = DecoderParameters(shape) * dtype_bytes;
    e.memory_bytes = weight_bytes + kv_bytes;
    e.transfer_bytes = b * t * 4.0 + b * shape.vocab * 4.0;  // token ids in, last logits out
    e.resident_bytes = weight_bytes + kv_bytes;
    return e;
  };
  return w;
}

Result<Placement> PlaceStage(const StageWorkload& work, std::string_view requested, const DeviceRegistry& devices) {
  Placement plan;
  plan.stage = work.stage;
  plan.requested = std::string(requested);
  std::optional<std::string> wanted;
  if (requested != "auto") wanted = std::string(requested);
  for (const Device& device : devices.devices()) plan.candidates.push_back(Evaluate(work, device));
  for (const AbsentDevice& absent : devices.absent()) {
    Candidate c;
    c.device = absent.kind;
    c.kind = absent.kind;
    c.why_not = "absent: " + absent.reason;
    plan.candidates.push_back(std::move(c));
  }

  std::vector<const Candidate*> able;
  for (const Candidate& c : plan.candidates) {
    if (c.able) able.push_back(&c);
  }
  std::stable_sort(able.begin(), able.end(),
                   [](const Candidate* a, const Candidate* b) { return a->predicted_us < b->predicted_us; });

  const Candidate* chosen = nullptr;
  if (wanted) {
    const Device* device = devices.Find(*wanted);
    if (device == nullptr) {
      std::string why = devices.AbsenceReason(*wanted);
      if (why.empty()) {
        std::string known;
        for (const std::string& kind : devices.Kinds()) known += (known.empty() ? "" : ", ") + kind;
        why = "no device of that kind was registered (known kinds: " + known + ")";
      }
      return FailedPrecondition("stage " + work.stage + ": placement \"" + plan.requested +
                                "\" names a device that is not available: " + why);
    }
    for (const Candidate& c : plan.candidates) {
      if (c.kind == *wanted && c.device == device->DisplayName()) chosen = &c;
    }
    if (!chosen->able) {
      return FailedPrecondition("stage " + work.stage + ": placement \"" + plan.requested + "\": " + chosen->device +
                                " " + chosen->why_not);
    }
    plan.reason = "placement names " + plan.requested;
  } else {
    if (able.empty()) return FailedPrecondition("stage " + work.stage + ": no available device can run it");
    chosen = able.front();
    plan.reason = "least predicted time (" + Microseconds(chosen->predicted_us) + ") at batch " +
                  std::to_string(work.expected_batch) + ", " + std::to_string(work.expected_tokens) + " tokens";
    if (able.size() > 1) {
      plan.reason += "; next: " + able[1]->device + " " + Microseconds(able[1]->predicted_us);
    }
  }
  plan.kind = chosen->kind;
  plan.dtype = *chosen->dtype;
  plan.adapters = chosen->op_adapters;
  for (const Device& d : devices.devices()) {
    if (d.DisplayName() == chosen->device) {
      plan.device = d.name;
      plan.emulated = d.emulated;
    }
  }
  for (const Candidate* c : able) {
    if (c == chosen) continue;
    plan.fallback.push_back(c->device);
    plan.fallback_candidates.push_back(*c);
  }
  return plan;
}

}  // namespace txscore::accelerator
