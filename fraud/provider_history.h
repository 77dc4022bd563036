// What txscore remembers of a claims provider (repair shop, clinic, contractor): the report
// day of each claim that named it, once per claim id.
//
// The claims model's provider feature (FeatureId::kClaimProviderClaims) counts the provider's
// claims reported in the kWindowDays days *before* a claim's report day. Counting by date
// from what was seen, as card velocity is, makes a claim's features independent of the file
// it arrives in: the claims after it, or the size of the file, change nothing; a claim in a
// later file sees the earlier files' claims; scoring a file again counts nothing twice (a
// claim id is held once); and the claim's own day is left out, so the order of claims within
// a day does not matter.
//
// Stored (pipelines/claims_job_record.h) little-endian and versioned: a format byte, a
// 32-bit count, then per claim a 64-bit claim digest and a 64-bit day number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/result.h"

namespace txscore::fraud {

class ProviderClaimsHistory {
 public:
  static constexpr int64_t kWindowDays = 90;
  // Claims older than this, counted back from the provider's newest, are dropped when stored:
  // long enough for any window, and for files that arrive some months out of date order.
  static constexpr int64_t kRetentionDays = 400;

  // A stable digest of a claim id (the first 8 bytes of its SHA-256): ids are held as digests,
  // so the state's size does not grow with the ids' length.
  static uint64_t ClaimDigest(std::string_view claim_id);

  // False when the claim was already held (its day is then left as first recorded).
  bool Add(uint64_t claim_digest, int64_t report_day);
  // Claims reported on days [report_day - kWindowDays, report_day - 1].
  int64_t CountBefore(int64_t report_day) const;
  // Drops claims reported before (newest day - kRetentionDays).
  void Prune();

  size_t size() const { return claims_.size(); }

  std::string Encode() const;
  // Errors: an unknown format byte, a truncated record or trailing bytes (kDataLoss).
  static Result<ProviderClaimsHistory> Decode(std::string_view bytes);

 private:
  struct Entry {
    int64_t day;
    uint64_t digest;
    bool operator<(const Entry& other) const { return day != other.day ? day < other.day : digest < other.digest; }
  };
  std::vector<Entry> claims_;  // sorted by (day, digest)
  std::unordered_set<uint64_t> digests_;
};

}  // namespace txscore::fraud
