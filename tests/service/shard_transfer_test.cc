#include "service/shard_transfer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "fraud/entity_state.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

// A card's stored state with `count` transactions.
std::string StateWith(uint64_t count) {
  fraud::CardState state;
  state.transaction_count = count;
  state.last_timestamp_ms = 1767261600000;
  return fraud::EncodeCardState(state);
}

ShardMap Map(const std::vector<std::string>& names, const std::string& self) {
  std::vector<ShardEndpoint> shards;
  for (const std::string& name : names) shards.push_back({name, "127.0.0.1:1"});
  return ShardMap::Create(shards, self).value();
}

class ShardTransferTest : public ::testing::Test {
 protected:
  // Two old shards, a and b, each holding the cards it owns among card-0..card-29.
  void SetUp() override {
    for (const std::string& name : {"a", "b"}) {
      auto db = storage::Database::Open(dir_.file("db-" + name)).value();
      storage::WriteBatch batch;
      for (int i = 0; i < 30; ++i) {
        const std::string token = "card-" + std::to_string(i);
        if (ShardOwnerIndex(token, {"a", "b"}) == (name == "a" ? 0u : 1u)) {
          batch.Put(storage::ColumnFamily::kEntityState, token, StateWith(i + 1));
        }
      }
      batch.Put(storage::ColumnFamily::kEntityState, "old-token-" + name, "moved-to:card-0");  // a marker
      ASSERT_TRUE(db->Write(batch).ok());
      ExportSummary summary = ExportCardState(*db, name, {"a", "b"}, dir_.file(name + ".jsonl")).value();
      EXPECT_EQ(summary.markers_skipped, 1);
      exported_ += summary.cards;
    }
  }
  std::string Export(const std::string& name) { return dir_.file(name + ".jsonl"); }

  testing::TempDir dir_;
  int64_t exported_ = 0;
};

TEST_F(ShardTransferTest, ImportGivesEachNewShardExactlyTheCardsItOwnsWithTheirState) {
  EXPECT_EQ(exported_, 30);
  const std::vector<std::string> three = {"a", "b", "c"};
  int64_t imported = 0;
  for (const std::string& name : three) {
    // a and b keep their databases (holding the old split); c starts empty.
    auto db = storage::Database::Open(dir_.file("db-" + name)).value();
    ImportSummary summary = ImportCardState(db.get(), Map(three, name), {Export("a"), Export("b")}).value();
    EXPECT_EQ(summary.from_shards, (std::vector<std::string>{"a", "b"}));
    imported += summary.imported;
    for (int i = 0; i < 30; ++i) {
      const std::string token = "card-" + std::to_string(i);
      const std::optional<std::string> stored = db->Get(storage::ColumnFamily::kEntityState, token).value();
      if (three[ShardOwnerIndex(token, three)] == name) {
        ASSERT_TRUE(stored.has_value()) << token << " on " << name;
        EXPECT_EQ(fraud::DecodeCardState(*stored).value().transaction_count, static_cast<uint64_t>(i + 1));
      } else {
        EXPECT_FALSE(stored.has_value()) << token << " left on " << name;
      }
    }
    // Running it again gives the same database.
    ImportSummary again = ImportCardState(db.get(), Map(three, name), {Export("a"), Export("b")}).value();
    EXPECT_EQ(again.imported, summary.imported);
    EXPECT_EQ(again.removed, 0);
  }
  EXPECT_EQ(imported, 30);
}

