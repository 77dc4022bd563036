// The project's one error type and Result<T>.
//
// Every library txscore uses reports failure its own way (XGBoost return codes, RocksDB
// Status, yaml-cpp and Thrift exceptions). Each is converted into an Error at exactly one
// boundary, inside the component that wraps that library; above that boundary, failures are
// values. No exceptions on the request path.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace txscore {

enum class ErrorCode {
  kInvalidArgument,     // the caller's input is wrong; nothing was changed
  kNotFound,            // a named file, key or entity does not exist
  kFailedPrecondition,  // the system is not in a state to do this (e.g. model not loaded)
  kDataLoss,            // a stored or supplied file is corrupt or truncated
  kInternal,            // a bug or a dependency failing in a way retrying will not fix
  kUnavailable,         // transient, or this resource failed: retrying (e.g. on another device) may succeed
  kDeadlineExceeded,    // the time allowed ran out before the work was complete
  kCancelled,           // the caller (or a stopping server) asked for the work to stop
  kResourceExhausted,   // a limit or quota was reached (a queue, memory, a cache)
};

const char* ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  // For kInvalidArgument on request input: the field at fault (e.g. "card_number").
  std::string field;

  std::string ToString() const;
};

// `message` with card numbers redacted (common/pan_scan.h, RedactPans). An invalid argument's
// message is built from what a caller sent, and goes back to it, into logs, job outputs and the
// audit trail: every one passes here, whichever validation built it.
std::string RedactCardNumbersIn(std::string message);
inline Error InvalidArgument(std::string message, std::string field = {}) {
  return Error{ErrorCode::kInvalidArgument, RedactCardNumbersIn(std::move(message)), std::move(field)};
}
inline Error NotFound(std::string message) { return Error{ErrorCode::kNotFound, std::move(message), {}}; }
// `field`: the input at fault, when callers act on which (e.g. "input" for a changed file).
inline Error FailedPrecondition(std::string message, std::string field = {}) {
  return Error{ErrorCode::kFailedPrecondition, std::move(message), std::move(field)};
}
inline Error DataLoss(std::string message) { return Error{ErrorCode::kDataLoss, std::move(message), {}}; }
inline Error Internal(std::string message) { return Error{ErrorCode::kInternal, std::move(message), {}}; }
inline Error Unavailable(std::string message) { return Error{ErrorCode::kUnavailable, std::move(message), {}}; }
inline Error DeadlineExceeded(std::string message) {
  return Error{ErrorCode::kDeadlineExceeded, std::move(message), {}};
}
inline Error Cancelled(std::string message) { return Error{ErrorCode::kCancelled, std::move(message), {}}; }
inline Error ResourceExhausted(std::string message) {
  return Error{ErrorCode::kResourceExhausted, std::move(message), {}};
}

// Result<T> holds either a T or an Error. Check ok() before value().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return state_.index() == 0; }
  const T& value() const& {
    assert(ok());
    return std::get<0>(state_);
  }
  T& value() & {
    assert(ok());
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(state_));
  }
  const Error& error() const {
    assert(!ok());
    return std::get<1>(state_);
  }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Error> state_;
};

// Result<void>: success carries nothing.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status Ok() { return Status(); }

  bool ok() const { return ok_; }
  const Error& error() const {
    assert(!ok_);
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace txscore

// Returns the error of `expr` (a Status or Result) from the enclosing function.
#define TXSCORE_RETURN_IF_ERROR(expr)                          \
  do {                                                         \
    auto&& txscore_status_ = (expr);                           \
    if (!txscore_status_.ok()) return txscore_status_.error(); \
  } while (0)

// TXSCORE_ASSIGN_OR_RETURN(auto value, ReturnsResult()): declares (or assigns) `lhs` from the
// value of a Result, or returns its error from the enclosing function. One per line.
#define TXSCORE_ASSIGN_OR_RETURN(lhs, expr) \
  TXSCORE_ASSIGN_OR_RETURN_IMPL_(TXSCORE_CONCAT_(txscore_result_, __LINE__), lhs, expr)
#define TXSCORE_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                   \
  if (!result.ok()) return result.error();                \
  lhs = std::move(result).value()
#define TXSCORE_CONCAT_(a, b) TXSCORE_CONCAT_INNER_(a, b)
#define TXSCORE_CONCAT_INNER_(a, b) a##b
