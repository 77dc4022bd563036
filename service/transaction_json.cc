#include "service/transaction_json.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_forms.h"

namespace txscore::service {
namespace {

using nlohmann::json;

template <typename Enum>
Result<typename Enum::type> EnumFromJson(const json& value, const std::map<int, const char*>& names,
                                         const char* field) {
  if (value.is_number_integer()) {
    const int v = value.get<int>();
    if (names.count(v)) return static_cast<typename Enum::type>(v);
  } else if (value.is_string()) {
    for (const auto& [v, name] : names) {
      if (value.get<std::string>() == name) return static_cast<typename Enum::type>(v);
    }
  }
  return InvalidArgument("is not a known value", field);
}

}  // namespace

Result<rpc::Transaction> TransactionFromJson(const std::string& json_text) {
  json doc = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("not a JSON object", "transaction");
  static const std::set<std::string> kKnown = {
      "request_id",  "timestamp_ms", "amount_minor",     "currency",    "card_number",  "card_token",
      "merchant_id", "mcc",          "merchant_country", "channel",     "entry_mode",   "device_id",
      "ip_address",  "latitude",     "longitude",        "traceparent", "card_country", "card_verification_code",
      "budget_ms"};
  for (const auto& [key, value] : doc.items()) {
    if (kKnown.count(key) == 0) return InvalidArgument("unknown field", key);
  }
  // Parse into the pipeline's struct, then convert: one place knows which fields are optional.
  fraud::RawTransaction raw;
  auto required_string = [&](const char* key, std::string* out) -> Status {
    auto it = doc.find(key);
    if (it == doc.end()) return InvalidArgument("is required", key);
    if (!it->is_string()) return InvalidArgument("must be a string", key);
    *out = it->get<std::string>();
    return Status::Ok();
  };
  auto optional_string = [&](const char* key, std::optional<std::string>* out) -> Status {
    auto it = doc.find(key);
    if (it == doc.end()) return Status::Ok();
    if (!it->is_string()) return InvalidArgument("must be a string", key);
    *out = it->get<std::string>();
    return Status::Ok();
  };
  auto required_integer = [&](const char* key, int64_t* out) -> Status {
    auto it = doc.find(key);
    if (it == doc.end()) return InvalidArgument("is required", key);
    if (!it->is_number_integer()) return InvalidArgument("must be an integer", key);
    *out = it->get<int64_t>();
    return Status::Ok();
  };
  auto optional_number = [&](const char* key, std::optional<double>* out) -> Status {
    auto it = doc.find(key);
    if (it == doc.end()) return Status::Ok();
    if (!it->is_number()) return InvalidArgument("must be a number", key);
    *out = it->get<double>();
    return Status::Ok();
  };
  TXSCORE_RETURN_IF_ERROR(required_string("request_id", &raw.request_id));
  TXSCORE_RETURN_IF_ERROR(required_integer("timestamp_ms", &raw.timestamp_ms));
  TXSCORE_RETURN_IF_ERROR(required_integer("amount_minor", &raw.amount_minor));
  TXSCORE_RETURN_IF_ERROR(required_string("currency", &raw.currency));
  TXSCORE_RETURN_IF_ERROR(optional_string("card_number", &raw.card_number));
  TXSCORE_RETURN_IF_ERROR(optional_string("card_token", &raw.card_token));
  TXSCORE_RETURN_IF_ERROR(required_string("merchant_id", &raw.merchant_id));
  TXSCORE_RETURN_IF_ERROR(required_string("mcc", &raw.mcc));
  TXSCORE_RETURN_IF_ERROR(required_string("merchant_country", &raw.merchant_country));
  TXSCORE_RETURN_IF_ERROR(optional_string("device_id", &raw.device_id));
  TXSCORE_RETURN_IF_ERROR(optional_string("ip_address", &raw.ip_address));
  TXSCORE_RETURN_IF_ERROR(optional_number("latitude", &raw.latitude));
  TXSCORE_RETURN_IF_ERROR(optional_number("longitude", &raw.longitude));
  TXSCORE_RETURN_IF_ERROR(optional_string("traceparent", &raw.traceparent));
  TXSCORE_RETURN_IF_ERROR(optional_string("card_country", &raw.card_country));
  TXSCORE_RETURN_IF_ERROR(optional_string("card_verification_code", &raw.card_verification_code));
  if (auto it = doc.find("budget_ms"); it != doc.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 600000) {
      return InvalidArgument("must be an integer between 1 and 600000", "budget_ms");
    }
    raw.budget_ms = static_cast<int32_t>(it->get<int64_t>());
  }
  if (!doc.contains("channel")) return InvalidArgument("is required", "channel");
  if (!doc.contains("entry_mode")) return InvalidArgument("is required", "entry_mode");
  Result<rpc::Channel::type> channel =
      EnumFromJson<rpc::Channel>(doc["channel"], rpc::_Channel_VALUES_TO_NAMES, "channel");
  if (!channel.ok()) return channel.error();
  Result<rpc::EntryMode::type> mode =
      EnumFromJson<rpc::EntryMode>(doc["entry_mode"], rpc::_EntryMode_VALUES_TO_NAMES, "entry_mode");
  if (!mode.ok()) return mode.error();
  raw.channel = static_cast<int>(*channel);
  raw.entry_mode = static_cast<int>(*mode);
  return ToThriftTransaction(raw);
}

