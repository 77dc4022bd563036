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

#include "common/result.h"

namespace txscore::fraud {

// True when `text` holds a PAN candidate as described above.
bool ContainsPan(std::string_view text);

// `text` with each PAN candidate run (separators included) replaced by kRedactedPan;
// `redactions` (when given) receives how many runs were replaced.
inline constexpr std::string_view kRedactedPan = "[card number redacted]";
std::string RedactPans(std::string_view text, int* redactions = nullptr);

// The stricter test for identifiers (request ids, merchant, claim, policy and provider ids,
// traceparent), which are keys a caller relies on and often long numbers or hex strings,
// where the every-window rule above would refuse many: true when a number standing apart (no
// letter or digit right before or after it) of contiguous digits, or of digits grouped as
// cards are printed (4-4-4-4, 4-4-4-4-3, 4-6-5 with single separators), has the length and
// the prefix a card network issues (Visa 4: 13, 16, 19 digits; Mastercard 51-55, 2221-2720:
// 16; Amex 34, 37: 15; Diners 300-305, 36, 38, 39: 14-19; JCB 3528-3589, Discover 6011,
// 644-649, 65, UnionPay 62, Mir 2200-2204: 16-19; Maestro 50, 56-69: 13-19, leaving out its
// rare 12-digit cards) and passes the Luhn check. Not found by this test: a card number glued
// to letters or inside a longer digit run ("x4000001234567899"), or written with other
// separators ("4000/0012/3456/7899").
bool LooksLikeCardNumber(std::string_view text);

// kInvalidArgument on `field` when LooksLikeCardNumber(value): "holds what looks like a card
// number ...".
Status RefuseCardNumberIn(std::string_view value, const char* field);

}  // namespace txscore::fraud
