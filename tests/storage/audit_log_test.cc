// The audit trail's writer (grouped, chained commits) and its verification: an intact trail
// verifies across clean and crashed restarts; each kind of tampering with a copy of the
// database is reported at its position.
#include "storage/audit_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <set>
#include <thread>

#include "common/bytes.h"
#include "common/pan_scan.h"
#include "common/sha256.h"
#include "common/signing.h"
#include "storage/audit_chain.h"
#include "storage/database.h"
#include "tests/test_support.h"

namespace txscore::storage {
namespace {

AuditCheckpointKey TestKey(const std::string& id = "k1") { return {id, std::string(32, id.back())}; }

// A destroyed checkpoint key leaves none of its secret behind. The secret here is short enough
// to live inside the object (the small-string buffer), so the object's own storage can be read
// after its destructor ran; clear() would zero only the first byte.
TEST(AuditCheckpointKey, ItsSecretIsWipedWhenTheKeyIsDestroyed) {
  const std::string private_key = "checkpoint-key!";  // 15 bytes: in-object in libstdc++
  alignas(AuditCheckpointKey) unsigned char storage[sizeof(AuditCheckpointKey)];
  auto* key = new (storage) AuditCheckpointKey{"k1", private_key};
  ASSERT_GE(reinterpret_cast<const unsigned char*>(key->private_key.data()), storage);
  ASSERT_LT(reinterpret_cast<const unsigned char*>(key->private_key.data()), storage + sizeof(storage));
  const std::string_view before(reinterpret_cast<const char*>(storage), sizeof(storage));
  ASSERT_NE(before.find(private_key), std::string_view::npos);
  key->~AuditCheckpointKey();
  const std::string_view after(reinterpret_cast<const char*>(storage), sizeof(storage));
  EXPECT_EQ(after.find(private_key.substr(1)), std::string_view::npos);
}

// Verifies with the keys' public halves alone, as an auditor holding `txscore keys public`'s
// file does.
ChainVerifyOptions VerifyWith(const std::vector<AuditCheckpointKey>& keys, int64_t from_time_us = 0) {
  ChainVerifyOptions options;
  options.from_time_us = from_time_us;
  options.checkpoint_public_key = [keys](const std::string& id) -> std::optional<std::string> {
    for (const AuditCheckpointKey& key : keys) {
      if (key.key_id == id) return Ed25519PublicKey(key.private_key).value();
    }
    return std::nullopt;
  };
  return options;
}

AuditRecord Decision(const std::string& request_id, int64_t time_us = 1000) {
  AuditRecord record;
  record.time_us = time_us;
  record.request_id = request_id;
  record.card_token = "k1_" + std::string(64, 'a');
  record.decision = "APPROVE";
  return record;
}

// The trail's entries (record keys only), in key order.
std::vector<std::pair<std::string, std::string>> Entries(const Database& db) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::vector<std::pair<std::string, std::string>> all = db.ReadAll(ColumnFamily::kAudit).value();
  for (auto& entry : all) {
    if (ParseAuditKey(entry.first)) entries.push_back(std::move(entry));
  }
  return entries;
}

ChainReport Verify(const Database& db, const std::vector<AuditCheckpointKey>& keys = {TestKey()}) {
  Result<ChainReport> report = VerifyAuditChain(db, VerifyWith(keys));
  EXPECT_TRUE(report.ok()) << report.error().ToString();
  return report.ok() ? *report : ChainReport{};
}

TEST(AuditLog, ReadLastReturnsNewestFirst) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(log.Commit(Decision("r" + std::to_string(i), 1000 + i), {}).ok());
  auto last = log.ReadLast(3);
  ASSERT_TRUE(last.ok()) << last.error().ToString();
  ASSERT_EQ(last->size(), 3u);
  EXPECT_EQ((*last)[0].request_id, "r4");
  EXPECT_EQ((*last)[2].request_id, "r2");
}

TEST(AuditLog, OperatorActionsShareTheTrailAndEachKindReadsBackAlone) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  for (int i = 0; i < 4; ++i) {
    if (i % 2 == 0) {
      ASSERT_TRUE(log.Commit(Decision("r" + std::to_string(i), 1000 + i), {}).ok());
    } else {
      AuditAction action{1000 + i, "reload",  "txscore-admin (127.0.0.1:5)",
                         "s.yaml", "applied", "p" + std::to_string(i)};
      ASSERT_TRUE(log.CommitAction(action).ok());
    }
  }
  const std::vector<AuditRecord> decisions = log.ReadLast(10).value();  // checkpoints are neither kind
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

// The trail's choke point: whatever field a card number reached, and whoever put it there, the
// stored entry holds none; ids are replaced whole by the id rule, so a long numeric id stays.
// A card token's or a digest's hex holds a card-shaped digit run one time in 900 (this one:
// 340998094460379, Amex-shaped): what txscore made is kept, as a caller's token is judged.
TEST(AuditLog, ATokensOrDigestsHexIsKeptThoughADigitRunInItIsCardShaped) {
  const std::string hex = "c0a024ba591a5cfb2aba085b4ea6071762e7934dc514bb340998094460379c4c";
  ASSERT_TRUE(LooksLikeCardNumber(hex));
  AuditRecord record;
  record.request_id = "r1";
  record.card_token = "k2026_" + hex;
  record.pipeline_digest = "sha256:" + hex;
  record.decision = "APPROVE";
  const AuditRecord back = DecodeAuditRecord(EncodeAuditRecord(record)).value();
  EXPECT_EQ(back.card_token, "k2026_" + hex);
  EXPECT_EQ(back.pipeline_digest, "sha256:" + hex);
  record.card_token = std::string(48, '0') + "4111111111111111";  // decimal digits holding a card
  EXPECT_EQ(DecodeAuditRecord(EncodeAuditRecord(record)).value().card_token, "[card number redacted]");
}

