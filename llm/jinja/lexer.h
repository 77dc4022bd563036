// The two lexical passes of a template: the source split into text, {{ output }} and
// {% statements %} (Jinja's whitespace rules as Hugging Face configures them), and the
// expression inside a tag split into tokens. Private to the Jinja engine.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace txscore::llm::jinja {

struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string text;
  int line;
};

std::vector<Segment> SplitSegments(std::string_view raw);

struct Token {
  enum class Kind { kName, kInteger, kFloat, kString, kOperator, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // name, operator, or the string's decoded value
  int64_t integer = 0;
  double number = 0;
  int line = 0;
};

// The tokens of `text` (the inside of a tag that starts on `line`), ending with a kEnd token.
std::vector<Token> Tokenize(std::string_view text, int line);

}  // namespace txscore::llm::jinja
