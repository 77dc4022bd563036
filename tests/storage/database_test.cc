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

// A full disk stops writes: each fails fast, says why without naming the path, and the
// database reports it; once space returns, a resume brings writes back with nothing written
// before lost; a second episode is counted again. Under both durabilities.
// RocksDB decides whether a failed write can be resumed while running; either way writes come
// back when space does: by themselves, or (when it called the failure fatal) at a restart.
TEST(Database, AFullDiskStopsWritesAndTheyComeBackWhenSpaceReturns) {
  for (const Durability durability : {Durability::kWal, Durability::kSync}) {
    testing::TempDir dir;
    auto faults = std::make_shared<WriteFaults>();
    auto db = Database::Open(dir.file("db"), {.durability = durability, .write_faults = faults, .resume_every_ms = 5});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    const auto put = [&](const std::string& key) {
      WriteBatch batch;
      batch.Put(ColumnFamily::kEntityState, key, "v");
      return (*db)->Write(batch);
    };
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
    Database::WriteHealth health_now = (*db)->write_health();
    while (health_now.stopped && health_now.reason.find("restarted") == std::string::npos) {
      std::this_thread::yield();
      health_now = (*db)->write_health();
    }
    if (health_now.stopped) {
      // RocksDB called the failure fatal: writes stay refused, saying why, until a restart.
      EXPECT_EQ(health_now.reason,
                "no space left on the database's disk; txscore must be restarted to write to it again");
      EXPECT_EQ(health_now.recoveries, 0u);
      EXPECT_TRUE(testing::IsError(put("after"), ErrorCode::kUnavailable,
                                   "the database takes no writes now: " + health_now.reason));
      (void)(*db)->Close();  // may report the stored error: this is the restart
      db = Database::Open(dir.file("db"), {.durability = durability});
      ASSERT_TRUE(db.ok()) << db.error().ToString();
    } else {
      EXPECT_EQ(health_now.recoveries, 1u);
    }
    EXPECT_TRUE((*db)->CheckHealth().ok());
    ASSERT_TRUE(put("after").ok());
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "before").value(), std::optional<std::string>("v"));
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "during").value(), std::nullopt);
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "after").value(), std::optional<std::string>("v"));
    EXPECT_TRUE((*db)->Close().ok());
  }
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
