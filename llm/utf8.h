// UTF-8 helpers shared by the tokenizer, its trainer and the tasks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace txscore::llm {

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte, so
// malformed text still advances).
inline size_t Utf8SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;
}

// The characters of `text`, each as a view of its bytes.
inline std::vector<std::string_view> SplitUtf8(std::string_view text) {
  std::vector<std::string_view> chars;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(Utf8SequenceLength(static_cast<unsigned char>(text[i])), text.size() - i);
    chars.push_back(text.substr(i, n));
    i += n;
  }
  return chars;
}

// The code point of one character's bytes (a SplitUtf8 piece).
inline char32_t CodePointOf(std::string_view ch) {
  const auto b = [&](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(ch[i])); };
  if (ch.size() == 1) return b(0);
  if (ch.size() == 2) return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
  if (ch.size() == 3) return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
}

// Appends `cp` to `out` as UTF-8.
inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// Number of characters (code points) in well-formed UTF-8.
inline size_t Utf8Length(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xc0) != 0x80; }));
}

}  // namespace txscore::llm
