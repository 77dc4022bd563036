// Card-keyed sharding of the scoring path (docs/scaling-out.md): which replica owns a card.
//
// A set of N shards partitions the per-card state by card token. The owner of a card is a
// documented function of its card token and the shard names, rendezvous (highest random
// weight) hashing:
//
//   weight(shard, token) = the first 8 bytes of SHA-256(shard_name "\n" token), big-endian
//   owner(token)         = the shard with the highest weight (ties: the smaller name)
//
// so that adding a shard moves only the cards the new shard now wins (about 1/(N+1) of them),
// all to it, and removing one moves only its own. Shards are named (a StatefulSet pod's name),
// not addressed: an address may change without moving a card. Any client that knows the
// names can route a card token itself (the C++ ShardMap, clients/python/txscore_shards.py).
//
// A card routes by the token its state is stored under: the keyset's primary key's token of its
// number (what ScoreResult.card_token returns), or the caller's own token. A key rotation
// therefore moves a card to the owner of its new token (docs/scaling-out.md, "Key rotation").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"
#include "common/result.h"

namespace txscore::service {

struct ShardEndpoint {
  std::string name;     // what the hash reads, e.g. "txscore-0" ([A-Za-z0-9._-], at most 63)
  std::string address;  // where its Thrift port answers, HOST:PORT
  bool operator==(const ShardEndpoint&) const = default;
};

// `sharding:` in the service settings (docs/settings.md). Empty `shards`: not sharded.
struct ShardingConfig {
  std::vector<ShardEndpoint> shards;  // every shard of the set, this one included
  // Required with shards: this process's name among them. `txscore serve --shard-name`
  // overrides it (a StatefulSet passes its pod's name).
  std::string self;
  // Default: none. The client certificate directory (ca.crt, tls.crt, tls.key) this replica
  // presents when it forwards to another; required when the Thrift port serves TLS.
  std::string client_tls_dir;
  // Default: none (plaintext: anyone). TLS identities whose forwarded transactions are
  // honoured (older_card_tokens); any other caller that sets forwarded_by is refused.
  std::vector<std::string> peer_identities;
  // Default: 500 ms to connect to the owner: TCP, the TLS handshake and a health call on a new
  // connection, each within it.
  int connect_timeout_ms = 500;
  int forward_timeout_ms = 2000;  // Default: 2 s for the owner's reply to a forwarded transaction
  // Default: 3 forwards in a row to one shard that fail (unreachable, no answer in time) open
  // its circuit: for breaker_open_ms (Default: 5000) its cards are answered ShardUnavailable at
  // once, then one trial forward goes, whose success closes it.
  int breaker_failures = 3;
  int breaker_open_ms = 5000;
  // Default: 4 forwards to one shard at once; more are answered ShardUnavailable at once, so
  // that a hung shard holds at most this many of this replica's workers.
  int max_forwards_in_flight = 4;
  bool operator==(const ShardingConfig&) const = default;
};

uint64_t ShardWeight(std::string_view shard_name, std::string_view routing_token);
// The index in `shard_names` of the owner of `routing_token`. `shard_names` is not empty.
size_t ShardOwnerIndex(std::string_view routing_token, const std::vector<std::string>& shard_names);

// Shard names must be unique and of [A-Za-z0-9._-], 1 to 63 characters.
Status ValidateShardNames(const std::vector<std::string>& shard_names);

class ShardMap {
 public:
  // kInvalidArgument: no shards, a bad or repeated name, an address that is not HOST:PORT, or
  // `self` not among the names.
  static Result<ShardMap> Create(const std::vector<ShardEndpoint>& shards, const std::string& self);

  const ShardEndpoint& OwnerOf(std::string_view card_token) const;
  bool Owns(std::string_view card_token) const { return &OwnerOf(card_token) == &shards_[self_]; }
  const ShardEndpoint& self() const { return shards_[self_]; }
  const std::vector<ShardEndpoint>& shards() const { return shards_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<ShardEndpoint> shards_;
  std::vector<std::string> names_;
  size_t self_ = 0;
};

}  // namespace txscore::service
