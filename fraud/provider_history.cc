#include "fraud/provider_history.h"

#include <algorithm>

#include "common/bytes.h"
#include "common/sha256.h"

namespace txscore::fraud {
namespace {

constexpr uint8_t kFormatVersion = 1;

}  // namespace

uint64_t ProviderClaimsHistory::ClaimDigest(std::string_view claim_id) {
  const std::string digest = Sha256Bytes({claim_id});
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value = (value << 8) | static_cast<uint8_t>(digest[static_cast<size_t>(i)]);
  return value;
}

bool ProviderClaimsHistory::Add(uint64_t claim_digest, int64_t report_day) {
  if (!digests_.insert(claim_digest).second) return false;
  const Entry entry{report_day, claim_digest};
  claims_.insert(std::upper_bound(claims_.begin(), claims_.end(), entry), entry);
  return true;
}

int64_t ProviderClaimsHistory::CountBefore(int64_t report_day) const {
  const auto first_day = [](const Entry& e, int64_t day) { return e.day < day; };
  const auto from = std::lower_bound(claims_.begin(), claims_.end(), report_day - kWindowDays, first_day);
  const auto to = std::lower_bound(claims_.begin(), claims_.end(), report_day, first_day);
  return to - from;
}

void ProviderClaimsHistory::Prune() {
  if (claims_.empty()) return;
  const int64_t oldest_kept = claims_.back().day - kRetentionDays;
  const auto end = std::find_if(claims_.begin(), claims_.end(), [&](const Entry& e) { return e.day >= oldest_kept; });
  for (auto it = claims_.begin(); it != end; ++it) digests_.erase(it->digest);
  claims_.erase(claims_.begin(), end);
}

std::string ProviderClaimsHistory::Encode() const {
  std::string out;
  out.reserve(5 + claims_.size() * 16);
  out.push_back(static_cast<char>(kFormatVersion));
  PutU32LE(&out, static_cast<uint32_t>(claims_.size()));
  for (const Entry& e : claims_) {
    PutU64LE(&out, e.digest);
    PutU64LE(&out, static_cast<uint64_t>(e.day));
  }
  return out;
}

Result<ProviderClaimsHistory> ProviderClaimsHistory::Decode(std::string_view bytes) {
  ByteReader in(bytes);
  const uint8_t version = in.U8();
  if (in.failed() || version != kFormatVersion) {
    return DataLoss("a provider's claims history has unknown format version " + std::to_string(version));
  }
  const uint32_t count = in.U32LE();
  // Checked before reserving: a damaged count must not ask for gigabytes.
  if (in.failed() || bytes.size() != 5 + static_cast<size_t>(count) * 16) {
    return DataLoss("a provider's claims history is " + std::to_string(bytes.size()) + " bytes, not the " +
                    std::to_string(5 + static_cast<size_t>(count) * 16) + " its count of " + std::to_string(count) +
                    " claims needs");
  }
  ProviderClaimsHistory history;
  history.claims_.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t digest = in.U64LE();
    const auto day = static_cast<int64_t>(in.U64LE());
    history.Add(digest, day);
  }
  return history;
}

}  // namespace txscore::fraud
