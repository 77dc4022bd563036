// UTF-8 validity, for text that outside callers send and txscore writes back as JSON (where a
// byte that is not UTF-8 would be replaced, so two different inputs could come out the same).
#pragma once

#include <string_view>

namespace txscore {

// True when `text` is well-formed UTF-8 (RFC 3629): no overlong forms, no UTF-16 surrogates,
// nothing above U+10FFFF, no truncated sequence.
inline bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the byte after the lead
    if (lead < 0x80) {
      ++i;
      continue;
    } else if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) low = 0xa0;   // no overlong 3-byte forms
      if (lead == 0xed) high = 0x9f;  // no surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) low = 0x90;   // no overlong 4-byte forms
      if (lead == 0xf4) high = 0x8f;  // nothing above U+10FFFF
    } else {
      return false;  // a continuation byte, an overlong 2-byte lead (c0, c1), or f5..ff
    }
    if (i + length > text.size()) return false;
    if (byte(i + 1) < low || byte(i + 1) > high) return false;
    for (size_t k = 2; k < length; ++k) {
      if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return false;
    }
    i += length;
  }
  return true;
}

}  // namespace txscore
