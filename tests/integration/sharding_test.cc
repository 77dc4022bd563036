// Card-keyed sharding over loopback (docs/scaling-out.md): three real servers, each a shard
// with its own database, one card key. Any replica answers for any card; each card's state and
// audit records live on its owner alone; a card whose shard is down gets ShardUnavailable and
// nothing is written; a forwarded transaction is never forwarded again.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "fraud/card_token.h"
#include "fraud/features.h"
#include "gen-cpp/TxScore.h"
#include "service/scoring_server.h"
#include "service/shard_map.h"
#include "service/transaction_json.h"
#include "storage/audit_log.h"
#include "tests/rpc_test_support.h"
#include "tests/server_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

// A port nothing listens on now, for a shard list written before the servers start.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// The test card with number `index`: a Luhn-valid PAN.
std::string Pan(int index) {
  std::string digits = "4000002" + std::to_string(100000000 + index);
  return digits + fraud::LuhnCheckDigit(digits);
}

class ShardingTest : public ::testing::Test {
 protected:
  static constexpr int kShards = 3;

  void SetUp() override {
    for (int i = 0; i < kShards; ++i) {
      dirs_.push_back(std::make_unique<testing::TempDir>());
      ports_.push_back(FreePort());
      names_.push_back("s" + std::to_string(i));
    }
    for (int i = 0; i < kShards; ++i) {
      testing::WriteTestPipeline(*dirs_[i]);
      std::string settings = testing::ReadFile(testing::TestSettingsPath(*dirs_[i]));
      settings.replace(settings.find("  port: 0\n"), 10, "  port: " + std::to_string(ports_[i]) + "\n");
      settings += "sharding:\n  self: " + names_[i] + "\n  shards:\n";
      for (int j = 0; j < kShards; ++j) {
        settings += "    - {name: " + names_[j] + ", address: 127.0.0.1:" + std::to_string(ports_[j]) + "}\n";
      }
      testing::WriteFile(testing::TestSettingsPath(*dirs_[i]), settings);
      auto server = testing::CreateTestServer(testing::TestSettingsPath(*dirs_[i]));
      ASSERT_TRUE(server.ok()) << server.error().ToString();
      servers_.push_back(std::move(server).value());
      servers_.back()->Start();
    }
    std::vector<ShardEndpoint> endpoints;
    for (int i = 0; i < kShards; ++i) endpoints.push_back({names_[i], "127.0.0.1:" + std::to_string(ports_[i])});
    map_ = std::make_unique<ShardMap>(ShardMap::Create(endpoints, names_[0]).value());
  }
  void TearDown() override {
    for (auto& server : servers_) {
      if (server) server->Stop();
    }
  }

  int Owner(const std::string& token) const { return static_cast<int>(ShardOwnerIndex(token, names_)); }
  std::string TokenOf(const std::string& pan) const {
    return fraud::CardTokenizer::FromKey(testing::TestCardKey())->Tokenize(pan);
  }
  fraud::RawTransaction Transaction(int card, int n) const {
    fraud::RawTransaction tx = testing::ValidTransaction("c" + std::to_string(card) + "-" + std::to_string(n));
    tx.card_number = Pan(card);
    tx.timestamp_ms += n * 60000;
    return tx;
  }
  rpc::ScoreResult ScoreAt(int shard, const fraud::RawTransaction& tx) {
    testing::RpcClient client(servers_[shard]->rpc_port());
    rpc::ScoreResult result;
    client.client->score(result, ToThriftTransaction(tx));
    return result;
  }

  std::vector<std::unique_ptr<testing::TempDir>> dirs_;
  std::vector<int> ports_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<ScoringServer>> servers_;
  std::unique_ptr<ShardMap> map_;
};

