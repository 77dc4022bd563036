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

TEST(AuditLog, ReadLastReturnsNewestFirst) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting().ok());
  for (int i = 0; i < 5; ++i) {
    AuditRecord record;
    record.time_us = 1000 + i;
    record.request_id = "r" + std::to_string(i);
    record.decision = "APPROVE";
    WriteBatch batch;
    ASSERT_TRUE(log.Append(record, &batch).ok());
    ASSERT_TRUE((*db)->Write(batch).ok());
  }
  auto last = log.ReadLast(3);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ(last->size(), 3u);
  EXPECT_EQ((*last)[0].request_id, "r4");
  EXPECT_EQ((*last)[2].request_id, "r2");
}

TEST(AuditLog, OperatorActionsShareTheTrailAndEachKindReadsBackAlone) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting().ok());
  for (int i = 0; i < 4; ++i) {
    WriteBatch batch;
    if (i % 2 == 0) {
      AuditRecord record;
      record.time_us = 1000 + i;
      record.request_id = "r" + std::to_string(i);
      ASSERT_TRUE(log.Append(record, &batch).ok());
    } else {
      AuditAction action{1000 + i, "reload",  "txscore-admin (127.0.0.1:5)",
                         "s.yaml", "applied", "p" + std::to_string(i)};
      ASSERT_TRUE(log.AppendAction(action, &batch).ok());
    }
    ASSERT_TRUE((*db)->Write(batch).ok());
  }
  const std::vector<AuditRecord> decisions = log.ReadLast(10).value();
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].request_id, "r2");
  EXPECT_EQ(decisions[1].request_id, "r0");
  const std::vector<AuditAction> actions = log.ReadLastActions(1).value();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].time_us, 1003);
  EXPECT_EQ(actions[0].action, "reload");
  EXPECT_EQ(actions[0].caller, "txscore-admin (127.0.0.1:5)");
  EXPECT_EQ(actions[0].target, "s.yaml");
  EXPECT_EQ(actions[0].outcome, "applied");
  EXPECT_EQ(actions[0].detail, "p3");
  EXPECT_EQ(EncodeAuditAction(actions[0]),
            "{\"kind\":\"action\",\"time_us\":1003,\"action\":\"reload\",\"caller\":\"txscore-admin "
            "(127.0.0.1:5)\",\"target\":\"s.yaml\",\"outcome\":\"applied\",\"detail\":\"p3\"}");
}

// One record at `time_us` written by a fresh writer, as a restarted process would.
void AppendAsANewWriter(Database* db, int64_t time_us, const std::string& request_id) {
  AuditLog log(db);
  ASSERT_TRUE(log.BeginWriting().ok());
  AuditRecord record;
  record.time_us = time_us;
  record.request_id = request_id;
  record.decision = "APPROVE";
  WriteBatch batch;
  ASSERT_TRUE(log.Append(record, &batch).ok());
  ASSERT_TRUE(db->Write(batch).ok());
}

TEST(AuditLog, RecordsAreNeverOverwrittenWhenTheClockStepsBackAcrossRestarts) {
  testing::TempDir dir;
  {
    auto db = Database::Open(dir.file("db"));
    ASSERT_TRUE(db.ok());
    AppendAsANewWriter(db->get(), 5000, "before the restart");
    AppendAsANewWriter(db->get(), 5000, "same microsecond, next writer");  // the sequence restarts at 0
  }
  auto db = Database::Open(dir.file("db"));  // a process restart
  ASSERT_TRUE(db.ok());
  AppendAsANewWriter(db->get(), 5000, "after the restart, the clock stepped back");
  auto all = AuditLog(db->get()).ReadLast(100);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  ASSERT_EQ(all->size(), 3u);  // three records, not one overwritten twice
  std::set<std::string> ids;
  for (const AuditRecord& r : *all) ids.insert(r.request_id);
  EXPECT_EQ(ids, (std::set<std::string>{"before the restart", "same microsecond, next writer",
                                        "after the restart, the clock stepped back"}));
  AuditLog fourth(db->get());
  ASSERT_TRUE(fourth.BeginWriting().ok());
  EXPECT_EQ(fourth.epoch(), 4u);
}

TEST(AuditLog, AppendBeforeBeginWritingIsRefused) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  WriteBatch batch;
  const Status appended = log.Append(AuditRecord{}, &batch);
  ASSERT_FALSE(appended.ok());
  EXPECT_EQ(appended.error().code, ErrorCode::kFailedPrecondition);
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
