// Card keys rotate under traffic without losing any card's history; a retired key's tokens are
// no longer resolved (fraud/keyset.h, docs/security.md "Keys").
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <map>
#include <thread>

#include "fraud/card_token.h"
#include "fraud/entity_state.h"
#include "fraud/keyset.h"
#include "gen-cpp/TxScore.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "service/rpc_client.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "storage/audit_chain.h"
#include "tests/server_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

// A Luhn-valid test card number of its own for each index.
std::string Pan(int index) {
  std::string digits = "400000" + std::to_string(100000000 + index);
  return digits + fraud::LuhnCheckDigit(digits);
}

class KeyRotationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);
    std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
    settings.replace(settings.find("card_key_file: card.key"), 23, "keyset: keyset.json");
    testing::WriteFile(testing::TestSettingsPath(dir_), settings);
    ASSERT_TRUE(fraud::SaveKeyset(fraud::Keyset::Generate(1), keyset_path()).ok());
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::string keyset_path() const { return dir_.file("keyset.json"); }
  fraud::Keyset Keys() const { return fraud::LoadKeyset(keyset_path()).value(); }
  void RotateAndReload() {
    ASSERT_TRUE(fraud::SaveKeyset(Keys().Rotated(2), keyset_path()).ok());
    const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
    ASSERT_TRUE(outcome.applied) << outcome.detail;
  }
  // Scores one transaction of card `index`, `minute` minutes into the test's day.
  void Score(RpcConnection& connection, int index, int minute, const std::string& request_id) {
    fraud::RawTransaction raw = testing::ValidTransaction(request_id);
    raw.card_number = Pan(index);
    raw.timestamp_ms = 1767261600000 + int64_t{minute} * 60000;
    rpc::ScoreResult result;
    connection.client().score(result, ToThriftTransaction(raw));
  }
  // The card's stored state under `key`'s token, if any (not a moved-to marker).
  std::optional<fraud::CardState> StateUnder(const fraud::KeysetKey& key, int index) {
    const std::string value = Stored(key, index);
    if (value.empty() || value.rfind("moved-to:", 0) == 0) return std::nullopt;
    return fraud::DecodeCardState(value).value();
  }
  // What is stored under `key`'s token for the card ("" when nothing).
  std::string Stored(const fraud::KeysetKey& key, int index) {
    auto stored =
        server_->database().Get(storage::ColumnFamily::kEntityState, fraud::Keyset::TokenUnder(key, Pan(index)));
    return stored.ok() && stored->has_value() ? **stored : std::string();
  }
  const fraud::KeysetKey& Key(const fraud::Keyset& keys, const std::string& id) {
    for (const fraud::KeysetKey& key : keys.keys()) {
      if (key.id == id) return key;
    }
    throw std::runtime_error("no key " + id);
  }

  testing::TempDir dir_;
  std::unique_ptr<ScoringServer> server_;
};