TEST_F(ShardingTest, EveryReplicaAnswersForEveryCardAndEachCardsStateLivesOnItsOwnerAlone) {
  constexpr int kCards = 9, kPerCard = 3;
  std::map<int, int> cards_per_owner;
  for (int card = 0; card < kCards; ++card) {
    for (int n = 0; n < kPerCard; ++n) {
      const rpc::ScoreResult result = ScoreAt((card + n) % kShards, Transaction(card, n));  // each a different replica
      EXPECT_EQ(result.request_id, "c" + std::to_string(card) + "-" + std::to_string(n));
      EXPECT_EQ(result.card_token, TokenOf(Pan(card)));
    }
    ++cards_per_owner[Owner(TokenOf(Pan(card)))];
  }
  // A caller that sends card tokens routes itself, to the owner: nothing is forwarded.
  for (int card = 0; card < kCards; ++card) {
    fraud::RawTransaction tx = Transaction(card, kPerCard);
    tx.card_number.reset();
    tx.card_token = TokenOf(Pan(card));
    EXPECT_EQ(ScoreAt(Owner(*tx.card_token), tx).card_token, *tx.card_token);
  }
  EXPECT_GE(cards_per_owner.size(), 2u) << "the cards fell on one shard: pick others";
  // Forwards were made and counted where cards arrived at a replica that does not own them.
  uint64_t forwards = 0;
  for (int shard = 0; shard < kShards; ++shard) {
    for (const MetricsRegistry::SeriesValue& series :
         servers_[shard]->metrics().Read({"txscore_shard_forwards_total"})) {
      if (series.labels[1].second == "ok") forwards += static_cast<uint64_t>(series.value);
      EXPECT_NE(series.labels[0].second, names_[shard]);  // never to itself
    }
  }
  EXPECT_EQ(forwards, static_cast<uint64_t>(kCards * kPerCard - kCards));  // one in three arrived at its owner
  // The dashboard says which shard it is and what it forwarded.
  const nlohmann::json state =
      nlohmann::json::parse(testing::AdminGet(servers_[1]->admin_port(), "/api/dashboard").body);
  EXPECT_EQ(
      state["shard"],
      (nlohmann::json{{"self", "s1"}, {"shards", {"s0", "s1", "s2"}}, {"circuit_open", nlohmann::json::array()}}));
  double dashboard_forwards = 0;
  for (const auto& [shard, outcomes] : state["shard_forwards"].items()) {
    EXPECT_NE(shard, "s1");
    dashboard_forwards += outcomes.value("ok", 0.0);
  }
  EXPECT_GT(dashboard_forwards, 0);
  for (auto& server : servers_) server->Stop();
  uint64_t forwarded_records = 0;
  for (int shard = 0; shard < kShards; ++shard) {
    auto db = storage::Database::Open(dirs_[shard]->file("db"), {.read_only = true});
    ASSERT_TRUE(db.ok()) << db.error().ToString();
    std::map<std::string, int> audited;
    const std::vector<storage::AuditRecord> records = storage::AuditLog(db->get()).ReadLast(1000).value();
    for (const storage::AuditRecord& record : records) {
      ++audited[record.card_token];
      // Each names its caller: the test's own in-process caller, through the peer that forwarded
      // it when it arrived elsewhere (PCI DSS 10.2.2).
      EXPECT_TRUE(record.caller.rfind("unauthenticated 127.0.0.1:", 0) == 0) << record.caller;
      forwarded_records += record.caller.find(" via unauthenticated 127.0.0.1:") != std::string::npos ? 1 : 0;
    }
    for (int card = 0; card < kCards; ++card) {
      const std::string token = TokenOf(Pan(card));
      const std::optional<std::string> state = (*db)->Get(storage::ColumnFamily::kEntityState, token).value();
      if (Owner(token) == shard) {
        ASSERT_TRUE(state.has_value()) << "card " << card << " on its owner " << names_[shard];
        // Every transaction of the card, whichever replica it arrived at, counted in one history.
        EXPECT_EQ(fraud::DecodeCardState(*state).value().transaction_count, static_cast<uint64_t>(kPerCard + 1));
        EXPECT_EQ(audited[token], kPerCard + 1) << "card " << card;
      } else {
        EXPECT_FALSE(state.has_value()) << "card " << card << " has state on " << names_[shard];
        EXPECT_EQ(audited.count(token), 0u) << "card " << card << " audited on " << names_[shard];
      }
    }
  }
  EXPECT_EQ(forwarded_records, forwards);
}

