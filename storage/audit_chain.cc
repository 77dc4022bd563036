#include "storage/audit_chain.h"

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/bytes.h"
#include "common/sha256.h"
#include "common/signing.h"

namespace txscore::storage {
namespace {

constexpr size_t kKeyBytes = 16;
constexpr int kCounterBits = 40;
constexpr std::string_view kCheckpointPrefix = "{\"kind\":\"checkpoint\"";
constexpr std::string_view kSignatureField = ",\"sig\":\"";  // Ed25519, 128 hex digits
constexpr std::string_view kHmacField = ",\"hmac\":\"";      // before Ed25519: HMAC-SHA256, 64
constexpr std::string_view kPrevField = ",\"prev\":\"";
constexpr std::string_view kSeqField = ",\"seq\":";
constexpr size_t kHexDigits = 2 * kAuditHashBytes;
constexpr size_t kSignatureHexDigits = 2 * kEd25519SignatureBytes;

bool IsLowerHex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string BytesOfHex(std::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    bytes.push_back(static_cast<char>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  }
  return bytes;
}

// `value` ends with `<field><`digits` hex>"}`: the hex, and the value with that field cut out.
std::optional<std::pair<std::string, std::string>> CutHexField(std::string_view value, std::string_view field,
                                                               size_t digits = kHexDigits) {
  const size_t tail = field.size() + digits + 2;
  if (value.size() < tail + 1 || value.substr(value.size() - 2) != "\"}") return std::nullopt;
  const size_t at = value.size() - tail;
  if (value.substr(at, field.size()) != field) return std::nullopt;
  const std::string_view hex = value.substr(at + field.size(), digits);
  if (!IsLowerHex(hex)) return std::nullopt;
  return std::make_pair(std::string(hex), std::string(value.substr(0, at)) + "}");
}

// A checkpoint's signature and what it signs (the value without the signature's field).
struct SplitCheckpointValue {
  bool hmac = false;  // signed before checkpoints were signed with Ed25519
  std::string signature_hex;
  std::string unsigned_value;
};

std::optional<SplitCheckpointValue> SplitCheckpoint(std::string_view value) {
  if (auto signature = CutHexField(value, kSignatureField, kSignatureHexDigits)) {
    return SplitCheckpointValue{false, std::move(signature->first), std::move(signature->second)};
  }
  if (auto mac = CutHexField(value, kHmacField)) {
    return SplitCheckpointValue{true, std::move(mac->first), std::move(mac->second)};
  }
  return std::nullopt;
}

}  // namespace

std::string MakeAuditKey(const AuditKeyParts& parts) {
  std::string key;
  key.reserve(kKeyBytes);
  PutU64BE(&key, static_cast<uint64_t>(parts.time_us));
  PutU64BE(&key, (uint64_t{parts.epoch} << kCounterBits) | parts.counter);
  return key;
}

std::optional<AuditKeyParts> ParseAuditKey(std::string_view key) {
  if (key.size() != kKeyBytes) return std::nullopt;
  const uint64_t sequence = GetU64BE(key.substr(8));
  return AuditKeyParts{static_cast<int64_t>(GetU64BE(key)), static_cast<uint32_t>(sequence >> kCounterBits),
                       sequence & ((uint64_t{1} << kCounterBits) - 1)};
}

std::string AuditEntryHash(std::string_view key, std::string_view value) { return Sha256Bytes({key, value}); }

std::string ChainAuditEntry(std::string_view json, uint64_t seq, std::string_view prev_hash) {
  std::string out(json.substr(0, json.size() - 1));  // without the closing brace
  out.append(kSeqField).append(std::to_string(seq)).append(kPrevField).append(HexOfBytes(prev_hash)).append("\"}");
  return out;
}

std::string SignAuditCheckpoint(std::string_view key, std::string_view chained_value, std::string_view private_key) {
  Result<std::string> signature = Ed25519Sign(private_key, {key, chained_value});
  if (!signature.ok()) {
    // Only a key of the wrong size (a programming error: keys come from fraud::PurposeKey) or
    // an allocation failure in OpenSSL get here; an unsigned checkpoint is never written.
    std::fprintf(stderr, "fatal: cannot sign an audit checkpoint: %s\n", signature.error().ToString().c_str());
    std::abort();
  }
  std::string out(chained_value.substr(0, chained_value.size() - 1));
  out.append(kSignatureField).append(HexOfBytes(*signature)).append("\"}");
  return out;
}

bool IsAuditCheckpoint(std::string_view value) {
  return value.substr(0, kCheckpointPrefix.size()) == kCheckpointPrefix;
}

bool IsShutdownCheckpoint(std::string_view value) {
  return IsAuditCheckpoint(value) && value.find("\"reason\":\"shutdown\"") != std::string_view::npos;
}

std::optional<ChainFields> ReadChainFields(std::string_view value) {
  std::string unsigned_value;
  if (IsAuditCheckpoint(value)) {
    auto split = SplitCheckpoint(value);
    if (!split) return std::nullopt;
    unsigned_value = std::move(split->unsigned_value);
    value = unsigned_value;
  }
  auto prev = CutHexField(value, kPrevField);
  if (!prev) return std::nullopt;
  const std::string& rest = prev->second;  // ends with `,"seq":<digits>}`
  const size_t at = rest.rfind(kSeqField);
  if (at == std::string::npos) return std::nullopt;
  const std::string digits = rest.substr(at + kSeqField.size(), rest.size() - 1 - at - kSeqField.size());
  if (digits.empty() || digits.size() > 19 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return ChainFields{std::stoull(digits), BytesOfHex(prev->first)};
}

const char* ChainProblemKindName(ChainProblemKind kind) {
  switch (kind) {
    case ChainProblemKind::kAltered:
      return "altered";
    case ChainProblemKind::kMissing:
      return "missing";
    case ChainProblemKind::kReordered:
      return "reordered";
    case ChainProblemKind::kUnchained:
      return "unchained";
    case ChainProblemKind::kBadSignature:
      return "bad signature";
    case ChainProblemKind::kUnknownKey:
      return "unknown key";
    case ChainProblemKind::kRetiredKey:
      return "retired key";
    case ChainProblemKind::kCheckpointMissing:
      return "checkpoint missing";
  }
  return "?";
}

namespace {

// What a checkpoint says about itself, once its signature is verified.
struct CheckpointFacts {
  std::string reason;    // start, periodic, shutdown
  std::string previous;  // a start's: shutdown, crash, none, legacy
  int64_t epoch = -1;
  uint64_t checkpoint_every = 0;  // 0 when the checkpoint does not say (written before it did)
};

// The walk's state: what the next entry must say.
class ChainWalker {
 public:
  explicit ChainWalker(const ChainVerifyOptions& options) : options_(options) {}

  // The entry just before the walk (--from): the first entry walked must link to it.
  void Seed(std::string_view key, std::string_view value) {
    const std::optional<AuditKeyParts> parts = ParseAuditKey(key);
    if (!parts) return;
    prev_hash_ = AuditEntryHash(key, value);
    have_prev_ = true;
    previous_ = *parts;
    have_previous_entry_ = true;
    if (!IsAuditCheckpoint(value) && !ReadChainFields(value)) legacy_before_ = true;
    if (const std::optional<ChainFields> fields = ReadChainFields(value)) {
      started_ = true;
      started_before_this_ = true;
      expected_seq_ = fields->seq + 1;
      report_.first_seq = expected_seq_;
      previous_was_shutdown_ = IsShutdownCheckpoint(value);
      // How many entries precede the walk since the last checkpoint is not known: the rule
      // "at most checkpoint_every between checkpoints" applies from the first checkpoint on.
    }
  }

  // The newest checkpoint before the walk and the chained entries after it (`since`): the walk
  // goes on with its spacing rule. False when its signature does not verify.
  bool SeedCheckpoint(std::string_view key, std::string_view value, uint64_t since) {
    const std::optional<AuditKeyParts> parts = ParseAuditKey(key);
    const std::optional<ChainFields> fields = ReadChainFields(value);
    if (!parts || !fields) return true;
    CheckpointFacts facts;
    if (!CheckSignature(key, value, *parts, fields->seq, &facts, /*count=*/false)) {
      report_.problem->detail += " (the newest checkpoint before the walk)";
      return false;
    }
    checkpoint_every_ = facts.checkpoint_every;
    since_checkpoint_ = since;
    return true;
  }

  // false once a problem is final (the scan stops).
  bool Visit(std::string_view key, std::string_view value) {
    const std::optional<AuditKeyParts> parts = ParseAuditKey(key);
    if (!parts) return true;  // the epoch record, not part of the chain
    ++position_;
    const std::optional<ChainFields> fields = ReadChainFields(value);
    if (pending_) return LookAhead(fields);
    if (!fields) {
      if (started_) {
        return Fail(ChainProblemKind::kUnchained, *parts, expected_seq_, "the entry has no chain fields (seq, prev)");
      }
      ++report_.legacy;
      prev_hash_ = AuditEntryHash(key, value);
      have_prev_ = true;
      previous_ = *parts;
      have_previous_entry_ = true;
      return true;
    }
    if (!started_) {
      // The chain starts at seq 0, after the legacy records (or nothing).
      started_ = true;
      expected_seq_ = 0;
      if (!have_prev_) prev_hash_ = std::string(kAuditHashBytes, '\0');
      have_prev_ = true;
    }
    if (fields->seq != expected_seq_) {
      // Reordered when the expected entry turns up later; missing when it does not.
      pending_ = Pending{*parts, fields->seq, position_};
      return true;
    }
    if (fields->prev_hash != prev_hash_) {
      const uint64_t at = position_;
      position_ -= 1;  // the fault is the predecessor's bytes (or this entry's record of them)
      Fail(ChainProblemKind::kAltered, previous_, fields->seq == 0 ? 0 : fields->seq - 1,
           "its bytes do not hash to what the next entry (position " + std::to_string(at) + ", seq " +
               std::to_string(fields->seq) + ") recorded as prev");
      return false;
    }
    const bool checkpoint = IsAuditCheckpoint(value);
    CheckpointFacts facts;
    if (checkpoint && !CheckSignature(key, value, *parts, fields->seq, &facts)) return false;
    if (!CheckPlacement(*parts, fields->seq, checkpoint, facts)) return false;
    ++report_.entries;
    report_.head_seq = fields->seq;
    prev_hash_ = AuditEntryHash(key, value);
    report_.head_hash_hex = HexOfBytes(prev_hash_);
    expected_seq_ = fields->seq + 1;
    previous_ = *parts;
    have_previous_entry_ = true;
    previous_was_shutdown_ = checkpoint && facts.reason == "shutdown";
    return true;
  }

  // The epoch record's bytes (kAuditEpochKey), checked against the newest entry by Finish.
  void ExpectNewestEpoch(std::string record) { epoch_record_ = std::move(record); }

  ChainReport Finish() {
    if (!pending_ && !report_.problem && epoch_record_) CheckNewestEpoch();
    if (pending_ && !report_.problem) {
      position_ = pending_->position;
      Fail(ChainProblemKind::kMissing, pending_->key, expected_seq_,
           "seq " + std::to_string(expected_seq_) +
               (pending_->seq > expected_seq_ + 1 ? " to " + std::to_string(pending_->seq - 1) : std::string()) +
               " absent: the entry here has seq " + std::to_string(pending_->seq));
    }
    report_.after_last_checkpoint = since_checkpoint_;
    report_.ends_with_shutdown = previous_was_shutdown_;
    return report_;
  }

 private:
  struct Pending {
    AuditKeyParts key;
    uint64_t seq;
    uint64_t position;
  };

  bool LookAhead(const std::optional<ChainFields>& fields) {
    if (!fields || fields->seq != expected_seq_) return true;
    const uint64_t found_at = position_;
    position_ = pending_->position;
    Fail(ChainProblemKind::kReordered, pending_->key, pending_->seq,
         "the entry here has seq " + std::to_string(pending_->seq) + " where seq " + std::to_string(expected_seq_) +
             " belongs; that one is at position " + std::to_string(found_at));
    pending_.reset();
    return false;
  }

  // The signed checkpoints are where the writer puts them, so none can be removed or turned
  // into an ordinary entry unnoticed: each server start (a new epoch in the keys) opens with its
  // start checkpoint; no more than checkpoint_every entries follow a checkpoint; and a start
  // that says the previous run shut down follows that run's shutdown checkpoint.
  bool CheckPlacement(const AuditKeyParts& key, uint64_t seq, bool checkpoint, const CheckpointFacts& facts) {
    const bool epoch_starts = !have_previous_entry_ || key.epoch != previous_.epoch;
    const bool start = checkpoint && facts.reason == "start";
    // The chain opens with a signed start checkpoint that says what came before it, so neither
    // a chain restarted at 0 nor records stripped of their chain fields pass for "legacy".
    if (seq == 0) {
      const std::string before = report_.legacy > 0 || legacy_before_ ? "legacy" : "none";
      if (!start || facts.previous != before) {
        return Fail(ChainProblemKind::kCheckpointMissing, key, seq,
                    "the chain's first entry is not a signed start checkpoint saying previous: " + before);
      }
    }
    if (epoch_starts && !start) {
      return Fail(ChainProblemKind::kCheckpointMissing, key, seq,
                  "a server start (epoch " + std::to_string(key.epoch) + ") without its signed start checkpoint");
    }
    if (start && (!epoch_starts || facts.epoch != key.epoch)) {
      return Fail(ChainProblemKind::kCheckpointMissing, key, seq,
                  "a start checkpoint that does not open its epoch (epoch " + std::to_string(facts.epoch) + ")");
    }
    if (start && facts.previous == "shutdown" && started_before_this_ && !previous_was_shutdown_) {
      return Fail(ChainProblemKind::kCheckpointMissing, key, seq,
                  "the start checkpoint says the previous run shut down, and the entry before it is not that run's "
                  "shutdown checkpoint");
    }
    started_before_this_ = true;
    if (checkpoint) {
      since_checkpoint_ = 0;
      if (facts.checkpoint_every > 0) checkpoint_every_ = facts.checkpoint_every;
      return true;
    }
    ++since_checkpoint_;
    if (checkpoint_every_ > 0 && since_checkpoint_ > checkpoint_every_) {
      return Fail(ChainProblemKind::kCheckpointMissing, key, seq,
                  std::to_string(since_checkpoint_) + " entries since the last checkpoint, where one is written " +
                      "after every " + std::to_string(checkpoint_every_));
    }
    return true;
  }

  bool CheckSignature(std::string_view key, std::string_view value, const AuditKeyParts& parts, uint64_t seq,
                      CheckpointFacts* facts, bool count = true) {
    const auto split = SplitCheckpoint(value);
    const nlohmann::json doc = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    std::string key_id;
    if (doc.is_object() && doc.contains("key_id") && doc["key_id"].is_string()) key_id = doc["key_id"];
    if (!split || key_id.empty()) {
      return Fail(ChainProblemKind::kBadSignature, parts, seq, "the checkpoint is not well-formed");
    }
    if (split->hmac) {
      if (seen_ed25519_) {
        return Fail(ChainProblemKind::kBadSignature, parts, seq,
                    "an HMAC-signed checkpoint after Ed25519-signed ones: the writer signs with Ed25519 since it "
                    "first did, so this one was written by someone else");
      }
      if (!options_.legacy_hmac_key) {
        return Fail(ChainProblemKind::kBadSignature, parts, seq,
                    "the checkpoint is HMAC-signed (written before checkpoints were signed with Ed25519): only the "
                    "keyset verifies it (txscore audit verify --keyset, not --public-keys)");
      }
      std::optional<std::string> secret = options_.legacy_hmac_key(key_id);
      if (!secret) return Fail(ChainProblemKind::kUnknownKey, parts, seq, UnknownKey(key_id));
      const bool valid = HexOfBytes(HmacSha256Bytes(*secret, {key, split->unsigned_value})) == split->signature_hex;
      WipeString(&*secret);
      if (!valid) {
        return Fail(ChainProblemKind::kBadSignature, parts, seq,
                    "the checkpoint's HMAC does not verify under key " + key_id);
      }
    } else {
      const std::optional<std::string> public_key =
          options_.checkpoint_public_key ? options_.checkpoint_public_key(key_id) : std::optional<std::string>();
      if (!public_key) return Fail(ChainProblemKind::kUnknownKey, parts, seq, UnknownKey(key_id));
      if (!Ed25519Verify(*public_key, {key, split->unsigned_value}, BytesOfHex(split->signature_hex))) {
        return Fail(ChainProblemKind::kBadSignature, parts, seq,
                    "the checkpoint's Ed25519 signature does not verify under key " + key_id + "'s public key");
      }
      seen_ed25519_ = true;
    }
    if (const std::optional<int64_t> retired =
            options_.key_retired_at_us ? options_.key_retired_at_us(key_id) : std::optional<int64_t>();
        retired && parts.time_us > *retired) {
      return Fail(ChainProblemKind::kRetiredKey, parts, seq,
                  "the checkpoint is signed with key " + key_id + ", which was retired " +
                      std::to_string((parts.time_us - *retired) / 1000) +
                      " ms before: whoever still holds a retired key could have written it");
    }
    // Signed: what it says can be believed.
    facts->reason = doc.value("reason", "");
    facts->previous = doc.value("previous", "");
    facts->epoch = doc.contains("epoch") && doc["epoch"].is_number_integer() ? doc["epoch"].get<int64_t>() : -1;
    if (!doc.contains("checkpoint_every") || !doc["checkpoint_every"].is_number_unsigned() ||
        doc["checkpoint_every"].get<uint64_t>() == 0) {
      return Fail(ChainProblemKind::kBadSignature, parts, seq, "the checkpoint does not say its checkpoint_every");
    }
    facts->checkpoint_every = doc["checkpoint_every"].get<uint64_t>();
    if (count) ++report_.checkpoints;
    return true;
  }

  // Each server start writes the epoch record in one batch with its start checkpoint, so the
  // newest entry is of the epoch the record names. An older newest entry (or none) means whole
  // runs were cut from the end; a newer one, that the record was rewritten.
  void CheckNewestEpoch() {
    if (epoch_record_->size() != 8) {
      position_ += 1;
      Fail(ChainProblemKind::kAltered, previous_, expected_seq_,
           "the epoch record (the trail's first key) is " + std::to_string(epoch_record_->size()) +
               " bytes, not 8: it was altered");
      return;
    }
    const uint64_t recorded = GetU64BE(*epoch_record_);
    const uint64_t newest = have_previous_entry_ ? previous_.epoch : 0;
    if (recorded == newest) return;
    const std::string newest_entry =
        have_previous_entry_ ? "the newest entry is of epoch " + std::to_string(newest) : "the trail holds no entry";
    position_ += 1;  // where the absent entries would follow
    if (recorded > newest) {
      Fail(ChainProblemKind::kMissing, previous_, expected_seq_,
           "the epoch record says a server start of epoch " + std::to_string(recorded) + " wrote to the trail, and " +
               newest_entry + ": entries were deleted from the end");
    } else {
      Fail(ChainProblemKind::kAltered, previous_, expected_seq_,
           "the epoch record says epoch " + std::to_string(recorded) + ", and " + newest_entry +
               ": the record was rewritten");
    }
  }

  static std::string UnknownKey(const std::string& key_id) {
    return "the checkpoint is signed with key " + key_id + ", which is not among the keys given";
  }

  bool Fail(ChainProblemKind kind, const AuditKeyParts& key, uint64_t seq, std::string detail) {
    report_.problem = ChainProblem{kind, position_, seq, key.time_us, key.epoch, key.counter, std::move(detail)};
    return false;
  }

  const ChainVerifyOptions& options_;
  ChainReport report_;
  uint64_t position_ = 0;
  bool started_ = false;
  bool have_prev_ = false;
  std::string prev_hash_;
  uint64_t expected_seq_ = 0;
  AuditKeyParts previous_;
  bool have_previous_entry_ = false;
  bool previous_was_shutdown_ = false;
  bool started_before_this_ = false;  // a chained entry was walked (or seeded) before this one
  uint64_t since_checkpoint_ = 0;
  uint64_t checkpoint_every_ = 0;  // from the last checkpoint that said; 0: not known yet
  bool legacy_before_ = false;     // the entry before the walk (--from) has no chain fields
  bool seen_ed25519_ = false;      // an Ed25519-signed checkpoint was verified
  std::optional<Pending> pending_;
  std::optional<std::string> epoch_record_;  // absent: a trail from before epochs, or none
};

}  // namespace

Result<ChainReport> VerifyAuditChain(const Database& db, const ChainVerifyOptions& options) {
  ChainWalker walker(options);
  TXSCORE_ASSIGN_OR_RETURN(std::optional<std::string> epoch_record, db.Get(ColumnFamily::kAudit, kAuditEpochKey));
  if (epoch_record) walker.ExpectNewestEpoch(std::move(*epoch_record));
  std::string from;
  if (options.from_time_us > 0) {
    from = MakeAuditKey({options.from_time_us, 0, 0});
    // The first entry walked must link to the one before it, as any other does.
    TXSCORE_ASSIGN_OR_RETURN(auto before, db.LastBefore(ColumnFamily::kAudit, from));
    if (before) {
      walker.Seed(before->first, before->second);
      // Back to the newest checkpoint, so that the spacing rule holds from the first entry
      // walked (a rewrite after T cannot turn the checkpoints after T into ordinary entries).
      uint64_t since = 0;
      std::optional<std::pair<std::string, std::string>> entry = before;
      while (entry && ParseAuditKey(entry->first) && ReadChainFields(entry->second)) {
        if (IsAuditCheckpoint(entry->second)) {
          if (!walker.SeedCheckpoint(entry->first, entry->second, since)) return walker.Finish();
          break;
        }
        ++since;
        TXSCORE_ASSIGN_OR_RETURN(entry, db.LastBefore(ColumnFamily::kAudit, entry->first));
      }
    }
  }
  TXSCORE_RETURN_IF_ERROR(
      db.ScanForward(ColumnFamily::kAudit, from,
                     [&walker](std::string_view key, std::string_view value) { return walker.Visit(key, value); }));
  return walker.Finish();
}

}  // namespace txscore::storage
