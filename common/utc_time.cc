#include "common/utc_time.h"

#include <cstdio>
#include <ctime>

namespace txscore {

std::string FormatUtcTime(int64_t time_us, int fraction_digits) {
  // Floor division, so a time before the epoch keeps a fraction in [0, 1 s).
  int64_t seconds = time_us / 1000000, micros = time_us % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --seconds;
  }
  const std::time_t whole = static_cast<std::time_t>(seconds);
  std::tm utc{};
  gmtime_r(&whole, &utc);
  char text[48];
  size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  if (fraction_digits == 3) {
    n +=
        static_cast<size_t>(std::snprintf(text + n, sizeof text - n, ".%03lld", static_cast<long long>(micros / 1000)));
  } else if (fraction_digits == 6) {
    n += static_cast<size_t>(std::snprintf(text + n, sizeof text - n, ".%06lld", static_cast<long long>(micros)));
  }
  return std::string(text, n) + "Z";
}

}  // namespace txscore
