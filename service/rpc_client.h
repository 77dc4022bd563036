// The client side of txscore's Thrift port: one framed binary connection to HOST:PORT, as every
// client opens it (`txscore score`, `txscore job`, bench/rpc_loadgen, the RPC tests). The
// address comes from ParseHostPort (common/host_port.h); the wire format is the server's
// (service/rpc_server.h: framed transport, binary protocol), over TLS with a client certificate
// through Thrift's own TSSLSocket, or plaintext when no files are given.
#pragma once

#include <memory>

#include "common/host_port.h"
#include "common/result.h"
#include "gen-cpp/TxScore.h"
#include "service/tls.h"

namespace apache::thrift::transport {
class TFramedTransport;
class TSocket;
}  // namespace apache::thrift::transport

namespace txscore::service {

struct RpcClientOptions {
  int connect_timeout_ms = 3000;  // Default: 3 s to connect
  int recv_timeout_ms = 10000;    // Default: 10 s for each reply (a claims job submission may want more)
  // Default: none, and plaintext. TLS 1.2 or later, presenting tls.certificate; the server's
  // certificate must chain to tls.ca and name the host connected to (SAN DNS or IP).
  TlsClientFiles tls;
};

class RpcConnection {
 public:
  // Connects. kUnavailable with Thrift's reason when nothing answers at `address`;
  // kInvalidArgument when a TLS file cannot be loaded. The TLS handshake runs with the first
  // call, so a server that refuses the client's certificate makes that call throw
  // TTransportException (with TLS 1.3 the server decides after the client's side is done).
  static Result<std::unique_ptr<RpcConnection>> Open(const HostPort& address, const RpcClientOptions& options = {});
  ~RpcConnection();  // closes the connection

  // The generated client: its calls throw Thrift's exceptions (InvalidRequest, ServiceError,
  // TTransportException), as the service's contract says (docs/rpc.md).
  rpc::TxScoreClient& client() { return *client_; }
  void Close();
  // Between calls: false once the server has closed the connection (or reset it), so that a
  // pooled connection is not used for a request that could not be sent.
  bool LooksAlive() const;
  // The time each later reply may take (RpcClientOptions::recv_timeout_ms until then).
  void SetRecvTimeout(int ms);

 private:
  RpcConnection() = default;
  std::shared_ptr<void> tls_factory_;  // keeps Thrift's SSL context alive as long as the socket
  std::shared_ptr<apache::thrift::transport::TSocket> socket_;
  std::shared_ptr<apache::thrift::transport::TFramedTransport> transport_;
  std::unique_ptr<rpc::TxScoreClient> client_;
};

}  // namespace txscore::service