// The caller is an identity and the peer's address, whose numbers the free-text rule reads as a
// card about one time in two (10.244.13.201:45678 joined is a UATP-shaped number): judged by the
// rule for log lines, an address stays, in decision records, operator actions and refusals alike,
// while a card number in an identity is cut.
TEST(AuditLog, ACallersAddressIsKeptAndACardInItsIdentityIsNot) {
  ASSERT_TRUE(ContainsPan("10.244.13.201:45678"));
  // Each caller and how it is stored. A card in the caller, however it is grouped or glued (a
  // shard peer's forwarded_for is the caller it served, as the peer wrote it), is cut, the
  // address and the peer kept.
  const std::vector<std::pair<std::string, std::string>> callers = {
      {"txscore-client (10.244.13.201:45678)", "txscore-client (10.244.13.201:45678)"},
      {"unauthenticated 10.149.138.237:23722", "unauthenticated 10.149.138.237:23722"},
      {"txscore-operator ([fd00:10:244:81::8675]:40583)", "txscore-operator ([fd00:10:244:81::8675]:40583)"},
      {"4111111111111111 (10.0.0.1:5)", "[card number redacted] (10.0.0.1:5)"},
      {"94111111111111111 via txscore-peer (10.244.13.201:45678)",
       "[card number redacted] via txscore-peer (10.244.13.201:45678)"},
      {"41111-11111-111111 via txscore-peer (10.244.13.201:45678)",
       "[card number redacted] via txscore-peer (10.244.13.201:45678)"},
      {"client-4111-1111-1111-111-1 via txscore-peer (10.244.13.201:45678)",
       "client-[card number redacted] via txscore-peer (10.244.13.201:45678)"},
      {"client (10.0.0.7:5555 5555 5555 4444)", "client (10.0.0.7:[card number redacted])"},
      {"unauthenticated [2001:db8:1:2:4111:1111:1111:1111]:5555", "unauthenticated [2001:db[card number redacted]"},
  };
  for (const auto& [caller, stored] : callers) {
    AuditRecord record;
    record.request_id = "r1";
    record.decision = "APPROVE";
    record.caller = caller;
    EXPECT_EQ(DecodeAuditRecord(EncodeAuditRecord(record)).value().caller, stored);
    const AuditAction action{1, "reload", caller, "", "denied", ""};
    EXPECT_EQ(DecodeAuditAction(EncodeAuditAction(action)).value().caller, stored);
  }
}

TEST(AuditLog, EveryStoredStringHasItsCardNumbersRedactedWhateverTheField) {
  const std::string pan = "4000 0012 3456 7899";
  const std::string wide =
      "\uff14\uff10\uff10\uff10\uff10\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19\uff19";
  AuditRecord record;
  record.request_id = "REQ-4000/0012/3456/7899";
  record.card_token = "4000001234567899";
  record.model_id = "fraud-" + pan;
  record.model_version = "v1";
  record.pipeline_version = "20261201123456788";  // a long number that is no card: kept
  record.decision = "REVIEW";
  record.reasons = {{"amount " + pan, 0.5, 1}};
  record.rule_hits = {{"deny " + wide, "DECLINE"}};
  record.timings_us = {{"stage " + pan, 10}};
  record.degraded_stages = {"x" + pan};
  record.skipped_stages = {pan};
  record.placement = "fraud@cpu " + pan;
  record.stage_scores = {{"shadow " + pan, 0.1}};
  record.traceparent = "00-4000001234567899-01";
  record.findings = AuditFindings{"high", {"flag " + pan}, "the claimant's card " + wide + " was used", "m"};
  const std::string stored = EncodeAuditRecord(record);
  for (const std::string& form : {std::string("4000001234567899"), std::string("4000 0012"), wide}) {
    EXPECT_EQ(stored.find(form), std::string::npos) << form << " in " << stored;
  }
  std::string without_version = stored;  // the kept long number aside, no card-like run anywhere
  without_version.erase(without_version.find("20261201123456788"), 17);
  EXPECT_FALSE(ContainsPan(without_version)) << stored;
  const AuditRecord back = DecodeAuditRecord(stored).value();
  EXPECT_EQ(back.request_id, "[card number redacted]");
  EXPECT_EQ(back.card_token, "[card number redacted]");
  EXPECT_EQ(back.model_id, "[card number redacted]");
  EXPECT_EQ(back.pipeline_version, "20261201123456788");
  EXPECT_EQ(back.reasons[0].feature, "amount [card number redacted]");
  EXPECT_EQ(back.rule_hits[0].rule, "deny [card number redacted]");
  EXPECT_EQ(back.timings_us[0].first, "stage [card number redacted]");
  EXPECT_EQ(back.degraded_stages[0], "x[card number redacted]");
  EXPECT_EQ(back.skipped_stages[0], "[card number redacted]");
  EXPECT_EQ(back.placement, "fraud@cpu [card number redacted]");
  EXPECT_EQ(back.stage_scores[0].first, "shadow [card number redacted]");
  EXPECT_EQ(back.traceparent, "[card number redacted]");
  ASSERT_TRUE(back.findings.has_value());
  EXPECT_EQ(back.findings->flags[0], "flag [card number redacted]");
  EXPECT_EQ(back.findings->summary, "the claimant's card [card number redacted] was used");

  const AuditAction action{1,           "submit_claims_job",
                           "op " + pan, "in/" + pan + ".jsonl",
                           "refused",   "claims[1]: incident_date: \"" + wide + "\" is not a date"};
  const std::string stored_action = EncodeAuditAction(action);
  EXPECT_FALSE(ContainsPan(stored_action)) << stored_action;
  EXPECT_TRUE(IsAuditAction(stored_action));
  const AuditAction action_back = DecodeAuditAction(stored_action).value();
  EXPECT_EQ(action_back.caller, "op [card number redacted]");  // by the log-line rule, as log lines name callers
  EXPECT_EQ(action_back.target, "in/[card number redacted].jsonl");
  EXPECT_EQ(action_back.detail, "claims[1]: incident_date: \"[card number redacted]\" is not a date");
}

TEST(AuditLog, RecordsAreNeverOverwrittenWhenTheClockStepsBackAcrossRestarts) {
  testing::TempDir dir;
  for (const char* id :
       {"before the restart", "same microsecond, next writer", "after the restart, the clock stepped back"}) {
    auto db = Database::Open(dir.file("db"));  // a process restart
    ASSERT_TRUE(db.ok());
    AuditLog log(db->get());
    ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
    ASSERT_TRUE(log.Commit(Decision(id, 5000), {}).ok());
  }
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  auto all = AuditLog(db->get()).ReadLast(100);
  ASSERT_TRUE(all.ok()) << all.error().ToString();
  ASSERT_EQ(all->size(), 3u);  // three records, not one overwritten twice
  std::set<std::string> ids;
  for (const AuditRecord& r : *all) ids.insert(r.request_id);
  EXPECT_EQ(ids, (std::set<std::string>{"before the restart", "same microsecond, next writer",
                                        "after the restart, the clock stepped back"}));
  AuditLog fourth(db->get());
  ASSERT_TRUE(fourth.BeginWriting(TestKey()).ok());
  EXPECT_EQ(fourth.epoch(), 4u);
  EXPECT_FALSE(Verify(**db).problem.has_value());
}

TEST(AuditLog, CommitBeforeBeginWritingAndAfterCloseIsRefused) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  const Status early = log.Commit(Decision("r"), {});
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().code, ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  ASSERT_TRUE(log.Close().ok());
  ASSERT_TRUE(log.Close().ok());  // idempotent
  const Status late = log.Commit(Decision("r"), {});
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(Entries(**db).size(), 2u);  // start and shutdown checkpoints, nothing else
}

