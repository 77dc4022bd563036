// Python's text forms of values and Python's parsing of numbers, as the rendered text shows
// them: str(), repr(), json.dumps, str.strip and friends, int() and float() of a string.
// Private to the Jinja engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "llm/jinja.h"

namespace txscore::llm::jinja {

inline bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
// Python's str.isspace().
bool IsPythonSpace(char32_t c);
// str.strip / lstrip / rstrip: whitespace, or the characters of `chars` when given.
std::string Strip(const std::string& text, bool left, bool right, const std::string* chars = nullptr);
// str.upper() / str.lower(), by code point.
std::string MapCase(const std::string& text, bool upper);
// Python's repr() of a float.
std::string PythonFloat(double d);
// Python's repr(): strings quoted, lists and dicts as Python prints them.
std::string PythonRepr(const Json& value);
// json.dumps's text of `value`; past `max_bytes` of it, or `max_depth` levels, a JinjaError
// (ErrorCode::kResourceExhausted, line 0: the caller names its own).
void JsonDump(std::string* out, const Json& value, int indent, int level, size_t max_bytes, int max_depth);
// Python's int(text); see python_text.cc.
std::optional<int64_t> PythonIntText(const std::string& text, int line);
// Python's float(text); see python_text.cc.
std::optional<double> PythonFloatText(const std::string& text);

}  // namespace txscore::llm::jinja
