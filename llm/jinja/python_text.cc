#include "llm/jinja/python_text.h"

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

#include "llm/jinja/syntax.h"
#include "llm/utf8.h"

namespace txscore::llm::jinja {

// ---------------------------------------------------------------------------------------------
// Unicode helpers: Python counts, slices and strips strings by code point.

// Python's str.isspace().
bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// str.strip / lstrip / rstrip: whitespace, or the characters of `chars` when given.
std::string Strip(const std::string& text, bool left, bool right, const std::string* chars) {
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

static std::string PythonStringRepr(const std::string& s) {
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

static void JsonString(std::string* out, const std::string& s) {
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

}  // namespace txscore::llm::jinja
