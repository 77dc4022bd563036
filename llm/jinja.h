// A Jinja template engine for chat templates: the subset that the chat templates of the
// supported model families use, rendered the way Hugging Face transformers renders them
// (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls,
// no autoescape, tojson as transformers defines it).
//
// Supported:
//   statements   if / elif / else, for (with `if` filter, `else`, tuple targets, loop.index,
//                index0, revindex, revindex0, first, last, length), set (a name, a namespace
//                attribute, a tuple), break, continue; {# comments #}; whitespace control with
//                - and +
//   expressions  literals (strings, numbers, true/false/none, lists, tuples, dicts), names,
//                .attribute, [item], [start:stop:step], and, or, not, in, not in, is [not],
//                == != < > <= >=, + - * / // % **, ~, x if c else y
//   functions    namespace(...), raise_exception(message), range(...), dict(...)
//   methods      strings: startswith endswith split rsplit strip lstrip rstrip upper lower
//                replace title capitalize find count join; dicts: items keys values get
//   filters      trim tojson length count string upper lower first last join default (d) list
//                int float reverse items capitalize title replace safe abs map select reject
//                selectattr rejectattr
//   tests        defined undefined none string number integer float boolean true false
//                mapping iterable sequence odd even divisibleby eq equalto ne lt gt le ge in
//                (and the operator forms == != < > <= >=)
// Anything else (macro, call, include, extends, block, raw, filter blocks, an unknown filter,
// test, function or method) is refused by Parse with an error that names it and its line: a
// template is either rendered as Hugging Face would render it or not at all.
//
// Values behave as Python's do where it shows in the text: True/False/None, 1.0, string
// slicing by code point, Python's % and //, undefined names render as "" and are false, an
// attribute of an undefined value is an error, comparisons chain (a < b < c). One difference:
// tuples (and the pairs of items()) print as lists (['a', 1]) where Python prints ('a', 1);
// templates unpack them instead.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore::llm::jinja {

using Json = nlohmann::ordered_json;

// What one rendering may spend: a template comes from a checkpoint directory, so a loop that
// never ends or an output that never stops is cut off with an error.
struct RenderLimits {
  size_t max_output_bytes = 4 << 20;  // Default: 4 MiB of rendered text, and of any string made
  size_t max_value_bytes = 16 << 20;  // Default: 16 MiB in any list a template makes (about)
  uint64_t max_steps = 10'000'000;    // Default: 10^7 evaluated expressions and loop iterations
  // Default: 2 s. Steps that each copy a large value can take long within max_steps (a list
  // grown by `+` in a loop is quadratic); real chat templates render in well under a millisecond.
  std::chrono::milliseconds max_duration{2000};
  // Default: 256. Lists and dicts nested deeper than this are refused when made (deeper ones
  // would overflow the stack when printed, compared or copied).
  int max_nesting = 256;
};

class Template {
 public:
  // kInvalidArgument naming the construct and "name:line" for what is not supported or does
  // not parse.
  static Result<Template> Parse(std::string_view source, const std::string& name);

  // `variables` is an object: its keys are the template's global names. kInvalidArgument for
  // an error the template raises (raise_exception) or meets (an attribute of an undefined
  // value, a type error), with its line; kResourceExhausted past `limits`. Thread-safe.
  Result<std::string> Render(const Json& variables, const RenderLimits& limits = {}) const;

  const std::string& name() const { return name_; }

  struct Node;  // the parsed template (jinja.cc)

 private:
  Template(std::shared_ptr<const Node> root, std::string name) : root_(std::move(root)), name_(std::move(name)) {}
  std::shared_ptr<const Node> root_;
  std::string name_;
};

// Python's str(): how a value appears in rendered text (True, None, 1.0, ['a', 1]).
std::string PythonStr(const Json& value);
// transformers' tojson filter: json.dumps(value, ensure_ascii=False, indent=indent) ("a": 1,
// items separated by ", " without indent and by ",\n" with it). indent < 0: none.
std::string PythonJsonDumps(const Json& value, int indent = -1);

}  // namespace txscore::llm::jinja
