#include "service/shard_map.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace txscore::service {
namespace {

std::vector<std::string> Tokens(int n) {
  std::vector<std::string> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back("card-token-" + std::to_string(i));
  return tokens;
}

TEST(ShardWeight, IsTheFirstEightBytesOfSha256OfNameNewlineTokenBigEndian) {
  // Computed with Python: int.from_bytes(hashlib.sha256(b"txscore-0\nk1_abab...").digest()[:8], "big").
  std::string abab;
  for (int i = 0; i < 32; ++i) abab += "ab";
  EXPECT_EQ(ShardWeight("txscore-0", "k1_" + abab), 10664247823334518424ull);
  EXPECT_EQ(ShardWeight("txscore-1", "k1_" + abab), 15390518547699384994ull);
  EXPECT_EQ(ShardWeight("txscore-2", "k1_" + abab), 17694399592155933839ull);
  EXPECT_EQ(ShardOwnerIndex("k1_" + abab, {"txscore-0", "txscore-1", "txscore-2"}), 2u);
}

TEST(ShardOwnerIndex, SpreadsCardsEvenlyAndDoesNotDependOnTheListsOrder) {
  const std::vector<std::string> names = {"a", "b", "c"}, reversed = {"c", "b", "a"};
  std::map<std::string, int> per_shard;
  for (const std::string& token : Tokens(3000)) {
    const std::string& owner = names[ShardOwnerIndex(token, names)];
    EXPECT_EQ(reversed[ShardOwnerIndex(token, reversed)], owner) << token;
    ++per_shard[owner];
  }
  for (const auto& [shard, cards] : per_shard) {
    EXPECT_GT(cards, 850) << shard;  // a third is 1000
    EXPECT_LT(cards, 1150) << shard;
  }
}

TEST(ShardOwnerIndex, AddingAShardMovesOnlyTheCardsItWinsAndRemovingOneMovesOnlyItsOwn) {
  const std::vector<std::string> two = {"txscore-0", "txscore-1"}, three = {"txscore-0", "txscore-1", "txscore-2"};
  int moved = 0;
  for (const std::string& token : Tokens(3000)) {
    const std::string& before = two[ShardOwnerIndex(token, two)];
    const std::string& after = three[ShardOwnerIndex(token, three)];
    if (before != after) {
      EXPECT_EQ(after, "txscore-2") << token;  // a moved card moves to the new shard, never between old ones
      ++moved;
    }
  }
  EXPECT_GT(moved, 850);  // about a third
  EXPECT_LT(moved, 1150);
  // Removing txscore-1 from the three: only its cards move.
  const std::vector<std::string> without = {"txscore-0", "txscore-2"};
  for (const std::string& token : Tokens(3000)) {
    const std::string& before = three[ShardOwnerIndex(token, three)];
    if (before != "txscore-1") EXPECT_EQ(without[ShardOwnerIndex(token, without)], before) << token;
  }
}

TEST(ShardMap, RefusesBadListsAndNamesItsSelf) {
  const ShardEndpoint a{"a", "127.0.0.1:9090"}, b{"b", "10.0.0.2:9090"};
  Result<ShardMap> map = ShardMap::Create({a, b}, "b");
  ASSERT_TRUE(map.ok()) << map.error().ToString();
  EXPECT_EQ(map->self().name, "b");
  int owned = 0;
  for (const std::string& token : Tokens(100)) owned += map->Owns(token);
  EXPECT_GT(owned, 20);
  EXPECT_LT(owned, 80);
  EXPECT_EQ(ShardMap::Create({a, a}, "a").error().message, "shard \"a\" is named twice");
  EXPECT_EQ(ShardMap::Create({a, {"b c", "h:1"}}, "a").error().message,
            "a shard name is of A-Z a-z 0-9 . _ -: \"b c\"");
  EXPECT_EQ(ShardMap::Create({}, "a").error().message, "a shard set needs at least one shard");
  EXPECT_EQ(ShardMap::Create({a, {std::string(64, 'x'), "h:1"}}, "a").error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(ShardMap::Create({a, {"b", "no-port"}}, "a").error().message.find("shard b: "), std::string::npos);
  EXPECT_EQ(ShardMap::Create({a, b}, "c").error().message,
            "this process's shard name \"c\" is not in the shard list (a, b): set sharding.self or pass txscore "
            "serve --shard-name");
}

}  // namespace
}  // namespace txscore::service
