#include "storage/audit_log.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "common/json_forms.h"
#include "common/logging.h"
#include "common/pan_scan.h"
#include "common/sha256.h"

namespace txscore::storage {
namespace {

// The one place a card number is kept out of the trail, whatever put it into a record (a
// caller's id, a refusal's detail, the LLM's summary, a rule's name): every string about to be
// stored, object keys included, is scanned. An entry is hash-chained, so a card number written
// once could never be removed without breaking the chain. Identifiers a caller relies on
// (`identifiers`: request ids, tokens, versions, the bundle digest) are scanned by the id rule
// and replaced whole, so that a long numeric id is kept, the hex txscore makes (a card token, a
// digest) as a caller's card token is judged (common/pan_scan.h, IdentifierHoldsCardNumber). The
// caller (an identity, a peer's "via", and addresses: "txscore-client (10.244.13.201:45678)",
// whose numbers the free-text rule would read as a card one time in two) by the rule for log
// lines, which names callers the same way: addresses kept, a card in any grouping found.
// Everything else by the free-text rule.
enum class FieldRule { kFreeText, kIdentifier, kCaller };

template <typename Json>
void RedactCardNumbers(Json* value, FieldRule rule = FieldRule::kFreeText) {
  if (value->is_string()) {
    const std::string& text = value->template get_ref<const std::string&>();
    if (rule == FieldRule::kIdentifier) {
      if (IdentifierHoldsCardNumber(text)) *value = std::string(kRedactedPan);
    } else {
      int redactions = 0;  // one pass: RedactPans finds and replaces
      std::string redacted =
          RedactPans(text, &redactions, rule == FieldRule::kCaller ? PanRule::kLogLine : PanRule::kFreeText);
      if (redactions > 0) *value = std::move(redacted);
    }
  } else if (value->is_array()) {
    for (Json& item : *value) RedactCardNumbers(&item);
  } else if (value->is_object()) {
    Json redacted = Json::object();
    for (auto it = value->begin(); it != value->end(); ++it) {
      Json item = std::move(it.value());
      RedactCardNumbers(&item);
      redacted[RedactPans(it.key())] = std::move(item);
    }
    *value = std::move(redacted);
  }
}

template <typename Json>
std::string DumpRedacted(Json doc, std::initializer_list<const char*> identifiers) {
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const bool identifier = std::find_if(identifiers.begin(), identifiers.end(),
                                         [&it](const char* name) { return it.key() == name; }) != identifiers.end();
    RedactCardNumbers(&it.value(), it.key() == "caller" ? FieldRule::kCaller
                                   : identifier         ? FieldRule::kIdentifier
                                                        : FieldRule::kFreeText);
  }
  return doc.dump();
}

}  // namespace

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
      {"pipeline_digest", r.pipeline_digest},
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
      {"caller", r.caller},
  };
  if (r.findings) doc["findings"] = FindingsToJson<nlohmann::json>(*r.findings);
  return DumpRedacted(std::move(doc), {"request_id", "card_token", "model_id", "model_version", "pipeline_version",
                                       "pipeline_digest", "traceparent"});
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
    r.pipeline_digest = doc.value("pipeline_digest", "");
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
    r.caller = doc.value("caller", "");
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
  return DumpRedacted(std::move(doc), {});
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
constexpr uint64_t kMaxEpoch = (uint64_t{1} << 24) - 1;
constexpr uint64_t kMaxCounter = uint64_t{1} << 40;
const std::string kEpochKey(kAuditEpochKey);

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status AuditLog::BeginWriting(AuditCheckpointKey key) {
  if (chain_.writing) return FailedPrecondition("AuditLog::BeginWriting called twice");
  Result<std::optional<std::string>> stored = db_->Get(ColumnFamily::kAudit, kEpochKey);
  if (!stored.ok()) return stored.error();
  uint64_t epoch = 0;
  if (stored->has_value()) {
    if ((*stored)->size() != 8) return DataLoss("the audit epoch record is corrupt");
    epoch = GetU64BE(**stored);
  }
  // The chain's head is the newest entry (key order is chain order). Should the epoch record
  // have been lost, the head's key still bounds the epoch.
  // Read before the head: after a reopen meanwhile, the start's group reads the head again.
  const uint64_t generation = db_->generation();
  ChainState chain;
  chain.head_hash = std::string(kAuditHashBytes, '\0');
  std::string previous = "none";
  Result<std::vector<std::pair<std::string, std::string>>> newest = db_->ReadLast(ColumnFamily::kAudit, 1);
  if (!newest.ok()) return newest.error();
  if (!newest->empty() && newest->front().first != kEpochKey) {
    const auto& [head_key, head_value] = newest->front();
    if (head_key.size() != kRecordKeyBytes) {
      return DataLoss(
          "the audit trail's newest key is not an audit record's; run `txscore audit verify` on the "
          "database before writing to it");
    }
    const AuditKeyParts parts = *ParseAuditKey(head_key);
    epoch = std::max<uint64_t>(epoch, parts.epoch);
    chain.last_time_us = parts.time_us;
    chain.head_hash = AuditEntryHash(head_key, head_value);
    if (std::optional<ChainFields> fields = ReadChainFields(head_value)) {
      chain.next_seq = fields->seq + 1;
      previous = IsShutdownCheckpoint(head_value) ? "shutdown" : "crash";
    } else if (!head_value.empty() && head_value.front() == '{' && !IsAuditCheckpoint(head_value)) {
      // Written before the chain: the chain starts at 0 and links it, unless a chained entry
      // exists further back (the newest entry was then altered, not legacy). A trail with no
      // chained entry is walked back once, at its first chained start.
      bool chained_before = false;
      TXSCORE_RETURN_IF_ERROR(db_->ScanBackward(ColumnFamily::kAudit, [&](std::string_view, std::string_view value) {
        chained_before = ReadChainFields(value).has_value();
        return !chained_before;
      }));
      if (chained_before) {
        return DataLoss(
            "the audit trail's newest entry has no chain fields, and older ones do: it was altered; run "
            "`txscore audit verify` on the database before writing to it");
      }
      previous = "legacy";
      Log("audit").warn(
          "the trail's records carry no chain fields (written before the chain); the chain starts "
          "now and links the newest of them; txscore audit verify reports them as unverifiable (exit 3)");
    } else {
      return DataLoss(
          "the audit trail's newest entry is not readable as a chained entry; run `txscore audit verify` "
          "on the database before writing to it");
    }
  }
  if (epoch + 1 > kMaxEpoch) return FailedPrecondition("the audit trail has used every epoch");
  epoch_ = static_cast<uint32_t>(epoch + 1);
  {
    std::lock_guard<std::mutex> lock(key_mutex_);
    checkpoint_key_ = std::move(key);
  }
  chain.writing = true;
  chain.generation = generation;
  chain_ = std::move(chain);
  // The epoch and the start checkpoint land together; should the write fail, nothing changed.
  WriteBatch batch;
  std::string value;
  PutU64BE(&value, epoch_);
  batch.Put(ColumnFamily::kAudit, kEpochKey, value);
  Pending start;
  start.time_us = NowMicros();
  start.checkpoint_reason = "start";
  start.json = previous;  // a start checkpoint says what came before it
  start.batch = std::move(batch);
  Status written = Enqueue(&start);
  if (!written.ok()) chain_.writing = false;
  return written;
}

