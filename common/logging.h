// Logging set-up. Components log through spdlog; this picks the format and level once.
//
// Contract for every log call site: never log a PAN, a card verification code or a key.
// Card tokens and request ids are fine.
#pragma once

#include <string>

namespace txscore {

// `level` is one of trace, debug, info, warn, error, off. Logs go to stderr.
void ConfigureLogging(const std::string& level);

}  // namespace txscore
