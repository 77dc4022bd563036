// UTC times as text (ISO 8601): what people read in the CLI's output and the LLM's prompts.
#pragma once

#include <cstdint>
#include <string>

namespace txscore {

// "YYYY-MM-DDTHH:MM:SSZ" for `time_us` (microseconds since the epoch), with `fraction_digits`
// (0, 3 or 6) digits of the second after a '.': 3 gives milliseconds, 6 microseconds.
std::string FormatUtcTime(int64_t time_us, int fraction_digits = 0);

}  // namespace txscore