void AuditLog::SetCheckpointKey(AuditCheckpointKey key) {
  std::lock_guard<std::mutex> lock(key_mutex_);
  checkpoint_key_ = std::move(key);
}

Status AuditLog::Commit(const AuditRecord& record, WriteBatch batch) {
  Pending pending;
  pending.time_us = record.time_us;
  pending.json = EncodeAuditRecord(record);
  pending.batch = std::move(batch);
  return Enqueue(&pending);
}

Status AuditLog::CommitAction(const AuditAction& action) {
  Pending pending;
  pending.time_us = action.time_us;
  pending.json = EncodeAuditAction(action);
  return Enqueue(&pending);
}

Status AuditLog::Close() {
  Pending shutdown;
  shutdown.time_us = NowMicros();
  shutdown.checkpoint_reason = "shutdown";
  Status written = Enqueue(&shutdown);
  // Closed already (or never begun): nothing to sign, and that is fine for an idempotent Close.
  if (shutdown.not_writing) return Status::Ok();
  return written;
}

Status AuditLog::Health() const {
  std::lock_guard<std::mutex> lock(stuck_mutex_);
  if (stuck_.empty()) return Status::Ok();
  return DataLoss(stuck_);
}

AuditCommitStats AuditLog::stats() const {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  return stats_;
}

size_t AuditLog::queued() const {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  return queue_.size();
}

Status AuditLog::Enqueue(Pending* pending) {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  queue_.push_back(pending);
  while (!pending->done) {
    if (leader_active_) {
      queue_cv_.wait(lock);
      continue;
    }
    leader_active_ = true;
    std::vector<Pending*> group;
    group.swap(queue_);
    lock.unlock();
    WriteGroup(group);
    lock.lock();
    for (Pending* member : group) member->done = true;
    leader_active_ = false;
    queue_cv_.notify_all();
  }
  return pending->status;
}

