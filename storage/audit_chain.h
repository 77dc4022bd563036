// The audit trail's hash chain: how a change to the stored trail is detected (PCI DSS 10.3.2 and
// 10.3.4: audit logs protected from modification, and changes detected).
//
// Every entry of the trail (a decision, an operator action, a checkpoint) is one link. The
// writer (AuditLog) appends two fields to the entry's JSON before storing it:
//   "seq":  its place in the chain, from 0, never reset (restarts continue it);
//   "prev": hex SHA-256 of the previous entry's key and value bytes, as stored.
// An entry's hash is SHA-256(key || value). Keys are assigned in chain order (audit_log.h), so
// the column family's key order is the chain's order.
//
// Checkpoints are entries of kind "checkpoint", written when a writer starts (linking the
// previous process's last entry, whether it shut down or crashed), every N entries, and at
// shutdown. Each carries an Ed25519 signature ("sig", last field) over key || the value without
// that field, under the audit signing key of the keyset key named by "key_id" (fraud::
// PurposeKey), and says its epoch and checkpoint_every. Verifying needs only the public keys
// (`txscore keys public`): whoever checks the trail holds nothing that makes a card token.
// Checkpoints written before Ed25519 carry an HMAC-SHA256 ("hmac") instead, which only the
// keyset verifies; once an Ed25519 checkpoint has been seen, an HMAC one is refused. The chain
// detects any change, deletion or reordering of an entry that has a successor; the signatures
// stop someone without the keyset who rewrites every later link, since they would have to sign
// the next checkpoint; and the checkpoints' places are checked (kCheckpointMissing), so one cannot be
// removed or rewritten as an ordinary entry either. What none of this can catch, and is
// documented (docs/security.md): the entries after the newest checkpoint (at most
// checkpoint_every; the newest run's shutdown checkpoint too, if removed), changed offline; and
// a trail cut off behind its newest checkpoint (compare `txscore audit verify`'s head with the
// one the service logged at shutdown). A trail cut back by whole server runs, or emptied, is
// caught while the epoch record (below) still names the newest run: each start writes it in the
// same batch as its start checkpoint, so the newest entry must be of that epoch. The record is
// not signed: who also rewrites it to an older epoch is caught only by the logged head.
//
// Records written before the chain existed (no "seq") are "legacy": counted, not verified; the
// first chained entry links the newest of them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "common/wipe.h"
#include "storage/database.h"

