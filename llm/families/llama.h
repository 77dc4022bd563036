// The Llama 3.x family (llm/model_family.h).
#pragma once

#include <memory>

#include "llm/model_family.h"

namespace txscore::llm {

std::unique_ptr<ModelFamily> MakeLlamaFamily();

}  // namespace txscore::llm
