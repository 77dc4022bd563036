// Moving card state between shards, offline (docs/scaling-out.md, "Resharding"): `txscore
// shard export` writes every card state of one stopped shard to a file; `txscore shard import`
// gives a stopped shard of the new set exactly the cards it owns by the new shard list, from
// the exports of every shard of the old set, and removes those it no longer owns.
//
// An export is JSON lines: a header {"format": "txscore-card-state", "version": 1, "shard",
// "shards": [every name of its set]}, one {"card_token", "transactions", "state_hex"} per card
// (its transaction count, and the stored bytes: fraud/entity_state.h), and a trailer {"end": true, "cards": N,
// "sha256": of the card lines}. Re-keying markers (a card moved to a newer key's token) are not exported: they only
// serve requests in flight across a reload. The file is written beside its name and renamed
// over it once synced, so an export is whole or absent; a file cut short or altered is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "service/shard_map.h"
#include "storage/database.h"

namespace txscore::service {

struct ExportSummary {
  int64_t cards = 0;
  int64_t markers_skipped = 0;
};
// `shard`: the exported shard's name; `shards`: every name of its set.
Result<ExportSummary> ExportCardState(const storage::Database& db, const std::string& shard,
                                      const std::vector<std::string>& shards, const std::string& out_path);

struct ImportSummary {
  int64_t imported = 0;                  // cards written (new here, or replacing the state held here)
  int64_t removed = 0;                   // entries this shard held for cards it no longer owns
  std::vector<std::string> from_shards;  // the old set's shards, as the exports named them
};
// Checks that `exports` are whole, of one shard set, and one per shard of it; then writes the
// cards `map`'s own shard owns and deletes the entries of cards it does not own, in one atomic
// write. Idempotent.
Result<ImportSummary> ImportCardState(storage::Database* db, const ShardMap& map,
                                      const std::vector<std::string>& exports);

// Which shard a database belongs to: STORAGE_PATH/txscore-shard.json, {"shard", "shards"},
// written when a shard first starts on an empty database and by each import. It keeps a shard
// from starting on another shard's database, or on a changed shard list without the reshard
// (whose cards it would score from an empty history).
struct ShardStamp {
  std::string shard;
  std::vector<std::string> shards;  // sorted
};
Result<std::optional<ShardStamp>> ReadShardStamp(const std::string& db_path);
Status WriteShardStamp(const std::string& db_path, const ShardMap& map);
// For a server starting on `db` at `db_path`: `map` null (not sharded) refuses a stamped
// database; otherwise the stamp must name map's shard and set, and an unstamped database must
// hold no card state (then it is stamped). kFailedPrecondition saying what to do.
Status CheckShardStamp(const std::string& db_path, const storage::Database& db, const ShardMap* map);

}  // namespace txscore::service
