#include "fraud/claim.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "common/logged_id.h"
#include "common/pan_scan.h"
#include "common/utf8.h"

namespace txscore::fraud {
namespace {

using json = nlohmann::json;

// Exactly one of claimant_id and claimant_token is required besides these.
const char* const kRequiredKeys[] = {"claim_id",       "policy_id",    "incident_date", "report_date", "claim_type",
                                     "amount_claimed", "policy_limit", "prior_claims",  "provider_id", "narrative"};
const char* const kOptionalKeys[] = {"claimant_id", "claimant_token", "adjuster_notes"};

bool IsKnownKey(const std::string& key) {
  for (const char* k : kRequiredKeys) {
    if (key == k) return true;
  }
  for (const char* k : kOptionalKeys) {
    if (key == k) return true;
  }
  return false;
}

// Days from civil date (Howard Hinnant's algorithm), proleptic Gregorian.
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

Status CheckId(const std::string& value, const char* field, const ClaimLimits& limits) {
  if (value.empty()) return InvalidArgument(std::string(field) + " must not be empty", field);
  if (value.size() > limits.max_id_bytes) {
    return InvalidArgument(std::string(field) + " is longer than " + std::to_string(limits.max_id_bytes) + " bytes",
                           field);
  }
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return InvalidArgument(std::string(field) + " holds a control character", field);
  }
  if (!IsValidUtf8(value)) return InvalidArgument(std::string(field) + " is not valid UTF-8", field);
  if (Status refused = RefuseCardNumberInLoggedId(value, field); !refused.ok()) {  // ids outputs and logs keep
    return InvalidArgument(std::string(field) + " " + refused.error().message, field);
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& ClaimTypes() {
  static const std::vector<std::string> types = {"auto_collision", "auto_theft", "property_water", "property_fire",
                                                 "burglary",       "health",     "travel"};
  return types;
}

Result<int64_t> ParseIsoDate(const std::string& text) {
  auto digits = [&](size_t from, size_t count) {
    for (size_t i = from; i < from + count; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
    }
    return true;
  };
  if (text.size() != 10 || text[4] != '-' || text[7] != '-' || !digits(0, 4) || !digits(5, 2) || !digits(8, 2)) {
    return InvalidArgument("\"" + text + "\" is not a date of the form YYYY-MM-DD");
  }
  const int y = std::atoi(text.substr(0, 4).c_str()), m = std::atoi(text.substr(5, 2).c_str()),
            d = std::atoi(text.substr(8, 2).c_str());
  static const int kDaysInMonth[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (m < 1 || m > 12 || d < 1 || d > kDaysInMonth[m - 1] + (m == 2 && leap ? 1 : 0)) {
    return InvalidArgument("\"" + text + "\" is not a calendar date");
  }
  if (y < 1900 || y > 2100) return InvalidArgument("\"" + text + "\" is outside the years 1900 to 2100");
  return DaysFromCivil(y, m, d);
}

Result<Claim> ValidateClaim(const RawClaim& raw, const CardTokenizer& tokenizer, const ClaimLimits& limits) {
  TXSCORE_RETURN_IF_ERROR(CheckId(raw.claim_id, "claim_id", limits));
  TXSCORE_RETURN_IF_ERROR(CheckId(raw.policy_id, "policy_id", limits));
  if (raw.claimant_token.empty()) {
    TXSCORE_RETURN_IF_ERROR(CheckId(raw.claimant_id, "claimant_id", limits));
  } else if (!raw.claimant_id.empty() || !IsTxscoreTokenForm(raw.claimant_token)) {
    return InvalidArgument(
        "claimant_token must be txscore's token form (64 lowercase hex digits, after KEYID_ when made under a keyset's "
        "key) and comes instead of claimant_id",
        "claimant_token");
  } else {
    // A token made under a retired key names a claimant txscore no longer resolves.
    Status key = tokenizer.CheckCallerToken(raw.claimant_token, "claimant_token");
    if (!key.ok()) return InvalidArgument("claimant_token " + key.error().message, "claimant_token");
  }
  TXSCORE_RETURN_IF_ERROR(CheckId(raw.provider_id, "provider_id", limits));
  Claim c;
  for (auto [text, day, field] : {std::tuple{&raw.incident_date, &c.incident_day, "incident_date"},
                                  std::tuple{&raw.report_date, &c.report_day, "report_date"}}) {
    Result<int64_t> parsed = ParseIsoDate(*text);
    if (!parsed.ok()) return InvalidArgument(std::string(field) + ": " + parsed.error().message, field);
    *day = *parsed;
  }
  if (c.report_day < c.incident_day) {
    return InvalidArgument("report_date " + raw.report_date + " is before incident_date " + raw.incident_date,
                           "report_date");
  }
  const auto type = std::find(ClaimTypes().begin(), ClaimTypes().end(), raw.claim_type);
  if (type == ClaimTypes().end()) {
    std::string known;
    for (const std::string& t : ClaimTypes()) known += (known.empty() ? "" : ", ") + t;
    return InvalidArgument("claim_type \"" + raw.claim_type + "\" is not one of " + known, "claim_type");
  }
  if (!std::isfinite(raw.amount_claimed) || raw.amount_claimed < 0) {
    return InvalidArgument("amount_claimed must be a finite number >= 0", "amount_claimed");
  }
  if (!std::isfinite(raw.policy_limit) || raw.policy_limit <= 0) {
    return InvalidArgument("policy_limit must be a finite number > 0", "policy_limit");
  }
  if (raw.prior_claims < 0 || raw.prior_claims > 10000) {
    return InvalidArgument("prior_claims must be between 0 and 10000", "prior_claims");
  }
  for (auto [text, field] :
       {std::pair{&raw.narrative, "narrative"}, std::pair{&raw.adjuster_notes, "adjuster_notes"}}) {
    if (text->size() > limits.max_text_bytes) {
      return InvalidArgument(std::string(field) + " is longer than " + std::to_string(limits.max_text_bytes) + " bytes",
                             field);
    }
    if (!IsValidUtf8(*text)) return InvalidArgument(std::string(field) + " is not valid UTF-8", field);
  }
  if (raw.narrative.empty()) return InvalidArgument("narrative must not be empty", "narrative");
  c.claim_id = raw.claim_id;
  c.policy_id = raw.policy_id;
  c.claimant_token = raw.claimant_token.empty() ? tokenizer.TokenizeClaimant(raw.claimant_id) : raw.claimant_token;
  c.incident_date = raw.incident_date;
  c.report_date = raw.report_date;
  c.claim_type = static_cast<int>(type - ClaimTypes().begin());
  c.amount_claimed = raw.amount_claimed;
  c.policy_limit = raw.policy_limit;
  c.prior_claims = raw.prior_claims;
  c.provider_id = raw.provider_id;
  // Free text goes to the LLM's prompt, job outputs and logs: a card number written in it
  // (a claimant quoting their card) is redacted here, before any of them sees it.
  c.narrative = RedactPans(raw.narrative);
  c.adjuster_notes = RedactPans(raw.adjuster_notes);
  return c;
}

Result<RawClaim> ClaimForStorage(const RawClaim& raw, const CardTokenizer& tokenizer, const ClaimLimits& limits) {
  RawClaim stored = raw;
  // Stored fields are stored as they are: the claim must pass every check ValidateClaim makes
  // (card numbers in ids, claim type, dates), so nothing unchecked reaches the disk.
  Result<Claim> valid = ValidateClaim(raw, tokenizer, limits);
  if (!valid.ok()) return valid.error();
  if (raw.claimant_token.empty()) {
    stored.claimant_token = tokenizer.TokenizeClaimant(raw.claimant_id);
    stored.claimant_id.clear();
  }
  stored.narrative = RedactPans(raw.narrative);
  stored.adjuster_notes = RedactPans(raw.adjuster_notes);
  return stored;
}

Result<RawClaim> ParseClaimJson(const std::string& line) {
  json doc = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument("the line is not valid JSON");
  if (!doc.is_object()) return InvalidArgument("the line is not a JSON object");
  for (const auto& [key, value] : doc.items()) {
    if (!IsKnownKey(key)) return InvalidArgument("unknown key \"" + key + "\"", key);
  }
  for (const char* key : kRequiredKeys) {
    if (!doc.contains(key)) return InvalidArgument(std::string("missing required key \"") + key + "\"", key);
  }
  RawClaim c;
  auto text = [&](const char* key, std::string* out) -> Status {
    const json& v = doc.at(key);
    if (!v.is_string()) return InvalidArgument(std::string(key) + " must be a string", key);
    *out = v.get<std::string>();
    return Status::Ok();
  };
  auto number = [&](const char* key, double* out) -> Status {
    const json& v = doc.at(key);
    if (!v.is_number()) return InvalidArgument(std::string(key) + " must be a number", key);
    *out = v.get<double>();
    return Status::Ok();
  };
  TXSCORE_RETURN_IF_ERROR(text("claim_id", &c.claim_id));
  TXSCORE_RETURN_IF_ERROR(text("policy_id", &c.policy_id));
  if (doc.contains("claimant_id") == doc.contains("claimant_token")) {
    return InvalidArgument("exactly one of claimant_id and claimant_token is required", "claimant_id");
  }
  if (doc.contains("claimant_id")) TXSCORE_RETURN_IF_ERROR(text("claimant_id", &c.claimant_id));
  if (doc.contains("claimant_token")) TXSCORE_RETURN_IF_ERROR(text("claimant_token", &c.claimant_token));
  TXSCORE_RETURN_IF_ERROR(text("incident_date", &c.incident_date));
  TXSCORE_RETURN_IF_ERROR(text("report_date", &c.report_date));
  TXSCORE_RETURN_IF_ERROR(text("claim_type", &c.claim_type));
  TXSCORE_RETURN_IF_ERROR(number("amount_claimed", &c.amount_claimed));
  TXSCORE_RETURN_IF_ERROR(number("policy_limit", &c.policy_limit));
  const json& prior = doc.at("prior_claims");
  if (!prior.is_number_integer()) return InvalidArgument("prior_claims must be an integer", "prior_claims");
  c.prior_claims = prior.get<int64_t>();
  TXSCORE_RETURN_IF_ERROR(text("provider_id", &c.provider_id));
  TXSCORE_RETURN_IF_ERROR(text("narrative", &c.narrative));
  if (doc.contains("adjuster_notes")) TXSCORE_RETURN_IF_ERROR(text("adjuster_notes", &c.adjuster_notes));
  return c;
}

std::string ClaimToJson(const RawClaim& c) {
  json doc = {
      {"claim_id", c.claim_id},         {"policy_id", c.policy_id},          {"incident_date", c.incident_date},
      {"report_date", c.report_date},   {"claim_type", c.claim_type},        {"amount_claimed", c.amount_claimed},
      {"policy_limit", c.policy_limit}, {"prior_claims", c.prior_claims},    {"provider_id", c.provider_id},
      {"narrative", c.narrative},       {"adjuster_notes", c.adjuster_notes}};
  if (c.claimant_token.empty()) {
    doc["claimant_id"] = c.claimant_id;
  } else {
    doc["claimant_token"] = c.claimant_token;
  }
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);  // bytes that are not UTF-8 become U+FFFD
}

std::vector<std::string> SplitCsvRecord(const std::string& text, bool* complete) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        fields.back() += ch;
      }
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields.emplace_back();
    } else if (ch != '\r' || i + 1 != text.size()) {
      fields.back() += ch;
    }
  }
  *complete = !quoted;
  return fields;
}