TEST_F(ShardingTest, ACardWhoseShardIsDownIsUnavailableAndNothingIsWrittenForIt) {
  // A card owned by s2, sent to s0 while s2 is stopped.
  int card = 0;
  while (Owner(TokenOf(Pan(card))) != 2) ++card;
  servers_[2]->Stop();
  testing::RpcClient client(servers_[0]->rpc_port());
  rpc::ScoreResult result;
  try {
    client.client->score(result, ToThriftTransaction(Transaction(card, 0)));
    FAIL() << "scored a card whose shard is down";
  } catch (const rpc::ShardUnavailable& unavailable) {
    EXPECT_EQ(unavailable.shard, "s2");
    EXPECT_NE(unavailable.reason.find("127.0.0.1:" + std::to_string(ports_[2])), std::string::npos)
        << unavailable.reason;
  }
  // In a batch: the unavailable card's item says so, the others are scored.
  int own = 0;
  while (Owner(TokenOf(Pan(own))) != 0) ++own;
  std::vector<rpc::BatchItem> items;
  client.client->scoreBatch(items,
                            {ToThriftTransaction(Transaction(card, 1)), ToThriftTransaction(Transaction(own, 0))});
  ASSERT_EQ(items.size(), 2u);
  EXPECT_TRUE(items[0].__isset.unavailable);
  EXPECT_EQ(items[0].unavailable.shard, "s2");
  EXPECT_FALSE(items[0].__isset.result);
  EXPECT_TRUE(items[1].__isset.result);
  // Nothing of the card on the replica that could not forward it.
  EXPECT_FALSE(
      servers_[0]->database().Get(storage::ColumnFamily::kEntityState, TokenOf(Pan(card))).value().has_value());
  EXPECT_TRUE(servers_[0]->database().Get(storage::ColumnFamily::kEntityState, TokenOf(Pan(own))).value().has_value());
}

TEST_F(ShardingTest, AShardThatRestartedIsReachedAgainAtOnceThroughTheSameReplica) {
  int card = 0;
  while (Owner(TokenOf(Pan(card))) != 1) ++card;
  EXPECT_EQ(ScoreAt(0, Transaction(card, 0)).card_token, TokenOf(Pan(card)));  // s0 keeps a connection to s1
  servers_[1]->Stop();
  servers_[1].reset();
  auto restarted = testing::CreateTestServer(testing::TestSettingsPath(*dirs_[1]));
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  servers_[1] = std::move(restarted).value();
  servers_[1]->Start();
  // The connection s0 kept was closed by the stop: s0 sees it and connects again, rather than
  // sending on it and answering ShardUnavailable.
  testing::RpcClient client(servers_[0]->rpc_port());
  rpc::ScoreResult result;
  ASSERT_NO_THROW(client.client->score(result, ToThriftTransaction(Transaction(card, 1))));
  EXPECT_EQ(result.card_token, TokenOf(Pan(card)));
}

