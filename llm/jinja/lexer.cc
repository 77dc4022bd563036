#include "llm/jinja/lexer.h"

#include <unicode/uchar.h>

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

#include "llm/jinja/python_text.h"
#include "llm/jinja/syntax.h"
#include "llm/utf8.h"

namespace txscore::llm::jinja {

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

namespace {

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

}  // namespace

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

}  // namespace txscore::llm::jinja
