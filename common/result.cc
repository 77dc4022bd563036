#include "common/result.h"

#include "common/pan_scan.h"

namespace txscore {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kFailedPrecondition:
      return "failed precondition";
    case ErrorCode::kDataLoss:
      return "data loss";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kDeadlineExceeded:
      return "deadline exceeded";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kResourceExhausted:
      return "resource exhausted";
  }
  return "unknown";
}

std::string RedactCardNumbersIn(std::string message) {
  return RedactPans(message);  // the message as it was when it holds no card number
}

std::string Error::ToString() const {
  std::string out = ErrorCodeName(code);
  out += ": ";
  if (!field.empty()) {
    out += field;
    out += ": ";
  }
  out += message;
  return out;
}

}  // namespace txscore
