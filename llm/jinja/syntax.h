// The parsed form of a template, shared by the parser (llm/jinja/parser.h), which builds it, and
// the renderer (llm/jinja/renderer.h), which runs it; and the error both throw. Private to the
// Jinja engine: users include llm/jinja.h.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "llm/jinja.h"

namespace txscore::llm::jinja {

// Errors unwind the parser and the renderer as this private type; Parse and Render catch it
// and return it as a Result, so nothing escapes the engine.
struct JinjaError {
  ErrorCode code;
  int line;
  std::string message;
};

[[noreturn]] inline void Fail(int line, std::string message, ErrorCode code = ErrorCode::kInvalidArgument) {
  throw JinjaError{code, line, std::move(message)};
}

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kAttr,       // a.name
    kItem,       // a[b]
    kSlice,      // a[args[0]:args[1]:args[2]] (each may be null)
    kFunction,   // name(args, kwargs)
    kMethod,     // a.name(args, kwargs)
    kFilter,     // a | name(args, kwargs)
    kTest,       // a is [not] name(args)
    kUnary,      // name is "-", "+" or "not"; operand a
    kBinary,     // a name b: arithmetic, comparison, in, not in, ~, and, or
    kChain,      // args[0] ops[0] args[1] ops[1] args[2] ...: chained comparisons
    kCondition,  // a if b else c (c may be null)
    kList,       // [args]
    kDict,       // {args[0]: args[1], ...}
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int height = 1;  // of the tree below: evaluation recurses this deep
  Json literal;
  std::string name;
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kChain
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;                                // kText
  ExprPtr expr;                                    // kOutput, kSet (the value), kFor (the iterable)
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: condition (null for else), body
  std::vector<std::string> targets;                // kFor, kSet: names (kSet: one, or a tuple)
  std::string attribute;                           // kSet of namespace.attribute: targets[0] is the namespace
  ExprPtr filter;                                  // kFor: `if` filter
  Body body, else_body;                            // kFor
};

// What Parse accepts by name; the renderer implements each (and nothing else).
const std::set<std::string>& KnownFilters();
const std::set<std::string>& KnownTests();
const std::set<std::string>& KnownFunctions();
const std::set<std::string>& KnownMethods();
const std::set<std::string>& LoopAttributes();

}  // namespace txscore::llm::jinja
