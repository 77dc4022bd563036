#include "llm/jinja/parser.h"

#include <algorithm>
#include <cctype>
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

#include "llm/jinja/lexer.h"
#include "llm/jinja/python_text.h"

namespace txscore::llm::jinja {

const std::set<std::string>& KnownFilters() {
  static const std::set<std::string> kFilters = {
      "trim",  "tojson",  "length", "count", "string", "upper",  "lower",   "first",      "last",
      "join",  "default", "d",      "list",  "int",    "float",  "reverse", "items",      "capitalize",
      "title", "replace", "safe",   "abs",   "map",    "select", "reject",  "selectattr", "rejectattr"};
  return kFilters;
}
const std::set<std::string>& KnownTests() {
  static const std::set<std::string> kTests = {
      "defined", "undefined", "none",     "string", "number", "integer",     "float", "boolean", "true", "false",
      "mapping", "iterable",  "sequence", "odd",    "even",   "divisibleby", "eq",    "equalto", "==",   "ne",
      "!=",      "lt",        "<",        "gt",     ">",      "le",          "<=",    "ge",      ">=",   "in"};
  return kTests;
}
const std::set<std::string>& KnownFunctions() {
  static const std::set<std::string> kFunctions = {"namespace", "raise_exception", "range", "dict", "strftime_now"};
  return kFunctions;
}
const std::set<std::string>& KnownMethods() {
  static const std::set<std::string> kMethods = {
      "startswith", "endswith",   "split", "rsplit", "strip", "lstrip", "rstrip", "upper",  "lower", "replace",
      "title",      "capitalize", "find",  "count",  "join",  "items",  "keys",   "values", "get"};
  return kMethods;
}
const std::set<std::string>& LoopAttributes() {
  static const std::set<std::string> kLoop = {"index", "index0", "revindex", "revindex0", "first", "last", "length"};
  return kLoop;
}

namespace {

constexpr int kMaxNesting = 200;  // expressions and blocks: a template deeper than this is refused

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kName && Peek(ahead).text == name;
  }
  bool IsOperator(const char* op) const { return Peek().kind == Token::Kind::kOperator && Peek().text == op; }
  bool AcceptName(const char* name) {
    if (!IsName(name)) return false;
    ++pos_;
    return true;
  }
  bool AcceptOperator(const char* op) {
    if (!IsOperator(op)) return false;
    ++pos_;
    return true;
  }
  void ExpectOperator(const char* op) {
    if (!AcceptOperator(op)) Fail(Peek().line, std::string("expected '") + op + "', found " + Describe(Peek()));
  }
  std::string ExpectName() {
    if (Peek().kind != Token::Kind::kName) Fail(Peek().line, "expected a name, found " + Describe(Peek()));
    return tokens_[pos_++].text;
  }
  void ExpectEnd() {
    if (!AtEnd()) Fail(Peek().line, "unexpected " + Describe(Peek()));
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kEnd:
        return "the end of the tag";
      case Token::Kind::kString:
        return "a string";
      case Token::Kind::kInteger:
      case Token::Kind::kFloat:
        return "a number";
      default:
        return "'" + t.text + "'";
    }
  }

  // expression := or ["if" or ["else" expression]]
  ExprPtr Expression(bool with_condition = true) {
    Nest nest(this);
    ExprPtr expr = Or();
    while (with_condition && IsName("if")) {
      auto cond = Make(Expr::Kind::kCondition);
      ++pos_;
      cond->b = Or();
      if (AcceptName("else")) cond->c = Expression();
      cond->a = std::move(expr);
      expr = Grown(std::move(cond));
    }
    return expr;
  }

 private:
  struct Nest {
    explicit Nest(ExprParser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) Fail(parser->Peek().line, "the expression is nested too deeply");
    }
    ~Nest() { --parser->depth_; }
    ExprParser* parser;
  };

  ExprPtr Make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Peek().line;
    return e;
  }
  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right) {
    auto e = Make(Expr::Kind::kBinary);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return Grown(std::move(e));
  }
  // `e` with its height set from its children: a chain of operators, filters or attributes
  // (a + b + c ..., x|trim|trim ...) nests as deeply as brackets do, and is bounded the same.
  static ExprPtr Grown(ExprPtr e) {
    int below = 0;
    for (const ExprPtr* child : {&e->a, &e->b, &e->c}) {
      if (*child) below = std::max(below, (*child)->height);
    }
    for (const ExprPtr& arg : e->args) {
      if (arg) below = std::max(below, arg->height);
    }
    for (const auto& [key, arg] : e->kwargs) below = std::max(below, arg->height);
    e->height = below + 1;
    if (e->height > kMaxNesting) Fail(e->line, "the expression is nested too deeply");
    return e;
  }

  ExprPtr Or() {
    ExprPtr left = And();
    while (AcceptName("or")) left = Binary("or", std::move(left), And());
    return left;
  }
  ExprPtr And() {
    ExprPtr left = Not();
    while (AcceptName("and")) left = Binary("and", std::move(left), Not());
    return left;
  }
  ExprPtr Not() {
    if (IsName("not")) {
      auto e = Make(Expr::Kind::kUnary);
      ++pos_;
      e->name = "not";
      Nest nest(this);
      e->a = Not();
      return Grown(std::move(e));
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr first = Math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      std::string op;
      if (Peek().kind == Token::Kind::kOperator && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                                                    Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        op = Peek().text;
        ++pos_;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsName("not") && IsName("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(Math1());
    }
    if (ops.empty()) return first;
    if (ops.size() == 1) return Binary(ops[0], std::move(first), std::move(operands[0]));
    auto chain = Make(Expr::Kind::kChain);
    chain->args.push_back(std::move(first));
    for (ExprPtr& operand : operands) chain->args.push_back(std::move(operand));
    chain->ops = std::move(ops);
    return Grown(std::move(chain));
  }
  ExprPtr Math1() {
    ExprPtr left = Concat();
    while (IsOperator("+") || IsOperator("-")) {
      const std::string op = tokens_[pos_++].text;
      left = Binary(op, std::move(left), Concat());
    }
    return left;
  }
  ExprPtr Concat() {
    ExprPtr left = Math2();
    while (AcceptOperator("~")) left = Binary("~", std::move(left), Math2());
    return left;
  }
  ExprPtr Math2() {
    ExprPtr left = Pow();
    while (IsOperator("*") || IsOperator("/") || IsOperator("//") || IsOperator("%")) {
      const std::string op = tokens_[pos_++].text;
      left = Binary(op, std::move(left), Pow());
    }
    return left;
  }
  ExprPtr Pow() {
    ExprPtr left = Unary(true);
    while (AcceptOperator("**")) left = Binary("**", std::move(left), Unary(true));
    return left;
  }
  ExprPtr Unary(bool with_filter) {
    Nest nest(this);
    ExprPtr node;
    if (IsOperator("-") || IsOperator("+")) {
      node = Make(Expr::Kind::kUnary);
      node->name = tokens_[pos_++].text;
      node->a = Unary(false);
      node = Grown(std::move(node));
    } else {
      node = Primary();
    }
    node = Postfix(std::move(node));
    if (with_filter) node = FilterAndTest(std::move(node));
    return node;
  }

  ExprPtr Primary() {
    const Token& t = Peek();
    if (t.kind == Token::Kind::kName) {
      static const std::map<std::string, Json> kConstants = {{"true", true},   {"True", true},    {"false", false},
                                                             {"False", false}, {"none", nullptr}, {"None", nullptr}};
      auto e = Make(Expr::Kind::kLiteral);
      ++pos_;
      if (auto constant = kConstants.find(t.text); constant != kConstants.end()) {
        e->literal = constant->second;
        return e;
      }
      e->kind = Expr::Kind::kName;
      e->name = t.text;
      return e;
    }
    if (t.kind == Token::Kind::kString) {
      auto e = Make(Expr::Kind::kLiteral);
      std::string s;
      while (Peek().kind == Token::Kind::kString) s += tokens_[pos_++].text;  // adjacent strings join
      e->literal = s;
      return e;
    }
    if (t.kind == Token::Kind::kInteger || t.kind == Token::Kind::kFloat) {
      auto e = Make(Expr::Kind::kLiteral);
      e->literal = t.kind == Token::Kind::kInteger ? Json(t.integer) : Json(t.number);
      ++pos_;
      return e;
    }
    if (AcceptOperator("(")) {
      if (AcceptOperator(")")) return Make(Expr::Kind::kList);  // () is an empty tuple
      ExprPtr first = Expression();
      if (AcceptOperator(")")) return first;
      auto tuple = Make(Expr::Kind::kList);
      tuple->args.push_back(std::move(first));
      while (AcceptOperator(",")) {
        if (IsOperator(")")) break;
        tuple->args.push_back(Expression());
      }
      ExpectOperator(")");
      return Grown(std::move(tuple));
    }
    if (AcceptOperator("[")) {
      auto list = Make(Expr::Kind::kList);
      while (!IsOperator("]")) {
        list->args.push_back(Expression());
        if (!AcceptOperator(",")) break;
      }
      ExpectOperator("]");
      return Grown(std::move(list));
    }
    if (AcceptOperator("{")) {
      auto dict = Make(Expr::Kind::kDict);
      while (!IsOperator("}")) {
        dict->args.push_back(Expression());
        ExpectOperator(":");
        dict->args.push_back(Expression());
        if (!AcceptOperator(",")) break;
      }
      ExpectOperator("}");
      return Grown(std::move(dict));
    }
    Fail(t.line, "expected a value, found " + Describe(t));
  }

  ExprPtr Postfix(ExprPtr node) {
    while (true) {
      if (AcceptOperator(".")) {
        if (Peek().kind == Token::Kind::kInteger) {
          auto item = Make(Expr::Kind::kItem);
          auto index = Make(Expr::Kind::kLiteral);
          index->literal = tokens_[pos_++].integer;
          item->a = std::move(node);
          item->b = std::move(index);
          node = Grown(std::move(item));
          continue;
        }
        auto attr = Make(Expr::Kind::kAttr);
        attr->name = ExpectName();
        if (node->kind == Expr::Kind::kName && node->name == "loop" && !IsOperator("(") &&
            LoopAttributes().count(attr->name) == 0) {
          Fail(attr->line, "loop." + attr->name + " is not supported");
        }
        attr->a = std::move(node);
        node = Grown(std::move(attr));
      } else if (AcceptOperator("[")) {
        node = Grown(Subscript(std::move(node)));
      } else if (IsOperator("(")) {
        node = Grown(Call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  ExprPtr Subscript(ExprPtr object) {
    auto slice = Make(Expr::Kind::kSlice);
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!IsOperator("]")) {
      if (AcceptOperator(":")) {
        is_slice = true;
        if (++part > 2) Fail(Peek().line, "a slice has at most three parts");
        continue;
      }
      if (parts[part]) Fail(Peek().line, "expected ':' or ']' in a subscript");
      parts[part] = Expression();
    }
    ExpectOperator("]");
    if (!is_slice) {
      if (!parts[0]) Fail(slice->line, "an empty subscript");
      auto item = Make(Expr::Kind::kItem);
      item->line = slice->line;
      item->a = std::move(object);
      item->b = std::move(parts[0]);
      return item;
    }
    slice->a = std::move(object);
    for (ExprPtr& p : parts) slice->args.push_back(std::move(p));
    return slice;
  }

  void Arguments(Expr* call) {
    ExpectOperator("(");
    while (!IsOperator(")")) {
      if (IsOperator("*") || IsOperator("**")) Fail(Peek().line, "*args and **kwargs in a call are not supported");
      if (Peek().kind == Token::Kind::kName && Peek(1).kind == Token::Kind::kOperator && Peek(1).text == "=") {
        std::string key = tokens_[pos_].text;
        pos_ += 2;
        call->kwargs.emplace_back(std::move(key), Expression());
      } else {
        if (!call->kwargs.empty()) Fail(Peek().line, "a positional argument after a keyword argument");
        call->args.push_back(Expression());
      }
      if (!AcceptOperator(",")) break;
    }
    ExpectOperator(")");
  }

  ExprPtr Call(ExprPtr callee) {
    auto call = Make(Expr::Kind::kFunction);
    if (callee->kind == Expr::Kind::kName) {
      if (KnownFunctions().count(callee->name) == 0) {
        Fail(callee->line, "the function '" + callee->name + "' is not supported");
      }
      call->name = callee->name;
    } else if (callee->kind == Expr::Kind::kAttr) {
      if (KnownMethods().count(callee->name) == 0) {
        Fail(callee->line, "the method '" + callee->name + "' is not supported");
      }
      call->kind = Expr::Kind::kMethod;
      call->name = callee->name;
      call->a = std::move(callee->a);
    } else {
      Fail(callee->line, "only named functions and methods can be called");
    }
    Arguments(call.get());
    return call;
  }

  ExprPtr FilterAndTest(ExprPtr node) {
    while (true) {
      if (AcceptOperator("|")) {
        auto filter = Make(Expr::Kind::kFilter);
        filter->name = ExpectName();
        if (KnownFilters().count(filter->name) == 0) {
          Fail(filter->line, "the filter '" + filter->name + "' is not supported");
        }
        filter->a = std::move(node);
        if (IsOperator("(")) Arguments(filter.get());
        node = Grown(std::move(filter));
      } else if (IsName("is")) {
        auto test = Make(Expr::Kind::kTest);
        ++pos_;
        test->negated = AcceptName("not");
        if (Peek().kind == Token::Kind::kName) {
          test->name = ExpectName();
        } else if (Peek().kind == Token::Kind::kOperator) {
          test->name = tokens_[pos_++].text;  // "is ==" and the like: jinja's operator tests
        } else {
          Fail(Peek().line, "expected a test name after 'is'");
        }
        if (KnownTests().count(test->name) == 0) Fail(test->line, "the test '" + test->name + "' is not supported");
        test->a = std::move(node);
        if (IsOperator("(")) {
          Arguments(test.get());
        } else if (!AtEnd() && !IsName("else") && !IsName("or") && !IsName("and") &&
                   (Peek().kind == Token::Kind::kName || Peek().kind == Token::Kind::kString ||
                    Peek().kind == Token::Kind::kInteger || Peek().kind == Token::Kind::kFloat || IsOperator("[") ||
                    IsOperator("{"))) {
          test->args.push_back(Postfix(Primary()));  // "x is divisibleby 3"
        }
        node = Grown(std::move(test));
      } else if (IsOperator("(")) {
        node = Grown(Call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  Body ParseAll() {
    Body body = ParseUntil({}, nullptr);
    return body;
  }

 private:
  // Statements up to one whose keyword is in `ends` (returned in *end with its parser, left
  // after the keyword). With `ends` empty, up to the end of the template.
  Body ParseUntil(const std::set<std::string>& ends, std::pair<std::string, std::unique_ptr<ExprParser>>* end,
                  const char* opened = nullptr, int opened_line = 0) {
    if (++depth_ > kMaxNesting) Fail(opened_line, "blocks are nested too deeply");
    Body body;
    while (pos_ < segments_.size()) {
      const Segment& segment = segments_[pos_++];
      auto stmt = std::make_unique<Stmt>();
      stmt->line = segment.line;
      if (segment.kind == Segment::Kind::kText) {
        stmt->text = segment.text;
        body.push_back(std::move(stmt));
        continue;
      }
      auto parser = std::make_unique<ExprParser>(Tokenize(segment.text, segment.line));
      if (segment.kind == Segment::Kind::kOutput) {
        stmt->kind = Stmt::Kind::kOutput;
        stmt->expr = parser->Expression();
        parser->ExpectEnd();
        body.push_back(std::move(stmt));
        continue;
      }
      if (parser->AtEnd()) Fail(segment.line, "an empty {% %} tag");
      const std::string keyword = parser->ExpectName();
      if (ends.count(keyword)) {
        *end = {keyword, std::move(parser)};
        --depth_;
        return body;
      }
      if (keyword == "if") {
        body.push_back(ParseIf(std::move(stmt), parser.get()));
      } else if (keyword == "for") {
        body.push_back(ParseFor(std::move(stmt), parser.get()));
      } else if (keyword == "set") {
        body.push_back(ParseSet(std::move(stmt), parser.get()));
      } else if (keyword == "break" || keyword == "continue") {
        if (loops_ == 0) Fail(segment.line, "'" + keyword + "' outside a loop");
        parser->ExpectEnd();
        stmt->kind = keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
        body.push_back(std::move(stmt));
      } else if (keyword == "elif" || keyword == "else" || keyword == "endif" || keyword == "endfor" ||
                 keyword == "endset") {
        Fail(segment.line, "unexpected '" + keyword + "'" +
                               (opened ? std::string(" inside '") + opened + "' of line " + std::to_string(opened_line)
                                       : std::string()));
      } else {
        Fail(segment.line, "the statement '" + keyword + "' is not supported");
      }
    }
    if (!ends.empty()) {
      Fail(opened_line, std::string("'") + opened + "' is never closed (expected " + *ends.rbegin() + ")");
    }
    --depth_;
    return body;
  }

  StmtPtr ParseIf(StmtPtr stmt, ExprParser* parser) {
    stmt->kind = Stmt::Kind::kIf;
    ExprPtr condition = parser->Expression();
    parser->ExpectEnd();
    while (true) {
      std::pair<std::string, std::unique_ptr<ExprParser>> end;
      Body body = ParseUntil({"elif", "else", "endif"}, &end, "if", stmt->line);
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      if (end.first == "endif") {
        end.second->ExpectEnd();
        return stmt;
      }
      if (end.first == "else") {
        end.second->ExpectEnd();
        std::pair<std::string, std::unique_ptr<ExprParser>> endif;
        Body else_body = ParseUntil({"endif"}, &endif, "if", stmt->line);
        endif.second->ExpectEnd();
        stmt->branches.emplace_back(nullptr, std::move(else_body));
        return stmt;
      }
      condition = end.second->Expression();  // elif
      end.second->ExpectEnd();
    }
  }

  StmtPtr ParseFor(StmtPtr stmt, ExprParser* parser) {
    stmt->kind = Stmt::Kind::kFor;
    const bool parenthesised = parser->AcceptOperator("(");
    do {
      stmt->targets.push_back(parser->ExpectName());
    } while (parser->AcceptOperator(","));
    if (parenthesised) parser->ExpectOperator(")");
    if (!parser->AcceptName("in")) Fail(stmt->line, "expected 'in' in a for loop");
    stmt->expr = parser->Expression(/*with_condition=*/false);
    if (parser->AcceptName("if")) stmt->filter = parser->Expression(/*with_condition=*/false);
    if (parser->IsName("recursive")) Fail(stmt->line, "recursive for loops are not supported");
    parser->ExpectEnd();
    ++loops_;
    std::pair<std::string, std::unique_ptr<ExprParser>> end;
    stmt->body = ParseUntil({"else", "endfor"}, &end, "for", stmt->line);
    --loops_;
    end.second->ExpectEnd();
    if (end.first == "else") {
      std::pair<std::string, std::unique_ptr<ExprParser>> endfor;
      stmt->else_body = ParseUntil({"endfor"}, &endfor, "for", stmt->line);
      endfor.second->ExpectEnd();
    }
    return stmt;
  }

  StmtPtr ParseSet(StmtPtr stmt, ExprParser* parser) {
    stmt->kind = Stmt::Kind::kSet;
    stmt->targets.push_back(parser->ExpectName());
    if (parser->AcceptOperator(".")) {
      stmt->attribute = parser->ExpectName();
    } else {
      while (parser->AcceptOperator(",")) stmt->targets.push_back(parser->ExpectName());
    }
    if (parser->AtEnd()) Fail(stmt->line, "block assignments ({% set x %}...{% endset %}) are not supported");
    parser->ExpectOperator("=");
    stmt->expr = parser->Expression();
    if (parser->IsOperator(",")) Fail(stmt->line, "a tuple without parentheses on the right of set is not supported");
    parser->ExpectEnd();
    return stmt;
  }

  std::vector<Segment> segments_;
  size_t pos_ = 0;
  int loops_ = 0;
  int depth_ = 0;
};

}  // namespace

Body ParseTemplate(std::string_view source) { return TemplateParser(SplitSegments(source)).ParseAll(); }

}  // namespace txscore::llm::jinja