std::string TransactionToJson(const rpc::Transaction& t) {
  json doc = {{"request_id", t.request_id},
              {"timestamp_ms", t.timestamp_ms},
              {"amount_minor", t.amount_minor},
              {"currency", t.currency},
              {"merchant_id", t.merchant_id},
              {"mcc", t.mcc},
              {"merchant_country", t.merchant_country},
              {"channel", rpc::_Channel_VALUES_TO_NAMES.at(t.channel)},
              {"entry_mode", rpc::_EntryMode_VALUES_TO_NAMES.at(t.entry_mode)}};
  if (t.__isset.card_number) doc["card_number"] = t.card_number;
  if (t.__isset.card_token) doc["card_token"] = t.card_token;
  if (t.__isset.card_country) doc["card_country"] = t.card_country;
  if (t.__isset.device_id) doc["device_id"] = t.device_id;
  if (t.__isset.ip_address) doc["ip_address"] = t.ip_address;
  if (t.__isset.latitude) doc["latitude"] = t.latitude;
  if (t.__isset.longitude) doc["longitude"] = t.longitude;
  if (t.__isset.traceparent) doc["traceparent"] = t.traceparent;
  if (t.__isset.card_verification_code) doc["card_verification_code"] = t.card_verification_code;
  if (t.__isset.budget_ms) doc["budget_ms"] = t.budget_ms;
  return doc.dump();
}

rpc::Transaction ToThriftTransaction(const fraud::RawTransaction& raw) {
  rpc::Transaction t;
  t.request_id = raw.request_id;
  t.timestamp_ms = raw.timestamp_ms;
  t.amount_minor = raw.amount_minor;
  t.currency = raw.currency;
  if (raw.card_number) t.__set_card_number(*raw.card_number);
  if (raw.card_token) t.__set_card_token(*raw.card_token);
  t.merchant_id = raw.merchant_id;
  t.mcc = raw.mcc;
  t.merchant_country = raw.merchant_country;
  if (raw.card_country) t.__set_card_country(*raw.card_country);
  t.channel = static_cast<rpc::Channel::type>(raw.channel);
  t.entry_mode = static_cast<rpc::EntryMode::type>(raw.entry_mode);
  if (raw.device_id) t.__set_device_id(*raw.device_id);
  if (raw.ip_address) t.__set_ip_address(*raw.ip_address);
  if (raw.latitude) t.__set_latitude(*raw.latitude);
  if (raw.longitude) t.__set_longitude(*raw.longitude);
  if (raw.traceparent) t.__set_traceparent(*raw.traceparent);
  if (raw.card_verification_code) t.__set_card_verification_code(*raw.card_verification_code);
  if (raw.budget_ms) t.__set_budget_ms(*raw.budget_ms);
  if (!raw.older_card_tokens.empty()) t.__set_older_card_tokens(raw.older_card_tokens);
  return t;
}

std::string ScoreResultToJson(const rpc::ScoreResult& r) {
  json timings = json::object();
  for (const auto& t : r.timings) timings[t.stage] = t.elapsed_us;
  auto decision = rpc::_Decision_VALUES_TO_NAMES.find(r.decision);
  json doc = {{"request_id", r.request_id},
              {"score", r.score},
              {"decision", decision != rpc::_Decision_VALUES_TO_NAMES.end() ? decision->second : "?"},
              {"reasons", ReasonsToJson<json>(r.reasons, ContributionDigits::kFour)},
              {"model", r.model_id + "@" + r.model_version},
              {"pipeline_version", r.pipeline_version},
              {"timings_us", timings}};
  if (r.__isset.stage_scores && r.stage_scores.size() > 1)
    doc["stage_scores"] = r.stage_scores;  // shadow models, blends
  if (r.__isset.rule_hits && !r.rule_hits.empty()) {
    doc["rule_hits"] = RuleHitsToJson<json>(r.rule_hits, [](const rpc::RuleHit& hit) -> const char* {
      auto forced = rpc::_Decision_VALUES_TO_NAMES.find(hit.decision);
      return hit.__isset.decision && forced != rpc::_Decision_VALUES_TO_NAMES.end() ? forced->second : nullptr;
    });
  }
  if (!r.degraded_stages.empty()) doc["degraded_stages"] = r.degraded_stages;
  if (!r.skipped_stages.empty()) doc["skipped_stages"] = r.skipped_stages;
  if (r.__isset.findings) doc["findings"] = FindingsToJson<json>(r.findings);
  return doc.dump();
}

rpc::Claim ToThriftClaim(const fraud::RawClaim& c) {
  rpc::Claim claim;
  claim.claim_id = c.claim_id;
  claim.policy_id = c.policy_id;
  claim.claimant_id = c.claimant_id;
  claim.incident_date = c.incident_date;
  claim.report_date = c.report_date;
  claim.claim_type = c.claim_type;
  claim.amount_claimed = c.amount_claimed;
  claim.policy_limit = c.policy_limit;
  claim.prior_claims = static_cast<int32_t>(c.prior_claims);
  claim.provider_id = c.provider_id;
  claim.narrative = c.narrative;
  if (!c.adjuster_notes.empty()) claim.__set_adjuster_notes(c.adjuster_notes);
  return claim;
}

fraud::RawClaim FromThriftClaim(const rpc::Claim& c) {
  fraud::RawClaim raw;
  raw.claim_id = c.claim_id;
  raw.policy_id = c.policy_id;
  raw.claimant_id = c.claimant_id;
  raw.incident_date = c.incident_date;
  raw.report_date = c.report_date;
  raw.claim_type = c.claim_type;
  raw.amount_claimed = c.amount_claimed;
  raw.policy_limit = c.policy_limit;
  raw.prior_claims = c.prior_claims;
  raw.provider_id = c.provider_id;
  raw.narrative = c.narrative;
  if (c.__isset.adjuster_notes) raw.adjuster_notes = c.adjuster_notes;
  return raw;
}

}  // namespace txscore::service