TEST(AuditLog, CloseSaysSoWhenTheShutdownCheckpointCannotBeWritten) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  ASSERT_TRUE((*db)->Close().ok());  // the database gone under the writer
  const Status closed = log.Close();
  ASSERT_FALSE(closed.ok());
  EXPECT_NE(closed.error().message.find("is closed"), std::string::npos) << closed.error().message;
}

TEST(AuditLog, TheRecordLandsWithItsBatch) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  WriteBatch batch;
  batch.Put(ColumnFamily::kEntityState, "card", "state");
  ASSERT_TRUE(log.Commit(Decision("r"), std::move(batch)).ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card").value(), std::optional<std::string>("state"));
  EXPECT_EQ(log.ReadLast(1).value().at(0).request_id, "r");
}

TEST(AuditLog, EntriesAreChainedBySeqAndThePreviousEntrysHash) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  ASSERT_TRUE(log.Commit(Decision("r"), {}).ok());
  const auto entries = Entries(**db);
  ASSERT_EQ(entries.size(), 2u);
  const std::optional<ChainFields> start = ReadChainFields(entries[0].second);
  const std::optional<ChainFields> record = ReadChainFields(entries[1].second);
  ASSERT_TRUE(start && record);
  EXPECT_EQ(start->seq, 0u);
  EXPECT_EQ(start->prev_hash, std::string(32, '\0'));  // nothing before it
  EXPECT_EQ(record->seq, 1u);
  EXPECT_EQ(record->prev_hash, Sha256Bytes({entries[0].first, entries[0].second}));
  EXPECT_TRUE(IsAuditCheckpoint(entries[0].second));
  EXPECT_NE(entries[0].second.find("\"reason\":\"start\""), std::string::npos) << entries[0].second;
  EXPECT_NE(entries[0].second.find("\"previous\":\"none\""), std::string::npos) << entries[0].second;
  // The record reads back as it was written: the chain fields are extra.
  EXPECT_EQ(DecodeAuditRecord(entries[1].second).value().request_id, "r");
}

TEST(AuditLog, CheckpointsAreWrittenEveryNEntriesAndAtClose) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get(), AuditLog::Options{.checkpoint_every = 3});
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(log.Commit(Decision("r" + std::to_string(i)), {}).ok());
  ASSERT_TRUE(log.Close().ok());
  std::string kinds;
  for (const auto& [key, value] : Entries(**db)) kinds += IsAuditCheckpoint(value) ? 'C' : 'r';
  EXPECT_EQ(kinds, "CrrrCrrrCrC");
  const ChainReport report = Verify(**db);
  EXPECT_FALSE(report.problem.has_value());
  EXPECT_EQ(report.entries, 11u);
  EXPECT_EQ(report.checkpoints, 4u);
  EXPECT_EQ(report.after_last_checkpoint, 0u);
  EXPECT_EQ(report.head_seq, 10u);
}

TEST(AuditLog, ConcurrentCommitsFormOneIntactChain) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"), {.durability = Durability::kSync});
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get(), AuditLog::Options{.checkpoint_every = 50});
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  constexpr int kThreads = 8, kEach = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&log, t] {
      for (int i = 0; i < kEach; ++i) {
        WriteBatch batch;
        batch.Put(ColumnFamily::kEntityState, "card" + std::to_string(t), std::to_string(i));
        EXPECT_TRUE(log.Commit(Decision(std::to_string(t) + "/" + std::to_string(i)), std::move(batch)).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(log.Close().ok());
  const ChainReport report = Verify(**db);
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  // start + 320 records + a checkpoint after every 50 + shutdown.
  EXPECT_EQ(report.entries, 1u + kThreads * kEach + (kThreads * kEach) / 50 + 1u);
  const AuditCommitStats stats = log.stats();
  EXPECT_EQ(stats.entries, report.entries);
  EXPECT_LE(stats.writes, stats.entries);  // grouped or not, never more writes than entries
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card" + std::to_string(t)).value(),
              std::optional<std::string>(std::to_string(kEach - 1)));
  }
}

TEST(AuditLog, CommitsQueuedDuringAWriteShareTheNextOne) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"), {.durability = Durability::kSync});
  ASSERT_TRUE(db.ok());
  AuditLog* log_ptr = nullptr;
  std::atomic<int> writes_seen{0};
  AuditLog::Options options;
  // The second write (the first decision's) waits until seven more commits have queued.
  options.before_write = [&]() -> Status {
    if (writes_seen.fetch_add(1) == 1) {
      while (log_ptr->queued() < 7) std::this_thread::yield();
    }
    return Status::Ok();
  };
  AuditLog log(db->get(), options);
  log_ptr = &log;
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());  // write 1: the start checkpoint
  std::thread first([&] { EXPECT_TRUE(log.Commit(Decision("first"), {}).ok()); });
  while (writes_seen.load() < 2) std::this_thread::yield();  // the first decision's write is in flight
  std::vector<std::thread> others;
  for (int i = 0; i < 7; ++i) {
    others.emplace_back([&, i] { EXPECT_TRUE(log.Commit(Decision("other" + std::to_string(i)), {}).ok()); });
  }
  first.join();
  for (std::thread& other : others) other.join();
  const AuditCommitStats stats = log.stats();
  EXPECT_EQ(stats.entries, 9u);
  EXPECT_EQ(stats.writes, 3u);  // the start, the first decision, the seven together
  EXPECT_EQ((*db)->WalSyncs(), 3u);
  EXPECT_FALSE(Verify(**db).problem.has_value());
}

TEST(AuditLog, AFailedWriteLeavesNoHoleInTheChain) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  bool fail_next = false;
  AuditLog::Options options;
  options.before_write = [&]() -> Status {
    if (!fail_next) return Status::Ok();
    fail_next = false;
    return Unavailable("the disk is full");
  };
  AuditLog log(db->get(), options);
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  ASSERT_TRUE(log.Commit(Decision("a"), {}).ok());
  fail_next = true;
  WriteBatch lost;
  lost.Put(ColumnFamily::kEntityState, "card", "never written");
  const Status failed = log.Commit(Decision("b"), std::move(lost));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().message, "the disk is full");
  ASSERT_TRUE(log.Commit(Decision("c"), {}).ok());
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card").value(), std::nullopt);  // b's batch did not land
  const auto entries = Entries(**db);
  ASSERT_EQ(entries.size(), 3u);                           // start, a, c
  EXPECT_EQ(ReadChainFields(entries[2].second)->seq, 2u);  // c took the seq b did not use
  const ChainReport report = Verify(**db);
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
}

