#include "service/shard_router.h"

#include <thrift/transport/TTransportException.h>

#include <algorithm>

#include "common/clock.h"
#include "common/logging.h"

namespace txscore::service {
namespace {

// A connection idle longer than this is closed rather than reused: the owner may have closed
// it meanwhile (server.idle_timeout_ms), and a request sent on a dead connection could not be
// sent again safely.
constexpr auto kMaxIdle = std::chrono::seconds(30);
constexpr size_t kMaxIdlePerPeer = 64;

rpc::ShardUnavailable Unavailable(const std::string& shard, const std::string& reason) {
  rpc::ShardUnavailable unavailable;
  unavailable.shard = shard;
  unavailable.reason = reason;
  return unavailable;
}

}  // namespace

ShardRouter::Peer::Peer(const ShardingConfig& config, const std::string& name)
    : breaker(config.breaker_failures, std::chrono::milliseconds(config.breaker_open_ms), SteadyDeadlineClock(),
              "shard " + name, "shard") {}

Result<std::unique_ptr<ShardRouter>> ShardRouter::Create(const ShardingConfig& config, MetricsRegistry* metrics) {
  TXSCORE_ASSIGN_OR_RETURN(ShardMap map, ShardMap::Create(config.shards, config.self));
  std::unique_ptr<ShardRouter> router(new ShardRouter(std::move(map), config));
  if (!config.client_tls_dir.empty()) router->tls_ = TlsClientFilesIn(config.client_tls_dir);
  ShardRouter* const self = router.get();
  for (const ShardEndpoint& shard : router->map_.shards()) {
    auto peer = std::make_unique<Peer>(config, shard.name);
    if (metrics != nullptr && shard.name != router->map_.self().name) {
      constexpr const char* kHelp = "Transactions forwarded to the shard owning their card, by shard and outcome.";
      peer->forwarded_ok =
          metrics->AddCounter("txscore_shard_forwards_total", kHelp, {{"shard", shard.name}, {"outcome", "ok"}});
      peer->forwarded_unavailable = metrics->AddCounter("txscore_shard_forwards_total", kHelp,
                                                        {{"shard", shard.name}, {"outcome", "unavailable"}});
      const std::string name = shard.name;
      metrics->AddGaugeFunction("txscore_shard_circuit_open",
                                "1 while forwards to the shard are refused at once (its circuit is open).",
                                {{"shard", name}}, [self, name] { return self->CircuitOpen(name) ? 1.0 : 0.0; });
    }
    router->peers_[shard.name] = std::move(peer);
  }
  return router;
}

bool ShardRouter::CircuitOpen(const std::string& shard) const {
  return peers_.at(shard)->breaker.state() == pipelines::CircuitBreaker::State::kOpen;
}

bool ShardRouter::IsPeer(const Caller& caller) const {
  if (caller.identity.empty()) return caller.address == "in-process" || config_.peer_identities.empty();
  return std::find(config_.peer_identities.begin(), config_.peer_identities.end(), caller.identity) !=
         config_.peer_identities.end();
}

std::unique_ptr<RpcConnection> ShardRouter::Take(const ShardEndpoint& owner, Peer& peer) {
  {
    std::lock_guard<std::mutex> lock(peer.mutex);
    while (!peer.idle.empty()) {
      Idle idle = std::move(peer.idle.back());
      peer.idle.pop_back();
      // Neither old nor closed by the owner meanwhile (it restarted, or timed the connection out).
      if (std::chrono::steady_clock::now() - idle.since < kMaxIdle && idle.connection->LooksAlive()) {
        return std::move(idle.connection);
      }
    }
  }
  Result<HostPort> address = ParseHostPort(owner.address);
  if (!address.ok()) throw Unavailable(owner.name, address.error().message);
  RpcClientOptions options;
  options.connect_timeout_ms = config_.connect_timeout_ms;
  options.recv_timeout_ms = config_.connect_timeout_ms;  // the handshake and the health call
  options.tls = tls_;
  Result<std::unique_ptr<RpcConnection>> connection = RpcConnection::Open(*address, options);
  if (!connection.ok()) {
    throw Unavailable(owner.name, "cannot connect to " + owner.address + ": " + connection.error().message);
  }
  // A health call does the TLS handshake and proves the owner answers, within the connect
  // timeout, before a transaction is sent that could then not be sent again.
  try {
    rpc::HealthStatus health;
    (*connection)->client().health(health);
  } catch (const apache::thrift::TException& e) {
    throw Unavailable(owner.name, "shard " + owner.name + " (" + owner.address + ") did not answer within " +
                                      std::to_string(config_.connect_timeout_ms) + " ms: " + e.what());
  }
  (*connection)->SetRecvTimeout(config_.forward_timeout_ms);
  return std::move(connection).value();
}

rpc::ScoreResult ShardRouter::Forward(const ShardEndpoint& owner, const rpc::Transaction& forwarded) {
  Peer& peer = *peers_.at(owner.name);
  const auto refuse = [&](const std::string& reason) {
    if (peer.forwarded_unavailable != nullptr) peer.forwarded_unavailable->Increment();
    return Unavailable(owner.name, reason);
  };
  {
    std::lock_guard<std::mutex> lock(peer.mutex);
    if (peer.in_flight >= config_.max_forwards_in_flight) {
      throw refuse("shard " + owner.name + " already has " + std::to_string(peer.in_flight) +
                   " forwards waiting on it (sharding.max_forwards_in_flight)");
    }
    ++peer.in_flight;
  }
  struct Leave {
    Peer& peer;
    ~Leave() {
      std::lock_guard<std::mutex> lock(peer.mutex);
      --peer.in_flight;
    }
  } leave{peer};
  if (!peer.breaker.Allow()) {
    throw refuse("shard " + owner.name + " failed " + std::to_string(config_.breaker_failures) +
                 " forwards in a row: its circuit is open (sharding.breaker_open_ms)");
  }
  std::unique_ptr<RpcConnection> connection;
  rpc::ScoreResult result;
  try {
    connection = Take(owner, peer);
    connection->client().score(result, forwarded);
  } catch (const rpc::ShardUnavailable& unavailable) {
    if (peer.forwarded_unavailable != nullptr) peer.forwarded_unavailable->Increment();
    if (unavailable.reason.find(kShardListsDiffer) != std::string::npos) {
      // The owner answered (its shard list differs from this replica's): not a failure to reach it.
      peer.breaker.Succeeded();
      Keep(peer, std::move(connection));
    } else {
      peer.breaker.Failed();  // this replica could not reach the owner (Take)
    }
    throw;
  } catch (const rpc::InvalidRequest& invalid) {
    peer.breaker.Succeeded();
    Keep(peer, std::move(connection));
    if (invalid.field == "forwarded_by" || invalid.field == "older_card_tokens") {
      // The owner does not take this replica as a peer: a configuration error of the set, not
      // the caller's; its card cannot be scored.
      throw refuse("shard " + owner.name + " refused this replica's forward: " + invalid.reason);
    }
    throw;  // the transaction's own fault
  } catch (const rpc::ServiceError&) {
    peer.breaker.Succeeded();
    Keep(peer, std::move(connection));
    throw;
  } catch (const apache::thrift::TException& e) {
    // The connection is broken (refused, reset, timed out): it is not reused, and the request
    // is not sent again, since the owner may have applied it.
    peer.breaker.Failed();
    Log("shard").warn("shard {} ({}) did not answer a forwarded transaction: {}", owner.name, owner.address, e.what());
    throw refuse("shard " + owner.name + " (" + owner.address + ") did not answer within " +
                 std::to_string(config_.forward_timeout_ms) + " ms: " + e.what());
  } catch (...) {
    peer.breaker.Failed();  // whatever it was, the half-open trial (if this was it) has ended
    throw;
  }
  peer.breaker.Succeeded();
  if (peer.forwarded_ok != nullptr) peer.forwarded_ok->Increment();
  Keep(peer, std::move(connection));
  return result;
}

void ShardRouter::Keep(Peer& peer, std::unique_ptr<RpcConnection> connection) {
  if (connection == nullptr) return;
  std::lock_guard<std::mutex> lock(peer.mutex);
  if (peer.idle.size() < kMaxIdlePerPeer)
    peer.idle.push_back({std::move(connection), std::chrono::steady_clock::now()});
}

}  // namespace txscore::service
