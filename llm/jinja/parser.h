// Parsing: a template's source into its syntax tree (llm/jinja/syntax.h), refusing with a
// JinjaError what the engine does not support. Private to the Jinja engine.
#pragma once

#include <string_view>

#include "llm/jinja/syntax.h"

namespace txscore::llm::jinja {

// Throws JinjaError naming the construct and its line.
Body ParseTemplate(std::string_view source);

}  // namespace txscore::llm::jinja