// A failed sync is fatal to RocksDB: the database is closed and opened again in the process,
// and the reopen replays RocksDB's log, which holds the failed decision's bytes. The chain
// continues from that entry (read from memory, the head would be the entry before, and the next
// decision would take its key), and the periodic checkpoints count it (one after every 3
// entries here), so the trail verifies.
TEST(AuditLog, AfterAReopenTheChainContinuesFromAWriteThatCameBack) {
  testing::TempDir dir;
  auto faults = std::make_shared<WriteFaults>();
  auto db = Database::Open(dir.file("db"), {.write_faults = faults, .resume_every_ms = 5});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  AuditLog log(db->get(), {.checkpoint_every = 3});
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  ASSERT_TRUE(log.Commit(Decision("a", 1000), {}).ok());
  faults->sync_io_error = true;
  EXPECT_TRUE(testing::IsError(log.Commit(Decision("b", 2000), {}), ErrorCode::kUnavailable,
                               "the database takes no writes now: an I/O error on the database's disk"));
  faults->sync_io_error = false;
  ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
  ASSERT_EQ((*db)->write_health().reopens, 1u);
  for (const char* id : {"c", "d", "e", "f"}) ASSERT_TRUE(log.Commit(Decision(id, 3000), {}).ok());

  const auto entries = Entries(**db);
  ASSERT_EQ(entries.size(), 9u);  // start, a, b (back with the log), c, checkpoint, d, e, f, checkpoint
  EXPECT_EQ(DecodeAuditRecord(entries[2].second).value().request_id, "b");
  EXPECT_EQ(ReadChainFields(entries[3].second)->seq, 3u);  // c follows b
  EXPECT_TRUE(IsAuditCheckpoint(entries[4].second));       // after a, b and c
  EXPECT_TRUE(IsAuditCheckpoint(entries[8].second));       // after d, e and f
  const ChainReport report = Verify(**db);
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.entries, 9u);
  EXPECT_TRUE(log.Close().ok());
}

// A decision whose card state was read before a reopen is refused after it, with nothing
// written: the reopen may have brought back a write to the same card that it did not see.
TEST(AuditLog, ADecisionReadBeforeAReopenIsRefusedAfterIt) {
  testing::TempDir dir;
  auto faults = std::make_shared<WriteFaults>();
  auto db = Database::Open(dir.file("db"), {.write_faults = faults, .resume_every_ms = 5});
  ASSERT_TRUE(db.ok()) << db.error().ToString();
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  const uint64_t read_in = (*db)->generation();  // the card's state is read here
  faults->sync_io_error = true;
  EXPECT_FALSE(log.Commit(Decision("failed", 1000), {}).ok());
  faults->sync_io_error = false;
  ASSERT_TRUE(testing::Eventually([&] { return !(*db)->write_health().stopped; }));
  WriteBatch state;
  state.RequireGeneration(read_in);
  state.Put(ColumnFamily::kEntityState, "card", "computed before the reopen");
  EXPECT_TRUE(testing::IsError(
      log.Commit(Decision("late", 2000), std::move(state)), ErrorCode::kUnavailable,
      "the database was reopened while this was being decided; nothing of it was written (send it again)"));
  EXPECT_EQ((*db)->Get(ColumnFamily::kEntityState, "card").value(), std::nullopt);
  const std::vector<AuditRecord> records = log.ReadLast(10).value();
  std::vector<std::string> ids;
  for (const AuditRecord& r : records) ids.push_back(r.request_id);
  EXPECT_EQ(ids, std::vector<std::string>{"failed"});        // back with the log; "late" is not there
  ASSERT_TRUE(log.Commit(Decision("next", 3000), {}).ok());  // the chain goes on
  EXPECT_FALSE(Verify(**db).problem.has_value());
}

TEST(AuditLog, RestartsAreLinkedAndSayWhetherThePreviousWriterShutDownOrCrashed) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  {
    AuditLog first(db->get());
    ASSERT_TRUE(first.BeginWriting(TestKey()).ok());
    ASSERT_TRUE(first.Commit(Decision("a"), {}).ok());
    ASSERT_TRUE(first.Close().ok());
  }
  {
    AuditLog second(db->get());  // a clean start after a shutdown; then it "crashes": no Close
    ASSERT_TRUE(second.BeginWriting(TestKey()).ok());
    ASSERT_TRUE(second.Commit(Decision("b"), {}).ok());
  }
  AuditLog third(db->get());
  ASSERT_TRUE(third.BeginWriting(TestKey("k2")).ok());  // keys rotated meanwhile
  ASSERT_TRUE(third.Commit(Decision("c"), {}).ok());
  ASSERT_TRUE(third.Close().ok());
  const auto entries = Entries(**db);
  ASSERT_EQ(entries.size(), 8u);
  EXPECT_NE(entries[3].second.find("\"previous\":\"shutdown\""), std::string::npos) << entries[3].second;
  EXPECT_NE(entries[5].second.find("\"previous\":\"crash\""), std::string::npos) << entries[5].second;
  const ChainReport report = Verify(**db, {TestKey(), TestKey("k2")});
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.entries, 8u);
  EXPECT_EQ(report.checkpoints, 5u);
  EXPECT_EQ(report.head_hash_hex, HexOfBytes(Sha256Bytes({entries.back().first, entries.back().second})));
}

TEST(AuditLog, AStartRefusesANewestEntryStrippedOfItsChainFields) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  {
    AuditLog log(db->get());
    ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
    ASSERT_TRUE(log.Commit(Decision("r"), {}).ok());
  }
  // The newest entry made to look like a record from before the chain.
  const auto entries = Entries(**db);
  WriteBatch edit;
  edit.Put(ColumnFamily::kAudit, entries.back().first, EncodeAuditRecord(Decision("forged")));
  ASSERT_TRUE((*db)->Write(edit).ok());
  AuditLog next(db->get());
  const Status started = next.BeginWriting(TestKey());
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(started.error().message.find("it was altered"), std::string::npos) << started.error().message;
}

TEST(AuditLog, AStartRefusesAnUnreadableNewestEntry) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  WriteBatch garbage;
  garbage.Put(ColumnFamily::kAudit, MakeAuditKey({5, 1, 0}), "\x01not json");
  ASSERT_TRUE((*db)->Write(garbage).ok());
  AuditLog log(db->get());
  const Status started = log.BeginWriting(TestKey());
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.error().code, ErrorCode::kDataLoss);
  EXPECT_NE(started.error().message.find("txscore audit verify"), std::string::npos);
}

// A trail of 3 restarts' worth of entries (checkpoints every 4), closed, and a copy of it to
// tamper with. Positions are 1-based in key order.
class AuditTamperTest : public ::testing::Test {
 public:  // RelinkFrom, below, edits through them
  void SetUp() override {
    auto db = Database::Open(dir_.file("original"));
    ASSERT_TRUE(db.ok());
    for (int run = 0; run < 3; ++run) {
      AuditLog log(db->get(), AuditLog::Options{.checkpoint_every = 4});
      ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
      for (int i = 0; i < 5; ++i) {
        ASSERT_TRUE(log.Commit(Decision("run" + std::to_string(run) + "-" + std::to_string(i)), {}).ok());
      }
      ASSERT_TRUE(log.Close().ok());
    }
    ASSERT_TRUE((*db)->Close().ok());
    std::filesystem::copy(dir_.file("original"), dir_.file("copy"), std::filesystem::copy_options::recursive);
    auto copy = Database::Open(dir_.file("copy"));
    ASSERT_TRUE(copy.ok());
    copy_ = std::move(copy).value();
    entries_ = Entries(*copy_);
    // Per run: start, r, r, r, r, periodic, r, shutdown = 8 entries.
    ASSERT_EQ(entries_.size(), 24u);
  }