TEST_F(KeyRotationTest, TwoRotationsUnderTrafficKeepEveryCardsHistory) {
  constexpr int kCards = 6, kThreads = 2;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::map<int, int> sent[kThreads];  // card -> transactions sent, per thread (each thread owns its cards)
  std::vector<std::thread> traffic;
  for (int t = 0; t < kThreads; ++t) {
    traffic.emplace_back([&, t] {
      auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()}).value();
      // Until told to stop, then one more round, so every card is also seen after the last rotation.
      const int cards_per_thread = kCards / kThreads;
      int last_round = -1;
      for (int n = 0; last_round < 0 || n < last_round; ++n) {
        if (last_round < 0 && stop.load()) last_round = n + cards_per_thread;
        const int card = t + kThreads * (n % cards_per_thread);
        try {
          Score(*connection, card, n, "t" + std::to_string(t) + "-" + std::to_string(n));
          ++sent[t][card];
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  }
  // Two rotations while the traffic runs, each picked up by a reload.
  while (server_->audit_log().ReadLast(10).value().size() < 10) std::this_thread::yield();
  RotateAndReload();
  while (server_->audit_log().ReadLast(40).value().size() < 40) std::this_thread::yield();
  RotateAndReload();
  stop = true;
  for (std::thread& t : traffic) t.join();
  EXPECT_EQ(failures.load(), 0);

  const fraud::Keyset keys = Keys();
  ASSERT_EQ(keys.primary().id, "k3");
  for (int t = 0; t < kThreads; ++t) {
    for (const auto& [card, count] : sent[t]) {
      // Every transaction of the card is in its state, now under the newest key alone; the older
      // keys' entries say where it moved.
      const std::optional<fraud::CardState> state = StateUnder(keys.primary(), card);
      ASSERT_TRUE(state.has_value()) << "card " << card;
      EXPECT_EQ(state->transaction_count, static_cast<uint64_t>(count)) << "card " << card;
      EXPECT_FALSE(StateUnder(Key(keys, "k1"), card).has_value()) << "card " << card;
      EXPECT_FALSE(StateUnder(Key(keys, "k2"), card).has_value()) << "card " << card;
      EXPECT_EQ(Stored(Key(keys, "k1"), card).rfind("moved-to:k", 0), 0u) << "card " << card;
    }
  }
  // The audit trail's checkpoints follow the rotations: after the reloads they are signed under
  // k3, and the whole trail verifies with the keyset (the older checkpoints under k1).
  ASSERT_TRUE(server_->audit_log().Close().ok());
  const std::vector<std::pair<std::string, std::string>> newest =
      server_->database().ReadLast(storage::ColumnFamily::kAudit, 1).value();
  ASSERT_EQ(newest.size(), 1u);
  EXPECT_NE(newest[0].second.find("\"reason\":\"shutdown\",\"epoch\":1,\"checkpoint_every\":1000,\"key_id\":\"k3\""),
            std::string::npos)
      << newest[0].second;
  storage::ChainVerifyOptions verify;
  verify.checkpoint_public_key = [&keys](const std::string& id) -> std::optional<std::string> {
    for (const fraud::KeysetKey& key : keys.keys()) {
      if (key.id == id) return fraud::AuditSigningPublicKey(key).value();
    }
    return std::nullopt;
  };
  const storage::ChainReport report = storage::VerifyAuditChain(server_->database(), verify).value();
  EXPECT_FALSE(report.problem.has_value()) << report.problem->detail;
  EXPECT_GE(report.checkpoints, 2u);  // start (k1), shutdown (k3), and one per 1000 entries
}

TEST_F(KeyRotationTest, AnActiveKeysCardIsFoundAndARetiredKeysIsNot) {
  auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()}).value();
  Score(*connection, 1, 0, "a-1");  // both cards seen once, under k1
  Score(*connection, 2, 0, "b-1");
  RotateAndReload();
  RotateAndReload();  // k3 primary; k1 and k2 active
  Score(*connection, 1, 5, "a-2");
  fraud::Keyset keys = Keys();
  EXPECT_EQ(StateUnder(keys.primary(), 1)->transaction_count, 2u);  // found under k1, re-keyed under k3
  EXPECT_EQ(Stored(Key(keys, "k1"), 1), "moved-to:" + fraud::Keyset::TokenUnder(keys.primary(), Pan(1)));

  // k1 retired: card 2, seen only under k1, starts over; its old state is not resolved.
  ASSERT_TRUE(fraud::SaveKeyset(keys.WithRetired("k1", 1).value(), keyset_path()).ok());
  ASSERT_TRUE(server_->Reload("test").applied);
  Score(*connection, 2, 5, "b-2");
  keys = Keys();
  EXPECT_EQ(StateUnder(keys.primary(), 2)->transaction_count, 1u);
  EXPECT_EQ(StateUnder(Key(keys, "k1"), 2)->transaction_count, 1u);  // left where it was, unread
  // A caller's token made under the retired key is refused, naming the field.
  fraud::RawTransaction raw = testing::ValidTransaction("b-3");
  raw.card_number.reset();
  raw.card_token = fraud::Keyset::TokenUnder(Key(keys, "k1"), Pan(2));
  rpc::ScoreResult result;
  try {
    connection->client().score(result, ToThriftTransaction(raw));
    ADD_FAILURE() << "a retired key's token was resolved";
  } catch (const rpc::InvalidRequest& e) {
    EXPECT_EQ(e.field, "card_token");
    EXPECT_EQ(e.reason, "was made with key k1, which is retired: tokenize with the primary key k3");
  }
}

// A request that started on the keys before a rotation and lands after another request moved
// the card: it follows the marker and adds to the card's history where it lives now, rather
// than starting a second history under the old key (the requests' order, replayed through the
// ledger's keys).
TEST(KeyRotationLedger, ARequestOnTheOldKeysFollowsTheCardToItsNewKey) {
  testing::TempDir dir;
  const std::string pipeline_file = testing::WriteTestPipeline(dir);
  const fraud::Keyset old_keys = fraud::Keyset::Generate(1);
  const fraud::Keyset new_keys = old_keys.Rotated(2);
  ASSERT_TRUE(fraud::SaveKeyset(old_keys, dir.file("keyset.json")).ok());
  auto db = storage::Database::Open(dir.file("db")).value();
  auto ledger = pipelines::ScoringLedger::Create(db.get(), dir.file("keyset.json")).value();
  auto pipeline =
      pipelines::ScoringPipeline::Create(pipelines::LoadPipelineConfig(pipeline_file).value(), ledger).value();
  const auto score = [&](const fraud::Keyset& keys, int minute) {
    ledger->SetTokenizer(fraud::CardTokenizer::FromKeyset(keys));
    fraud::RawTransaction raw = testing::ValidTransaction("r" + std::to_string(minute));
    raw.card_number = Pan(7);
    raw.timestamp_ms = 1767261600000 + int64_t{minute} * 60000;
    ASSERT_TRUE(pipeline->Score(raw).ok());
  };
  const auto stored = [&](const fraud::KeysetKey& key) {
    return db->Get(storage::ColumnFamily::kEntityState, fraud::Keyset::TokenUnder(key, Pan(7))).value().value_or("");
  };
  score(old_keys, 0);  // under k1
  score(new_keys, 1);  // moved to k2
  score(old_keys, 2);  // a request that took the old keys before the reload
  score(new_keys, 3);
  EXPECT_EQ(stored(new_keys.keys()[0]), "moved-to:" + fraud::Keyset::TokenUnder(new_keys.primary(), Pan(7)));
  EXPECT_EQ(fraud::DecodeCardState(stored(new_keys.primary())).value().transaction_count, 4u);
}

