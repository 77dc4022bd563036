#include "fraud/entity_state.h"

#include <algorithm>

#include "common/bytes.h"

namespace txscore::fraud {
namespace {
constexpr uint8_t kFormatVersion = 1;
constexpr uint8_t kHasCoordinates = 1;
}  // namespace

void UpdateCardState(const Transaction& tx, CardState* state) {
  const double amount = tx.amount_major();
  if (state->transaction_count == 0) state->home_country = tx.merchant_country;
  state->transaction_count++;
  const double delta = amount - state->amount_mean;
  state->amount_mean += delta / static_cast<double>(state->transaction_count);
  state->amount_m2 += delta * (amount - state->amount_mean);

  const int64_t newest = std::max(state->last_timestamp_ms, tx.timestamp_ms);
  // Keep events ordered by time even when a transaction arrives late.
  RecentEvent event{tx.timestamp_ms, amount, Fnv1a64(tx.merchant_id)};
  auto pos =
      std::upper_bound(state->recent.begin(), state->recent.end(), event,
                       [](const RecentEvent& a, const RecentEvent& b) { return a.timestamp_ms < b.timestamp_ms; });
  state->recent.insert(pos, event);
  auto first_kept = std::find_if(state->recent.begin(), state->recent.end(),
                                 [&](const RecentEvent& e) { return e.timestamp_ms > newest - kStateWindowMs; });
  state->recent.erase(state->recent.begin(), first_kept);
  if (state->recent.size() > kMaxRecentEvents) {
    state->recent.erase(state->recent.begin(), state->recent.end() - kMaxRecentEvents);
  }

  if (tx.timestamp_ms >= state->last_timestamp_ms) {
    state->last_timestamp_ms = tx.timestamp_ms;
    state->last_latitude = tx.latitude;
    state->last_longitude = tx.longitude;
  }
  if (tx.device_id) {
    uint64_t device = Fnv1a64(*tx.device_id);
    auto& devices = state->known_devices;
    devices.erase(std::remove(devices.begin(), devices.end(), device), devices.end());
    devices.push_back(device);
    if (devices.size() > kMaxKnownDevices) devices.erase(devices.begin());
  }
}

std::string EncodeCardState(const CardState& state) {
  std::string out;
  out.reserve(64 + state.recent.size() * 24 + state.known_devices.size() * 8);
  out.push_back(static_cast<char>(kFormatVersion));
  PutU64LE(&out, state.transaction_count);
  PutU64LE(&out, static_cast<uint64_t>(state.last_timestamp_ms));
  const bool has_coordinates = state.last_latitude && state.last_longitude;
  out.push_back(static_cast<char>(has_coordinates ? kHasCoordinates : 0));
  PutF64LE(&out, has_coordinates ? *state.last_latitude : 0.0);
  PutF64LE(&out, has_coordinates ? *state.last_longitude : 0.0);
  PutF64LE(&out, state.amount_mean);
  PutF64LE(&out, state.amount_m2);
  PutBytes(&out, state.home_country);
  PutU32LE(&out, static_cast<uint32_t>(state.recent.size()));
  for (const RecentEvent& e : state.recent) {
    PutU64LE(&out, static_cast<uint64_t>(e.timestamp_ms));
    PutF64LE(&out, e.amount_major);
    PutU64LE(&out, e.merchant_hash);
  }
  PutU32LE(&out, static_cast<uint32_t>(state.known_devices.size()));
  for (uint64_t d : state.known_devices) PutU64LE(&out, d);
  return out;
}

Result<CardState> DecodeCardState(std::string_view bytes) {
  ByteReader in(bytes);
  const uint8_t version = in.U8();
  if (in.failed() || version != kFormatVersion) {
    return DataLoss("card state has unknown format version " + std::to_string(version));
  }
  CardState state;
  state.transaction_count = in.U64LE();
  state.last_timestamp_ms = static_cast<int64_t>(in.U64LE());
  const bool has_coordinates = in.U8() == kHasCoordinates;
  const double lat = in.F64LE();
  const double lon = in.F64LE();
  if (has_coordinates) {
    state.last_latitude = lat;
    state.last_longitude = lon;
  }
  state.amount_mean = in.F64LE();
  state.amount_m2 = in.F64LE();
  state.home_country = in.Bytes();
  const uint32_t recent_count = in.U32LE();
  if (recent_count > kMaxRecentEvents) return DataLoss("card state lists too many recent events");
  state.recent.resize(recent_count);
  for (RecentEvent& e : state.recent) {
    e.timestamp_ms = static_cast<int64_t>(in.U64LE());
    e.amount_major = in.F64LE();
    e.merchant_hash = in.U64LE();
  }
  const uint32_t device_count = in.U32LE();
  if (device_count > kMaxKnownDevices) return DataLoss("card state lists too many devices");
  state.known_devices.resize(device_count);
  for (uint64_t& d : state.known_devices) d = in.U64LE();
  if (in.failed() || !in.at_end()) return DataLoss("card state is truncated or has trailing bytes");
  return state;
}

}  // namespace txscore::fraud