TEST_F(ShardingTest, AnOwnersAnswerThatTheListsDifferEndsAHalfOpenTrialAndTheShardIsReachedAgain) {
  // Replica x believes the set is {x, s1} (a misconfiguration): s1, by its list {s0, s1, s2},
  // answers that some of "its" cards are not its own. Card a: s1's by x's list, s2's by s1's.
  // Card b: s1's by both.
  const std::vector<std::string> xs = {"x", "s1"};
  int a = 0, b = 0;
  while (!(xs[ShardOwnerIndex(TokenOf(Pan(a)), xs)] == "s1" && Owner(TokenOf(Pan(a))) == 2)) ++a;
  while (!(xs[ShardOwnerIndex(TokenOf(Pan(b)), xs)] == "s1" && Owner(TokenOf(Pan(b))) == 1)) ++b;
  testing::TempDir x_dir;
  testing::WriteTestPipeline(x_dir);
  std::string settings = testing::ReadFile(testing::TestSettingsPath(x_dir));
  settings +=
      "sharding:\n  self: x\n  breaker_failures: 1\n  breaker_open_ms: 100\n  shards:\n"
      "    - {name: x, address: 127.0.0.1:1}\n"
      "    - {name: s1, address: 127.0.0.1:" +
      std::to_string(ports_[1]) + "}\n";
  testing::WriteFile(testing::TestSettingsPath(x_dir), settings);
  auto x = testing::CreateTestServer(testing::TestSettingsPath(x_dir));
  ASSERT_TRUE(x.ok()) << x.error().ToString();
  (*x)->Start();
  testing::RpcClient client((*x)->rpc_port());
  rpc::ScoreResult result;
  // s1 down: one failure opens x's circuit to it.
  servers_[1]->Stop();
  servers_[1].reset();
  EXPECT_THROW(client.client->score(result, ToThriftTransaction(Transaction(b, 0))), rpc::ShardUnavailable);
  auto restarted = testing::CreateTestServer(testing::TestSettingsPath(*dirs_[1]));
  ASSERT_TRUE(restarted.ok()) << restarted.error().ToString();
  servers_[1] = std::move(restarted).value();
  servers_[1]->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // past breaker_open_ms: half-open
  // The trial forward: s1 answers that the lists differ. An answer, not a failure to reach it.
  try {
    client.client->score(result, ToThriftTransaction(Transaction(a, 0)));
    FAIL() << "card a was scored by a replica that does not own it";
  } catch (const rpc::ShardUnavailable& unavailable) {
    EXPECT_NE(unavailable.reason.find("sharding.shards differ"), std::string::npos) << unavailable.reason;
  }
  // The circuit is closed again: s1's own card goes through.
  ASSERT_NO_THROW(client.client->score(result, ToThriftTransaction(Transaction(b, 1))));
  EXPECT_EQ(result.card_token, TokenOf(Pan(b)));
  (*x)->Stop();
}

TEST_F(ShardingTest, AForwardedTransactionIsNeverForwardedAgainAndForwardingFieldsNeedASharding) {
  int card = 0;
  while (Owner(TokenOf(Pan(card))) != 1) ++card;
  rpc::Transaction forwarded = ToThriftTransaction(Transaction(card, 0));
  forwarded.__set_forwarded_by("s2");
  testing::RpcClient client(servers_[0]->rpc_port());
  rpc::ScoreResult result;
  try {
    client.client->score(result, forwarded);
    FAIL() << "a forwarded transaction was scored or forwarded again by a replica that does not own its card";
  } catch (const rpc::ShardUnavailable& unavailable) {
    EXPECT_EQ(unavailable.shard, "s1");
    EXPECT_EQ(unavailable.reason,
              "shard s2 forwarded a card that, by the shard list of s0, shard s1 owns: the replicas' sharding.shards "
              "differ");
  }
  // older_card_tokens only with forwarded_by.
  rpc::Transaction older = ToThriftTransaction(Transaction(card, 1));
  older.card_number.clear();
  older.__isset.card_number = false;
  older.__set_card_token(TokenOf(Pan(card)));
  older.__set_older_card_tokens({TokenOf(Pan(card + 1))});
  try {
    client.client->score(result, older);
    FAIL() << "older_card_tokens without forwarded_by was accepted";
  } catch (const rpc::InvalidRequest& invalid) {
    EXPECT_EQ(invalid.field, "older_card_tokens");
  }
  // A server that is not sharded refuses both.
  testing::TempDir single;
  testing::WriteTestPipeline(single);
  auto server = testing::CreateTestServer(testing::TestSettingsPath(single));
  ASSERT_TRUE(server.ok());
  (*server)->Start();
  testing::RpcClient plain((*server)->rpc_port());
  try {
    plain.client->score(result, forwarded);
    FAIL() << "an unsharded server took a forwarded transaction";
  } catch (const rpc::InvalidRequest& invalid) {
    EXPECT_EQ(invalid.field, "forwarded_by");
    EXPECT_EQ(invalid.reason, "this server is not sharded: only a sharded replica forwards transactions");
  }
  (*server)->Stop();
}

}  // namespace
}  // namespace txscore::service
