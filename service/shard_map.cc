#include "service/shard_map.h"

#include <set>

#include "common/sha256.h"

namespace txscore::service {

uint64_t ShardWeight(std::string_view shard_name, std::string_view routing_token) {
  const std::string digest = Sha256Bytes({shard_name, "\n", routing_token});
  uint64_t weight = 0;
  for (int i = 0; i < 8; ++i) weight = (weight << 8) | static_cast<unsigned char>(digest[static_cast<size_t>(i)]);
  return weight;
}

size_t ShardOwnerIndex(std::string_view routing_token, const std::vector<std::string>& shard_names) {
  size_t best = 0;
  uint64_t best_weight = ShardWeight(shard_names[0], routing_token);
  for (size_t i = 1; i < shard_names.size(); ++i) {
    const uint64_t weight = ShardWeight(shard_names[i], routing_token);
    if (weight > best_weight || (weight == best_weight && shard_names[i] < shard_names[best])) {
      best = i;
      best_weight = weight;
    }
  }
  return best;
}

Status ValidateShardNames(const std::vector<std::string>& shard_names) {
  if (shard_names.empty()) return InvalidArgument("a shard set needs at least one shard");
  std::set<std::string> seen;
  for (const std::string& name : shard_names) {
    if (name.empty() || name.size() > 63) {
      return InvalidArgument("a shard name has 1 to 63 characters: \"" + name + "\"");
    }
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-';
      if (!ok) return InvalidArgument("a shard name is of A-Z a-z 0-9 . _ -: \"" + name + "\"");
    }
    if (!seen.insert(name).second) return InvalidArgument("shard \"" + name + "\" is named twice");
  }
  return Status::Ok();
}

Result<ShardMap> ShardMap::Create(const std::vector<ShardEndpoint>& shards, const std::string& self) {
  ShardMap map;
  for (const ShardEndpoint& shard : shards) map.names_.push_back(shard.name);
  TXSCORE_RETURN_IF_ERROR(ValidateShardNames(map.names_));
  for (const ShardEndpoint& shard : shards) {
    Result<HostPort> address = ParseHostPort(shard.address);
    if (!address.ok()) {
      return InvalidArgument("shard " + shard.name + ": " + address.error().message);
    }
  }
  map.shards_ = shards;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].name == self) {
      map.self_ = i;
      return map;
    }
  }
  std::string names;
  for (const std::string& name : map.names_) names += (names.empty() ? "" : ", ") + name;
  return InvalidArgument("this process's shard name \"" + self + "\" is not in the shard list (" + names +
                         "): set sharding.self or pass txscore serve --shard-name");
}

const ShardEndpoint& ShardMap::OwnerOf(std::string_view routing_token) const {
  return shards_[ShardOwnerIndex(routing_token, names_)];
}

}  // namespace txscore::service