void AuditLog::AddEntry(int64_t time_us, const std::string& json, const std::string& checkpoint_reason,
                        WriteBatch* batch) {
  ChainState& chain = chain_;
  chain.last_time_us = std::max(chain.last_time_us, time_us);
  const std::string key = MakeAuditKey({chain.last_time_us, epoch_, chain.counter++});
  std::string value;
  if (checkpoint_reason.empty()) {
    value = ChainAuditEntry(json, chain.next_seq, chain.head_hash);
    ++chain.since_checkpoint;
  } else {
    AuditCheckpointKey key_copy;
    {
      std::lock_guard<std::mutex> lock(key_mutex_);
      key_copy = checkpoint_key_;
    }
    nlohmann::ordered_json doc = {{"kind", "checkpoint"},
                                  {"time_us", chain.last_time_us},
                                  {"reason", checkpoint_reason},
                                  {"epoch", epoch_},
                                  {"checkpoint_every", options_.checkpoint_every},
                                  {"key_id", key_copy.key_id}};
    if (checkpoint_reason == "start") doc["previous"] = json;
    value =
        SignAuditCheckpoint(key, ChainAuditEntry(doc.dump(), chain.next_seq, chain.head_hash), key_copy.private_key);
    chain.since_checkpoint = 0;
  }
  chain.head_hash = AuditEntryHash(key, value);
  if (!checkpoint_reason.empty()) group_checkpoints_.push_back({checkpoint_reason, chain.next_seq, chain.head_hash});
  ++chain.next_seq;
  batch->Put(ColumnFamily::kAudit, key, value);
}

Status AuditLog::FollowReopen(uint64_t generation) {
  // From the newest entry back to the newest checkpoint: where the chain goes on, and how many
  // entries the next periodic checkpoint must count.
  std::optional<std::pair<std::string, std::string>> head;
  uint64_t since_checkpoint = 0;
  std::vector<GroupCheckpoint> came_back;      // checkpoints among the entries that came back
  std::optional<std::string> first_back_prev;  // what the first entry that came back follows
  Status walked = db_->ScanBackward(ColumnFamily::kAudit, [&](std::string_view key, std::string_view value) {
    if (key.size() != kRecordKeyBytes) return false;  // the epoch record: no entry before it
    if (!head) head.emplace(std::string(key), std::string(value));
    const std::optional<ChainFields> fields = ReadChainFields(value);
    if (fields && fields->seq == chain_.next_seq) first_back_prev = fields->prev_hash;
    if (!IsAuditCheckpoint(value)) {
      ++since_checkpoint;
      return true;
    }
    if (fields && fields->seq >= chain_.next_seq) came_back.push_back({"", fields->seq, AuditEntryHash(key, value)});
    return false;
  });
  TXSCORE_RETURN_IF_ERROR(walked);
  if (first_back_prev && *first_back_prev != chain_.head_hash) {
    return DataLoss("after the database was reopened, the audit entry seq " + std::to_string(chain_.next_seq) +
                    " does not follow the entry written last: entries were replaced; run `txscore audit verify`");
  }
  if (!head) return DataLoss("the audit trail is empty after the database was reopened; run `txscore audit verify`");
  const auto& [head_key, head_value] = *head;
  const std::optional<AuditKeyParts> parts = ParseAuditKey(head_key);
  const std::optional<ChainFields> fields = ReadChainFields(head_value);
  if (!parts || !fields) {
    return DataLoss(
        "the audit trail's newest entry is not a chained entry after the database was reopened; run `txscore "
        "audit verify`");
  }
  if (fields->seq + 1 < chain_.next_seq ||
      (fields->seq + 1 == chain_.next_seq && AuditEntryHash(head_key, head_value) != chain_.head_hash)) {
    return DataLoss("after the database was reopened the audit trail ends at seq " + std::to_string(fields->seq) +
                    ", not at the entry written last (seq " + std::to_string(chain_.next_seq - 1) +
                    "): entries were lost or replaced; run `txscore audit verify`");
  }
  const std::string head_hash = AuditEntryHash(head_key, head_value);
  if (head_hash != chain_.head_hash) {
    Log("audit").warn(
        "after the database was reopened its newest audit entry is seq {}, not {}: a write reported as failed "
        "came back with RocksDB's log; the chain continues from it",
        fields->seq, chain_.next_seq == 0 ? 0 : chain_.next_seq - 1);
    // A checkpoint's hash in a log kept elsewhere anchors the trail (as WriteGroup logs them).
    for (const GroupCheckpoint& checkpoint : came_back) {
      Log("audit").info("checkpoint seq {} (epoch {}) came back with the database's log, hash {}", checkpoint.seq,
                        epoch_, HexOfBytes(checkpoint.hash));
    }
    chain_.head_hash = head_hash;
    chain_.next_seq = fields->seq + 1;
    chain_.last_time_us = std::max(chain_.last_time_us, parts->time_us);
    if (parts->epoch == epoch_) chain_.counter = std::max(chain_.counter, parts->counter + 1);
    chain_.since_checkpoint = since_checkpoint;
  }
  chain_.generation = generation;
  return Status::Ok();
}

