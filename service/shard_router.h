// A sharded server's side of card routing (docs/scaling-out.md): which shard owns a card
// (service/shard_map.h), and forwarding a tokenized transaction to the owner over the owner's
// Thrift port (mutual TLS with sharding.client_tls_dir, or plaintext when the set is), on
// connections kept open between requests. Per shard, a circuit breaker and a bound on forwards
// in flight keep a hung shard from holding this replica's workers. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "gen-cpp/TxScore.h"
#include "pipelines/remote_llm.h"
#include "service/metrics.h"
#include "service/rpc_client.h"
#include "service/shard_map.h"
#include "service/tls.h"

namespace txscore::service {

// How an owner's ShardUnavailable reason ends when the replicas' shard lists differ (it answered:
// not a failure to reach it).
inline constexpr char kShardListsDiffer[] = "the replicas' sharding.shards differ";

class ShardRouter {
 public:
  // This process's shard is config.self. Errors as ShardMap::Create.
  static Result<std::unique_ptr<ShardRouter>> Create(const ShardingConfig& config, MetricsRegistry* metrics);

  const ShardMap& map() const { return map_; }
  // Whether forwards to `shard` are being refused at once (its circuit is open).
  bool CircuitOpen(const std::string& shard) const;
  // Whether `caller` may forward transactions here: an identity on sharding.peer_identities;
  // on a plaintext port (no identity) anyone, as plaintext trusts its network.
  bool IsPeer(const Caller& caller) const;
  // Sends `forwarded` (tokenized, forwarded_by set) to `owner` and returns its answer. The
  // owner's own exceptions (InvalidRequest, ServiceError, ShardUnavailable) pass through; when
  // the owner cannot be reached or does not answer in time, throws rpc::ShardUnavailable. A
  // request that may have reached the owner is never sent twice.
  rpc::ScoreResult Forward(const ShardEndpoint& owner, const rpc::Transaction& forwarded);

 private:
  struct Idle {
    std::unique_ptr<RpcConnection> connection;
    std::chrono::steady_clock::time_point since;
  };
  struct Peer {
    Peer(const ShardingConfig& config, const std::string& name);
    std::mutex mutex;
    std::vector<Idle> idle;  // connections to reuse, the most recent last
    int in_flight = 0;       // under mutex
    pipelines::CircuitBreaker breaker;
    Counter* forwarded_ok = nullptr;
    Counter* forwarded_unavailable = nullptr;
  };
  ShardRouter(ShardMap map, ShardingConfig config) : map_(std::move(map)), config_(std::move(config)) {}
  // A connection to `owner`: an idle one, or a new one (connected, TLS handshake done and a
  // health call answered, each within connect_timeout_ms).
  std::unique_ptr<RpcConnection> Take(const ShardEndpoint& owner, Peer& peer);
  // Puts a connection that answered back among the idle ones (at most kMaxIdlePerPeer).
  void Keep(Peer& peer, std::unique_ptr<RpcConnection> connection);

  ShardMap map_;
  ShardingConfig config_;
  TlsClientFiles tls_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;  // by shard name; fixed after Create
};

}  // namespace txscore::service
