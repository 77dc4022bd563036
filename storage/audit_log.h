// The audit trail: one record per decision, and one per operator action (a reload, a claims
// job submitted or cancelled, allowed or denied), in column family `audit`, one sequence.
//
// Keys are 16 bytes, big-endian (time_us, sequence), so RocksDB's byte order is time order
// and "the last N" is a reverse scan. The sequence is (epoch << 40 | counter): each writer
// takes a new epoch, stored durably in the same column family before its first record, so a
// key never repeats across restarts, even when the wall clock steps back (records are never
// overwritten). Databases written before epochs existed have epoch 0. Values are JSON, readable by any tool. A record
// is added to the same WriteBatch as the card's new state, so both land or neither does.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "storage/database.h"

namespace txscore::storage {

struct AuditReason {
  std::string feature;
  double contribution = 0;
  double value = 0;
};

// What the forensic stage wrote (storage keeps its own copy of the shape: no llm dependency).
struct AuditFindings {
  std::string risk_level;
  std::vector<std::string> flags;
  std::string summary;
  std::string model_id;
};

// A rule that matched (a rules stage), and the decision it forced ("" when it only reports).
struct AuditRuleHit {
  std::string rule;
  std::string decision;
};

struct AuditRecord {
  int64_t time_us = 0;  // when the decision was made, microseconds since the epoch (UTC)
  std::string request_id;
  std::string card_token;  // never the PAN
  int64_t transaction_time_ms = 0;
  std::string model_id;
  std::string model_version;
  std::string pipeline_version;
  double score = 0;
  std::string decision;  // APPROVE, REVIEW or DECLINE
  std::vector<AuditReason> reasons;
  std::vector<AuditRuleHit> rule_hits;                      // in rule order; the first with a decision decided
  std::vector<std::pair<std::string, int64_t>> timings_us;  // stage -> elapsed
  std::vector<std::string> degraded_stages;
  std::vector<std::string> skipped_stages;
  // Where the model stages ran, stage@device: "fraud@cpu", or
  // "fraud@cpu,forensic@emulated:0 (emulated)" when the forensic stage ran.
  std::string placement;
  // The score of every model stage that ran, shadow models included, in run order.
  std::vector<std::pair<std::string, double>> stage_scores;
  std::string traceparent;
  std::optional<AuditFindings> findings;  // only for decisions the forensic stage analysed
};

std::string EncodeAuditRecord(const AuditRecord& record);
Result<AuditRecord> DecodeAuditRecord(const std::string& json_text);

// Something an operator did or tried, in the same trail as the decisions.
struct AuditAction {
  int64_t time_us = 0;  // when, microseconds since the epoch (UTC)
  std::string action;   // "reload", "submit_claims_job", "cancel_claims_job"
  // Who: the caller's certificate identity and address ("txscore-admin (127.0.0.1:5555)"),
  // "unauthenticated 127.0.0.1:5555" on a plaintext port, or "signal SIGHUP".
  std::string caller;
  std::string target;   // what it acted on: a job id, the settings file
  std::string outcome;  // "applied"; "refused" (tried, and it failed); "denied" (the caller may not)
  std::string detail;
};

// Stored as JSON with "kind": "action" (decision records have no "kind").
std::string EncodeAuditAction(const AuditAction& action);
Result<AuditAction> DecodeAuditAction(const std::string& json_text);
bool IsAuditAction(const std::string& json_text);

class AuditLog {
 public:
  explicit AuditLog(Database* db) : db_(db) {}

  // Takes a new epoch for this writer (one past the stored one and past the newest record's)
  // and stores it. Call once before Append.
  Status BeginWriting();
  // Adds the record to `batch` under a fresh, time-ordered key. kFailedPrecondition before
  // BeginWriting, or after 2^40 records of one epoch (restart the writer).
  Status Append(const AuditRecord& record, WriteBatch* batch);
  // The same for an operator action.
  Status AppendAction(const AuditAction& action, WriteBatch* batch);
  uint32_t epoch() const { return epoch_; }
  // Up to `limit` most recent decision records, newest first.
  Result<std::vector<AuditRecord>> ReadLast(size_t limit) const;
  // Up to `limit` most recent operator actions, newest first.
  Result<std::vector<AuditAction>> ReadLastActions(size_t limit) const;

 private:
  Status AppendEncoded(int64_t time_us, std::string value, WriteBatch* batch);
  // The newest `limit` entries of one kind (actions or decisions), newest first.
  template <typename Entry>
  Result<std::vector<Entry>> ReadLastOfKind(size_t limit, bool actions,
                                            Result<Entry> (*decode)(const std::string&)) const;

  Database* db_;
  uint32_t epoch_ = 0;
  bool writing_ = false;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace txscore::storage
