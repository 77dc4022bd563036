#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace txscore {

void ConfigureLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("txscore");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%l%$ %v", spdlog::pattern_time_type::utc);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace txscore