TEST_F(KeyRotationTest, AReloadRefusesAKeysetThatDropsAKeyOrChangesItsSecret) {
  RotateAndReload();  // k1 active, k2 primary
  const fraud::Keyset keys = Keys();
  std::vector<fraud::KeysetKey> dropped = {keys.keys()[0]};  // k1 alone, primary again: k2 gone
  dropped[0].state = fraud::KeyState::kPrimary;
  ASSERT_TRUE(fraud::SaveKeyset(fraud::Keyset::FromKeys(dropped).value(), keyset_path()).ok());
  ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_EQ(outcome.detail, keyset_path() +
                                ": the new keyset drops key k2, whose cards' history it would orphan: retire a key "
                                "instead of removing it");
  std::vector<fraud::KeysetKey> changed = keys.keys();
  changed[0].secret = std::string(32, 'x');
  ASSERT_TRUE(fraud::SaveKeyset(fraud::Keyset::FromKeys(changed).value(), keyset_path()).ok());
  outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_EQ(outcome.detail, keyset_path() +
                                ": the new keyset gives key k1 another secret: a key id names one key for good "
                                "(rotate to get a new one)");
}

TEST_F(KeyRotationTest, AReloadWithAnUnreadableKeysetIsRefusedAndTheKeysInForceStay) {
  testing::WriteFile(keyset_path(), "{not json");
  const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_NE(outcome.detail.find("keyset file " + keyset_path() + ": not a JSON object"), std::string::npos)
      << outcome.detail;
  auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()}).value();
  Score(*connection, 3, 0, "c-1");  // still served with k1
  EXPECT_EQ(server_->audit_log().ReadLast(1).value().at(0).card_token.substr(0, 3), "k1_");
}

TEST_F(KeyRotationTest, ARawKeyWhereTheSettingsNameAKeysetIsRefusedAtReloadAndAtStart) {
  testing::WriteFile(keyset_path(), testing::TestCardKey());
  ::chmod(keyset_path().c_str(), 0600);
  const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_NE(outcome.detail.find("keyset file " + keyset_path() + " is not a keyset"), std::string::npos)
      << outcome.detail;
  auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()}).value();
  Score(*connection, 3, 0, "c-1");  // still served with k1
  EXPECT_EQ(server_->audit_log().ReadLast(1).value().at(0).card_token.substr(0, 3), "k1_");
  connection.reset();
  server_->Stop();
  server_.reset();
  auto started = testing::CreateTestServer(testing::TestSettingsPath(dir_));
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.error().message.find("keyset file " + keyset_path() + " is not a keyset"), std::string::npos)
      << started.error().ToString();
}

TEST_F(KeyRotationTest, AReloadWithAKeysetOthersMayReadIsRefusedAndTheKeysInForceStay) {
  const std::string keyset = testing::ReadFile(keyset_path());
  for (const mode_t mode : {0644, 0640, 0604}) {  // others, group alone, others alone
    ASSERT_EQ(::chmod(keyset_path().c_str(), mode), 0);
    const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
    EXPECT_FALSE(outcome.applied);
    EXPECT_NE(outcome.detail.find(keyset_path() + " is readable by group or others; run: chmod 600 " + keyset_path()),
              std::string::npos)
        << outcome.detail;
  }
  auto connection = RpcConnection::Open({"127.0.0.1", server_->rpc_port()}).value();
  Score(*connection, 3, 0, "c-1");  // still served with k1
  EXPECT_EQ(server_->audit_log().ReadLast(1).value().at(0).card_token.substr(0, 3), "k1_");
  EXPECT_EQ(testing::ReadFile(keyset_path()), keyset);  // not rewritten
}

}  // namespace
}  // namespace txscore::service
