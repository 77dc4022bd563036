// The llm_findings stage kind: an LLM reads an item its `when` selects and writes structured
// findings (llm/claim_analysis.h). On the transaction path it reads the transaction, the
// score and the model's reasons (transaction review); on the batch path, the claim (claim
// analysis), with the chunk's selected claims submitted together. Best effort: a failure or a
// deadline leaves the item without findings, reported degraded, and the decision stands.
// The engine itself (batching, device fallback) is pipelines/forensic_stage.h.
//
//   - {name: forensic, kind: llm_findings, after: decision, model: ../var/models/llm-tiny}
//
// Without `when:`, it runs for REVIEW decisions ("<decision>.decision == REVIEW").
// Keys (defaults beside them):
//   model            required: a Hugging Face checkpoint directory
//   dtype            Default: float32; or bfloat16
//   quantization     Default: none; int8 (int8 weights, needs dtype bfloat16 on the CPU)
//   cpu_kernels      Default: true: on the CPU, decode steps in bfloat16 or int8 run txscore's
//                    own kernels (llm/cpu_kernels/); false keeps libtorch's ops
//   threads          Default: 1 libtorch thread (0: libtorch's choice), leaving cores to scoring
//   max_new_tokens   Default: 96; the findings schema needs at least 50
//   budget_ms        Default: 1500 ms from the request's arrival, unless the request asks for
//                    less; output still unfinished then is dropped (degraded)
//   placement        Default: cpu. auto picks the device with the least predicted time at the
//                    expected batch and tokens below
//   expected_batch   Default: 1 request at a time
//   expected_tokens  Default: 512 tokens per request (prompt and findings)
//   max_batch        Default: the dynamic batcher runs up to 8 requests together
//   max_wait_us      Default: waiting up to 2 ms after the first for more
//   placement: remote, with a `remote:` map: the work goes to an OpenAI-compatible server
//                    (keys and defaults in pipelines/remote_llm.h); `model` is then needed only
//                    for a local fallback (`fallback:` cpu, auto or a device kind)
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "accelerator/placement_planner.h"
#include "fraud/claim.h"
#include "llm/claim_analysis.h"
#include "pipelines/forensic_stage.h"
#include "pipelines/remote_llm.h"
#include "pipelines/stage_kind.h"

namespace txscore::pipelines {

struct LlmFindingsStageSettings : StageSettings {
  LlmFindingsStageSettings() {
    budget_ms = 1500;
    compute_threads = 1;
  }
  std::string model_dir;
  accelerator::Dtype dtype = accelerator::Dtype::kFloat32;  // float32 or bfloat16
  int max_new_tokens = 96;
  int expected_batch = 1;
  int max_batch = 8;
  int max_wait_us = 2000;
  int expected_tokens = 512;
  // The CPU engine's weights (the stage placed on the CPU, or its CPU fallback): none, or
  // int8 (needs dtype bfloat16; llm::DecoderOptions::quantization). Other devices run dtype.
  llm::DecoderOptions::Quantization quantization = llm::DecoderOptions::Quantization::kNone;
  bool cpu_kernels = true;  // llm::DecoderOptions::cpu_kernels; false: libtorch's ops throughout
  // placement: remote. `remote_fallback_local`: the stage's own model answers when the remote
  // cannot, on the device `fallback` names (then in `placement`: cpu, auto or a device kind);
  // otherwise the item is skipped, reported degraded.
  std::optional<RemoteLlmOptions> remote;
  bool remote_fallback_local = false;
};

std::unique_ptr<StageKind> MakeLlmFindingsStageKind();

// The work the planner places for such a stage over a checkpoint of `shape`.
accelerator::StageWorkload FindingsWorkload(const LlmFindingsStageSettings& stage,
                                            const accelerator::DecoderShape& shape);

// The engine behind a prepared llm_findings stage (for tests and metrics); null for any other,
// and for a remote stage without a local fallback.
ForensicStage* ForensicStageOf(const PreparedStage& stage);
// The remote client of an llm_findings stage placed remote; null for any other.
const RemoteLlm* RemoteLlmOf(const PreparedStage& stage);

}  // namespace txscore::pipelines