void AuditLog::WriteGroup(const std::vector<Pending*>& group) {
  // Work on a copy: should the write fail, the chain continues from where it was.
  const ChainState before = chain_;
  const uint64_t generation = db_->generation();
  if (chain_.writing && generation != chain_.generation) {
    const Status followed = FollowReopen(generation);
    if (!followed.ok()) {
      chain_ = before;
      for (Pending* member : group) member->status = followed;
      std::lock_guard<std::mutex> lock(stuck_mutex_);
      stuck_ = followed.error().message;
      return;
    }
  }
  const uint64_t next_seq_before_group = chain_.next_seq;  // entries that came back are not this group's
  std::vector<Pending*> written;
  Status status;
  try {
    status = ChainAndWrite(group, &written);
  } catch (const std::exception& e) {
    // An allocation failure before the write, say: nothing of the group was written.
    status = Internal(std::string("audit commit failed: ") + e.what());
    written.clear();
    for (Pending* member : group) {
      if (member->status.ok()) written.push_back(member);
    }
  }
  if (written.empty()) return;
  const uint64_t entries = chain_.next_seq - next_seq_before_group;
  if (!status.ok()) {
    chain_ = before;
  } else {
    // A checkpoint's hash in a log kept elsewhere anchors the trail: a trail cut back behind
    // its newest checkpoint would still verify on its own (docs/security.md).
    for (const GroupCheckpoint& checkpoint : group_checkpoints_) {
      Log("audit").log(checkpoint.reason == "periodic" ? spdlog::level::debug : spdlog::level::info,
                       "{} checkpoint seq {} (epoch {}), hash {}", checkpoint.reason, checkpoint.seq, epoch_,
                       HexOfBytes(checkpoint.hash));
    }
  }
  group_checkpoints_.clear();
  for (Pending* member : written) member->status = status;
  std::lock_guard<std::mutex> lock(queue_mutex_);
  if (status.ok()) {
    stats_.writes += 1;
    stats_.entries += entries;
  }
}

Status AuditLog::ChainAndWrite(const std::vector<Pending*>& group, std::vector<Pending*>* written) {
  WriteBatch merged;
  for (Pending* member : group) {
    if (!chain_.writing) {
      member->not_writing = true;
      member->status = FailedPrecondition(epoch_ == 0 ? "AuditLog::Commit before BeginWriting"
                                                      : "the audit trail is closed (the service is stopping)");
      continue;
    }
    if (member->batch.required_generation() && *member->batch.required_generation() != chain_.generation) {
      // What it was made of was read before the database was reopened, which may have brought
      // back a write it did not see.
      member->status = Unavailable(
          "the database was reopened while this was being decided; nothing of it was written (send it again)");
      continue;
    }
    if (chain_.counter + 2 >= kMaxCounter) {
      member->status =
          FailedPrecondition("this process has written 2^40 audit entries; restart it to take a new epoch");
      continue;
    }
    merged.Append(std::move(member->batch));
    AddEntry(member->time_us, member->json, member->checkpoint_reason, &merged);
    if (member->checkpoint_reason == "shutdown") {
      chain_.writing = false;
    } else if (chain_.since_checkpoint >= options_.checkpoint_every) {
      AddEntry(NowMicros(), "", "periodic", &merged);
    }
    written->push_back(member);
  }
  if (written->empty()) return Status::Ok();
  TXSCORE_RETURN_IF_ERROR(options_.before_write ? options_.before_write() : Status::Ok());
  merged.RequireGeneration(chain_.generation);  // the head it was chained from
  return db_->Write(merged);
}

template <typename Entry>
Result<std::vector<Entry>> AuditLog::ReadLastOfKind(size_t limit, bool actions,
                                                    Result<Entry> (*decode)(const std::string&)) const {
  std::vector<Entry> entries;
  Status error;
  TXSCORE_RETURN_IF_ERROR(db_->ScanBackward(ColumnFamily::kAudit, [&](std::string_view key, std::string_view value) {
    if (entries.size() >= limit) return false;
    const std::string text(value);
    // The epoch record, a checkpoint, or the other kind.
    if (key.size() != kRecordKeyBytes || IsAuditCheckpoint(text) || IsAuditAction(text) != actions) return true;
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
