#include "llm/jinja.h"

#include <unicode/uchar.h>
#include <unicode/unistr.h>

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

#include "llm/utf8.h"

namespace txscore::llm::jinja {
namespace {

// Errors unwind the parser and the renderer as this private type; Parse and Render catch it
// and return it as a Result, so nothing escapes the engine.
struct JinjaError {
  ErrorCode code;
  int line;
  std::string message;
};

[[noreturn]] void Fail(int line, std::string message, ErrorCode code = ErrorCode::kInvalidArgument) {
  throw JinjaError{code, line, std::move(message)};
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// ---------------------------------------------------------------------------------------------
// Unicode helpers: Python counts, slices and strips strings by code point.

// Python's str.isspace().
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip / lstrip / rstrip: whitespace, or the characters of `chars` when given.
std::string Strip(const std::string& text, bool left, bool right, const std::string* chars = nullptr) {
  const std::vector<std::string_view> cs = SplitUtf8(text);
  std::set<char32_t> strip_set;
  if (chars != nullptr) {
    for (std::string_view c : SplitUtf8(*chars)) strip_set.insert(CodePointOf(c));
  }
  const auto strip = [&](std::string_view c) {
    return chars != nullptr ? strip_set.count(CodePointOf(c)) > 0 : IsPythonSpace(CodePointOf(c));
  };
  size_t begin = 0, end = cs.size();
  while (left && begin < end && strip(cs[begin])) ++begin;
  while (right && end > begin && strip(cs[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cs[i];
  return out;
}

std::string MapCase(const std::string& text, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  std::string out;
  (upper ? u.toUpper() : u.toLower()).toUTF8String(out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Python's text forms of values.

std::string PythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest digits that read back as d, then Python's layout of them (repr: positional
  // for exponents -4..15, else scientific with at least two exponent digits).
  char buf[40];
  for (int precision = 0; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string mantissa = s.substr(0, e);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out +=
          digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

std::string PythonRepr(const Json& value);

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += std::string("\\") + quote;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out + quote;
}

std::string PythonRepr(const Json& value) {
  if (value.is_string()) return PythonStringRepr(value.get_ref<const std::string&>());
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + PythonRepr(value[i]);
    return out + "]";
  }
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      out += (first ? "" : ", ") + PythonStringRepr(key) + ": " + PythonRepr(item);
      first = false;
    }
    return out + "}";
  }
  return PythonStr(value);
}

void JsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// json.dumps's text of `value`; past `max_bytes` of it, or `max_depth` levels, a JinjaError
// (ErrorCode::kResourceExhausted, line 0: the caller names its own).
void JsonDump(std::string* out, const Json& value, int indent, int level, size_t max_bytes, int max_depth) {
  if (out->size() > max_bytes ||
      (indent > 0 && static_cast<size_t>(indent) * static_cast<size_t>(level + 1) > max_bytes)) {
    Fail(0, "tojson's text is longer than " + std::to_string(max_bytes) + " bytes", ErrorCode::kResourceExhausted);
  }
  if (level > max_depth) {
    Fail(0, "tojson of a value nested more than " + std::to_string(max_depth) + " deep", ErrorCode::kResourceExhausted);
  }
  const std::string newline = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ') : "";
  const std::string closing = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * level), ' ') : "";
  const char* separator = indent >= 0 ? "," : ", ";
  if (value.is_string()) {
    JsonString(out, value.get_ref<const std::string&>());
  } else if (value.is_array()) {
    if (value.empty()) {
      *out += "[]";
      return;
    }
    *out += "[" + newline;
    for (size_t i = 0; i < value.size(); ++i) {
      if (i) *out += separator + newline;
      JsonDump(out, value[i], indent, level + 1, max_bytes, max_depth);
    }
    *out += closing + "]";
  } else if (value.is_object()) {
    if (value.empty()) {
      *out += "{}";
      return;
    }
    *out += "{" + newline;
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) *out += separator + newline;
      first = false;
      JsonString(out, key);
      *out += ": ";
      JsonDump(out, item, indent, level + 1, max_bytes, max_depth);
    }
    *out += closing + "}";
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : PythonFloat(d);
  } else {
    *out += value.dump();  // integers, true, false, null
  }
}

// ---------------------------------------------------------------------------------------------
// Splitting the source into text, {{ output }} and {% statements %}, with Jinja's whitespace
// rules as Hugging Face configures them.

struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string text;
  int line;
};

