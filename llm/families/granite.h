// The Granite 3.x and 4 dense family (llm/model_family.h).
#pragma once

#include <memory>

#include "llm/model_family.h"

namespace txscore::llm {

std::unique_ptr<ModelFamily> MakeGraniteFamily();

}  // namespace txscore::llm