  void Put(size_t position, const std::string& value) {
    WriteBatch batch;
    batch.Put(ColumnFamily::kAudit, entries_[position - 1].first, value);
    ASSERT_TRUE(copy_->Write(batch).ok());
  }
  void Erase(size_t position) {
    WriteBatch batch;
    batch.Delete(ColumnFamily::kAudit, entries_[position - 1].first);
    ASSERT_TRUE(copy_->Write(batch).ok());
  }
  const std::string& ValueAt(size_t position) { return entries_[position - 1].second; }  // as first written
  std::string StoredAt(size_t position) {                                                // as it is now, after Put
    return copy_->Get(ColumnFamily::kAudit, entries_[position - 1].first).value().value_or("");
  }
  // A checkpoint without its signature (the value it signs).
  static std::string Unsigned(const std::string& checkpoint) {
    const size_t at = checkpoint.rfind(",\"sig\":\"");
    EXPECT_EQ(checkpoint.size() - at, 8 + 128 + 2u) << checkpoint;
    return checkpoint.substr(0, at) + "}";
  }
  // A checkpoint made an ordinary entry: another kind, and no signature to check.
  static std::string AsAction(const std::string& checkpoint) {
    return Replaced(Unsigned(checkpoint), "{\"kind\":\"checkpoint\"", "{\"kind\":\"action\"");
  }
  static std::string Replaced(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << text;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  }
  void ExpectProblem(ChainProblemKind kind, uint64_t position, uint64_t seq,
                     const std::vector<AuditCheckpointKey>& keys = {TestKey()}) {
    const ChainReport report = Verify(*copy_, keys);
    ASSERT_TRUE(report.problem.has_value()) << "tampering not detected";
    EXPECT_EQ(ChainProblemKindName(report.problem->kind), std::string(ChainProblemKindName(kind)))
        << report.problem->detail;
    EXPECT_EQ(report.problem->position, position) << report.problem->detail;
    EXPECT_EQ(report.problem->seq, seq) << report.problem->detail;
  }

  testing::TempDir dir_;
  std::unique_ptr<Database> copy_;
  std::vector<std::pair<std::string, std::string>> entries_;
};

TEST_F(AuditTamperTest, TheUntouchedCopyVerifies) {
  const ChainReport report = Verify(*copy_);
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.entries, 24u);
  EXPECT_EQ(report.checkpoints, 9u);
  EXPECT_EQ(report.legacy, 0u);
}

TEST_F(AuditTamperTest, AnEditedDecisionIsReportedAtItsPosition) {
  Put(11, Replaced(ValueAt(11), "\"decision\":\"APPROVE\"", "\"decision\":\"DECLINE\""));
  ExpectProblem(ChainProblemKind::kAltered, 11, 10);
}

TEST_F(AuditTamperTest, AnEditedCheckpointFailsItsSignatureAtItsPosition) {
  Put(8, Replaced(ValueAt(8), "\"reason\":\"shutdown\"", "\"reason\":\"periodic\""));
  ExpectProblem(ChainProblemKind::kBadSignature, 8, 7);
}

TEST_F(AuditTamperTest, ADeletedRecordIsReportedMissingWhereTheGapIs) {
  Erase(13);
  ExpectProblem(ChainProblemKind::kMissing, 13, 12);
}

TEST_F(AuditTamperTest, DeletedFirstEntriesAreReportedMissing) {
  Erase(1);
  Erase(2);
  ExpectProblem(ChainProblemKind::kMissing, 1, 0);
}

TEST_F(AuditTamperTest, SwappedRecordsAreReportedReorderedAtTheFirst) {
  const std::string fourth = ValueAt(4);
  Put(4, ValueAt(7));
  Put(7, fourth);
  ExpectProblem(ChainProblemKind::kReordered, 4, 6);
}

TEST_F(AuditTamperTest, ARecordMovedLaterIsReportedReorderedWhereItWas) {
  Erase(10);
  AuditKeyParts later = *ParseAuditKey(entries_[9].first);
  later.counter += 1000;
  WriteBatch batch;
  batch.Put(ColumnFamily::kAudit, MakeAuditKey(later), ValueAt(10));
  ASSERT_TRUE(copy_->Write(batch).ok());
  ExpectProblem(ChainProblemKind::kReordered, 10, 10);
}

void RelinkFrom(AuditTamperTest* test, size_t from, const std::function<std::string(size_t, std::string)>& edit) {
  std::string previous_hash;
  for (size_t position = from; position <= test->entries_.size(); ++position) {
    std::string value = edit(position, test->ValueAt(position));
    if (position > from) {
      const size_t at = value.find(",\"prev\":\"") + 9;
      value.replace(at, 64, HexOfBytes(previous_hash));
    }
    test->Put(position, value);
    previous_hash = Sha256Bytes({test->entries_[position - 1].first, value});
  }
}

TEST_F(AuditTamperTest, AChainRewrittenWithoutTheKeyFailsAtTheNextCheckpoint) {
  // Edit entry 18 and recompute every later link: the hashes line up again, and the next
  // checkpoint's signature (position 22) gives it away.
  RelinkFrom(this, 18, [](size_t position, std::string value) {
    return position == 18 ? Replaced(value, "\"decision\":\"APPROVE\"", "\"decision\":\"DECLINE\"") : value;
  });
  ExpectProblem(ChainProblemKind::kBadSignature, 22, 21);
}

// Rewrites positions from..end: `edit` changes an entry's value, and every entry's "prev" is
// recomputed, as someone without the keyset could.
void RelinkFrom(AuditTamperTest* test, size_t from, const std::function<std::string(size_t, std::string)>& edit);

TEST_F(AuditTamperTest, CheckpointsTurnedIntoOrdinaryEntriesToCarryARewriteAreCaught) {
  // The rewrite of position 18 carried past the periodic checkpoint at 22 by making it an
  // operator action (so no signature is checked there): 5 entries follow the start checkpoint
  // where one is written after every 4.
  RelinkFrom(this, 18, [](size_t position, std::string value) {
    if (position == 18) return Replaced(value, "\"decision\":\"APPROVE\"", "\"decision\":\"DECLINE\"");
    if (position == 22) return AsAction(value);
    return value;
  });
  ExpectProblem(ChainProblemKind::kCheckpointMissing, 22, 21);
}

