#include "storage/database.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "storage/audit_log.h"
#include "tests/test_support.h"

namespace txscore::storage {
namespace {

TEST(Database, WriteBatchIsVisibleInEveryColumnFamily) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  WriteBatch batch;
  batch.Put(ColumnFamily::kEntityState, "card", "state");
  batch.Put(ColumnFamily::kAudit, "k1", "record");
  ASSERT_TRUE((*db)->Write(batch).ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card").value(), std::optional<std::string>("state"));
  EXPECT_EQ((*db)->Get(ColumnFamily::kAudit, "k1").value(), std::optional<std::string>("record"));
  // Column families are separate key spaces.
  EXPECT_EQ((*db)->Get(ColumnFamily::kAudit, "card").value(), std::nullopt);
}

TEST(Database, DataSurvivesReopen) {
  testing::TempDir dir;
  {
    auto db = Database::Open(dir.file("db"));
    ASSERT_TRUE(db.ok());
    WriteBatch batch;
    batch.Put(ColumnFamily::kEntityState, "card", "state");
    ASSERT_TRUE((*db)->Write(batch).ok());
  }
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card").value(), std::optional<std::string>("state"));
}

TEST(Database, ReadOnlyOpenWorksBesideAWriter) {
  testing::TempDir dir;
  auto writer = Database::Open(dir.file("db"));
  ASSERT_TRUE(writer.ok());
  WriteBatch batch;
  batch.Put(ColumnFamily::kAudit, "a", "1");
  ASSERT_TRUE((*writer)->Write(batch).ok());
  auto reader = Database::Open(dir.file("db"), {.read_only = true});
  ASSERT_TRUE(reader.ok()) << reader.error().ToString();
  EXPECT_EQ((*reader)->ReadAll(ColumnFamily::kAudit).value().size(), 1u);
}

TEST(Database, SecondWriterIsRefusedWithAHint) {
  testing::TempDir dir;
  auto first = Database::Open(dir.file("db"));
  ASSERT_TRUE(first.ok());
  auto second = Database::Open(dir.file("db"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(second.error().message.find("is another txscore using this database?"), std::string::npos)
      << second.error().message;
}

TEST(ParseDurability, AcceptsSyncAndWalOnly) {
  EXPECT_EQ(ParseDurability("sync").value(), Durability::kSync);
  EXPECT_EQ(ParseDurability("wal").value(), Durability::kWal);
  EXPECT_EQ(ParseDurability("none").error().message, "durability must be \"sync\" or \"wal\", not \"none\"");
}

TEST(Database, SyncDurabilitySyncsTheLogOnEveryWriteAndWalNever) {
  for (Durability durability : {Durability::kSync, Durability::kWal}) {
    testing::TempDir dir;
    auto db = Database::Open(dir.file("db"), {.durability = durability});
    ASSERT_TRUE(db.ok());
    const uint64_t before = (*db)->WalSyncs();
    for (int i = 0; i < 3; ++i) {
      WriteBatch batch;
      batch.Put(ColumnFamily::kEntityState, "card" + std::to_string(i), "state");
      ASSERT_TRUE((*db)->Write(batch).ok());
    }
    EXPECT_EQ((*db)->WalSyncs() - before, durability == Durability::kSync ? 3u : 0u)
        << (durability == Durability::kSync ? "sync" : "wal");
  }
}

TEST(Database, KeepsAtMostMaxOpenFilesTableFilesOpen) {
  testing::TempDir dir;
  ASSERT_TRUE(Database::Open(dir.file("db"), {}).ok());
  // RocksDB writes the options it runs with to OPTIONS-NNNNNN in the database directory.
  std::string options_text;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("db"))) {
    if (entry.path().filename().string().rfind("OPTIONS-", 0) == 0)
      options_text = testing::ReadFile(entry.path().string());
  }
  EXPECT_NE(options_text.find("\n  max_open_files=128\n"), std::string::npos) << options_text.substr(0, 2000);
}

TEST(Database, CloseReportsSuccessAndReleasesTheDirectory) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  EXPECT_TRUE((*db)->CheckHealth().ok());
  EXPECT_TRUE((*db)->Close().ok());
  EXPECT_TRUE((*db)->Close().ok());  // idempotent
  EXPECT_EQ((*db)->CheckHealth().error().code, ErrorCode::kFailedPrecondition);
  WriteBatch batch;
  batch.Put(ColumnFamily::kAudit, "k", "v");
  EXPECT_EQ((*db)->Write(batch).error().code, ErrorCode::kFailedPrecondition);  // refused, not a crash
  EXPECT_EQ((*db)->Get(ColumnFamily::kAudit, "k").error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*db)->ReadLast(ColumnFamily::kAudit, 1).error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Database::Open(dir.file("db")).ok());  // the lock is released: another writer may open it
}

