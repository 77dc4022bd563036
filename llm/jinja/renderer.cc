#include "llm/jinja/renderer.h"

#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "llm/jinja/python_text.h"
#include "llm/utf8.h"

namespace txscore::llm::jinja {
namespace {

// ---------------------------------------------------------------------------------------------
// Values at render time. Data is shared, not copied: an attribute or an element of a value
// points into its parent (shared_ptr's aliasing constructor).

struct Value;
using Namespace = std::map<std::string, Value>;

struct Value {
  enum class Type { kUndefined, kData, kNamespace };
  Type type = Type::kUndefined;
  std::shared_ptr<const Json> data;
  Namespace* ns = nullptr;  // owned by the Renderer: a namespace may hold itself (ns.a = ns)
  std::string what;         // kUndefined: the name or attribute that was not there, for messages

  bool undefined() const { return type == Type::kUndefined; }
  bool is_data() const { return type == Type::kData; }
  const Json& json() const { return *data; }
};

Value Data(Json json) {
  Value v;
  v.type = Value::Type::kData;
  v.data = std::make_shared<const Json>(std::move(json));
  return v;
}
Value Child(const Value& parent, const Json& child) {
  Value v;
  v.type = Value::Type::kData;
  v.data = std::shared_ptr<const Json>(parent.data, &child);
  return v;
}
Value Undefined(std::string what) {
  Value v;
  v.what = std::move(what);
  return v;
}

std::string TypeName(const Value& v) {
  if (v.undefined()) return "Undefined";
  if (v.type == Value::Type::kNamespace) return "Namespace";
  const Json& j = v.json();
  if (j.is_string()) return "str";
  if (j.is_boolean()) return "bool";
  if (j.is_number_float()) return "float";
  if (j.is_number()) return "int";
  if (j.is_null()) return "NoneType";
  if (j.is_array()) return "list";
  return "dict";
}

bool IsString(const Value& v) { return v.is_data() && v.json().is_string(); }
bool IsInteger(const Value& v) { return v.is_data() && v.json().is_number_integer(); }
bool IsNumber(const Value& v) {
  return v.is_data() && (v.json().is_number() || v.json().is_boolean());  // Python's bool is an int
}
const std::string& Str(const Value& v) { return v.json().get_ref<const std::string&>(); }

bool Truthy(const Value& v) {
  if (v.undefined()) return false;
  if (v.type == Value::Type::kNamespace) return true;
  const Json& j = v.json();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  if (j.is_array() || j.is_object()) return !j.empty();
  return true;
}

double AsDouble(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); }
int64_t AsInt(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }
bool IsIntLike(const Json& j) { return j.is_number_integer() || j.is_boolean(); }

bool Equal(const Value& a, const Value& b) {
  if (a.undefined() || b.undefined()) return a.undefined() && b.undefined();
  if (a.type == Value::Type::kNamespace || b.type == Value::Type::kNamespace) return a.ns == b.ns;
  const Json &x = a.json(), &y = b.json();
  if ((x.is_number() || x.is_boolean()) && (y.is_number() || y.is_boolean())) {
    if (IsIntLike(x) && IsIntLike(y)) return AsInt(x) == AsInt(y);
    return AsDouble(x) == AsDouble(y);
  }
  return x == y;
}

// About the memory a value holds: its strings' bytes and 16 per element; counting stops past
// `limit` (so a huge value costs no more than `limit` to measure).
size_t ApproxBytes(const Json& value, size_t limit) {
  size_t total = 0;
  std::vector<const Json*> pending = {&value};
  while (!pending.empty() && total <= limit) {
    const Json* j = pending.back();
    pending.pop_back();
    total += 16;
    if (j->is_string()) {
      total += j->get_ref<const std::string&>().size();
    } else if (j->is_array()) {
      for (const Json& item : *j) pending.push_back(&item);
    } else if (j->is_object()) {
      for (const auto& [key, item] : j->items()) {
        total += key.size();
        pending.push_back(&item);
      }
    }
  }
  return total;
}

class Renderer {
 public:
  static constexpr int64_t kMaxRange = 1'000'000;
  Renderer(const Json& variables, const RenderLimits& limits) : limits_(limits) {
    globals_.type = Value::Type::kData;
    globals_.data = std::shared_ptr<const Json>(std::shared_ptr<const Json>(), &variables);  // not owned
  }