Result<ClaimCsvHeader> ClaimCsvHeader::Parse(const std::vector<std::string>& columns) {
  ClaimCsvHeader header;
  std::set<std::string> seen;
  for (const std::string& column : columns) {
    if (!IsKnownKey(column)) return InvalidArgument("unknown column \"" + column + "\" in the header", column);
    if (!seen.insert(column).second) return InvalidArgument("column \"" + column + "\" appears twice", column);
  }
  for (const char* key : kRequiredKeys) {
    if (seen.count(key) == 0) return InvalidArgument(std::string("the header has no column \"") + key + "\"", key);
  }
  header.columns_ = columns;
  return header;
}

Result<RawClaim> ClaimCsvHeader::Read(const std::vector<std::string>& fields) const {
  if (fields.size() != columns_.size()) {
    return InvalidArgument("the record has " + std::to_string(fields.size()) + " fields; the header has " +
                           std::to_string(columns_.size()));
  }
  // The same checks as JSON: numbers must parse in full.
  json doc = json::object();
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& column = columns_[i];
    if (column == "amount_claimed" || column == "policy_limit" || column == "prior_claims") {
      const std::string& f = fields[i];
      char* end = nullptr;
      if (column == "prior_claims") {
        const long long v = std::strtoll(f.c_str(), &end, 10);
        if (f.empty() || *end != '\0') return InvalidArgument(column + " must be an integer", column);
        doc[column] = static_cast<int64_t>(v);
      } else {
        const double v = std::strtod(f.c_str(), &end);
        if (f.empty() || *end != '\0') return InvalidArgument(column + " must be a number", column);
        doc[column] = v;
      }
    } else {
      doc[column] = fields[i];
    }
  }
  return ParseClaimJson(doc.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace txscore::fraud