// Writes "v" under `key` in kEntityState.
Status PutValue(Database& db, const std::string& key) {
  WriteBatch batch;
  batch.Put(ColumnFamily::kEntityState, key, "v");
  return db.Write(batch);
}

// A full disk stops writes: each fails fast, says why without naming the path, and the
// database reports it; once space returns, writes come back without a restart, with nothing
// written before lost; a second episode is counted again. Under both durabilities.
// RocksDB decides whether the failure can be resumed; when it calls it fatal the database is
// reopened in the process instead (AFailedSyncIsFatalAndTheDatabaseIsReopenedInTheProcess).
TEST(Database, AFullDiskStopsWritesAndTheyComeBackWhenSpaceReturns) {
  for (const Durability durability : {Durability::kWal, Durability::kSync}) {
    testing::TempDir dir;
    auto faults = std::make_shared<WriteFaults>();
    auto db = Database::Open(dir.file("db"), {.durability = durability, .write_faults = faults, .resume_every_ms = 5});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    const auto put = [&](const std::string& key) { return PutValue(**db, key); };
    ASSERT_TRUE(put("before").ok());
    EXPECT_TRUE((*db)->CheckHealth().ok());

    faults->no_space = true;
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(testing::IsError(put("during"), ErrorCode::kUnavailable,
                                   "the database takes no writes now: no space left on the database's disk"));
    }
    const Database::WriteHealth stopped = (*db)->write_health();
    EXPECT_TRUE(stopped.stopped);
    EXPECT_EQ(stopped.reason, "no space left on the database's disk");
    EXPECT_EQ(stopped.stops, 1u);
    EXPECT_EQ(stopped.recoveries, 0u);
    const Status health = (*db)->CheckHealth();
    ASSERT_FALSE(health.ok());
    EXPECT_EQ(health.error().code, ErrorCode::kUnavailable);
    EXPECT_NE(health.error().message.find("no space left on the database's disk; retrying every 5 ms"),
              std::string::npos)
        << health.error().message;
    EXPECT_EQ(health.error().message.find(dir.path()), std::string::npos) << health.error().message;

    faults->no_space = false;  // space is back: the resumer notices
    ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
    const Database::WriteHealth health_now = (*db)->write_health();
    EXPECT_EQ(health_now.recoveries, 1u);
    EXPECT_LE(health_now.reopens, 1u);
    EXPECT_EQ((*db)->generation(), 1 + health_now.reopens);
    EXPECT_TRUE((*db)->CheckHealth().ok());
    ASSERT_TRUE(put("after").ok());
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "before").value(), std::optional<std::string>("v"));
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "during").value(), std::nullopt);  // never appended
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "after").value(), std::optional<std::string>("v"));

    faults->no_space = true;  // a second episode
    EXPECT_FALSE(put("again").ok());
    faults->no_space = false;
    ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
    EXPECT_EQ((*db)->write_health().stops, 2u);
    EXPECT_EQ((*db)->write_health().recoveries, 2u);
    ASSERT_TRUE(put("after again").ok());
    EXPECT_TRUE((*db)->Close().ok());
  }
}

// A sync that fails with an I/O error after the bytes were appended (a disk failing writeback)
// is fatal to RocksDB: no Resume clears it. Once syncs work again the database is closed and
// opened again in the process, generation() says so, and the write that was reported as failed
// is back (RocksDB's log held it): AuditLog.AfterAReopenTheChainContinuesFromAWriteThatCameBack.
TEST(Database, AFailedSyncIsFatalAndTheDatabaseIsReopenedInTheProcess) {
  testing::TempDir dir;
  auto faults = std::make_shared<WriteFaults>();
  auto db = Database::Open(dir.file("db"), {.write_faults = faults, .resume_every_ms = 5});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  const auto put = [&](const std::string& key) { return PutValue(**db, key); };
  ASSERT_TRUE(put("before").ok());
  EXPECT_EQ((*db)->generation(), 1u);
  faults->sync_io_error = true;
  EXPECT_TRUE(testing::IsError(put("during"), ErrorCode::kUnavailable,
                               "the database takes no writes now: an I/O error on the database's disk"));
  EXPECT_TRUE(testing::IsError(put("during 2"), ErrorCode::kUnavailable,
                               "the database takes no writes now: an I/O error on the database's disk"));
  EXPECT_TRUE((*db)->write_health().stopped);
  EXPECT_FALSE((*db)->CheckHealth().ok());

  faults->sync_io_error = false;
  ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
  const Database::WriteHealth health = (*db)->write_health();
  EXPECT_EQ(health.stops, 1u);
  EXPECT_EQ(health.recoveries, 1u);
  EXPECT_EQ(health.reopens, 1u);
  EXPECT_EQ((*db)->generation(), 2u);
  EXPECT_TRUE((*db)->CheckHealth().ok());
  ASSERT_TRUE(put("after").ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "before").value(), std::optional<std::string>("v"));
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "during").value(), std::optional<std::string>("v"));  // came back
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "during 2").value(), std::nullopt);  // refused before RocksDB
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "after").value(), std::optional<std::string>("v"));

  // A write made of what was read before the reopen is refused: the reopen may have brought
  // back a write it did not see.
  WriteBatch stale;
  stale.RequireGeneration(1);
  stale.Put(ColumnFamily::kEntityState, "during", "computed without it");
  EXPECT_TRUE(testing::IsError((*db)->Write(stale), ErrorCode::kUnavailable,
                               "the database was reopened since what this write was made of was read (generation "
                               "1); nothing was written"));
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "during").value(), std::optional<std::string>("v"));
  stale.RequireGeneration(2);
  EXPECT_TRUE((*db)->Write(stale).ok());
  EXPECT_TRUE((*db)->Close().ok());
}

