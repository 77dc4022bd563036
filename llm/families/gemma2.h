// The Gemma 2 family (llm/model_family.h).
#pragma once

#include <memory>

#include "llm/model_family.h"

namespace txscore::llm {

std::unique_ptr<ModelFamily> MakeGemma2Family();

}  // namespace txscore::llm