std::vector<Segment> SplitSegments(std::string_view raw) {
  // Jinja reads "\r\n" and "\r" as "\n" and drops one newline at the end (keep_trailing_newline
  // is off).
  std::string source;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      source.push_back('\n');
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      source.push_back(raw[i]);
    }
  }
  if (!source.empty() && source.back() == '\n') source.pop_back();

  std::vector<Segment> segments;
  std::string text;
  int text_line = 1, line = 1;
  bool line_starting = true;  // the text so far starts a line (jinja's lstrip_blocks condition)
  size_t pos = 0;
  const auto advance_to = [&](size_t to) {
    line += static_cast<int>(std::count(source.begin() + static_cast<std::ptrdiff_t>(pos),
                                        source.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
    pos = to;
  };
  while (pos < source.size()) {
    size_t open = pos;
    while (open + 1 < source.size() &&
           !(source[open] == '{' && (source[open + 1] == '{' || source[open + 1] == '%' || source[open + 1] == '#'))) {
      ++open;
    }
    if (open + 1 >= source.size()) {
      text.append(source, pos, std::string::npos);
      break;
    }
    text.append(source, pos, open - pos);
    advance_to(open);
    const int tag_line = line;
    const char kind = source[open + 1];
    size_t inner = open + 2;
    const char left = inner < source.size() ? source[inner] : '\0';
    if (left == '-' || left == '+') ++inner;
    if (left == '-') {
      while (!text.empty() && IsAsciiSpace(text.back())) text.pop_back();
    } else if (kind != '{' && left != '+') {
      const size_t newline = text.rfind('\n');
      const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
      if ((newline != std::string::npos || line_starting) &&
          text.find_first_not_of(" \t", line_start) == std::string::npos) {
        text.resize(line_start);
      }
    }
    if (!text.empty()) segments.push_back({Segment::Kind::kText, text, text_line});
    text.clear();

    // The end of the tag: outside strings and brackets for {{ }} and {% %}.
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end = inner;
    if (kind == '#') {
      end = source.find(close, inner);
    } else {
      int depth = 0;
      while (end < source.size()) {
        const char c = source[end];
        if (c == '\'' || c == '"') {
          for (++end; end < source.size() && source[end] != c; ++end) {
            if (source[end] == '\\') ++end;
          }
        } else if (c == '(' || c == '[' || c == '{') {
          ++depth;
        } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
          --depth;
        } else if (depth == 0 && source.compare(end, 2, close) == 0) {
          break;
        }
        ++end;
      }
      if (end >= source.size()) end = std::string::npos;
    }
    if (end == std::string::npos) {
      const char* what = kind == '{' ? "{{" : kind == '%' ? "{%" : "{#";
      Fail(tag_line, std::string(what) + " is never closed");
    }
    size_t content_end = end;
    const char right = end > inner ? source[end - 1] : '\0';
    if (right == '-' || (right == '+' && kind != '{')) --content_end;
    if (kind != '#') {
      segments.push_back({kind == '{' ? Segment::Kind::kOutput : Segment::Kind::kStatement,
                          source.substr(inner, content_end - inner), tag_line});
    }
    size_t after = end + 2;
    line_starting = false;
    if (right == '-') {
      while (after < source.size() && IsAsciiSpace(source[after])) {
        line_starting = source[after] == '\n';
        ++after;
      }
    } else if (kind != '{' && right != '+' && after < source.size() && source[after] == '\n') {
      ++after;  // trim_blocks
      line_starting = true;
    }
    advance_to(std::min(after, source.size()));
    text_line = line;
  }
  if (!text.empty()) segments.push_back({Segment::Kind::kText, text, text_line});
  return segments;
}

// ---------------------------------------------------------------------------------------------
// Tokens of the expressions inside tags.