// Should the database not open again for writing when it is reopened (here its MANIFEST cannot
// be created), it is opened read-only meanwhile: reads go on, writes stay stopped saying why,
// and a later try opens it for writing.
TEST(Database, WhileItCannotBeReopenedForWritingItIsReadOnly) {
  testing::TempDir dir;
  auto faults = std::make_shared<WriteFaults>();
  auto db = Database::Open(dir.file("db"), {.write_faults = faults, .resume_every_ms = 5});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  ASSERT_TRUE(PutValue(**db, "before").ok());
  faults->manifest_io_error = true;
  faults->sync_io_error = true;  // fatal: the next recovery is a reopen
  EXPECT_FALSE(PutValue(**db, "during").ok());
  faults->sync_io_error = false;
  // Each failed writable open is followed by a read-only one: generation 1, then 2, 3, ...
  ASSERT_TRUE(testing::Eventually([&] { return (*db)->generation() >= 3; }));
  // Between two tries (each closes the read-only instance for a moment) the data reads.
  EXPECT_TRUE(testing::Eventually([&] {
    const Result<std::optional<std::string>> read = (*db)->Get(ColumnFamily::kEntityState, "before");
    return read.ok() && *read == std::optional<std::string>("v");
  }));
  EXPECT_TRUE(testing::IsError(PutValue(**db, "still"), ErrorCode::kUnavailable,
                               "the database takes no writes now: an I/O error on the database's disk"));
  EXPECT_EQ((*db)->write_health().reopens, 0u);
  EXPECT_FALSE((*db)->CheckHealth().ok());
  faults->manifest_io_error = false;
  ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
  EXPECT_EQ((*db)->write_health().reopens, 1u);
  ASSERT_TRUE(PutValue(**db, "after").ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "before").value(), std::optional<std::string>("v"));
  EXPECT_TRUE((*db)->Close().ok());
}

TEST(AuditRecordCodec, RoundTripsIncludingMissingFeatureValues) {
  AuditRecord r;
  r.time_us = 42;
  r.request_id = "req";
  r.card_token = "tok";
  r.transaction_time_ms = 7;
  r.model_id = "fraud";
  r.model_version = "abc";
  r.pipeline_version = "1";
  r.score = 0.25;
  r.decision = "REVIEW";
  r.reasons = {{"new_device", 1.5, 1.0}, {"distance_km", 0.5, std::nan("")}};
  r.timings_us = {{"features", 3}, {"fraud", 40}};
  r.degraded_stages = {"llm"};
  r.placement = "cpu";
  r.stage_scores = {{"fraud", 0.25}, {"challenger", 0.125}};
  r.traceparent = "00-abc-def-01";
  auto decoded = DecodeAuditRecord(EncodeAuditRecord(r));
  ASSERT_TRUE(decoded.ok()) << decoded.error().ToString();
  EXPECT_EQ(decoded->request_id, "req");
  EXPECT_EQ(decoded->reasons[0].feature, "new_device");
  EXPECT_TRUE(std::isnan(decoded->reasons[1].value));
  EXPECT_EQ(decoded->timings_us, r.timings_us);
  EXPECT_EQ(decoded->degraded_stages, r.degraded_stages);
  EXPECT_EQ(decoded->traceparent, r.traceparent);
  EXPECT_EQ(decoded->stage_scores, r.stage_scores);  // in run order
}

}  // namespace
}  // namespace txscore::storage
