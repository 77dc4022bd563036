// The Gemma 3 (text-only and multimodal checkpoints) family (llm/model_family.h).
#pragma once

#include <memory>

#include "llm/model_family.h"

namespace txscore::llm {

std::unique_ptr<ModelFamily> MakeGemma3Family();

}  // namespace txscore::llm
