// Per-card state: what the features need to know about a card's past.
//
// Stored in RocksDB (column family `entity_state`) keyed by the card token, encoded with
// EncodeCardState (little-endian, versioned). The PAN is never part of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "fraud/transaction.h"

namespace txscore::fraud {

struct RecentEvent {
  int64_t timestamp_ms = 0;
  double amount_major = 0;
  uint64_t merchant_hash = 0;  // Fnv1a64(merchant_id)

  bool operator==(const RecentEvent&) const = default;
};

struct CardState {
  // Transactions of the last 24 h before the newest one, oldest first; at most
  // kMaxRecentEvents (the oldest are dropped first, so counts saturate there).
  std::vector<RecentEvent> recent;
  uint64_t transaction_count = 0;
  int64_t last_timestamp_ms = 0;  // valid when transaction_count > 0
  // Coordinates of the newest transaction, when it had them.
  std::optional<double> last_latitude;
  std::optional<double> last_longitude;
  // Running mean and sum of squared deviations of amount_major (Welford's method).
  double amount_mean = 0;
  double amount_m2 = 0;
  // Fnv1a64 of device ids seen on this card, newest last; at most kMaxKnownDevices.
  std::vector<uint64_t> known_devices;
  // Merchant country of the card's first transaction; stands in for the issuer country.
  std::string home_country;

  bool operator==(const CardState&) const = default;
};

inline constexpr size_t kMaxRecentEvents = 256;
inline constexpr size_t kMaxKnownDevices = 16;
inline constexpr int64_t kStateWindowMs = 24LL * 3600 * 1000;

// Folds a transaction into the state (call after computing its features).
void UpdateCardState(const Transaction& tx, CardState* state);

std::string EncodeCardState(const CardState& state);
// kDataLoss for bytes that are not an encoded CardState of a known version.
Result<CardState> DecodeCardState(std::string_view bytes);

}  // namespace txscore::fraud