namespace txscore::storage {

inline constexpr size_t kAuditHashBytes = 32;

// The key a writer signs checkpoints with: the keyset key's id and its audit signing key (an
// Ed25519 private key, 32 bytes), wiped when the key is destroyed (every copy wipes its own).
struct AuditCheckpointKey {
  std::string key_id;
  std::string private_key;
  ~AuditCheckpointKey() { WipeString(&private_key); }
};

// SHA-256(key || value): what the next entry's "prev" names.
std::string AuditEntryHash(std::string_view key, std::string_view value);
// `json` (an object) with "seq" and "prev" added as its last fields.
std::string ChainAuditEntry(std::string_view json, uint64_t seq, std::string_view prev_hash);
// A chained checkpoint value with its "sig" field added (Ed25519 over key || value).
std::string SignAuditCheckpoint(std::string_view key, std::string_view chained_value, std::string_view private_key);

// What an entry's chain fields say; nullopt for an entry without them (legacy, or altered
// beyond recognition).
struct ChainFields {
  uint64_t seq = 0;
  std::string prev_hash;  // raw 32 bytes
};
std::optional<ChainFields> ReadChainFields(std::string_view value);
bool IsAuditCheckpoint(std::string_view value);
// A checkpoint written at a clean shutdown.
bool IsShutdownCheckpoint(std::string_view value);

enum class ChainProblemKind {
  kAltered,       // an entry's bytes are not what its successor recorded
  kMissing,       // entries are absent: "seq" jumps, and the skipped ones are nowhere later; or the
                  // newest server start the epoch record names left no entry (the tail was cut)
  kReordered,     // an entry is out of its place: the expected "seq" comes later
  kUnchained,     // an entry without chain fields after the chain began
  kBadSignature,  // a checkpoint's signature does not verify (or cannot: an HMAC one, public keys only)
  kUnknownKey,    // a checkpoint names a key not among those given
  kRetiredKey,    // a checkpoint is signed with a key after that key was retired
  // A signed checkpoint is not where the writer puts one: a server start (a new epoch) without
  // its start checkpoint, more than checkpoint_every entries after a checkpoint, or a start that
  // says the run before shut down with no shutdown checkpoint before it. What a checkpoint
  // removed, or rewritten as an ordinary entry to carry a rewritten chain past it, leaves.
  kCheckpointMissing,
};
const char* ChainProblemKindName(ChainProblemKind kind);

struct ChainProblem {
  ChainProblemKind kind = ChainProblemKind::kAltered;
  uint64_t position = 0;    // 1-based place among the entries walked (legacy ones included)
  uint64_t seq = 0;         // the seq of the entry at fault (for kMissing: the first absent one)
  int64_t key_time_us = 0;  // the entry's key (for kMissing: the entry where the gap shows)
  uint32_t epoch = 0;
  uint64_t counter = 0;
  std::string detail;
};

struct ChainReport {
  uint64_t entries = 0;                // chained entries walked
  uint64_t legacy = 0;                 // entries from before the chain, not verifiable
  uint64_t checkpoints = 0;            // checkpoint signatures verified
  uint64_t after_last_checkpoint = 0;  // entries no checkpoint covers yet
  bool ends_with_shutdown = false;     // the newest entry is a shutdown checkpoint
  uint64_t first_seq = 0;
  uint64_t head_seq = 0;
  std::string head_hash_hex;            // hash of the newest entry walked
  std::optional<ChainProblem> problem;  // the first one found; the walk stops there
};

struct ChainVerifyOptions {
  // Default: 0 (from the first entry). Start at the first entry whose key time is >= this; it
  // must link to the entry before it (or be seq 0 when there is none). Positions count from
  // there. The rule "at most checkpoint_every entries between checkpoints" applies from the
  // first checkpoint walked.
  int64_t from_time_us = 0;
  // The Ed25519 public key (32 bytes) of a key id, nullopt when there is no such key.
  std::function<std::optional<std::string>(const std::string& key_id)> checkpoint_public_key;
  // For a trail written before checkpoints were signed with Ed25519: the HMAC secret of a key id
  // (fraud::DeriveLegacyAuditHmacKey), nullopt when there is no such key. Unset (verifying with
  // public keys only), an HMAC-signed checkpoint is refused as unverifiable.
  std::function<std::optional<std::string>(const std::string& key_id)> legacy_hmac_key;
  // When a key was retired (us since the epoch), nullopt while it is not (or when is not known).
  // A checkpoint it signed with a later entry time is refused. The entry time is the writer's:
  // this does not stop a holder of the key rewriting what is dated before and cutting the tail
  // (the logged head hash does). Default: none (no key retired).
  std::function<std::optional<int64_t>(const std::string& key_id)> key_retired_at_us;
};

// Walks the trail in key order and reports the first problem. Errors only when the database
// cannot be read.
Result<ChainReport> VerifyAuditChain(const Database& db, const ChainVerifyOptions& options);

// The key of the epoch record: 8 bytes, big-endian, the epoch of the newest server start that
// wrote to the trail. It sorts before every record key (all of which start with a zero byte
// until the year 4253).
inline constexpr std::string_view kAuditEpochKey{"\0", 1};

// A record key's parts (16 bytes: time_us, then epoch << 40 | counter, big-endian).
struct AuditKeyParts {
  int64_t time_us = 0;
  uint32_t epoch = 0;
  uint64_t counter = 0;
};
std::string MakeAuditKey(const AuditKeyParts& parts);
std::optional<AuditKeyParts> ParseAuditKey(std::string_view key);

}  // namespace txscore::storage
