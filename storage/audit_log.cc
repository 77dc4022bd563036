#include "storage/audit_log.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "common/json_forms.h"

namespace txscore::storage {

std::string EncodeAuditRecord(const AuditRecord& r) {
  nlohmann::json timings = nlohmann::json::object();
  for (const auto& [stage, us] : r.timings_us) timings[stage] = us;
  nlohmann::json stage_scores = nlohmann::json::array();
  for (const auto& [stage, score] : r.stage_scores) stage_scores.push_back({{"stage", stage}, {"score", score}});
  // Not RuleHitsToJson's shape: a stored record says "" for a hit without a decision.
  nlohmann::json rule_hits = nlohmann::json::array();
  for (const AuditRuleHit& hit : r.rule_hits) rule_hits.push_back({{"rule", hit.rule}, {"decision", hit.decision}});
  nlohmann::json doc = {
      {"time_us", r.time_us},
      {"request_id", r.request_id},
      {"card_token", r.card_token},
      {"transaction_time_ms", r.transaction_time_ms},
      {"model_id", r.model_id},
      {"model_version", r.model_version},
      {"pipeline_version", r.pipeline_version},
      {"score", r.score},
      {"decision", r.decision},
      {"reasons", ReasonsToJson<nlohmann::json>(r.reasons)},
      {"timings_us", timings},
      {"degraded_stages", r.degraded_stages},
      {"skipped_stages", r.skipped_stages},
      {"placement", r.placement},
      {"stage_scores", stage_scores},
      {"rule_hits", rule_hits},
      {"traceparent", r.traceparent},
  };
  if (r.findings) doc["findings"] = FindingsToJson<nlohmann::json>(*r.findings);
  return doc.dump();
}

Result<AuditRecord> DecodeAuditRecord(const std::string& json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return DataLoss("audit record is not a JSON object");
  AuditRecord r;
  try {
    r.time_us = doc.at("time_us").get<int64_t>();
    r.request_id = doc.at("request_id").get<std::string>();
    r.card_token = doc.at("card_token").get<std::string>();
    r.transaction_time_ms = doc.at("transaction_time_ms").get<int64_t>();
    r.model_id = doc.at("model_id").get<std::string>();
    r.model_version = doc.at("model_version").get<std::string>();
    r.pipeline_version = doc.at("pipeline_version").get<std::string>();
    r.score = doc.at("score").get<double>();
    r.decision = doc.at("decision").get<std::string>();
    for (const auto& reason : doc.at("reasons")) {
      const auto& value = reason.at("value");
      r.reasons.push_back({reason.at("feature").get<std::string>(), reason.at("contribution").get<double>(),
                           value.is_null() ? std::nan("") : value.get<double>()});
    }
    for (const auto& [stage, us] : doc.at("timings_us").items()) r.timings_us.emplace_back(stage, us.get<int64_t>());
    r.degraded_stages = doc.at("degraded_stages").get<std::vector<std::string>>();
    r.skipped_stages = doc.at("skipped_stages").get<std::vector<std::string>>();
    r.placement = doc.value("placement", "");
    if (auto scores = doc.find("stage_scores"); scores != doc.end()) {
      for (const auto& entry : *scores) {
        r.stage_scores.emplace_back(entry.at("stage").get<std::string>(), entry.at("score").get<double>());
      }
    }
    if (auto hits = doc.find("rule_hits"); hits != doc.end()) {
      for (const auto& entry : *hits) {
        r.rule_hits.push_back({entry.at("rule").get<std::string>(), entry.at("decision").get<std::string>()});
      }
    }
    r.traceparent = doc.value("traceparent", "");
    if (auto f = doc.find("findings"); f != doc.end()) {
      r.findings = AuditFindings{f->at("risk_level").get<std::string>(), f->at("flags").get<std::vector<std::string>>(),
                                 f->at("summary").get<std::string>(), f->at("model_id").get<std::string>()};
    }
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("audit record is malformed: ") + e.what());
  }
  return r;
}

std::string EncodeAuditAction(const AuditAction& a) {
  // "kind" first, so IsAuditAction needs no parse.
  nlohmann::ordered_json doc = {{"kind", "action"},   {"time_us", a.time_us}, {"action", a.action},
                                {"caller", a.caller}, {"target", a.target},   {"outcome", a.outcome},
                                {"detail", a.detail}};
  return doc.dump();
}

bool IsAuditAction(const std::string& json_text) { return json_text.rfind("{\"kind\":\"action\"", 0) == 0; }

