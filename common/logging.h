// Logging: every component logs through Log("component"), one spdlog logger per component
// sharing one stderr sink, in one of two formats chosen once by ConfigureLogging:
//
//   json (txscore serve's default): one JSON object per line, for log collectors:
//     {"time":"2026-12-02T10:00:00.123456Z","level":"warning","component":"thrift",
//      "message":"...","request_id":"r-1","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}
//     request_id and trace_id are null outside a request (see LogContext).
//   text (the command-line tools' default): 2026-12-02T10:00:00.123456Z warning thrift: ...
//
// Contract for every log call site: never log a PAN, a card verification code, a claimant's
// name or id, or a key. Card tokens and request ids are fine. tests/integration/demo_test.py
// scans the logs of a full demo run for card numbers and claimant ids.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace txscore {

enum class LogFormat { kJson, kText };

struct LoggingOptions {
  std::string level = "info";  // Default: info. One of trace, debug, info, warn, error, off
  LogFormat format = LogFormat::kText;
};

// Sets the level and format of every component's logger, now and later. Logs go to stderr.
void ConfigureLogging(const LoggingOptions& options);

// The logger of `component` (a short lowercase name: thrift, admin, audit, pipeline, ...).
// Thread-safe; the same logger for the same name.
spdlog::logger& Log(std::string_view component);

// "json" or "text", as the --log-format flags spell them; nullopt for anything else.
std::optional<LogFormat> ParseLogFormat(std::string_view name);

// Logs a warning at most once per `period` (for each object: one per kind of event), with how
// many events the line stands for, so a flood of hostile clients cannot flood the log.
class RateLimitedWarning {
 public:
  RateLimitedWarning(std::string component, std::chrono::seconds period)
      : component_(std::move(component)), period_(period) {}
  template <typename... Args>
  void Warn(spdlog::format_string_t<Args...> format, Args&&... args) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_.load(std::memory_order_relaxed);
    const int64_t period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(period_).count();
    if (last != 0 && now - last < period) return;
    if (!last_.compare_exchange_strong(last, now)) return;
    const uint64_t count = suppressed_.exchange(0);
    Log(component_)
        .warn("{} ({} such event(s) since the last warning)", fmt::format(format, std::forward<Args>(args)...), count);
  }

 private:
  const std::string component_;
  const std::chrono::seconds period_;
  std::atomic<int64_t> last_{0};
  std::atomic<uint64_t> suppressed_{0};
};

// While alive, lines logged by this thread carry the request's id and trace id (the 32 hex
// digits of a traceparent the caller validated). Scopes nest; the previous ones come back.
// Set only after the request passed validation: an id that is not printable ASCII or holds a
// card number never reaches a log line this way.
class LogContext {
 public:
  LogContext(std::string_view request_id, std::string_view trace_id);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

 private:
  std::string previous_request_id_;
  std::string previous_trace_id_;
};

}  // namespace txscore