TEST_F(AuditTamperTest, AServerStartWithoutItsStartCheckpointIsCaught) {
  RelinkFrom(this, 17, [](size_t position, std::string value) {
    if (position == 17) return AsAction(value);
    return value;
  });
  ExpectProblem(ChainProblemKind::kCheckpointMissing, 17, 16);
}

TEST_F(AuditTamperTest, TheNewestRunsEndRewrittenIsOnlyReportedAsNotEndingCleanly) {
  // What the documentation says the chain cannot show: the entries after the newest checkpoint,
  // the last run's shutdown checkpoint among them, rewritten. The report says the trail does
  // not end with a shutdown checkpoint; the log's anchor (the shutdown hash) is what shows it.
  RelinkFrom(this, 23, [](size_t position, std::string value) {
    if (position == 23) return Replaced(value, "\"decision\":\"APPROVE\"", "\"decision\":\"DECLINE\"");
    if (position == 24) return AsAction(value);
    return value;
  });
  const ChainReport report = Verify(*copy_);
  EXPECT_FALSE(report.problem.has_value());
  EXPECT_FALSE(report.ends_with_shutdown);
  EXPECT_EQ(report.after_last_checkpoint, 2u);
  EXPECT_NE(report.head_hash_hex, HexOfBytes(Sha256Bytes({entries_.back().first, entries_.back().second})));
}

// Whole runs cut from the end leave a trail whose every link holds; the epoch record, written with
// each start's checkpoint, still names the newest run. Emptied: the same. Rewritten to name an
// older run than the newest entry's: the record was altered. (Cut and rewritten to match: only
// the logged head shows it, as documented.)
TEST_F(AuditTamperTest, RunsCutFromTheEndOrEveryEntryDeletedAreCaughtByTheEpochRecord) {
  for (size_t position = 17; position <= 24; ++position) Erase(position);  // the third run
  ExpectProblem(ChainProblemKind::kMissing, 17, 16);
  EXPECT_EQ(Verify(*copy_).problem->detail,
            "the epoch record says a server start of epoch 3 wrote to the trail, and the newest entry is of epoch 2: "
            "entries were deleted from the end");
  for (size_t position = 1; position <= 16; ++position) Erase(position);
  ExpectProblem(ChainProblemKind::kMissing, 1, 0);
  EXPECT_EQ(Verify(*copy_).problem->detail,
            "the epoch record says a server start of epoch 3 wrote to the trail, and the trail holds no entry: "
            "entries were deleted from the end");
}

TEST_F(AuditTamperTest, AnEpochRecordOlderThanTheNewestEntryIsReportedAltered) {
  std::string record;
  PutU64BE(&record, 2);
  WriteBatch batch;
  batch.Put(ColumnFamily::kAudit, kAuditEpochKey, record);
  ASSERT_TRUE(copy_->Write(batch).ok());
  ExpectProblem(ChainProblemKind::kAltered, 25, 24);
  EXPECT_EQ(Verify(*copy_).problem->detail,
            "the epoch record says epoch 2, and the newest entry is of epoch 3: the record was rewritten");
  // Cut to the second run as well, it matches: what only the logged head can show.
  for (size_t position = 17; position <= 24; ++position) Erase(position);
  EXPECT_FALSE(Verify(*copy_).problem.has_value());
}

TEST_F(AuditTamperTest, VerifyingFromATimeBeforeTheTrailStillNeedsItsFirstEntries) {
  Erase(1);
  Erase(2);
  Result<ChainReport> report = VerifyAuditChain(*copy_, VerifyWith({TestKey()}, /*from_time_us=*/1));
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->problem.has_value());
  EXPECT_EQ(report->problem->kind, ChainProblemKind::kMissing);
  EXPECT_EQ(report->problem->position, 1u);
  EXPECT_EQ(report->problem->seq, 0u);
}

TEST_F(AuditTamperTest, EveryEntryStrippedOfItsChainIsCountedAsOutsideIt) {
  // Nothing is verified then: `txscore audit verify` says so (exit 3), never "intact".
  for (size_t position = 1; position <= entries_.size(); ++position) {
    std::string value = ValueAt(position);
    if (IsAuditCheckpoint(value)) value = AsAction(value);
    Put(position, value.substr(0, value.find(",\"seq\":")) + "}");
  }
  const ChainReport report = Verify(*copy_);
  EXPECT_FALSE(report.problem.has_value());
  EXPECT_EQ(report.legacy, 24u);
  EXPECT_EQ(report.entries, 0u);
}

TEST_F(AuditTamperTest, AChainRestartedAtZeroAfterStrippedEntriesIsCaught) {
  // Everything up to the newest checkpoint stripped, the two entries after it chained again
  // from seq 0: the chain's first entry must be a signed start checkpoint.
  std::string previous_hash;  // of the newest stripped entry, which the new chain links
  for (size_t position = 1; position <= 22; ++position) {
    std::string value = ValueAt(position);
    if (IsAuditCheckpoint(value)) value = AsAction(value);
    value = value.substr(0, value.find(",\"seq\":")) + "}";
    Put(position, value);
    previous_hash = Sha256Bytes({entries_[position - 1].first, value});
  }
  for (size_t position = 23; position <= 24; ++position) {
    std::string value = ValueAt(position);
    if (IsAuditCheckpoint(value)) value = AsAction(value);
    value = ChainAuditEntry(value.substr(0, value.find(",\"seq\":")) + "}", position - 23, previous_hash);
    Put(position, value);
    previous_hash = Sha256Bytes({entries_[position - 1].first, value});
  }
  ExpectProblem(ChainProblemKind::kCheckpointMissing, 23, 0);
}

TEST_F(AuditTamperTest, ACheckpointUnderAnotherKeyOrNoKnownKeyFails) {
  ExpectProblem(ChainProblemKind::kBadSignature, 1, 0, {{"k1", std::string(32, 'x')}});
  ExpectProblem(ChainProblemKind::kUnknownKey, 1, 0, {TestKey("k7")});
}

// Rewrites the trail from `from` on as a writer from before Ed25519 did: checkpoints signed with
// HMAC-SHA256 under `hmac_key` ("hmac", 64 hex digits), every later link recomputed.
// Rewrites the trail from `from` on as an earlier version would have signed it up to `hmac_until`
// (HMAC checkpoints) and as today's writer does after it (Ed25519 under TestKey()), re-linked.
void SignWithHmacFrom(AuditTamperTest* test, size_t from, const std::string& hmac_key,
                      size_t hmac_until = std::numeric_limits<size_t>::max()) {
  std::string previous_hash;
  for (size_t position = from; position <= test->entries_.size(); ++position) {
    std::string value = test->ValueAt(position);
    if (position > from) value.replace(value.find(",\"prev\":\"") + 9, 64, HexOfBytes(previous_hash));
    if (IsAuditCheckpoint(value)) {
      const std::string& key = test->entries_[position - 1].first;
      // The signature is over the re-linked value, so strip it only after "prev" is set.
      const size_t at = value.rfind(",\"sig\":\"");
      const std::string unsigned_value = value.substr(0, at) + "}";
      value = position > hmac_until ? SignAuditCheckpoint(key, unsigned_value, TestKey().private_key)
                                    : unsigned_value.substr(0, unsigned_value.size() - 1) + ",\"hmac\":\"" +
                                          HexOfBytes(HmacSha256Bytes(hmac_key, {key, unsigned_value})) + "\"}";
    }
    test->Put(position, value);
    previous_hash = Sha256Bytes({test->entries_[position - 1].first, value});
  }
}

