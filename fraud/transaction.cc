#include "fraud/transaction.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmath>

#include "common/logged_id.h"
#include "common/pan_scan.h"
#include "fraud/country.h"
#include "fraud/currency.h"

namespace txscore::fraud {
namespace {

// 2000-01-01T00:00:00Z and 2100-01-01T00:00:00Z: anything outside is a caller bug.
constexpr int64_t kMinTimestampMs = 946684800000;
constexpr int64_t kMaxTimestampMs = 4102444800000;
// Amounts above 10^15 minor units are not card payments.
constexpr int64_t kMaxAmountMinor = 1000000000000000;

bool IsLowerHex(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

bool AllZeros(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

bool IsPrintableAscii(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// `logged`: log lines and the audit trail keep the id whole (the request id), so it takes the
// stricter check (common/logged_id.h, which makes RefuseCardNumberIn's too); merchant and
// device ids are kept by neither, and a device fingerprint is often 64 hex digits.
Status CheckId(const std::string& value, const char* field, const ValidationLimits& limits, bool required,
               bool logged = false) {
  if (value.empty()) {
    if (required) return InvalidArgument("must not be empty", field);
    return Status::Ok();
  }
  if (value.size() > limits.max_id_bytes) {
    return InvalidArgument(
        "is " + std::to_string(value.size()) + " bytes; the limit is " + std::to_string(limits.max_id_bytes), field);
  }
  if (!IsPrintableAscii(value)) return InvalidArgument("must be printable ASCII", field);
  return logged ? RefuseCardNumberInLoggedId(value, field) : RefuseCardNumberIn(value, field);
}

}  // namespace

bool IsIpAddress(const std::string& text) {
  if (text.size() > 45) return false;
  unsigned char address[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, text.c_str(), address) == 1 || ::inet_pton(AF_INET6, text.c_str(), address) == 1;
}

bool IsW3cTraceparent(std::string_view t) {
  // W3C Trace Context, section 3.2: version "ff" is invalid; version 00 is exactly 55
  // characters; a later version may append "-..." fields, which are not checked.
  if (t.size() < 55 || t[2] != '-' || t[35] != '-' || t[52] != '-') return false;
  const std::string_view version = t.substr(0, 2), trace_id = t.substr(3, 32), parent_id = t.substr(36, 16),
                         flags = t.substr(53, 2);
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace_id) || !IsLowerHex(parent_id) ||
      !IsLowerHex(flags)) {
    return false;
  }
  if (AllZeros(trace_id) || AllZeros(parent_id)) return false;
  if (version == "00") return t.size() == 55;
  return t.size() == 55 || (t[55] == '-' && t.size() <= 512);
}

double Transaction::amount_major() const {
  return static_cast<double>(amount_minor) / std::pow(10.0, currency_exponent);
}

Result<Transaction> ValidateTransaction(const RawTransaction& raw, const ValidationLimits& limits) {
  TXSCORE_RETURN_IF_ERROR(CheckId(raw.request_id, "request_id", limits, /*required=*/true, /*logged=*/true));
  if (raw.timestamp_ms < kMinTimestampMs || raw.timestamp_ms >= kMaxTimestampMs) {
    return InvalidArgument("must be milliseconds since 1970-01-01 UTC between the years 2000 and 2100", "timestamp_ms");
  }
  if (raw.amount_minor < 0) return InvalidArgument("must not be negative", "amount_minor");
  if (raw.amount_minor > kMaxAmountMinor) return InvalidArgument("exceeds 10^15 minor units", "amount_minor");
  std::optional<int> exponent = CurrencyExponent(raw.currency);
  if (!exponent) {
    return InvalidArgument("is not an ISO 4217 currency code", "currency");
  }
  TXSCORE_RETURN_IF_ERROR(CheckId(raw.merchant_id, "merchant_id", limits, /*required=*/true));
  if (raw.mcc.size() != 4 || raw.mcc.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("must be 4 digits (ISO 18245)", "mcc");
  }
  if (!IsIsoCountry(raw.merchant_country)) {
    return InvalidArgument("must be an ISO 3166-1 alpha-2 code such as \"US\"", "merchant_country");
  }
  if (raw.card_country && !IsIsoCountry(*raw.card_country)) {
    return InvalidArgument("must be an ISO 3166-1 alpha-2 code such as \"US\"", "card_country");
  }
  if (raw.channel < 0 || raw.channel > static_cast<int>(Channel::kContactless)) {
    return InvalidArgument("is not a known Channel value", "channel");
  }
  if (raw.entry_mode < 0 || raw.entry_mode > static_cast<int>(EntryMode::kTokenizedWallet)) {
    return InvalidArgument("is not a known EntryMode value", "entry_mode");
  }
  if (raw.device_id) TXSCORE_RETURN_IF_ERROR(CheckId(*raw.device_id, "device_id", limits, /*required=*/true));
  if (raw.ip_address) {
    if (!IsIpAddress(*raw.ip_address)) {
      return InvalidArgument("must be an IPv4 address (dotted decimal, each part 0-255) or an IPv6 address",
                             "ip_address");
    }
  }
  if (raw.latitude.has_value() != raw.longitude.has_value()) {
    return InvalidArgument("latitude and longitude must be sent together", raw.latitude ? "longitude" : "latitude");
  }
  if (raw.latitude && !(std::isfinite(*raw.latitude) && std::fabs(*raw.latitude) <= 90.0)) {
    return InvalidArgument("must be between -90 and 90 degrees", "latitude");
  }
  if (raw.longitude && !(std::isfinite(*raw.longitude) && std::fabs(*raw.longitude) <= 180.0)) {
    return InvalidArgument("must be between -180 and 180 degrees", "longitude");
  }
  if (raw.traceparent && !IsW3cTraceparent(*raw.traceparent)) {
    return InvalidArgument(
        "must be a W3C traceparent: version-traceid-parentid-flags in lowercase hex, e.g. "
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "traceparent");
  }

  if (raw.budget_ms && (*raw.budget_ms < 1 || *raw.budget_ms > 600000)) {
    return InvalidArgument("must be between 1 and 600000 milliseconds", "budget_ms");
  }

  Transaction tx;
  tx.request_id = raw.request_id;
  tx.timestamp_ms = raw.timestamp_ms;
  tx.amount_minor = raw.amount_minor;
  tx.currency = raw.currency;
  tx.currency_exponent = *exponent;
  tx.merchant_id = raw.merchant_id;
  tx.mcc = raw.mcc;
  tx.merchant_country = raw.merchant_country;
  tx.card_country = raw.card_country.value_or("");
  tx.channel = static_cast<Channel>(raw.channel);
  tx.entry_mode = static_cast<EntryMode>(raw.entry_mode);
  tx.device_id = raw.device_id;
  tx.ip_address = raw.ip_address;
  tx.latitude = raw.latitude;
  tx.longitude = raw.longitude;
  if (raw.traceparent) {
    // Only version-traceid-parentid-flags is kept: a later version's extra fields are not
    // understood here, and nothing unchecked is stored. A trace context that holds a
    // card-shaped number (a random one does about once in 25,000) is dropped rather than the
    // transaction refused: W3C lets a receiver restart the trace.
    const std::string kept = raw.traceparent->substr(0, 55);
    if (!LooksLikeCardNumber(kept)) tx.traceparent = kept;
  }
  tx.budget_ms = raw.budget_ms;
  tx.caller = raw.caller;
  return tx;
}

}  // namespace txscore::fraud