struct Token {
  enum class Kind { kName, kInteger, kFloat, kString, kOperator, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the string's decoded value
  int64_t integer = 0;
  double number = 0;
  int line = 0;
};

// Python's int(text): surrounding whitespace, a sign, decimal digits with single underscores
// between them. nullopt when Python would raise ValueError; a number past int64 (a Python big
// int) is an error: refused rather than rendered differently.
std::optional<int64_t> PythonIntText(const std::string& text, int line) {
  size_t i = 0, end = text.size();
  while (i < end && IsAsciiSpace(text[i])) ++i;
  while (end > i && IsAsciiSpace(text[end - 1])) --end;
  bool negative = false;
  if (i < end && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (i == end) return std::nullopt;
  int64_t value = 0;
  for (size_t k = i; k < end; ++k) {
    const char c = text[k];
    if (c == '_') {
      if (k == i || k + 1 == end || text[k + 1] == '_') return std::nullopt;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, c - '0', &value)) {
      Fail(line, "integer overflow: " + text);
    }
  }
  return negative ? -value : value;
}

// Python's float(text): strtod's decimal forms and inf/infinity/nan, with underscores between
// digits, but no hexadecimal (strtod reads 0x1A; Python does not).
std::optional<double> PythonFloatText(const std::string& text) {
  std::string cleaned;
  size_t i = 0, end = text.size();
  while (i < end && IsAsciiSpace(text[i])) ++i;
  while (end > i && IsAsciiSpace(text[end - 1])) --end;
  for (size_t k = i; k < end; ++k) {
    const char c = text[k];
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P') return std::nullopt;
    if (c == '_') {
      const bool between_digits = k > i && k + 1 < end && std::isdigit(static_cast<unsigned char>(text[k - 1])) &&
                                  std::isdigit(static_cast<unsigned char>(text[k + 1]));
      if (!between_digits) return std::nullopt;
      continue;
    }
    cleaned.push_back(c);
  }
  if (cleaned.empty()) return std::nullopt;
  char* stop = nullptr;
  const double d = std::strtod(cleaned.c_str(), &stop);
  if (*stop != '\0') return std::nullopt;
  return d;
}

std::string DecodeStringLiteral(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char c = body[++i];
    const auto hex = [&](size_t digits) {
      const std::string h(body.substr(i + 1, digits));
      if (h.size() != digits || h.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        Fail(line, "a \\x/\\u escape needs " + std::to_string(digits) + " hex digits");
      }
      i += digits;
      return static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16));
    };
    switch (c) {
      case 'n':
        out.push_back('\n');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case '0':
      case '1':
      case '2':
      case '3':
      case '4':
      case '5':
      case '6':
      case '7': {  // up to three octal digits, as Python reads them
        uint32_t value = static_cast<uint32_t>(c - '0');
        for (int more = 0; more < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++more) {
          value = value * 8 + static_cast<uint32_t>(body[++i] - '0');
        }
        AppendUtf8(static_cast<char32_t>(value), &out);
        break;
      }
      case 'N': {  // \N{NAME}: a character by its Unicode name (or a name alias)
        const size_t close = body.find('}', i + 1);
        if (i + 1 >= body.size() || body[i + 1] != '{' || close == std::string_view::npos) {
          Fail(line, "a \\N escape needs {NAME}");
        }
        const std::string name(body.substr(i + 2, close - i - 2));
        UErrorCode status = U_ZERO_ERROR;
        UChar32 found = u_charFromName(U_UNICODE_CHAR_NAME, name.c_str(), &status);
        if (U_FAILURE(status)) {
          status = U_ZERO_ERROR;
          found = u_charFromName(U_CHAR_NAME_ALIAS, name.c_str(), &status);
        }
        if (U_FAILURE(status)) Fail(line, "unknown Unicode character name in \\N{" + name + "}");
        AppendUtf8(static_cast<char32_t>(found), &out);
        i = close;
        break;
      }
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      case '\n':
        break;  // a backslash at the end of a line continues it
      case 'x':
        AppendUtf8(hex(2), &out);
        break;
      case 'u':
        AppendUtf8(hex(4), &out);
        break;
      case 'U':
        AppendUtf8(hex(8), &out);
        break;
      default:  // Python keeps an unknown escape as written
        out.push_back('\\');
        out.push_back(c);
    }
  }
  return out;
}

std::vector<Token> Tokenize(std::string_view text, int line) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (IsAsciiSpace(c)) {
      if (c == '\n') ++line;
      ++i;
      continue;
    }
    Token token;
    token.line = line;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      token.kind = Token::Kind::kName;
      token.text = std::string(text.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      bool is_float = false;
      if (j + 1 < text.size() && text[j] == '.' && std::isdigit(static_cast<unsigned char>(text[j + 1]))) {
        is_float = true;
        for (++j; j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])); ++j) {
        }
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) {
          is_float = true;
          for (j = k; j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])); ++j) {
          }
        }
      }
      const std::string literal(text.substr(i, j - i));
      if (is_float) {
        token.kind = Token::Kind::kFloat;
        token.number = std::strtod(literal.c_str(), nullptr);
      } else {
        token.kind = Token::Kind::kInteger;
        errno = 0;
        token.integer = std::strtoll(literal.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail(line, "the integer " + literal + " is too large");
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != c) {
        if (text[j] == '\\') ++j;
        ++j;
      }
      if (j >= text.size()) Fail(line, "a string is never closed");
      token.kind = Token::Kind::kString;
      const std::string_view body = text.substr(i + 1, j - i - 1);
      token.text = DecodeStringLiteral(body, line);
      line += static_cast<int>(std::count(body.begin(), body.end(), '\n'));
      i = j + 1;
    } else {
      static const char* kTwoCharacter[] = {"==", "!=", "<=", ">=", "//", "**"};
      token.kind = Token::Kind::kOperator;
      for (const char* op : kTwoCharacter) {
        if (text.compare(i, 2, op) == 0) token.text = op;
      }
      if (token.text.empty()) {
        if (std::string_view("+-*/%~|.,:()[]{}<>=").find(c) == std::string_view::npos) {
          Fail(line, std::string("unexpected character '") + c + "'");
        }
        token.text = std::string(1, c);
      }
      i += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  Token end;
  end.line = line;
  tokens.push_back(end);
  return tokens;
}

// ---------------------------------------------------------------------------------------------
// The syntax tree.

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

struct Template::Node {
  Body body;
};

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
    root->body = TemplateParser(SplitSegments(source)).ParseAll();
    return Template(std::move(root), name);
  } catch (const JinjaError& e) {
    return Error{e.code, name + ":" + std::to_string(e.line) + ": " + e.message, "chat_template"};
  }
}

Result<std::string> Template::Render(const Json& variables, const RenderLimits& limits) const {
  if (!variables.is_object()) return InvalidArgument("template variables must be an object");
  try {
    return Renderer(variables, limits).Run(root_->body);
  } catch (const JinjaError& e) {
    return Error{e.code, name_ + ":" + std::to_string(e.line) + ": " + e.message, {}};
  } catch (const nlohmann::json::exception& e) {
    return Internal(name_ + ": " + e.what());
  }
}

}  // namespace txscore::llm::jinja
