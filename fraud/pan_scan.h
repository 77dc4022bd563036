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
// traceparent), which are keys a caller relies on and often long numbers, where the
// every-window rule above would refuse most numeric ids: true when a run of contiguous digits,
// or digits grouped as cards are printed (4-4-4-4, 4-4-4-4-3, 4-6-5 with single separators,
// with no letter or digit right before or after),
// has as a whole the length and the prefix a card network issues (Visa 4: 13, 16,
// 19 digits; Mastercard 51-55, 2221-2720: 16; Amex 34, 37: 15; Diners 300-305, 36, 38, 39:
// 14-19; JCB 3528-3589, Discover 6011, 644-649, 65, UnionPay 62, Mir 2200-2204: 16-19;
// Maestro 50, 56-69: 13-19, leaving out its rare 12-digit cards, which a UUID's digit groups
// would match) and passes the Luhn check. A card number glued inside a longer digit run is not
// found by this test.
bool LooksLikeCardNumber(std::string_view text);

// kInvalidArgument on `field` when LooksLikeCardNumber(value): "holds what looks like a card
// number ...".
Status RefuseCardNumberIn(std::string_view value, const char* field);

}  // namespace txscore::fraud
