// The Thrift server: binary protocol, framed transport, a fixed pool of worker threads.
//
// Each worker serves one connection at a time (TThreadPoolServer); connections beyond the
// pool wait in the accept queue. Client sockets time out after socket_timeout_ms of silence,
// so idle connections give their worker back. Limits on message, frame, string and container
// sizes and on nesting depth come from config; a client that exceeds them is disconnected.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "pipelines/config.h"

namespace apache::thrift::server {
class TServer;
}

namespace txscore::rpc {
class TxScoreIf;
}

namespace txscore::service {

class RpcServer {
 public:
  // Binds and listens before returning, so port() is known and connections queue at once.
  static Result<std::unique_ptr<RpcServer>> Create(const pipelines::RpcServerConfig& config,
                                                   std::shared_ptr<rpc::TxScoreIf> handler);
  ~RpcServer();

  // The bound port (useful when the config asked for port 0).
  int port() const { return port_; }
  // Serves until Stop(); returns after in-flight requests have finished.
  void Serve();
  // Stops accepting, lets in-flight requests finish and closes idle connections. Safe to
  // call from another thread, once.
  void Stop();

 private:
  RpcServer() = default;
  std::shared_ptr<apache::thrift::server::TServer> server_;
  int port_ = 0;
};

}  // namespace txscore::service
