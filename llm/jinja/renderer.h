// Rendering: a parsed template run over its variables, within RenderLimits, as transformers'
// sandboxed jinja2 would run it. Private to the Jinja engine.
#pragma once

#include <string>

#include "llm/jinja/syntax.h"

namespace txscore::llm::jinja {

// Throws JinjaError (with the line) for an error the template raises or meets, and past `limits`.
std::string RenderTemplate(const Body& body, const Json& variables, const RenderLimits& limits);

}  // namespace txscore::llm::jinja
