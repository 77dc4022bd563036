// The Qwen3 (dense) family (llm/model_family.h).
#pragma once

#include <memory>

#include "llm/model_family.h"

namespace txscore::llm {

std::unique_ptr<ModelFamily> MakeQwen3Family();

}  // namespace txscore::llm
