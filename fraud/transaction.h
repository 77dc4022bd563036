// The transaction as the fraud component sees it, independent of the wire format.
//
// RawTransaction is what a caller sent (possibly with a PAN); Transaction is what remains
// after validation and tokenization: the PAN is gone, only its HMAC token is left.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace txscore::fraud {

// Values match the Thrift enums (schemas/txscore.thrift).
enum class Channel : int {
  kUnknown = 0,
  kCardPresent = 1,
  kEcommerce = 2,
  kAtm = 3,
  kMailPhoneOrder = 4,
  kRecurring = 5,
  kContactless = 6
};
enum class EntryMode : int {
  kUnknown = 0,
  kChip = 1,
  kMagstripe = 2,
  kContactless = 3,
  kManualKeyed = 4,
  kCredentialOnFile = 5,
  kTokenizedWallet = 6
};

struct RawTransaction {
  std::string request_id;
  int64_t timestamp_ms = 0;
  int64_t amount_minor = 0;
  std::string currency;
  std::optional<std::string> card_number;  // PAN; never stored
  std::optional<std::string> card_token;
  std::optional<std::string> card_verification_code;  // checked for shape, never stored
  std::string merchant_id;
  std::string mcc;
  std::string merchant_country;
  std::optional<std::string> card_country;
  int channel = 0;
  int entry_mode = 0;
  std::optional<std::string> device_id;
  std::optional<std::string> ip_address;
  std::optional<double> latitude;
  std::optional<double> longitude;
  std::optional<std::string> traceparent;
  std::optional<int32_t> budget_ms;  // the caller's time budget for this request
  // With card_token, from a replica that forwarded the transaction to its card's shard
  // (service/shard_router.h): the card's tokens under the keyset's older active keys, oldest
  // first, where its state may still be stored.
  std::vector<std::string> older_card_tokens;
  // Who sent it, for the audit record (PCI DSS 10.2.2): set by the transport from the caller's
  // TLS identity and address ("txscore-client (10.0.0.7:5555)"), never from the message.
  std::string caller;
};

struct Transaction {
  std::string request_id;
  int64_t timestamp_ms = 0;
  int64_t amount_minor = 0;
  std::string currency;
  int currency_exponent = 2;  // minor units per major unit = 10^exponent
  std::string card_token;
  std::string merchant_id;
  std::string mcc;
  std::string merchant_country;
  std::string card_country;  // empty when the caller did not send one
  Channel channel = Channel::kUnknown;
  EntryMode entry_mode = EntryMode::kUnknown;
  std::optional<std::string> device_id;
  std::optional<std::string> ip_address;
  std::optional<double> latitude;
  std::optional<double> longitude;
  std::string traceparent;
  std::optional<int32_t> budget_ms;  // 1..600000 when set
  std::string caller;                // RawTransaction::caller

  double amount_major() const;
};

// Limits on caller-supplied strings; longer values are rejected as invalid.
struct ValidationLimits {
  size_t max_id_bytes = 128;  // Default: 128 (request_id, merchant_id, device_id, card_token)
};

// An IPv4 address in dotted decimal (each part 0-255, four parts) or an IPv6 address, as
// inet_pton(3) reads them.
bool IsIpAddress(const std::string& text);
// A W3C Trace Context traceparent (https://www.w3.org/TR/trace-context/#traceparent-header):
// lowercase hex, version not ff, trace and parent ids not all zeros; version 00 exactly 55
// characters.
bool IsW3cTraceparent(std::string_view text);

// Checks every field except the card fields (card_number, card_token and
// card_verification_code: see card_token.h) and returns the transaction without its card
// data. Errors name the field.
Result<Transaction> ValidateTransaction(const RawTransaction& raw, const ValidationLimits& limits = {});

}  // namespace txscore::fraud
