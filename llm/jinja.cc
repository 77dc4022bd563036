#include "llm/jinja.h"

#include <limits>

#include "llm/jinja/parser.h"
#include "llm/jinja/python_text.h"
#include "llm/jinja/renderer.h"

// The engine's parts (llm/jinja/): lexer (tags and tokens), parser (the syntax tree),
// renderer (values, statements, filters, tests, methods), python_text (Python's text forms).
namespace txscore::llm::jinja {

struct Template::Node {
  Body body;
};

std::string PythonStr(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "None";
  if (value.is_boolean()) return value.get<bool>() ? "True" : "False";
  if (value.is_number_float()) return PythonFloat(value.get<double>());
  if (value.is_number()) return value.dump();
  return PythonRepr(value);
}

std::string PythonJsonDumps(const Json& value, int indent) {
  std::string out;
  JsonDump(&out, value, indent, 0, std::numeric_limits<size_t>::max(), std::numeric_limits<int>::max());
  return out;
}

Result<Template> Template::Parse(std::string_view source, const std::string& name) {
  try {
    auto root = std::make_shared<Node>();
    root->body = ParseTemplate(source);
    return Template(std::move(root), name);
  } catch (const JinjaError& e) {
    return Error{e.code, name + ":" + std::to_string(e.line) + ": " + e.message, "chat_template"};
  }
}

Result<std::string> Template::Render(const Json& variables, const RenderLimits& limits) const {
  if (!variables.is_object()) return InvalidArgument("template variables must be an object");
  try {
    return RenderTemplate(root_->body, variables, limits);
  } catch (const JinjaError& e) {
    return Error{e.code, name_ + ":" + std::to_string(e.line) + ": " + e.message, {}};
  } catch (const nlohmann::json::exception& e) {
    return Internal(name_ + ": " + e.what());
  }
}

}  // namespace txscore::llm::jinja
