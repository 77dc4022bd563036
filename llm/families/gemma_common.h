// What Gemma 2 and Gemma 3 share (llm/families/gemma2.cc, gemma3.cc): RMSNorm scaling by
// (1 + weight), four norms per layer, embeddings times sqrt(hidden_size), tanh soft-capping
// and a sliding window.
#pragma once

#include "llm/model_family.h"

namespace txscore::llm::gemma {

void ApplyCommonDefaults(ModelConfig* config);
// Soft-capping (present and null means off; absent keeps the family default) and sliding_window.
Status ReadCommonKeys(const ConfigKeys& keys, ModelConfig* config);

}  // namespace txscore::llm::gemma