  std::string Run(const Body& body) {
    scopes_.emplace_back();
    Exec(body);
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  void Step(int line, uint64_t steps = 1) {
    steps_ += steps;
    if (steps_ > limits_.max_steps) {
      Fail(line, "rendering took more than " + std::to_string(limits_.max_steps) + " steps",
           ErrorCode::kResourceExhausted);
    }
    // The clock, every 1024 steps: a step may copy a large value.
    if ((steps_ >> 10) != (checked_clock_at_ >> 10)) {
      checked_clock_at_ = steps_;
      if (std::chrono::steady_clock::now() - started_ > limits_.max_duration) {
        Fail(line, "rendering took more than " + std::to_string(limits_.max_duration.count()) + " ms",
             ErrorCode::kResourceExhausted);
      }
    }
  }
  // Lists and dicts made from `item` nest one deeper than it: refused past max_nesting. Walks
  // the item (its nodes charged as steps, 64 a step), without recursion.
  void CheckNesting(const Json& item, int line) {
    if (!item.is_array() && !item.is_object()) return;
    std::vector<std::pair<const Json*, int>> pending{{&item, 1}};
    uint64_t visited = 0;
    while (!pending.empty()) {
      const auto [node, depth] = pending.back();
      pending.pop_back();
      if (++visited % 64 == 0) Step(line);
      if (depth + 1 > limits_.max_nesting) {
        Fail(line, "a list or dict nested more than " + std::to_string(limits_.max_nesting) + " deep",
             ErrorCode::kResourceExhausted);
      }
      for (const Json& child : *node) {
        if (child.is_array() || child.is_object()) pending.push_back({&child, depth + 1});
      }
    }
  }
  // A string or list a template makes may hold at most the output's size and the value limit.
  void CheckStringSize(size_t bytes, int line) {
    if (bytes > limits_.max_output_bytes) {
      Fail(line, "a string of " + std::to_string(bytes) + " bytes is longer than the output limit",
           ErrorCode::kResourceExhausted);
    }
  }
  void CheckValueSize(size_t bytes, int line) {
    if (bytes > limits_.max_value_bytes) {
      Fail(line, "a value of more than " + std::to_string(limits_.max_value_bytes) + " bytes",
           ErrorCode::kResourceExhausted);
    }
  }

  void Emit(const std::string& text, int line) {
    out_ += text;
    if (out_.size() > limits_.max_output_bytes) {
      Fail(line, "the rendered text is longer than " + std::to_string(limits_.max_output_bytes) + " bytes",
           ErrorCode::kResourceExhausted);
    }
  }

  Flow Exec(const Body& body) {
    for (const StmtPtr& stmt : body) {
      const Flow flow = ExecOne(*stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow ExecOne(const Stmt& stmt) {
    Step(stmt.line);
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        Emit(stmt.text, stmt.line);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        Emit(Text(Eval(*stmt.expr), stmt.line), stmt.line);
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [condition, body] : stmt.branches) {
          if (!condition || Truthy(Eval(*condition))) return Exec(body);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        ExecFor(stmt);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        ExecSet(stmt);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  // How a value shows in the output: Python's str(), undefined as nothing.
  std::string Text(const Value& v, int line) {
    if (v.undefined()) return "";
    if (v.type == Value::Type::kNamespace) Fail(line, "a namespace cannot be written out");
    return PythonStr(v.json());
  }

  void Assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

  void ExecSet(const Stmt& stmt) {
    Value value = Eval(*stmt.expr);
    if (!stmt.attribute.empty()) {
      Value target = Lookup(stmt.targets[0], stmt.line);
      if (target.type != Value::Type::kNamespace) {
        Fail(stmt.line, "cannot assign to an attribute of '" + stmt.targets[0] + "': it is not a namespace");
      }
      (*target.ns)[stmt.attribute] = std::move(value);
      return;
    }
    if (stmt.targets.size() == 1) {
      Assign(stmt.targets[0], std::move(value));
      return;
    }
    const std::vector<Value> items = Items(value, stmt.line);
    if (items.size() != stmt.targets.size()) {
      Fail(stmt.line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                          std::to_string(stmt.targets.size()) + " names");
    }
    for (size_t i = 0; i < items.size(); ++i) Assign(stmt.targets[i], items[i]);
  }

  void ExecFor(const Stmt& stmt) {
    const Value iterable = Eval(*stmt.expr);
    std::vector<Value> items = Items(iterable, stmt.line);
    scopes_.emplace_back();
    const auto bind = [&](const Value& item) {
      if (stmt.targets.size() == 1) {
        Assign(stmt.targets[0], item);
        return;
      }
      const std::vector<Value> parts = Items(item, stmt.line);
      if (parts.size() != stmt.targets.size()) {
        Fail(stmt.line, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                            std::to_string(stmt.targets.size()) + " names");
      }
      for (size_t i = 0; i < parts.size(); ++i) Assign(stmt.targets[i], parts[i]);
    };
    if (stmt.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Step(stmt.line);
        bind(item);
        if (Truthy(Eval(*stmt.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      Step(stmt.line);
      bind(items[static_cast<size_t>(i)]);
      Assign("loop", Data(Json{{"index", i + 1},
                               {"index0", i},
                               {"revindex", length - i},
                               {"revindex0", length - i - 1},
                               {"first", i == 0},
                               {"last", i == length - 1},
                               {"length", length}}));
      if (Exec(stmt.body) == Flow::kBreak) break;
    }
    if (items.empty()) Exec(stmt.else_body);
    scopes_.pop_back();
  }

  Value Lookup(const std::string& name, int /*line*/) {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      if (auto found = scope->find(name); found != scope->end()) return found->second;
    }
    const Json& globals = globals_.json();
    if (auto found = globals.find(name); found != globals.end()) return Child(globals_, *found);
    return Undefined("'" + name + "'");
  }

  // The elements a for loop or a filter walks: a list's items, a dict's keys, a string's
  // characters; nothing for an undefined value.
  std::vector<Value> Items(const Value& v, int line) {
    std::vector<Value> items;
    if (v.undefined()) return items;
    if (v.type == Value::Type::kNamespace) Fail(line, "a namespace cannot be iterated");
    const Json& j = v.json();
    if (j.is_array()) {
      for (const Json& item : j) items.push_back(Child(v, item));
    } else if (j.is_object()) {
      for (const auto& [key, item] : j.items()) items.push_back(Data(key));
    } else if (j.is_string()) {
      for (std::string_view c : SplitUtf8(Str(v))) items.push_back(Data(std::string(c)));
    } else {
      Fail(line, "'" + TypeName(v) + "' object is not iterable");
    }
    return items;
  }

  [[noreturn]] void FailUndefined(const Value& v, int line) { Fail(line, v.what + " is undefined"); }

  Value Attribute(const Value& object, const std::string& name, int line) {
    if (object.undefined()) FailUndefined(object, line);
    if (object.type == Value::Type::kNamespace) {
      if (auto found = object.ns->find(name); found != object.ns->end()) return found->second;
      return Undefined("namespace attribute '" + name + "'");
    }
    const Json& j = object.json();
    if (j.is_object()) {
      if (auto found = j.find(name); found != j.end()) return Child(object, *found);
    }
    return Undefined("'" + TypeName(object) + " object' has no attribute '" + name + "'; it");
  }

  Value Item(const Value& object, const Value& key, int line) {
    if (object.undefined()) FailUndefined(object, line);
    if (object.type == Value::Type::kNamespace) {
      if (!IsString(key)) Fail(line, "a namespace is indexed by name");
      return Attribute(object, Str(key), line);
    }
    const Json& j = object.json();
    if (j.is_object()) {
      if (IsString(key)) {
        if (auto found = j.find(Str(key)); found != j.end()) return Child(object, *found);
      }
      return Undefined("'dict object' has no item " + (key.is_data() ? PythonRepr(key.json()) : "undefined") + "; it");
    }
    if ((j.is_array() || j.is_string()) && key.is_data() && IsIntLike(key.json())) {
      int64_t index = AsInt(key.json());
      if (j.is_array()) {
        const int64_t n = static_cast<int64_t>(j.size());
        if (index < 0) index += n;
        if (index < 0 || index >= n) return Undefined("list index " + std::to_string(AsInt(key.json())));
        return Child(object, j[static_cast<size_t>(index)]);
      }
      const std::vector<std::string_view> chars = SplitUtf8(Str(object));
      const int64_t n = static_cast<int64_t>(chars.size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return Undefined("string index " + std::to_string(AsInt(key.json())));
      return Data(std::string(chars[static_cast<size_t>(index)]));
    }
    if (key.undefined()) FailUndefined(key, line);
    return Undefined("'" + TypeName(object) + " object' has no item " + PythonRepr(key.json()) + "; it");
  }

  // Python's slice.indices() and the positions it selects.
  static std::vector<int64_t> SliceIndices(int64_t n, const std::optional<int64_t>& start_in,
                                           const std::optional<int64_t>& stop_in, int64_t step, int line) {
    if (step == 0) Fail(line, "slice step cannot be zero");
    const auto clamp = [&](std::optional<int64_t> v, int64_t when_missing) {
      if (!v) return when_missing;
      int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t start = clamp(start_in, step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(stop_in, step > 0 ? n : -1);
    std::vector<int64_t> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
    return out;
  }

  Value Slice(const Expr& e) {
    const Value object = Eval(*e.a);
    std::optional<int64_t> bounds[3];
    for (int i = 0; i < 3; ++i) {
      if (!e.args[i]) continue;
      const Value v = Eval(*e.args[i]);
      if (v.is_data() && v.json().is_null()) continue;
      if (!v.is_data() || !IsIntLike(v.json())) Fail(e.line, "slice indices must be integers");
      bounds[i] = AsInt(v.json());
    }
    if (object.undefined()) FailUndefined(object, e.line);
    if (!object.is_data() || !(object.json().is_array() || object.json().is_string())) {
      Fail(e.line, "'" + TypeName(object) + "' object cannot be sliced");
    }
    const int64_t step = bounds[2].value_or(1);
    if (object.json().is_array()) {
      const Json& list = object.json();
      Json out = Json::array();
      for (int64_t i : SliceIndices(static_cast<int64_t>(list.size()), bounds[0], bounds[1], step, e.line)) {
        out.push_back(list[static_cast<size_t>(i)]);
      }
      return Data(std::move(out));
    }
    const std::vector<std::string_view> chars = SplitUtf8(Str(object));
    std::string out;
    for (int64_t i : SliceIndices(static_cast<int64_t>(chars.size()), bounds[0], bounds[1], step, e.line)) {
      out += chars[static_cast<size_t>(i)];
    }
    return Data(std::move(out));
  }

  Value Eval(const Expr& e) {
    Step(e.line);
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return Data(e.literal);
      case Expr::Kind::kName: {
        Value found = Lookup(e.name, e.line);
        // A global function (range, strftime_now, ...) used as a value: jinja2 would print or
        // test a function object, which this engine has not; refused rather than rendered as
        // undefined. `is defined` on one is answered in kTest.
        if (found.undefined() && KnownFunctions().count(e.name) != 0) {
          Fail(e.line, "the function " + e.name + " can only be called here (or tested with 'is defined')");
        }
        return found;
      }
      case Expr::Kind::kAttr:
        return Attribute(Eval(*e.a), e.name, e.line);
      case Expr::Kind::kItem: {
        const Value object = Eval(*e.a);
        return Item(object, Eval(*e.b), e.line);
      }
      case Expr::Kind::kSlice:
        return Slice(e);
      case Expr::Kind::kList: {
        Json list = Json::array();
        for (const ExprPtr& item : e.args) {
          list.push_back(Plain(Eval(*item), item->line));
          CheckNesting(list.back(), item->line);
        }
        return Data(std::move(list));
      }
      case Expr::Kind::kDict: {
        Json dict = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value key = Eval(*e.args[i]);
          if (!IsString(key)) Fail(e.line, "dict keys must be strings here");
          Json& value = dict[Str(key)];
          value = Plain(Eval(*e.args[i + 1]), e.line);
          CheckNesting(value, e.line);
        }
        return Data(std::move(dict));
      }
      case Expr::Kind::kUnary:
        return UnaryOp(e);
      case Expr::Kind::kBinary:
        return BinaryOp(e);
      case Expr::Kind::kChain: {  // a < b < c: a < b and b < c, each operand evaluated once
        Value left = Eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = Eval(*e.args[i + 1]);
          if (!Truthy(Apply(e.ops[i], left, right, e.line))) return Data(false);
          left = std::move(right);
        }
        return Data(true);
      }
      case Expr::Kind::kCondition:
        if (Truthy(Eval(*e.b))) return Eval(*e.a);
        return e.c ? Eval(*e.c) : Undefined("the else branch");
      case Expr::Kind::kFunction:
        return CallFunction(e);
      case Expr::Kind::kMethod:
        return CallMethod(e);
      case Expr::Kind::kFilter:
        return ApplyFilter(e);
      case Expr::Kind::kTest: {
        if ((e.name == "defined" || e.name == "undefined") && e.a->kind == Expr::Kind::kName &&
            KnownFunctions().count(e.a->name) != 0 && Lookup(e.a->name, e.line).undefined()) {
          return Data((e.name == "defined") != e.negated);  // a global function is defined
        }
        std::vector<Value> args;
        for (const ExprPtr& arg : e.args) args.push_back(Eval(*arg));
        return Data(RunTest(e.name, Eval(*e.a), args, e.line) != e.negated);
      }
    }
    Fail(e.line, "unknown expression");
  }

  // A value as data inside a list or dict (namespaces and undefined values cannot be).
  Json Plain(const Value& v, int line) {
    if (v.undefined()) FailUndefined(v, line);
    if (v.type == Value::Type::kNamespace) Fail(line, "a namespace cannot be put in a list or dict");
    return v.json();
  }

  Value UnaryOp(const Expr& e) {
    const Value v = Eval(*e.a);
    if (e.name == "not") return Data(!Truthy(v));
    if (v.undefined()) FailUndefined(v, e.line);
    if (!IsNumber(v)) Fail(e.line, "bad operand type for unary " + e.name + ": '" + TypeName(v) + "'");
    if (e.name == "+") return Data(IsIntLike(v.json()) ? Json(AsInt(v.json())) : v.json());
    if (IsIntLike(v.json())) {
      int64_t negated = 0;
      if (__builtin_sub_overflow(int64_t{0}, AsInt(v.json()), &negated)) Fail(e.line, "integer overflow");
      return Data(negated);
    }
    return Data(-v.json().get<double>());
  }

  Value BinaryOp(const Expr& e) {
    if (e.name == "and") {
      Value left = Eval(*e.a);
      return Truthy(left) ? Eval(*e.b) : left;
    }
    if (e.name == "or") {
      Value left = Eval(*e.a);
      return Truthy(left) ? left : Eval(*e.b);
    }
    return Apply(e.name, Eval(*e.a), Eval(*e.b), e.line);
  }

  // `left op right` for every operator but and/or (which may not evaluate their right side).
  Value Apply(const std::string& op, const Value& left, const Value& right, int line) {
    if (op == "==") return Data(Equal(left, right));
    if (op == "!=") return Data(!Equal(left, right));
    if (op == "~") {
      std::string a = Text(left, line);
      const std::string b = Text(right, line);
      CheckStringSize(a.size() + b.size(), line);
      return Data(a + b);
    }
    if (op == "in") return Data(Contains(right, left, line));
    if (op == "not in") return Data(!Contains(right, left, line));
    if (left.undefined()) FailUndefined(left, line);
    if (right.undefined()) FailUndefined(right, line);
    const auto type_error = [&]() -> Value {
      Fail(line, "unsupported operand types for " + op + ": '" + TypeName(left) + "' and '" + TypeName(right) + "'");
    };
    if (!left.is_data() || !right.is_data()) return type_error();
    const Json &x = left.json(), &y = right.json();
    const bool numbers = (x.is_number() || x.is_boolean()) && (y.is_number() || y.is_boolean());
    const bool ints = IsIntLike(x) && IsIntLike(y);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int order = 0;
      if (numbers) {
        const double a = AsDouble(x), b = AsDouble(y);
        order = ints ? (AsInt(x) < AsInt(y) ? -1 : AsInt(x) > AsInt(y)) : (a < b ? -1 : a > b);
      } else if (x.is_string() && y.is_string()) {
        order = x.get_ref<const std::string&>().compare(y.get_ref<const std::string&>());
        order = order < 0 ? -1 : order > 0;
      } else {
        return type_error();
      }
      if (op == "<") return Data(order < 0);
      if (op == ">") return Data(order > 0);
      if (op == "<=") return Data(order <= 0);
      return Data(order >= 0);
    }
    if (op == "+") {
      if (x.is_string() && y.is_string()) {
        CheckStringSize(x.get_ref<const std::string&>().size() + y.get_ref<const std::string&>().size(), line);
        return Data(x.get_ref<const std::string&>() + y.get_ref<const std::string&>());
      }
      if (x.is_array() && y.is_array()) {
        CheckValueSize(ApproxBytes(x, limits_.max_value_bytes) + ApproxBytes(y, limits_.max_value_bytes), line);
        Json out = x;
        for (const Json& item : y) out.push_back(item);
        return Data(std::move(out));
      }
    }
    const bool x_sequence = x.is_string() || x.is_array(), y_sequence = y.is_string() || y.is_array();
    if (op == "*" && ((x_sequence && IsIntLike(y)) || (y_sequence && IsIntLike(x)))) {
      const bool sequence_first = x.is_string() || x.is_array();
      return Repeat(sequence_first ? x : y, AsInt(sequence_first ? y : x), line);
    }
    if (!numbers) return type_error();
    if (ints && op != "/") {
      const int64_t a = AsInt(x), b = AsInt(y);
      int64_t result = 0;
      if (op == "+") {
        if (__builtin_add_overflow(a, b, &result)) Fail(line, "integer overflow");
      } else if (op == "-") {
        if (__builtin_sub_overflow(a, b, &result)) Fail(line, "integer overflow");
      } else if (op == "*") {
        if (__builtin_mul_overflow(a, b, &result)) Fail(line, "integer overflow");
      } else if (op == "//" || op == "%") {
        if (b == 0) Fail(line, "integer division or modulo by zero");
        if (a == std::numeric_limits<int64_t>::min() && b == -1) {
          if (op == "//") Fail(line, "integer overflow");  // the one quotient past int64
          return Data(int64_t{0});
        }
        int64_t q = a / b, r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) {
          --q;
          r += b;
        }
        result = op == "//" ? q : r;
      } else if (op == "**") {
        if (b < 0) return Data(std::pow(static_cast<double>(a), static_cast<double>(b)));
        result = 1;
        if (a == 0 || a == 1 || a == -1) {
          result = b == 0 ? 1 : a == -1 ? (b % 2 == 0 ? 1 : -1) : a;
        } else {
          for (int64_t i = 0; i < b; ++i) {
            if (__builtin_mul_overflow(result, a, &result)) Fail(line, "integer overflow");
          }
        }
      }
      return Data(result);
    }
    const double a = AsDouble(x), b = AsDouble(y);
    if (op == "+") return Data(a + b);
    if (op == "-") return Data(a - b);
    if (op == "*") return Data(a * b);
    if (op == "**") return Data(std::pow(a, b));
    if (b == 0) Fail(line, "float division by zero");
    if (op == "/") return Data(a / b);
    const double q = std::floor(a / b);
    if (op == "//") return Data(q);
    return Data(a - q * b);  // %
  }

  // Python's sequence * n.
  Value Repeat(const Json& x, int64_t times, int line) {
    if (times > 0) {
      const size_t one =
          x.is_string() ? x.get_ref<const std::string&>().size() : ApproxBytes(x, limits_.max_value_bytes);
      if (one > 0 && static_cast<uint64_t>(times) > limits_.max_value_bytes / one) {
        CheckValueSize(limits_.max_value_bytes + 1, line);
      }
      if (x.is_string()) CheckStringSize(one * static_cast<size_t>(times), line);
    }
    Json out = x.is_string() ? Json("") : Json::array();
    for (int64_t i = 0; i < times; ++i) {
      Step(line);
      if (x.is_string()) {
        out.get_ref<std::string&>() += x.get_ref<const std::string&>();
        if (out.get_ref<const std::string&>().size() > limits_.max_output_bytes) {
          Fail(line, "a repeated string is longer than the output limit", ErrorCode::kResourceExhausted);
        }
      } else {
        for (const Json& item : x) out.push_back(item);
      }
    }
    return Data(std::move(out));
  }

  bool Contains(const Value& container, const Value& item, int line) {
    if (container.undefined()) return false;
    if (container.type == Value::Type::kNamespace) return IsString(item) && container.ns->count(Str(item)) > 0;
    const Json& j = container.json();
    if (j.is_string()) {
      if (!IsString(item)) Fail(line, "'in <string>' requires a string on the left, not '" + TypeName(item) + "'");
      return Str(container).find(Str(item)) != std::string::npos;
    }
    if (j.is_array()) {
      for (const Json& element : j) {
        if (Equal(Child(container, element), item)) return true;
      }
      return false;
    }
    if (j.is_object()) return IsString(item) && j.contains(Str(item));
    Fail(line, "argument of type '" + TypeName(container) + "' is not iterable");
  }

  // Arguments by position or keyword, as Python binds them.
  struct Args {
    std::vector<Value> positional;
    std::map<std::string, Value> keyword;
    const Value* Get(size_t index, const char* name) const {
      if (index < positional.size()) return &positional[index];
      auto found = keyword.find(name);
      return found == keyword.end() ? nullptr : &found->second;
    }
  };
  Args EvalArgs(const Expr& e) {
    Args args;
    for (const ExprPtr& arg : e.args) args.positional.push_back(Eval(*arg));
    for (const auto& [name, arg] : e.kwargs) args.keyword[name] = Eval(*arg);
    return args;
  }
  std::string StringArg(const Args& args, size_t index, const char* name, const std::string& fallback, int line,
                        bool* given = nullptr) {
    const Value* v = args.Get(index, name);
    if (given) *given = v != nullptr && !(v->is_data() && v->json().is_null());
    if (v == nullptr || (v->is_data() && v->json().is_null())) return fallback;
    if (!IsString(*v)) Fail(line, std::string("argument '") + name + "' must be a string, not '" + TypeName(*v) + "'");
    return Str(*v);
  }
  int64_t IntArg(const Args& args, size_t index, const char* name, int64_t fallback, int line) {
    const Value* v = args.Get(index, name);
    if (v == nullptr || (v->is_data() && v->json().is_null())) return fallback;
    if (!v->is_data() || !IsIntLike(v->json())) {
      Fail(line, std::string("argument '") + name + "' must be an integer, not '" + TypeName(*v) + "'");
    }
    return AsInt(v->json());
  }

  Value CallFunction(const Expr& e) {
    const Args args = EvalArgs(e);
    if (e.name == "raise_exception") {
      Fail(e.line, "the template raised: " + StringArg(args, 0, "message", "", e.line));
    }
    if (e.name == "namespace" || e.name == "dict") {
      Namespace fields;
      for (const Value& positional : args.positional) {
        if (!positional.is_data() || !positional.json().is_object())
          Fail(e.line, e.name + "() takes keyword arguments");
        for (const auto& [key, item] : positional.json().items()) fields[key] = Child(positional, item);
      }
      for (const auto& [key, value] : args.keyword) fields[key] = value;
      if (e.name == "namespace") {
        Value ns;
        ns.type = Value::Type::kNamespace;
        namespaces_.push_back(std::make_unique<Namespace>(std::move(fields)));
        ns.ns = namespaces_.back().get();
        return ns;
      }
      Json dict = Json::object();
      for (const auto& [key, value] : fields) {
        dict[key] = Plain(value, e.line);
        CheckNesting(dict[key], e.line);
      }
      return Data(std::move(dict));
    }
    if (e.name == "range") {
      int64_t start = 0, stop = 0, step = 1;
      if (args.positional.size() == 1) {
        stop = IntArg(args, 0, "stop", 0, e.line);
      } else {
        start = IntArg(args, 0, "start", 0, e.line);
        stop = IntArg(args, 1, "stop", 0, e.line);
        step = IntArg(args, 2, "step", 1, e.line);
      }
      if (step == 0) Fail(e.line, "range() step must not be zero");
      const double length =
          std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
      if (length > static_cast<double>(kMaxRange)) {
        Fail(e.line, "range() of more than " + std::to_string(kMaxRange) + " numbers", ErrorCode::kResourceExhausted);
      }
      Json out = Json::array();
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        Step(e.line);
        out.push_back(i);
      }
      return Data(std::move(out));
    }
    // strftime_now(format): transformers' global for templates that print today's date.
    const std::string format = StringArg(args, 0, "format", "", e.line);
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    if (format.size() > 256) Fail(e.line, "strftime_now() takes a format of at most 256 characters");
    char buf[4096];
    const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &local);
    if (n == 0 && !format.empty()) Fail(e.line, "strftime_now() wrote nothing for \"" + format + "\"");
    return Data(std::string(buf, n));
  }

  Value CallMethod(const Expr& e) {
    const Value object = Eval(*e.a);
    const Args args = EvalArgs(e);
    const std::string& m = e.name;
    if (object.undefined()) FailUndefined(object, e.line);
    const auto no_such_method = [&]() -> Value {
      Fail(e.line, "'" + TypeName(object) + "' object has no method '" + m + "'");
    };
    if (!object.is_data()) return no_such_method();
    const Json& j = object.json();
    if (j.is_object()) {
      if (m == "items" || m == "keys" || m == "values") {
        Json out = Json::array();
        for (const auto& [key, item] : j.items()) {
          out.push_back(m == "items" ? Json::array({key, item}) : m == "keys" ? Json(key) : item);
        }
        return Data(std::move(out));
      }
      if (m == "get") {
        const Value* key = args.Get(0, "key");
        if (key && IsString(*key)) {
          if (auto found = j.find(Str(*key)); found != j.end()) return Child(object, *found);
        }
        const Value* fallback = args.Get(1, "default");
        return fallback ? *fallback : Data(nullptr);
      }
      return no_such_method();
    }
    if (!j.is_string()) return no_such_method();
    const std::string& s = Str(object);
    if (m == "startswith" || m == "endswith") {
      const Value* prefix = args.Get(0, "prefix");
      std::vector<std::string> candidates;
      if (prefix && IsString(*prefix)) {
        candidates.push_back(Str(*prefix));
      } else if (prefix && prefix->is_data() && prefix->json().is_array()) {
        for (const Json& c : prefix->json()) {
          if (!c.is_string()) Fail(e.line, m + "() takes strings");
          candidates.push_back(c.get<std::string>());
        }
      } else {
        Fail(e.line, m + "() takes a string or a tuple of strings");
      }
      for (const std::string& c : candidates) {
        if (c.size() <= s.size() &&
            (m == "startswith" ? s.compare(0, c.size(), c) == 0 : s.compare(s.size() - c.size(), c.size(), c) == 0)) {
          return Data(true);
        }
      }
      return Data(false);
    }
    if (m == "split" || m == "rsplit") {
      bool has_separator = false;
      const std::string separator = StringArg(args, 0, "sep", "", e.line, &has_separator);
      const int64_t max_split = IntArg(args, 1, "maxsplit", -1, e.line);
      return Data(Split(s, has_separator ? &separator : nullptr, max_split, m == "rsplit", e.line));
    }
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      bool has_chars = false;
      const std::string chars = StringArg(args, 0, "chars", "", e.line, &has_chars);
      return Data(Strip(s, m != "rstrip", m != "lstrip", has_chars ? &chars : nullptr));
    }
    if (m == "upper" || m == "lower") return Data(MapCase(s, m == "upper"));
    if (m == "title" || m == "capitalize") return Data(Capitalize(s, m == "title"));
    if (m == "replace") {
      return Data(Replace(s, StringArg(args, 0, "old", "", e.line), StringArg(args, 1, "new", "", e.line),
                          IntArg(args, 2, "count", -1, e.line), e.line));
    }
    if (m == "find" || m == "count") {
      const std::string sub = StringArg(args, 0, "sub", "", e.line);
      if (m == "find") {
        const size_t at = s.find(sub);
        return Data(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(Utf8Length(s.substr(0, at))));
      }
      if (sub.empty()) return Data(static_cast<int64_t>(Utf8Length(s) + 1));
      int64_t count = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++count;
      return Data(count);
    }
    if (m == "join") {
      const Value* items = args.Get(0, "iterable");
      if (!items) Fail(e.line, "join() takes an iterable");
      std::string out;
      bool first = true;
      for (const Value& item : Items(*items, e.line)) {
        if (!IsString(item)) Fail(e.line, "join() expects strings, found '" + TypeName(item) + "'");
        out += (first ? "" : s) + Str(item);
        first = false;
        CheckStringSize(out.size(), e.line);
      }
      return Data(std::move(out));
    }
    return no_such_method();
  }

  std::string Replace(const std::string& s, const std::string& old_text, const std::string& new_text, int64_t count,
                      int line) {
    // The result's size first: a replacement can multiply the text.
    size_t places = 0;
    if (old_text.empty()) {
      places = Utf8Length(s) + 1;
    } else {
      for (size_t at = s.find(old_text); at != std::string::npos; at = s.find(old_text, at + old_text.size())) ++places;
    }
    if (count >= 0) places = std::min(places, static_cast<size_t>(count));
    CheckStringSize(s.size() - std::min(s.size(), places * old_text.size()) + places * new_text.size(), line);
    if (old_text.empty()) {
      // Python inserts `new` between characters (and at both ends).
      std::string out;
      int64_t done = 0;
      for (std::string_view c : SplitUtf8(s)) {
        if (count < 0 || done < count) {
          out += new_text;
          ++done;
        }
        out += c;
      }
      if (count < 0 || done < count) out += new_text;
      return out;
    }
    std::string out;
    size_t pos = 0;
    int64_t done = 0;
    for (size_t at = s.find(old_text); at != std::string::npos && (count < 0 || done < count);
         at = s.find(old_text, pos)) {
      out.append(s, pos, at - pos);
      out += new_text;
      pos = at + old_text.size();
      ++done;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

  static Json Split(const std::string& s, const std::string* separator, int64_t max_split, bool from_right, int line) {
    Json out = Json::array();
    if (separator != nullptr) {
      if (separator->empty()) Fail(line, "split() separator must not be empty");
      std::vector<std::string> parts;
      if (!from_right) {
        size_t pos = 0;
        for (size_t at = s.find(*separator);
             at != std::string::npos && (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split);
             at = s.find(*separator, pos)) {
          parts.push_back(s.substr(pos, at - pos));
          pos = at + separator->size();
        }
        parts.push_back(s.substr(pos));
      } else {
        size_t end = s.size();
        std::vector<std::string> reversed;
        while (max_split < 0 || static_cast<int64_t>(reversed.size()) < max_split) {
          if (end < separator->size()) break;
          const size_t at = s.rfind(*separator, end - separator->size());
          if (at == std::string::npos) break;
          reversed.push_back(s.substr(at + separator->size(), end - at - separator->size()));
          end = at;
        }
        reversed.push_back(s.substr(0, end));
        parts.assign(reversed.rbegin(), reversed.rend());
      }
      for (std::string& p : parts) out.push_back(std::move(p));
      return out;
    }
    // No separator: runs of whitespace split, and empty strings are dropped.
    const std::vector<std::string_view> chars = SplitUtf8(s);
    std::vector<std::pair<size_t, size_t>> words;  // char ranges
    for (size_t i = 0; i < chars.size();) {
      while (i < chars.size() && IsPythonSpace(CodePointOf(chars[i]))) ++i;
      if (i == chars.size()) break;
      size_t j = i;
      while (j < chars.size() && !IsPythonSpace(CodePointOf(chars[j]))) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    const auto join = [&](size_t from, size_t to) {
      std::string w;
      for (size_t k = from; k < to; ++k) w += chars[k];
      return w;
    };
    if (max_split < 0 || static_cast<int64_t>(words.size()) <= max_split + 1) {
      for (const auto& [from, to] : words) out.push_back(join(from, to));
      return out;
    }
    const size_t keep = static_cast<size_t>(max_split);
    if (!from_right) {
      for (size_t k = 0; k < keep; ++k) out.push_back(join(words[k].first, words[k].second));
      out.push_back(Strip(join(words[keep].first, chars.size()), false, true));
    } else {
      const size_t first_split = words.size() - keep;
      out.push_back(Strip(join(0, words[first_split - 1].second), true, false));
      for (size_t k = first_split; k < words.size(); ++k) out.push_back(join(words[k].first, words[k].second));
    }
    return out;
  }

  static std::string Capitalize(const std::string& s, bool every_word) {
    std::string out;
    bool start = true;
    for (std::string_view c : SplitUtf8(s)) {
      const char32_t cp = CodePointOf(c);
      const bool letter = u_isalpha(static_cast<UChar32>(cp));
      // Python upper-cases a word's first character to its title case (ǆ -> ǅ, not Ǆ).
      AppendUtf8(static_cast<char32_t>(start && letter ? u_totitle(static_cast<UChar32>(cp))
                                                       : u_tolower(static_cast<UChar32>(cp))),
                 &out);
      start = every_word ? !letter : false;
      if (!every_word && letter) start = false;
    }
    return out;
  }

  // Jinja's title filter (not str.title): a word starts after whitespace or one of -({[<, so
  // "they're" gives "They're".
  static std::string JinjaTitle(const std::string& s) {
    std::string out;
    bool start = true;
    for (std::string_view c : SplitUtf8(s)) {
      const char32_t cp = CodePointOf(c);
      const bool separator = IsPythonSpace(cp) || (cp < 0x80 && std::strchr("-({[<", static_cast<char>(cp)) && cp != 0);
      AppendUtf8(
          static_cast<char32_t>(start ? u_toupper(static_cast<UChar32>(cp)) : u_tolower(static_cast<UChar32>(cp))),
          &out);
      start = separator;
    }
    return out;
  }

  Value ApplyFilter(const Expr& e) {
    const Value v = Eval(*e.a);
    const Args args = EvalArgs(e);
    return Filter(e.name, v, args, e.line);
  }

  Value Filter(const std::string& f, const Value& v, const Args& args, int line) {
    if (f == "default" || f == "d") {
      const bool boolean = args.Get(1, "boolean") && Truthy(*args.Get(1, "boolean"));
      if (v.undefined() || (boolean && !Truthy(v))) {
        const Value* fallback = args.Get(0, "default_value");
        return fallback ? *fallback : Data("");
      }
      return v;
    }
    if (f == "length" || f == "count") {
      if (v.undefined()) return Data(int64_t{0});
      if (v.is_data() && v.json().is_string()) return Data(static_cast<int64_t>(Utf8Length(Str(v))));
      if (v.is_data() && (v.json().is_array() || v.json().is_object())) {
        return Data(static_cast<int64_t>(v.json().size()));
      }
      Fail(line, "object of type '" + TypeName(v) + "' has no len()");
    }
    if (f == "safe") return v;
    if (f == "string") return Data(Text(v, line));
    if (f == "list") {
      Json out = Json::array();
      for (const Value& item : Items(v, line)) out.push_back(Plain(item, line));
      return Data(std::move(out));
    }
    if (f == "first" || f == "last") {
      const std::vector<Value> items = Items(v, line);
      if (items.empty()) return Undefined("the " + f + " item of an empty sequence");
      return f == "first" ? items.front() : items.back();
    }
    if (f == "reverse") {
      if (IsString(v)) {
        const std::vector<std::string_view> chars = SplitUtf8(Str(v));
        std::string out;
        for (auto c = chars.rbegin(); c != chars.rend(); ++c) out += *c;
        return Data(std::move(out));
      }
      Json out = Json::array();
      const std::vector<Value> items = Items(v, line);
      for (auto item = items.rbegin(); item != items.rend(); ++item) out.push_back(Plain(*item, line));
      return Data(std::move(out));
    }
    if (f == "join") {
      const std::string separator = StringArg(args, 0, "d", "", line);
      const Value* attribute = args.Get(1, "attribute");
      std::string out;
      bool first = true;
      for (Value item : Items(v, line)) {
        if (attribute && IsString(*attribute)) item = Attribute(item, Str(*attribute), line);
        out += (first ? "" : separator) + Text(item, line);
        first = false;
        CheckStringSize(out.size(), line);
      }
      return Data(std::move(out));
    }
    if (f == "items") {
      if (v.undefined()) return Data(Json::array());
      if (!v.is_data() || !v.json().is_object()) Fail(line, "items expects a dict, not '" + TypeName(v) + "'");
      Json out = Json::array();
      for (const auto& [key, item] : v.json().items()) out.push_back(Json::array({key, item}));
      return Data(std::move(out));
    }
    if (f == "tojson") {
      const int64_t indent = IntArg(args, 0, "indent", -1, line);
      std::string text;
      try {
        JsonDump(&text, Plain(v, line), static_cast<int>(std::clamp<int64_t>(indent, -1, 1 << 20)), 0,
                 limits_.max_output_bytes, limits_.max_nesting);
      } catch (const JinjaError& e) {
        Fail(line, e.message, e.code);
      }
      CheckStringSize(text.size(), line);
      return Data(std::move(text));
    }
    if (f == "int" || f == "float") return Data(Convert(f, v, args, line));
    if (f == "abs") {
      if (!IsNumber(v)) Fail(line, "bad operand type for abs(): '" + TypeName(v) + "'");
      if (IsIntLike(v.json())) {
        const int64_t n = AsInt(v.json());
        if (n == std::numeric_limits<int64_t>::min()) Fail(line, "integer overflow");
        return Data(n < 0 ? -n : n);
      }
      return Data(std::fabs(v.json().get<double>()));
    }
    if (f == "map" || f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      return MapOrSelect(f, v, args, line);
    }
    // The rest take a string (Jinja converts with str() first).
    const std::string s = Text(v, line);
    if (f == "trim") {
      bool has_chars = false;
      const std::string chars = StringArg(args, 0, "chars", "", line, &has_chars);
      return Data(Strip(s, true, true, has_chars ? &chars : nullptr));
    }
    if (f == "upper" || f == "lower") return Data(MapCase(s, f == "upper"));
    if (f == "capitalize") return Data(Capitalize(s, false));
    if (f == "title") return Data(JinjaTitle(s));
    if (f == "replace") {
      return Data(Replace(s, StringArg(args, 0, "old", "", line), StringArg(args, 1, "new", "", line),
                          IntArg(args, 2, "count", -1, line), line));
    }
    Fail(line, "the filter '" + f + "' is not supported");
  }

  Json Convert(const std::string& f, const Value& v, const Args& args, int line) {
    const Value* fallback_arg = args.Get(0, "default");
    const Json fallback = fallback_arg ? Plain(*fallback_arg, line) : (f == "int" ? Json(0) : Json(0.0));
    if (!v.is_data()) return fallback;
    const Json& j = v.json();
    // jinja2: int(value), else int(float(value)), else the default; float(value), else the
    // default. Python's int() and float() of a string: see PythonIntText, PythonFloatText.
    if (f == "int") {
      if (IsIntLike(j)) return AsInt(j);
      double d = 0;
      if (j.is_number()) {
        d = j.get<double>();
      } else if (j.is_string()) {
        const std::string text = j.get<std::string>();
        if (std::optional<int64_t> n = PythonIntText(text, line)) return *n;
        std::optional<double> parsed = PythonFloatText(text);
        if (!parsed || std::isnan(*parsed)) return fallback;
        d = *parsed;
      } else {
        return fallback;
      }
      if (!(d > -9.2e18 && d < 9.2e18)) Fail(line, "integer overflow");  // Python: OverflowError or a big int
      return static_cast<int64_t>(d);
    }
    if (j.is_number() || j.is_boolean()) return AsDouble(j);
    if (j.is_string()) {
      if (std::optional<double> d = PythonFloatText(j.get<std::string>())) return *d;
    }
    return fallback;
  }

  Value MapOrSelect(const std::string& f, const Value& v, const Args& args, int line) {
    Json out = Json::array();
    const bool by_attribute = f == "selectattr" || f == "rejectattr";
    for (const Value& item : Items(v, line)) {
      Step(line);
      if (f == "map") {
        if (const Value* attribute = args.keyword.count("attribute") ? &args.keyword.at("attribute") : nullptr) {
          if (!IsString(*attribute)) Fail(line, "map(attribute=...) takes a string");
          Value mapped = Attribute(item, Str(*attribute), line);
          if (mapped.undefined() && args.keyword.count("default")) mapped = args.keyword.at("default");
          out.push_back(Plain(mapped, line));
          continue;
        }
        if (args.positional.empty() || !IsString(args.positional[0])) Fail(line, "map() takes a filter name");
        const std::string name = Str(args.positional[0]);
        if (KnownFilters().count(name) == 0 || name == "map")
          Fail(line, "map() cannot apply the filter '" + name + "'");
        Args rest;
        rest.positional.assign(args.positional.begin() + 1, args.positional.end());
        out.push_back(Plain(Filter(name, item, rest, line), line));
        continue;
      }
      size_t first_test_arg = 0;
      Value subject = item;
      if (by_attribute) {
        if (args.positional.empty() || !IsString(args.positional[0])) Fail(line, f + "() takes an attribute name");
        subject = Attribute(item, Str(args.positional[0]), line);
        first_test_arg = 1;
      }
      bool passed;
      if (args.positional.size() <= first_test_arg) {
        passed = Truthy(subject);
      } else {
        if (!IsString(args.positional[first_test_arg])) Fail(line, f + "() takes a test name");
        const std::string test = Str(args.positional[first_test_arg]);
        if (KnownTests().count(test) == 0) Fail(line, f + "() cannot apply the test '" + test + "'");
        std::vector<Value> test_args(args.positional.begin() + static_cast<std::ptrdiff_t>(first_test_arg) + 1,
                                     args.positional.end());
        passed = RunTest(test, subject, test_args, line);
      }
      if (passed == (f == "select" || f == "selectattr")) out.push_back(Plain(item, line));
    }
    return Data(std::move(out));
  }

  bool RunTest(const std::string& t, const Value& v, const std::vector<Value>& args, int line) {
    const auto arg = [&](size_t i) -> const Value& {
      if (i >= args.size()) Fail(line, "the test '" + t + "' needs an argument");
      return args[i];
    };
    if (t == "defined") return !v.undefined();
    if (t == "undefined") return v.undefined();
    if (t == "none") return v.is_data() && v.json().is_null();
    if (t == "string") return IsString(v);
    if (t == "number") return v.is_data() && (v.json().is_number() || v.json().is_boolean());
    if (t == "integer") return v.is_data() && v.json().is_number_integer();
    if (t == "float") return v.is_data() && v.json().is_number_float();
    if (t == "boolean") return v.is_data() && v.json().is_boolean();
    if (t == "true") return v.is_data() && v.json().is_boolean() && v.json().get<bool>();
    if (t == "false") return v.is_data() && v.json().is_boolean() && !v.json().get<bool>();
    if (t == "mapping") return v.is_data() && v.json().is_object();
    if (t == "iterable" || t == "sequence") {
      return v.is_data() && (v.json().is_array() || v.json().is_object() || v.json().is_string());
    }
    if (t == "odd" || t == "even" || t == "divisibleby") {
      if (!IsInteger(v)) Fail(line, "the test '" + t + "' needs an integer");
      const int64_t n = AsInt(v.json());
      if (t == "odd") return n % 2 != 0;
      if (t == "even") return n % 2 == 0;
      const Value& d = arg(0);
      if (!IsInteger(d) || AsInt(d.json()) == 0) Fail(line, "divisibleby needs a non-zero integer");
      return n % AsInt(d.json()) == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==") return Equal(v, arg(0));
    if (t == "ne" || t == "!=") return !Equal(v, arg(0));
    if (t == "in") return Contains(arg(0), v, line);
    // lt gt le ge and their operators.
    static const std::map<std::string, std::string> kOperator = {{"lt", "<"}, {"gt", ">"}, {"le", "<="}, {"ge", ">="},
                                                                 {"<", "<"},  {">", ">"},  {"<=", "<="}, {">=", ">="}};
    return Truthy(Apply(kOperator.at(t), v, arg(0), line));
  }

  RenderLimits limits_;
  // Every namespace() made during the render. Owned here rather than by the values that name
  // it, because `set ns.a = ns` makes a cycle that reference counting would never free.
  std::vector<std::unique_ptr<Namespace>> namespaces_;
  Value globals_;
  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
  uint64_t steps_ = 0;
  uint64_t checked_clock_at_ = 0;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace

std::string RenderTemplate(const Body& body, const Json& variables, const RenderLimits& limits) {
  return Renderer(variables, limits).Run(body);
}

}  // namespace txscore::llm::jinja
