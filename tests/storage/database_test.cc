#include "storage/database.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

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
