// Finding card numbers (PANs) where none should be: in free text, ids, error messages and
// everything the audit trail stores.
//
// Text is normalized first, so that a card number cannot hide behind how it is written:
// decimal digits of any script (full-width "４０００", Arabic-Indic, Devanagari, ...) count as
// digits; invisible format characters (zero-width space and joiners, soft hyphen, byte-order
// mark, direction marks) are skipped; Unicode spaces (no-break, thin, ideographic, ...), dashes
// (en, em, minus, ...) and full-width punctuation count as the ASCII separator they look like.
//
// A PAN candidate in free text is a run of digits in which up to three separators (any
// characters that are neither letters nor digits: spaces, tabs, line breaks, dashes, '.', '/',
// '*', '#', '(', ...) may stand between digits, as people write card numbers:
// "4000 0012 3456 7899", "4000 - 0012 - 3456 - 7899", "4000/0012/3456/7899", or digits glued to
// other text ("x4000001234567899"). A run whose digits, separators removed, contain 12 to 19
// consecutive digits that pass the Luhn check is treated as a PAN. Every window is checked, so
// a PAN inside a longer digit run is found too (at the price of also flagging some long
// non-card numbers and lists of numbers: redaction errs towards privacy).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace txscore {

// The Luhn check of a string of ASCII digits (false for anything else or empty).
bool LuhnValid(std::string_view digits);

// True when `text` holds a PAN candidate as described above.
bool ContainsPan(std::string_view text);

// Which runs RedactPans replaces:
// - kFreeText: PAN candidates as ContainsPan finds them (every 12-19 digits of a run that pass
//   Luhn), for text people write (narratives, notes, error messages quoting input).
// - kLogLine: for log lines, which name ids, digests and peers: a run is replaced when 13-19 of
//   its digits in a row have a card network's prefix and length and pass Luhn, as
//   LooksLikeCardNumber judges a card (so a card inside a longer number, in any grouping, glued
//   to any letters: "e94111111111111111", "a41111-11111-111111"); a run inside a token or digest
//   txscore makes is judged as IdentifierHoldsCardNumber judges its word, so their hex stays
//   whole; and an IPv4 address, with its port, is no part of a run ("10.244.13.201:45678" stays:
//   peers are how log lines and the audit trail name callers) unless digits follow it that begin
//   no address join its port, or the whole address where it has none ("10.0.0.7:5555 5555 5555
//   4444"); an IPv6 address in brackets is no part of a run either. Not found in a log line: a card
//   written as an address ("41.111.111.111:11111", "10.0.0.4:1111 1111 1111 1111"), of unlisted networks.
enum class PanRule { kFreeText, kLogLine };
// `text` with each run `rule` finds (its separators and hidden characters included) replaced by
// kRedactedPan; `redactions` (when given) receives how many runs were replaced.
inline constexpr std::string_view kRedactedPan = "[card number redacted]";
std::string RedactPans(std::string_view text, int* redactions = nullptr, PanRule rule = PanRule::kFreeText);

// The stricter test for identifiers (request ids, merchant, claim, policy and provider ids,
// traceparent), which are keys a caller relies on and often long numbers or hex strings,
// where the every-window rule above would refuse many: true when a run of contiguous digits
// (letters around it do not hide it, a-f included: "REQ4000001234567899", "card4111111111111111"), that run without
// the zeros padding it in front, behind or both ("04111111111111111", a zero-padded trace id), or digits grouped as
// cards are printed (4-4-4-4, 4-4-4-4-3, 4-6-5, 4-6-4 and 8-8, split by up to three characters that are neither
// letters nor digits: "4111|1111|1111|1111", "4111 - 1111 - ..."), has the length and the prefix a card network issues
// (Visa 4: 13, 16, 19 digits; Mastercard 51-55, 2221-2720: 16; Amex 34, 37: 15; Diners 300-305, 36, 38, 39: 14-19; JCB
// 3528-3589, Discover 6011, 644-649, 65, UnionPay 62, Mir 2200-2204, RuPay 81-82, Troy 9792: 16-19; UATP 1: 15; Maestro
// 50, 56-69: 13-19, leaving out its rare 12-digit cards; not listed, so not found: domestic schemes such as UzCard
// 8600, Humo 9860, GPN 1946 and China T-Union 31) and passes the Luhn check. So a hex id whose digits happen to
// make a card is refused too (42 in 100,000 uuid4().hex ids). Not found by this test: a card number inside a longer
// digit run that is not zeros ("94000001234567899"), split by more than three characters or by letters, or reversed
// (docs/rpc.md: the id shapes to use).
bool LooksLikeCardNumber(std::string_view text);

// For a value that may be hex txscore made (a card token, KEYID_ and 64 hex digits or the 64
// alone; a "sha256:" and 64 hex digits bundle digest: what the audit trail stores and rule
// lists hold): those forms' hex is an HMAC's or a hash's, whose digit runs are card-shaped one
// time in 900 by chance, so they hold a card number only when all 64 are decimal digits and
// LooksLikeCardNumber finds one in them (zeros around a card: as ValidateCardToken judges a
// caller's token), or when the key id in front, with the digits that continue it, holds one
// ("4111111111111111_" and 64 hex digits); any other value as LooksLikeCardNumber judges it.
bool IdentifierHoldsCardNumber(std::string_view value);

// kInvalidArgument on `field` when LooksLikeCardNumber(value): "holds what looks like a card
// number ...". The value itself is never quoted. For ids that log lines and the audit trail keep
// (a request id, a claim's ids), common/logged_id.h's RefuseCardNumberInLoggedId is stricter
// still: it also refuses a card the log-line rule would leave in a token-shaped word.
Status RefuseCardNumberIn(std::string_view value, const char* field);

}  // namespace txscore
