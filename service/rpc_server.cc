#include "service/rpc_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <thrift/TConfiguration.h>
#include <thrift/TOutput.h>
#include <thrift/concurrency/ThreadFactory.h>
#include <thrift/concurrency/ThreadManager.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadPoolServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include "gen-cpp/TxScore.h"

namespace txscore::service {
namespace {

using apache::thrift::TConfiguration;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TTransport;
using apache::thrift::transport::TTransportFactory;

// Wraps each accepted socket in a framed transport that enforces our message and frame
// limits (Thrift's own factory would use its 100 MB defaults).
class LimitedFramedTransportFactory : public TTransportFactory {
 public:
  explicit LimitedFramedTransportFactory(std::shared_ptr<TConfiguration> config) : config_(std::move(config)) {}
  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> transport) override {
    return std::make_shared<TFramedTransport>(std::move(transport), config_);
  }

 private:
  std::shared_ptr<TConfiguration> config_;
};

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return 0;
}

// TServerSocket::listen() runs inside serve(); listening early and handing the same socket
// to the server lets Create() report the bound port before Serve() starts.
class PreboundServerSocket : public TServerSocket {
 public:
  using TServerSocket::TServerSocket;
  void listen() override {
    if (!listening_early_) TServerSocket::listen();
  }
  void ListenNow() {
    TServerSocket::listen();
    listening_early_ = true;
  }

 private:
  bool listening_early_ = false;
};

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Create(const pipelines::RpcServerConfig& config,
                                                     std::shared_ptr<rpc::TxScoreIf> handler) {
  // Thrift reports dropped clients and socket trouble through GlobalOutput (stderr by
  // default); send it to our log instead, one format for everything.
  apache::thrift::GlobalOutput.setOutputFunction([](const char* message) { spdlog::warn("thrift: {}", message); });
  const pipelines::ThriftLimits& limits = config.limits;
  auto thrift_config = std::make_shared<TConfiguration>(static_cast<int>(limits.max_message_bytes),
                                                        static_cast<int>(limits.max_frame_bytes),
                                                        limits.max_recursion_depth);
  auto socket = std::make_shared<PreboundServerSocket>(config.host, config.port);
  socket->setRecvTimeout(config.socket_timeout_ms);
  socket->setSendTimeout(config.socket_timeout_ms);
  socket->setAcceptBacklog(1024);
  try {
    socket->ListenNow();
  } catch (const apache::thrift::TException& e) {
    return Error{ErrorCode::kUnavailable,
                 "cannot listen on " + config.host + ":" + std::to_string(config.port) + ": " + e.what(), {}};
  }

  auto threads = apache::thrift::concurrency::ThreadManager::newSimpleThreadManager(config.workers);
  threads->threadFactory(std::make_shared<apache::thrift::concurrency::ThreadFactory>());
  threads->start();

  auto protocol = std::make_shared<apache::thrift::protocol::TBinaryProtocolFactory>(
      static_cast<int32_t>(limits.max_string_bytes), static_cast<int32_t>(limits.max_container_items),
      /*strict_read=*/true, /*strict_write=*/true);
  auto processor = std::make_shared<rpc::TxScoreProcessor>(std::move(handler));

  std::unique_ptr<RpcServer> server(new RpcServer());
  server->port_ = BoundPort(socket->getSocketFD());
  server->server_ = std::make_shared<apache::thrift::server::TThreadPoolServer>(
      processor, socket, std::make_shared<LimitedFramedTransportFactory>(thrift_config), protocol, threads);
  return server;
}

RpcServer::~RpcServer() = default;

void RpcServer::Serve() {
  try {
    server_->serve();
  } catch (const apache::thrift::TException& e) {
    spdlog::error("Thrift server stopped: {}", e.what());
  }
}

void RpcServer::Stop() { server_->stop(); }

}  // namespace txscore::service
