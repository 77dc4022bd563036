// The audit trail: one record per decision, and one per operator action (a reload, a claims
// job submitted or cancelled, allowed or denied), in column family `audit`, one sequence,
// hash-chained with signed checkpoints (audit_chain.h) so that a change is detected.
//
// Keys are 16 bytes, big-endian (time_us, sequence), so RocksDB's byte order is time order
// and "the last N" is a reverse scan. The sequence is (epoch << 40 | counter): each writer
// takes a new epoch, stored durably in the same column family before its first record, so a
// key never repeats across restarts. A key's time is the record's, or the newest key's when
// that is later (a commit that overtook it, or a wall clock stepped back), so key order is also
// the order the entries were written and chained in. Databases written before epochs existed
// have epoch 0. Values are JSON, readable by any tool. A record is written in the same batch
// as the card's new state, so both land or neither does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "storage/audit_chain.h"
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
  // The bundle digest of the pipeline that decided (pipelines/bundle_digest.h), "sha256:...";
  // empty in records written before it was recorded.
  std::string pipeline_digest;
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
  // Who asked (PCI DSS 10.2.2): the caller's TLS identity and address, "unauthenticated ADDRESS"
  // on a plaintext port, "in-process" for txscore's own callers; on a forwarded transaction, the
  // replica that forwarded it. Empty in records written before callers were recorded.
  std::string caller;
  std::optional<AuditFindings> findings;  // only for decisions the forensic stage analysed
};

// Every string of the encoded record and action is scanned for card numbers first (the trail's
// one choke point, common/pan_scan.h): ids whole by the id rule, the rest by the free-text rule,
// each card number replaced by "[card number redacted]". So what a record holds when decoded
// may differ from what was encoded there, and only there.
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

// What a decision's commit costs the trail, for metrics: how many commits shared one write.
struct AuditCommitStats {
  uint64_t writes = 0;   // database writes (one per group; one fsync each under kSync)
  uint64_t entries = 0;  // entries written (decisions, actions, checkpoints)
};

// The one writer of the trail. Commit chains each entry (audit_chain.h) and writes it with its
// batch; concurrent commits are grouped into one database write (one WAL sync under kSync):
// the first to arrive while no write is in flight leads, takes every commit queued by then,
// chains them in order, writes them as one batch, and wakes the others. So the chain has one
// order, has no holes (a group lands whole or not at all; a failed one advances nothing), and
// its key order is its chain order.
class AuditLog {
 public:
  struct Options {
    // Default: 1000. A signed checkpoint after this many entries (and at each start and Close).
    // Only entries written after the newest checkpoint and lost with a crash can go unnoticed.
    uint64_t checkpoint_every = 1000;
    // Default: none. Called by the leader before each database write; an error it returns
    // fails that group as a failed write would. A seam for tests (grouping, a failed write).
    std::function<Status()> before_write;
  };
  explicit AuditLog(Database* db) : AuditLog(db, Options()) {}
  AuditLog(Database* db, Options options) : db_(db), options_(options) {}

  // Takes a new epoch (one past the stored one and past the newest record's), finds the chain's
  // head and writes a "start" checkpoint linking to it, signed with `key`. Call once before
  // Commit. kDataLoss when the newest entry is unreadable (run `txscore audit verify`).
  Status BeginWriting(AuditCheckpointKey key);
  // The key later checkpoints are signed with (a key rotation).
  void SetCheckpointKey(AuditCheckpointKey key);
  // Writes `batch` and the record, chained, in one durable write; returns when it has landed.
  // kFailedPrecondition before BeginWriting or after Close.
  Status Commit(const AuditRecord& record, WriteBatch batch);
  // The same for an operator action.
  Status CommitAction(const AuditAction& action);
  // Writes the "shutdown" checkpoint; commits fail afterwards. Idempotent.
  Status Close();
  uint32_t epoch() const { return epoch_; }
  // OK while the trail takes entries; kDataLoss, saying why, once a reopen of the database
  // found it ended before or apart from what was written last (every commit fails then, until
  // a restart after `txscore audit verify`).
  Status Health() const;
  AuditCommitStats stats() const;
  // Commits waiting for the write in flight (tests).
  size_t queued() const;
  // Up to `limit` most recent decision records, newest first.
  Result<std::vector<AuditRecord>> ReadLast(size_t limit) const;
  // Up to `limit` most recent operator actions, newest first.
  Result<std::vector<AuditAction>> ReadLastActions(size_t limit) const;

 private:
  // One commit waiting for its group's write.
  struct Pending {
    int64_t time_us = 0;
    std::string json;               // the entry without chain fields; empty for a checkpoint
    std::string checkpoint_reason;  // "start" or "shutdown": the leader writes a checkpoint
    WriteBatch batch;
    Status status;
    bool done = false;
    bool not_writing = false;  // refused: before BeginWriting, or after Close
  };
  Status Enqueue(Pending* pending);
  // After the database was reopened: the chain continues from its newest entry, which may be
  // a write reported as failed that RocksDB's log brought back.
  Status FollowReopen(uint64_t generation);
  // Chains and writes one group. Only the leader runs it, so the chain state is its own.
  void WriteGroup(const std::vector<Pending*>& group);
  // Chains the group's entries into one batch and writes it; `written` receives the members
  // it carries. Throws only before the write (an allocation failure).
  Status ChainAndWrite(const std::vector<Pending*>& group, std::vector<Pending*>* written);
  // Appends a chained entry (a checkpoint when `checkpoint_reason` is set) to `batch`.
  void AddEntry(int64_t time_us, const std::string& json, const std::string& checkpoint_reason, WriteBatch* batch);
  template <typename Entry>
  Result<std::vector<Entry>> ReadLastOfKind(size_t limit, bool actions,
                                            Result<Entry> (*decode)(const std::string&)) const;

  Database* db_;
  const Options options_;
  uint32_t epoch_ = 0;

  std::mutex key_mutex_;
  AuditCheckpointKey checkpoint_key_;

  mutable std::mutex stuck_mutex_;
  std::string stuck_;  // why the trail takes no entries: "" while it does

  mutable std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::vector<Pending*> queue_;
  bool leader_active_ = false;
  AuditCommitStats stats_;  // under queue_mutex_

  // The chain's state: the leader's alone (leader_active_ hands it from one to the next).
  struct ChainState {
    bool writing = false;  // BeginWriting done, Close not yet
    uint64_t next_seq = 0;
    std::string head_hash;     // of the newest entry written
    int64_t last_time_us = 0;  // the newest key's time: keys never go back in time
    uint64_t counter = 0;      // this epoch's next key counter
    uint64_t since_checkpoint = 0;
    uint64_t generation = 0;  // the database's generation the head was read from
  };
  ChainState chain_;
  // The checkpoints of the group being written, logged once it has landed (the leader's).
  struct GroupCheckpoint {
    std::string reason;
    uint64_t seq = 0;
    std::string hash;
  };
  std::vector<GroupCheckpoint> group_checkpoints_;
};

}  // namespace txscore::storage