Result<AuditAction> DecodeAuditAction(const std::string& json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return DataLoss("audit action is not a JSON object");
  AuditAction a;
  try {
    if (doc.at("kind").get<std::string>() != "action") return DataLoss("audit record is not an action");
    a.time_us = doc.at("time_us").get<int64_t>();
    a.action = doc.at("action").get<std::string>();
    a.caller = doc.at("caller").get<std::string>();
    a.target = doc.at("target").get<std::string>();
    a.outcome = doc.at("outcome").get<std::string>();
    a.detail = doc.at("detail").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return DataLoss(std::string("audit action is malformed: ") + e.what());
  }
  return a;
}

namespace {

constexpr size_t kRecordKeyBytes = 16;
constexpr int kCounterBits = 40;
constexpr uint64_t kMaxEpoch = (uint64_t{1} << 24) - 1;
// Sorts before every record key (all of which start with a zero byte until the year 4253).
const std::string kEpochKey(1, '\0');

uint64_t ReadU64BE(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

}  // namespace

Status AuditLog::BeginWriting() {
  Result<std::optional<std::string>> stored = db_->Get(ColumnFamily::kAudit, kEpochKey);
  if (!stored.ok()) return stored.error();
  uint64_t epoch = 0;
  if (stored->has_value()) {
    if ((*stored)->size() != 8) return DataLoss("the audit epoch record is corrupt");
    epoch = ReadU64BE(**stored, 0);
  }
  // Should the epoch record have been lost, the newest record still bounds it.
  Result<std::vector<std::pair<std::string, std::string>>> newest = db_->ReadLast(ColumnFamily::kAudit, 1);
  if (!newest.ok()) return newest.error();
  if (!newest->empty() && newest->front().first.size() == kRecordKeyBytes) {
    epoch = std::max(epoch, ReadU64BE(newest->front().first, 8) >> kCounterBits);
  }
  if (epoch + 1 > kMaxEpoch) return FailedPrecondition("the audit trail has used every epoch");
  std::string value;
  PutU64BE(&value, epoch + 1);
  WriteBatch batch;
  batch.Put(ColumnFamily::kAudit, kEpochKey, value);
  TXSCORE_RETURN_IF_ERROR(db_->Write(batch));
  epoch_ = static_cast<uint32_t>(epoch + 1);
  writing_ = true;
  return Status::Ok();
}

Status AuditLog::Append(const AuditRecord& record, WriteBatch* batch) {
  return AppendEncoded(record.time_us, EncodeAuditRecord(record), batch);
}

Status AuditLog::AppendAction(const AuditAction& action, WriteBatch* batch) {
  return AppendEncoded(action.time_us, EncodeAuditAction(action), batch);
}

Status AuditLog::AppendEncoded(int64_t time_us, std::string value, WriteBatch* batch) {
  if (!writing_) return FailedPrecondition("AuditLog::Append before BeginWriting");
  const uint64_t counter = counter_.fetch_add(1, std::memory_order_relaxed);
  if (counter >= (uint64_t{1} << kCounterBits)) {
    return FailedPrecondition("this process has written 2^40 audit records; restart it to take a new epoch");
  }
  std::string key;
  key.reserve(kRecordKeyBytes);
  PutU64BE(&key, static_cast<uint64_t>(time_us));
  PutU64BE(&key, (uint64_t{epoch_} << kCounterBits) | counter);
  batch->Put(ColumnFamily::kAudit, key, value);
  return Status::Ok();
}

template <typename Entry>
Result<std::vector<Entry>> AuditLog::ReadLastOfKind(size_t limit, bool actions,
                                                    Result<Entry> (*decode)(const std::string&)) const {
  std::vector<Entry> entries;
  Status error;
  TXSCORE_RETURN_IF_ERROR(db_->ScanBackward(ColumnFamily::kAudit, [&](std::string_view key, std::string_view value) {
    if (entries.size() >= limit) return false;
    const std::string text(value);
    if (key.size() != kRecordKeyBytes || IsAuditAction(text) != actions) return true;  // the epoch record, another kind
    Result<Entry> entry = decode(text);
    if (!entry.ok()) {
      error = entry.error();
      return false;
    }
    entries.push_back(std::move(entry).value());
    return true;
  }));
  if (!error.ok()) return error.error();
  return entries;
}

Result<std::vector<AuditRecord>> AuditLog::ReadLast(size_t limit) const {
  return ReadLastOfKind<AuditRecord>(limit, /*actions=*/false, &DecodeAuditRecord);
}

Result<std::vector<AuditAction>> AuditLog::ReadLastActions(size_t limit) const {
  return ReadLastOfKind<AuditAction>(limit, /*actions=*/true, &DecodeAuditAction);
}

}  // namespace txscore::storage
