// Finding card numbers (PANs) where none should be: in free text, ids and tokens.
//
// A PAN candidate is a run of digits in which single separators (space, '-', '.', '_') may
// stand between digits, as people write card numbers: "4000 0012 3456 7899",
// "4000-0012-3456-7899", or digits glued to other text ("x4000001234567899"). A run whose
// digits, separators removed, contain 12 to 19 consecutive digits that pass the Luhn check is
// treated as a PAN. Every window is checked, so a PAN inside a longer digit run is found too
// (at the price of also flagging some long non-card numbers: redaction errs towards privacy).
#pragma once

#include <string>
#include <string_view>

namespace txscore::fraud {

// True when `text` holds a PAN candidate as described above.
bool ContainsPan(std::string_view text);

// `text` with each PAN candidate run (separators included) replaced by kRedactedPan;
// `redactions` (when given) receives how many runs were replaced.
inline constexpr std::string_view kRedactedPan = "[card number redacted]";
std::string RedactPans(std::string_view text, int* redactions = nullptr);

}  // namespace txscore::fraud
