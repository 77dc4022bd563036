// UTF-8 helpers shared by the tokenizer, its trainer and the tasks.
#pragma once

#include <algorithm>
#include <cstddef>
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

// Number of characters (code points) in well-formed UTF-8.
inline size_t Utf8Length(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xc0) != 0x80; }));
}

}  // namespace txscore::llm