// A trail written before checkpoints were signed with Ed25519 still verifies, with the keyset
// (the HMAC secret); with public keys alone its checkpoints cannot be verified, and it says so
// rather than passing them.
TEST_F(AuditTamperTest, ATrailSignedWithHmacBeforeEd25519VerifiesWithTheKeysetOnly) {
  const std::string hmac_key(32, 'h');
  SignWithHmacFrom(this, 1, hmac_key);
  ChainVerifyOptions with_keyset = VerifyWith({TestKey()});
  with_keyset.legacy_hmac_key = [&hmac_key](const std::string& id) -> std::optional<std::string> {
    return id == "k1" ? std::optional<std::string>(hmac_key) : std::nullopt;
  };
  const ChainReport verified = VerifyAuditChain(*copy_, with_keyset).value();
  EXPECT_FALSE(verified.problem.has_value()) << verified.problem->detail;
  EXPECT_EQ(verified.checkpoints, 9u);
  // A wrong secret fails it: the HMAC is checked, not only its presence.
  with_keyset.legacy_hmac_key = [](const std::string&) -> std::optional<std::string> { return std::string(32, 'x'); };
  const ChainReport wrong = VerifyAuditChain(*copy_, with_keyset).value();
  ASSERT_TRUE(wrong.problem.has_value());
  EXPECT_EQ(wrong.problem->kind, ChainProblemKind::kBadSignature);
  EXPECT_EQ(wrong.problem->detail, "the checkpoint's HMAC does not verify under key k1");
  // Public keys alone: refused at the first checkpoint, saying what would verify it.
  ExpectProblem(ChainProblemKind::kBadSignature, 1, 0);
  EXPECT_EQ(Verify(*copy_).problem->detail,
            "the checkpoint is HMAC-signed (written before checkpoints were signed with Ed25519): only the keyset "
            "verifies it (txscore audit verify --keyset, not --public-keys)");
}

// The trail of a deployment that upgraded: its first run's checkpoints are HMAC-signed, every
// later one Ed25519-signed. With the keyset it verifies whole; a wrong HMAC secret fails it at
// the first run's first checkpoint, a wrong public key at the second run's first.
TEST_F(AuditTamperTest, ATrailSignedWithHmacThenEd25519VerifiesWholeWithTheKeyset) {
  const std::string hmac_key(32, 'h');
  SignWithHmacFrom(this, 1, hmac_key, /*hmac_until=*/8);
  ASSERT_NE(StoredAt(1).find(",\"hmac\":\""), std::string::npos);
  ASSERT_NE(StoredAt(9).find(",\"sig\":\""), std::string::npos);
  ChainVerifyOptions with_keyset = VerifyWith({TestKey()});
  with_keyset.legacy_hmac_key = [&hmac_key](const std::string& id) -> std::optional<std::string> {
    return id == "k1" ? std::optional<std::string>(hmac_key) : std::nullopt;
  };
  const ChainReport verified = VerifyAuditChain(*copy_, with_keyset).value();
  EXPECT_FALSE(verified.problem.has_value()) << verified.problem->detail;
  EXPECT_EQ(verified.entries, 24u);
  EXPECT_EQ(verified.checkpoints, 9u);
  ChainVerifyOptions wrong_public_key = with_keyset;
  wrong_public_key.checkpoint_public_key = [](const std::string&) -> std::optional<std::string> {
    return Ed25519PublicKey(std::string(32, 'z')).value();
  };
  const ChainReport refused = VerifyAuditChain(*copy_, wrong_public_key).value();
  ASSERT_TRUE(refused.problem.has_value());
  EXPECT_EQ(refused.problem->kind, ChainProblemKind::kBadSignature);
  EXPECT_EQ(refused.problem->position, 9u);
}

// Once the writer signs with Ed25519 it never goes back: an HMAC checkpoint after that is
// refused even by a verifier holding the HMAC secret.
TEST_F(AuditTamperTest, AnHmacCheckpointAfterAnEd25519OneIsRefused) {
  const std::string hmac_key(32, 'h');
  SignWithHmacFrom(this, 9, hmac_key);
  ChainVerifyOptions options = VerifyWith({TestKey()});
  options.legacy_hmac_key = [&hmac_key](const std::string&) -> std::optional<std::string> { return hmac_key; };
  const ChainReport report = VerifyAuditChain(*copy_, options).value();
  ASSERT_TRUE(report.problem.has_value());
  EXPECT_EQ(report.problem->kind, ChainProblemKind::kBadSignature);
  EXPECT_EQ(report.problem->position, 9u);
  EXPECT_EQ(report.problem->detail,
            "an HMAC-signed checkpoint after Ed25519-signed ones: the writer signs with Ed25519 since it first did, so "
            "this one was written by someone else");
}

// The signature is Ed25519 under the public key of the writer's private key: one bit flipped in
// it fails. (A trail checked against another key's public half fails too:
// ATrailSignedWithHmacThenEd25519VerifiesWholeWithTheKeyset.)
TEST_F(AuditTamperTest, AnEd25519SignatureIsCheckedAgainstThePublicKey) {
  std::string value = ValueAt(9);
  ASSERT_TRUE(IsAuditCheckpoint(value));
  const size_t digit = value.rfind(",\"sig\":\"") + 8 + 5;
  value[digit] = value[digit] == '0' ? '1' : '0';
  Put(9, value);
  ExpectProblem(ChainProblemKind::kBadSignature, 9, 8);
  EXPECT_EQ(Verify(*copy_).problem->detail,
            "the checkpoint's Ed25519 signature does not verify under key k1's public key");
}

