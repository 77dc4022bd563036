// An insurance claim as the claims pipeline sees it, independent of the input format.
//
// RawClaim is what an input row or a caller said; Claim is what remains after validation: the
// claimant id is replaced by its HMAC token (it is personal data), dates are checked and turned
// into day numbers. Input rows come as JSON objects (JSON lines) or CSV records with a header;
// both parsers name the field at fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "fraud/card_token.h"

namespace txscore::fraud {

// The claim types txscore knows; their order is the `claim_type` feature's value.
const std::vector<std::string>& ClaimTypes();  // auto_collision, auto_theft, property_water, ...

struct RawClaim {
  std::string claim_id;
  std::string policy_id;
  std::string claimant_id;  // personal data: tokenized by ValidateClaim, never stored
  // Instead of claimant_id: the claimant already tokenized (txscore's token form), as the
  // server stores inline job inputs so that no clear id is written to disk.
  std::string claimant_token;
  std::string incident_date;  // YYYY-MM-DD
  std::string report_date;    // YYYY-MM-DD
  std::string claim_type;     // one of ClaimTypes()
  double amount_claimed = 0;  // major currency units
  double policy_limit = 0;    // major currency units
  int64_t prior_claims = 0;   // the claimant's earlier claims
  std::string provider_id;    // repair shop, clinic, contractor
  std::string narrative;
  std::string adjuster_notes;  // may be empty
};

struct Claim {
  std::string claim_id;
  std::string policy_id;
  std::string claimant_token;  // hex(HMAC-SHA256(key, "claimant:" + claimant_id))
  int64_t incident_day = 0;    // days since 1970-01-01
  int64_t report_day = 0;
  std::string incident_date;  // as given, for the LLM's prompt and the output
  std::string report_date;
  int claim_type = 0;  // index into ClaimTypes()
  double amount_claimed = 0;
  double policy_limit = 0;
  int64_t prior_claims = 0;
  std::string provider_id;
  std::string narrative;       // card numbers in it redacted (common/pan_scan.h)
  std::string adjuster_notes;  // likewise
};

struct ClaimLimits {
  size_t max_id_bytes = 128;        // Default: 128 (claim, policy, claimant, provider ids)
  size_t max_text_bytes = 8 << 10;  // Default: 8 KiB (narrative, adjuster notes)
};

// Days since 1970-01-01 of a real calendar date written YYYY-MM-DD; kInvalidArgument otherwise.
Result<int64_t> ParseIsoDate(const std::string& text);

// Checks every field; errors name it (`field`) and say why. Dates must be real calendar
// dates, the report no earlier than the incident; amounts finite, >= 0, the limit > 0.
Result<Claim> ValidateClaim(const RawClaim& raw, const CardTokenizer& tokenizer, const ClaimLimits& limits = {});

// `raw` as it may be written to disk: claimant_id replaced by its token, card numbers in the
// free text redacted. Fails (nothing to write) when claimant_id is not a valid id.
Result<RawClaim> ClaimForStorage(const RawClaim& raw, const CardTokenizer& tokenizer, const ClaimLimits& limits = {});

// One JSON object (a line of a JSON-lines file). Unknown keys are refused; so are missing
// required keys and values of the wrong type (amounts are numbers, prior_claims an integer).
Result<RawClaim> ParseClaimJson(const std::string& line);
std::string ClaimToJson(const RawClaim& claim);  // one line, the keys ParseClaimJson reads

// CSV (RFC 4180: quoted fields may hold commas, quotes as "" and newlines). The header names
// the columns, in any order, with the JSON keys.
class ClaimCsvHeader {
 public:
  static Result<ClaimCsvHeader> Parse(const std::vector<std::string>& columns);
  Result<RawClaim> Read(const std::vector<std::string>& fields) const;

 private:
  std::vector<std::string> columns_;
};
// Splits one CSV record; `*complete` is false when a quoted field is still open at the end
// (the record continues on the next line).
std::vector<std::string> SplitCsvRecord(const std::string& text, bool* complete);

}  // namespace txscore::fraud
