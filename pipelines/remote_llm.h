// The llm_findings stage's work handed to a pool of LLM servers that speak the OpenAI API
// (vLLM, llm-d's gateway in front of many vLLM servers, or another txscore's admin port), for
// when one machine's CPU or accelerator is not enough:
//
//   - name: forensic
//     kind: llm_findings
//     model: ../var/models/llm-tiny      # for the fallback below (and `txscore plan`)
//     placement: remote
//     remote:
//       base_url: https://llm-pool.internal:8443/v1    # required
//       model: qwen3-8b-instruct                       # required: the pool's model name
//       call_timeout_ms: 2000     # Default: 2000; each call, and never past the stage's deadline
//       retries: 2                # Default: 2 more calls after a failed one (bounded)
//       backoff_ms: 50            # Default: 50 before the first retry, doubling after each
//       breaker_failures: 5       # Default: 5 failed calls in a row open the circuit
//       breaker_open_ms: 10000    # Default: 10000; then one trial call may close it again
//       fallback: skip            # Default: skip (no findings, reported degraded); or where
//                                 # the stage's own `model` runs here: cpu, auto or a device
//                                 # kind (as `placement` takes)
//       tls:                      # required for https: the pool's CA, and this client's identity
//         ca: ../var/pki/ca.crt
//         certificate: ../var/pki/admin/tls.crt
//         private_key: ../var/pki/admin/tls.key
//
// Each call is POST {base_url}/chat/completions with the task's system and user turns (the
// pool applies its model's chat template), temperature 0, and response_format json_schema with
// the findings schema; the reply is validated (ClaimAnalysisTask::ParseFindings) before it
// becomes findings, and one that does not validate counts as a failed call. While the circuit is
// open no call is made: the fallback answers at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/result.h"
#include "llm/claim_analysis.h"

namespace txscore::pipelines {

struct RemoteLlmOptions {
  std::string stage{};                            // the stage's name, for messages
  std::string base_url{};                         // required: http[s]://host:port[/path], e.g. https://pool:8443/v1
  std::string model{};                            // required
  std::chrono::milliseconds call_timeout{2000};   // Default: 2 s per call (within the stage's deadline)
  int retries = 2;                                // Default: 2 more calls after a failed one
  std::chrono::milliseconds backoff{50};          // Default: 50 ms before the first retry, doubling after
  int breaker_failures = 5;                       // Default: 5 failed calls in a row open the circuit
  std::chrono::milliseconds breaker_open{10000};  // Default: 10 s open before a trial call
  int max_tokens = 96;                            // the stage's max_new_tokens
  // PEM files; required for https (the client certificate too: pools admit callers by it).
  std::string ca_file{}, certificate_file{}, private_key_file{};
  // The clock deadlines are time points of (common/clock.h). Default: steady_clock. The
  // breaker's open interval and the backoff are measured on it too.
  DeadlineClock clock = SteadyDeadlineClock();
  // How a backoff is waited out. Default: std::this_thread::sleep_for (tests record the waits).
  std::function<void(std::chrono::milliseconds)> sleep = [](std::chrono::milliseconds d) {
    std::this_thread::sleep_for(d);
  };
};

// Closed: calls go. `failures` failed calls in a row open it: none go for `open_for`; then one
// trial call goes (half-open), whose success closes it and whose failure opens it again.
class CircuitBreaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };
  // `subject` names what the circuit guards in its log lines, e.g. "the remote LLM".
  CircuitBreaker(int failures, std::chrono::milliseconds open_for, DeadlineClock clock,
                 std::string subject = "the remote LLM", std::string log_component = "llm")
      : failures_to_open_(failures),
        open_for_(open_for),
        clock_(std::move(clock)),
        subject_(std::move(subject)),
        log_component_(std::move(log_component)) {}

  // Whether a call may go now; in half-open state only one caller is let through at a time.
  bool Allow();
  void Succeeded();
  void Failed();
  State state() const;
  uint64_t times_opened() const { return times_opened_.load(); }

 private:
  const int failures_to_open_;
  const std::chrono::milliseconds open_for_;
  const DeadlineClock clock_;
  const std::string subject_, log_component_;
  mutable std::mutex mu_;
  State state_ = State::kClosed;
  int failures_in_a_row_ = 0;
  bool trial_in_flight_ = false;
  std::chrono::steady_clock::time_point open_until_{};
  std::atomic<uint64_t> times_opened_{0};
};
const char* CircuitStateName(CircuitBreaker::State state);  // "closed", "open", "half_open"

class RemoteLlm {
 public:
  // Checks the URL and reads the TLS files (a missing or unreadable one is refused now).
  static Result<std::unique_ptr<RemoteLlm>> Create(const RemoteLlmOptions& options);
  ~RemoteLlm();

  // One task's findings from the pool: calls with retries and backoff, through the breaker,
  // until `deadline`. kUnavailable when the circuit is open or every call failed (the last
  // failure named), kDeadlineExceeded when the deadline came first. Thread-safe.
  Result<llm::Findings> Analyze(const llm::TaskMessages& messages, std::chrono::steady_clock::time_point deadline);

  const std::string& name() const { return name_; }  // "remote:<base_url> (<model>)"
  const std::string& model() const { return options_.model; }
  CircuitBreaker::State breaker_state() const { return breaker_.state(); }
  uint64_t breaker_opened() const { return breaker_.times_opened(); }
  // Calls made, by outcome: answered with valid findings, failed (connection, HTTP status,
  // timeout), answered but not valid findings.
  uint64_t calls_ok() const { return calls_ok_.load(); }
  uint64_t calls_failed() const { return calls_failed_.load(); }
  uint64_t calls_invalid() const { return calls_invalid_.load(); }

 private:
  struct Impl;
  RemoteLlm(RemoteLlmOptions options, std::unique_ptr<Impl> impl);
  // One HTTP call; the reply's findings, or why not.
  Result<llm::Findings> Call(const std::string& body, std::chrono::steady_clock::time_point call_deadline);

  RemoteLlmOptions options_;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  CircuitBreaker breaker_;
  std::atomic<uint64_t> calls_ok_{0}, calls_failed_{0}, calls_invalid_{0};
};

}  // namespace txscore::pipelines
