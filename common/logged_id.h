// The card-number check for ids that log lines and the audit trail keep whole (a transaction's
// request id, a claim's ids). Kept out of common/pan_scan.h, which nearly every file includes.
#pragma once

#include <string_view>

#include "common/result.h"

namespace txscore {

// kInvalidArgument on `field` when RefuseCardNumberIn refuses `value`, or when the rule for log
// lines (common/pan_scan.h, PanRule::kLogLine) would leave a card-shaped run in it: one inside a
// word shaped as a token or digest txscore makes (64 hex digits, alone, after a key id and '_',
// or after "sha256:"), whose hex log lines and the trail leave whole. So such a word can never
// carry a caller's card into a log line ("r.4111111111111111337f..." with 64 hex digits). A
// random 64-hex id is refused 599 times in 100,000 (PanScan.HowOftenRandomIdsAndTokensLookLikeCards).
Status RefuseCardNumberInLoggedId(std::string_view value, const char* field);

}  // namespace txscore
