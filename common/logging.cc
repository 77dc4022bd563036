#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/pan_scan.h"

namespace txscore {
namespace {

// What LogContext sets for this thread; empty outside a request.
struct ThreadLogContext {
  std::string request_id;
  std::string trace_id;
};
thread_local ThreadLogContext current_context;

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%fZ %^%l%$ %n: %v";

// One JSON object per line (see logging.h). Built with nlohmann::ordered_json so the fields
// keep their documented order; a message that is not valid UTF-8 has the bad bytes replaced
// (U+FFFD) so the line stays valid JSON.
class JsonLineFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count() % 1000000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char time[40];
    const size_t n = std::strftime(time, sizeof time, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(time + n, sizeof time - n, ".%06lldZ", static_cast<long long>(micros));

    nlohmann::ordered_json line;
    line["time"] = time;
    line["level"] =
        std::string(spdlog::level::to_string_view(msg.level).data(), spdlog::level::to_string_view(msg.level).size());
    line["component"] = std::string(msg.logger_name.data(), msg.logger_name.size());
    line["message"] = std::string(msg.payload.data(), msg.payload.size());
    const ThreadLogContext& context = current_context;
    const auto or_null = [](const std::string& id) {
      return id.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(id);
    };
    // Ids passed the id rule when the request was validated; a card inside a longer digit run
    // passes it, so they are redacted here as the message is.
    line["request_id"] = or_null(RedactPans(context.request_id, nullptr, PanRule::kLogLine));
    line["trace_id"] = or_null(RedactPans(context.trace_id, nullptr, PanRule::kLogLine));
    const std::string text = line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonLineFormatter>(); }
};

// Every line's message passes here, whichever component or library wrote it, so a card number
// that reached a message (a caller's job id or file name, an error quoting input) is redacted
// before it is written, by the rule for log lines (common/pan_scan.h, PanRule::kLogLine): any
// card-shaped digits, in any grouping, but the tokens and digests txscore makes and peers'
// addresses stay readable.
class RedactingFormatter final : public spdlog::formatter {
 public:
  explicit RedactingFormatter(std::unique_ptr<spdlog::formatter> inner) : inner_(std::move(inner)) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string redacted =
        RedactPans(std::string_view(msg.payload.data(), msg.payload.size()), nullptr, PanRule::kLogLine);
    spdlog::details::log_msg copy = msg;
    copy.payload = spdlog::string_view_t(redacted.data(), redacted.size());
    inner_->format(copy, dest);
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<RedactingFormatter>(inner_->clone());
  }

 private:
  std::unique_ptr<spdlog::formatter> inner_;
};

std::unique_ptr<spdlog::formatter> FormatterFor(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<RedactingFormatter>(std::make_unique<JsonLineFormatter>());
  return std::make_unique<RedactingFormatter>(
      std::make_unique<spdlog::pattern_formatter>(kTextPattern, spdlog::pattern_time_type::utc));
}

// Every component's logger writes to the one sink. Never destroyed: a component may log while
// static objects are torn down at exit.
struct LoggingState {
  LoggingState() : sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {
    sink->set_formatter(FormatterFor(LogFormat::kText));
    InstallDefaultLogger(spdlog::level::info);
  }
  // What still logs through spdlog's default logger (a library's messages) goes the same way.
  void InstallDefaultLogger(spdlog::level::level_enum default_level) {
    auto fallback = std::make_shared<spdlog::logger>("txscore", sink);
    fallback->set_level(default_level);
    spdlog::set_default_logger(std::move(fallback));
  }
  std::mutex mutex;
  std::shared_ptr<spdlog::sinks::sink> sink;
  spdlog::level::level_enum level = spdlog::level::info;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
};

LoggingState& State() {
  static LoggingState* state = new LoggingState();
  return *state;
}

// Built while the program starts, so that spdlog's default logger redacts from the first line
// whatever logs it, before main() configures logging. init_priority puts it before every static
// object of the program that has none (theirs run in link order, the executable's first).
struct RedactingFromTheStart {
  RedactingFromTheStart() { State(); }
};
__attribute__((init_priority(101))) const RedactingFromTheStart kRedactingFromTheStart;

}  // namespace

void ConfigureLogging(const LoggingOptions& options) {
  LoggingState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.level = spdlog::level::from_str(options.level);
  state.sink->set_formatter(FormatterFor(options.format));
  for (auto& [name, logger] : state.loggers) logger->set_level(state.level);
  state.InstallDefaultLogger(state.level);
}

spdlog::logger& Log(std::string_view component) {
  LoggingState& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.loggers.find(component);
  if (it == state.loggers.end()) {
    auto logger = std::make_shared<spdlog::logger>(std::string(component), state.sink);
    logger->set_level(state.level);
    it = state.loggers.emplace(std::string(component), std::move(logger)).first;
  }
  return *it->second;
}

std::optional<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "json") return LogFormat::kJson;
  if (name == "text") return LogFormat::kText;
  return std::nullopt;
}

LogContext::LogContext(std::string_view request_id, std::string_view trace_id)
    : previous_request_id_(std::move(current_context.request_id)),
      previous_trace_id_(std::move(current_context.trace_id)) {
  current_context.request_id.assign(request_id);
  current_context.trace_id.assign(trace_id);
}

LogContext::~LogContext() {
  current_context.request_id = std::move(previous_request_id_);
  current_context.trace_id = std::move(previous_trace_id_);
}

}  // namespace txscore
