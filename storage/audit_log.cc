#include "storage/audit_log.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/bytes.h"

namespace txscore::storage {

std::string EncodeAuditRecord(const AuditRecord& r) {
  nlohmann::json reasons = nlohmann::json::array();
  for (const AuditReason& reason : r.reasons) {
    reasons.push_back({{"feature", reason.feature}, {"contribution", reason.contribution}, {"value", reason.value}});
  }
  nlohmann::json timings = nlohmann::json::object();
  for (const auto& [stage, us] : r.timings_us) timings[stage] = us;
  nlohmann::json stage_scores = nlohmann::json::array();
  for (const auto& [stage, score] : r.stage_scores) stage_scores.push_back({{"stage", stage}, {"score", score}});
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
      {"reasons", reasons},
      {"timings_us", timings},
      {"degraded_stages", r.degraded_stages},
      {"skipped_stages", r.skipped_stages},
      {"placement", r.placement},
      {"stage_scores", stage_scores},
      {"traceparent", r.traceparent},
  };
  if (r.findings) {
    doc["findings"] = {{"risk_level", r.findings->risk_level},
                       {"flags", r.findings->flags},
                       {"summary", r.findings->summary},
                       {"model_id", r.findings->model_id}};
  }
  // NaN feature values (missing) are written as null: JSON has no NaN.
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

void AuditLog::Append(const AuditRecord& record, WriteBatch* batch) {
  std::string key;
  key.reserve(16);
  PutU64BE(&key, static_cast<uint64_t>(record.time_us));
  PutU64BE(&key, sequence_.fetch_add(1, std::memory_order_relaxed));
  batch->Put(ColumnFamily::kAudit, key, EncodeAuditRecord(record));
}

Result<std::vector<AuditRecord>> AuditLog::ReadLast(size_t limit) const {
  auto entries = db_->ReadLast(ColumnFamily::kAudit, limit);
  if (!entries.ok()) return entries.error();
  std::vector<AuditRecord> records;
  for (const auto& [key, value] : *entries) {
    Result<AuditRecord> record = DecodeAuditRecord(value);
    if (!record.ok()) return record.error();
    records.push_back(std::move(record).value());
  }
  return records;
}

}  // namespace txscore::storage
