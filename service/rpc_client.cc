#include "service/rpc_client.h"

#include <openssl/ssl.h>
#include <poll.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TSocket.h>

#include <csignal>
#include <mutex>

namespace txscore::service {

namespace {

using apache::thrift::transport::TSSLSocketFactory;

// Thrift 0.17's SSLProtocol::LATEST means TLS 1.2 and nothing else; this factory allows TLS 1.2
// and later, so TLS 1.3 is used whenever the server has it (and a server asking for 1.3 only
// is reached).
class TlsFactoryAllowing13 : public TSSLSocketFactory {
 public:
  TlsFactoryAllowing13() : TSSLSocketFactory(apache::thrift::transport::SSLTLS) {
    SSL_CTX_set_min_proto_version(ctx_->get(), TLS1_2_VERSION);
  }
};

// A Thrift SSL socket factory presenting the client's certificate and checking the server's.
Result<std::shared_ptr<TSSLSocketFactory>> TlsFactory(const TlsClientFiles& files) {
  // OpenSSL 1.1+ initialises itself; Thrift's own initialisation and clean-up (at the last
  // factory's end) would reach into a process that also serves TLS.
  static std::once_flag manual;
  std::call_once(manual, [] {
    TSSLSocketFactory::setManualOpenSSLInitialization(true);
    // OpenSSL writes with write(2): a server that closes the connection (a frame over its limit,
    // a refused certificate) would raise SIGPIPE and end the process instead of failing the call.
    ::signal(SIGPIPE, SIG_IGN);
  });
  for (const auto& [file, what] : {std::pair{&files.ca, "CA"}, std::pair{&files.certificate, "certificate"},
                                   std::pair{&files.private_key, "private key"}}) {
    if (file->empty()) return InvalidArgument(std::string("TLS needs the client's ") + what + " file");
  }
  TXSCORE_RETURN_IF_ERROR(CheckPrivateFile(files.private_key, "the client's TLS private key"));
  try {
    std::shared_ptr<TSSLSocketFactory> factory = std::make_shared<TlsFactoryAllowing13>();
    factory->authenticate(true);
    factory->loadTrustedCertificates(files.ca.c_str());
    factory->loadCertificate(files.certificate.c_str());
    factory->loadPrivateKey(files.private_key.c_str());
    // Checks that the server's certificate names the host (SAN DNS or IP) connected to.
    factory->access(std::make_shared<apache::thrift::transport::DefaultClientAccessManager>());
    return factory;
  } catch (const apache::thrift::TException& e) {
    return InvalidArgument(std::string("cannot load the client's TLS files (") + files.certificate + ", " +
                           files.private_key + ", " + files.ca + "): " + e.what());
  }
}

}  // namespace

Result<std::unique_ptr<RpcConnection>> RpcConnection::Open(const HostPort& address, const RpcClientOptions& options) {
  std::unique_ptr<RpcConnection> connection(new RpcConnection());
  std::shared_ptr<apache::thrift::transport::TSocket> socket;
  if (options.tls.empty()) {
    socket = std::make_shared<apache::thrift::transport::TSocket>(address.host, address.port);
  } else {
    TXSCORE_ASSIGN_OR_RETURN(std::shared_ptr<TSSLSocketFactory> factory, TlsFactory(options.tls));
    socket = factory->createSocket(address.host, address.port);
    connection->tls_factory_ = factory;
  }
  socket->setConnTimeout(options.connect_timeout_ms);
  socket->setRecvTimeout(options.recv_timeout_ms);
  connection->socket_ = socket;
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

void RpcConnection::SetRecvTimeout(int ms) {
  if (socket_) socket_->setRecvTimeout(ms);
}

bool RpcConnection::LooksAlive() const {
  if (!socket_ || !socket_->isOpen()) return false;
  pollfd idle{static_cast<int>(socket_->getSocketFD()), POLLIN, 0};
  // Between calls a server sends nothing: anything to read now is its close (or a reset).
  return ::poll(&idle, 1, 0) == 0;
}

}  // namespace txscore::service
