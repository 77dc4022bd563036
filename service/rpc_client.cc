#include "service/rpc_client.h"

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

namespace txscore::service {

Result<std::unique_ptr<RpcConnection>> RpcConnection::Open(const HostPort& address, const RpcClientOptions& options) {
  auto socket = std::make_shared<apache::thrift::transport::TSocket>(address.host, address.port);
  socket->setConnTimeout(options.connect_timeout_ms);
  socket->setRecvTimeout(options.recv_timeout_ms);
  std::unique_ptr<RpcConnection> connection(new RpcConnection());
  connection->transport_ = std::make_shared<apache::thrift::transport::TFramedTransport>(socket);
  connection->client_ = std::make_unique<rpc::TxScoreClient>(
      std::make_shared<apache::thrift::protocol::TBinaryProtocol>(connection->transport_));
  try {
    connection->transport_->open();
  } catch (const apache::thrift::TException& e) {
    return Error{ErrorCode::kUnavailable, e.what(), {}};
  }
  return connection;
}

RpcConnection::~RpcConnection() { Close(); }

void RpcConnection::Close() {
  try {
    if (transport_ && transport_->isOpen()) transport_->close();
  } catch (const apache::thrift::TException&) {
    // Closing a connection the server already dropped: nothing left to release.
  }
}

}  // namespace txscore::service