TEST_F(ShardTransferTest, ImportRefusesIncompleteAlteredOrMismatchedExportsAndWritesNothing) {
  auto db = storage::Database::Open(dir_.file("db-c")).value();
  const ShardMap map = Map({"a", "b", "c"}, "c");
  const auto refusal = [&](const std::vector<std::string>& files) {
    Result<ImportSummary> result = ImportCardState(db.get(), map, files);
    EXPECT_FALSE(result.ok());
    return result.ok() ? std::string() : result.error().message;
  };
  EXPECT_EQ(refusal({Export("a")}), "the exports of shard(s) b of the old set are missing: give every shard's");
  EXPECT_EQ(refusal({Export("a"), Export("a")}), Export("a") + " and " + Export("a") + " are both of shard a");
  // Cut short: no trailer.
  std::string text = testing::ReadFile(Export("b"));
  text.erase(text.rfind("{\"cards\""));
  testing::WriteFile(dir_.file("short.jsonl"), text);
  EXPECT_EQ(refusal({Export("a"), dir_.file("short.jsonl")}),
            dir_.file("short.jsonl") + " has no trailer: it was cut short (export it again)");
  // Altered: one card's count changed, the trailer left as it was.
  text = testing::ReadFile(Export("b"));
  const size_t at = text.find("\"transactions\":");
  text.replace(at, std::string("\"transactions\":").size() + 1, "\"transactions\":9");
  testing::WriteFile(dir_.file("altered.jsonl"), text);
  EXPECT_NE(refusal({Export("a"), dir_.file("altered.jsonl")}).find("the trailer does not match the card lines"),
            std::string::npos);
  // Of another shard set.
  {
    auto other = storage::Database::Open(dir_.file("db-x")).value();
    ASSERT_TRUE(ExportCardState(*other, "x", {"x", "b"}, dir_.file("x.jsonl")).ok());
  }
  EXPECT_EQ(refusal({Export("a"), dir_.file("x.jsonl")}),
            dir_.file("x.jsonl") + " is of another shard set than " + Export("a"));
  // A card in two exports: b's export given again as if it were a's.
  text = testing::ReadFile(Export("b"));
  text.replace(text.find("\"shard\":\"b\""), 11, "\"shard\":\"a\"");
  testing::WriteFile(dir_.file("b-as-a.jsonl"), text);
  EXPECT_NE(refusal({dir_.file("b-as-a.jsonl"), Export("b")}).find("the old set's shards disagree about it"),
            std::string::npos);
  // Not an export at all.
  testing::WriteFile(dir_.file("junk.jsonl"), "{\"hello\": 1}\n");
  EXPECT_NE(refusal({dir_.file("junk.jsonl")}).find("not a txscore card-state export"), std::string::npos);
  // Nothing was written by any of them.
  EXPECT_TRUE(db->ReadAll(storage::ColumnFamily::kEntityState).value().empty());
}

TEST(ShardStamp, AShardStartsOnlyOnItsOwnDatabase) {
  testing::TempDir dir;
  auto db = storage::Database::Open(dir.file("db")).value();
  const ShardMap a = Map({"a", "b"}, "a");
  // An empty database becomes shard a's.
  ASSERT_TRUE(CheckShardStamp(dir.file("db"), *db, &a).ok());
  const ShardStamp stamp = ReadShardStamp(dir.file("db")).value().value();
  EXPECT_EQ(stamp.shard, "a");
  EXPECT_EQ(stamp.shards, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(CheckShardStamp(dir.file("db"), *db, &a).ok());
  const ShardMap reordered = Map({"b", "a"}, "a");
  EXPECT_TRUE(CheckShardStamp(dir.file("db"), *db, &reordered).ok());  // the list's order is no change
  // Shard b's settings, a changed set, or no sharding at all: refused.
  const ShardMap b = Map({"a", "b"}, "b");
  EXPECT_EQ(CheckShardStamp(dir.file("db"), *db, &b).error().message,
            "the database " + dir.file("db") +
                " is shard a of {a, b}, not shard b of {a, b}: a changed shard set needs the reshard (txscore shard "
                "export, then import on each new shard: docs/scaling-out.md)");
  const ShardMap grown = Map({"a", "b", "c"}, "a");
  EXPECT_EQ(CheckShardStamp(dir.file("db"), *db, &grown).error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(
      CheckShardStamp(dir.file("db"), *db, nullptr).error().message.find("these settings have no sharding section"),
      std::string::npos);
  // An unstamped database with cards (an unsharded server's) must be imported first.
  auto cards = storage::Database::Open(dir.file("db-cards")).value();
  storage::WriteBatch batch;
  batch.Put(storage::ColumnFamily::kEntityState, "card-1", StateWith(3));
  ASSERT_TRUE(cards->Write(batch).ok());
  EXPECT_NE(CheckShardStamp(dir.file("db-cards"), *cards, &a)
                .error()
                .message.find("holds card state but belongs to "
                              "no shard yet"),
            std::string::npos);
  EXPECT_FALSE(ReadShardStamp(dir.file("db-cards")).value().has_value());
  EXPECT_TRUE(CheckShardStamp(dir.file("db-cards"), *cards, nullptr).ok());  // unsharded, as before
}

}  // namespace
}  // namespace txscore::service