// A key retired after the first run: the second run's checkpoints, which it signed later, are
// refused (the copy is untouched; what matters is who could have signed them). Retired after
// the last entry, or with no retirement known, the same trail verifies.
TEST_F(AuditTamperTest, ACheckpointSignedWithAKeyAfterItsRetirementFails) {
  const int64_t first_run_ends = ParseAuditKey(entries_[7].first)->time_us;  // position 8: its shutdown
  size_t first_later_checkpoint = 9;
  while (first_later_checkpoint <= entries_.size() &&
         !(IsAuditCheckpoint(ValueAt(first_later_checkpoint)) &&
           ParseAuditKey(entries_[first_later_checkpoint - 1].first)->time_us > first_run_ends)) {
    ++first_later_checkpoint;
  }
  ASSERT_LE(first_later_checkpoint, entries_.size()) << "no checkpoint after the first run's end";
  const auto verify_retired_at = [&](std::optional<int64_t> retired_us) {
    ChainVerifyOptions options = VerifyWith({TestKey()});
    options.key_retired_at_us = [retired_us](const std::string& id) {
      return id == "k1" ? retired_us : std::optional<int64_t>();
    };
    return VerifyAuditChain(*copy_, options).value();
  };
  const ChainReport refused = verify_retired_at(first_run_ends);
  ASSERT_TRUE(refused.problem.has_value());
  EXPECT_EQ(refused.problem->kind, ChainProblemKind::kRetiredKey) << refused.problem->detail;
  EXPECT_EQ(refused.problem->position, first_later_checkpoint);
  EXPECT_NE(refused.problem->detail.find("the checkpoint is signed with key k1, which was retired "), std::string::npos)
      << refused.problem->detail;
  const ChainReport later = verify_retired_at(ParseAuditKey(entries_.back().first)->time_us);
  EXPECT_FALSE(later.problem.has_value()) << later.problem->detail;
  const ChainReport unknown = verify_retired_at(std::nullopt);
  EXPECT_FALSE(unknown.problem.has_value()) << unknown.problem->detail;
}

TEST_F(AuditTamperTest, ARecordStrippedOfItsChainFieldsIsReported) {
  std::string value = ValueAt(3);
  value = value.substr(0, value.find(",\"seq\":")) + "}";
  Put(3, value);
  ExpectProblem(ChainProblemKind::kUnchained, 3, 2);
}

TEST_F(AuditTamperTest, VerifyingFromATimeStartsThere) {
  const int64_t from = ParseAuditKey(entries_[16].first)->time_us;  // position 17: the third start
  Erase(5);                                                         // before `from`: not walked
  Result<ChainReport> report = VerifyAuditChain(*copy_, VerifyWith({TestKey()}, from));
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->problem.has_value()) << report->problem->detail;
  EXPECT_EQ(report->first_seq, 16u);
  EXPECT_EQ(report->entries, 8u);
  Put(20, Replaced(ValueAt(20), "\"decision\":\"APPROVE\"", "\"decision\":\"REVIEW\""));
  report = VerifyAuditChain(*copy_, VerifyWith({TestKey()}, from));
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->problem.has_value());
  EXPECT_EQ(report->problem->kind, ChainProblemKind::kAltered);
  EXPECT_EQ(report->problem->position, 4u);  // the 4th entry walked from `from`
  EXPECT_EQ(report->problem->seq, 19u);
}

TEST(AuditLog, VerifyingFromATimeKeepsTheCheckpointSpacingOfTheEntriesBeforeIt) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  AuditLog log(db->get(), AuditLog::Options{.checkpoint_every = 3});
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  // Times after the start's, one second apart, so that --from can start between two records.
  const int64_t base = ParseAuditKey(Entries(**db)[0].first)->time_us + 1000000;
  for (int i = 1; i <= 7; ++i) ASSERT_TRUE(log.Commit(Decision("r" + std::to_string(i), base + i * 1000000), {}).ok());
  // Positions: 1 start, 2-4 r1-r3, 5 periodic, 6-8 r4-r6, 9 periodic, 10 r7.
  auto entries = Entries(**db);
  ASSERT_EQ(entries.size(), 10u);
  // r5 edited and the checkpoint after it made an ordinary entry, every link from r5 on
  // recomputed: walked from r5's time, 4 entries follow the checkpoint before the walk.
  std::string previous_hash = Sha256Bytes({entries[5].first, entries[5].second});
  for (size_t i = 6; i < entries.size(); ++i) {
    std::string value = entries[i].second;
    if (i == 6) value.replace(value.find("\"request_id\":\"r5\""), 17, "\"request_id\":\"r9\"");
    if (i == 8) {
      value = value.substr(0, value.rfind(",\"sig\":\"")) + "}";
      value.replace(0, 20, "{\"kind\":\"action\"");
    }
    const size_t at = value.find(",\"prev\":\"") + 9;
    value.replace(at, 64, HexOfBytes(previous_hash));
    WriteBatch batch;
    batch.Put(ColumnFamily::kAudit, entries[i].first, value);
    ASSERT_TRUE((*db)->Write(batch).ok());
    previous_hash = Sha256Bytes({entries[i].first, value});
  }
  const int64_t from = ParseAuditKey(entries[6].first)->time_us;
  Result<ChainReport> report = VerifyAuditChain(**db, VerifyWith({TestKey()}, from));
  ASSERT_TRUE(report.ok());
  ASSERT_TRUE(report->problem.has_value());
  EXPECT_EQ(report->problem->kind, ChainProblemKind::kCheckpointMissing) << report->problem->detail;
  EXPECT_EQ(report->problem->position, 3u);  // the third entry walked: the one that was a checkpoint
}

TEST(AuditLog, RecordsFromBeforeTheChainAreCountedAndTheNewestIsLinked) {
  testing::TempDir dir;
  auto db = Database::Open(dir.file("db"));
  ASSERT_TRUE(db.ok());
  // What a server before the chain wrote: epoch 1, plain JSON records.
  WriteBatch legacy;
  for (uint64_t i = 0; i < 3; ++i) {
    legacy.Put(ColumnFamily::kAudit, MakeAuditKey({1000 + static_cast<int64_t>(i), 1, i}),
               EncodeAuditRecord(Decision("old" + std::to_string(i))));
  }
  ASSERT_TRUE((*db)->Write(legacy).ok());
  AuditLog log(db->get());
  ASSERT_TRUE(log.BeginWriting(TestKey()).ok());
  EXPECT_EQ(log.epoch(), 2u);
  ASSERT_TRUE(log.Commit(Decision("new"), {}).ok());
  ASSERT_TRUE(log.Close().ok());
  ChainReport report = Verify(**db);
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_EQ(report.legacy, 3u);
  EXPECT_EQ(report.entries, 3u);
  EXPECT_NE(Entries(**db)[3].second.find("\"previous\":\"legacy\""), std::string::npos);
  // The newest legacy record is pinned by the chain's first link.
  WriteBatch edit;
  edit.Put(ColumnFamily::kAudit, MakeAuditKey({1002, 1, 2}), EncodeAuditRecord(Decision("edited")));
  ASSERT_TRUE((*db)->Write(edit).ok());
  report = Verify(**db);
  ASSERT_TRUE(report.problem.has_value());
  EXPECT_EQ(report.problem->kind, ChainProblemKind::kAltered);
  EXPECT_EQ(report.problem->position, 3u);
}

}  // namespace
}  // namespace txscore::storage
