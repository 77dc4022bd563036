// Helpers for tests that talk to a Thrift server over loopback: a framed binary client and
// raw sockets for bytes no Thrift client would send. Header-only: only RPC tests include it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "gen-cpp/TxScore.h"
#include "service/rpc_client.h"
#include "tests/memory_support.h"

namespace txscore::testing {

// A TxScore client on a fresh connection to 127.0.0.1:port, as txscore's own clients open it
// (service/rpc_client.h; 10 s receive timeout). Throws TTransportException, as Thrift's own
// client would, when nothing listens (tests of a stopped server expect that).
struct RpcClient {
  explicit RpcClient(int port) {
    Result<std::unique_ptr<service::RpcConnection>> opened = service::RpcConnection::Open({"127.0.0.1", port});
    if (!opened.ok()) {
      throw apache::thrift::transport::TTransportException(apache::thrift::transport::TTransportException::NOT_OPEN,
                                                           opened.error().message);
    }
    connection = std::move(opened).value();
    client = &connection->client();
  }
  std::unique_ptr<service::RpcConnection> connection;
  rpc::TxScoreClient* client = nullptr;
};

// An IPv4 address of this machine other than loopback, or "" when it has none: for tests of
// what only local callers may do.
inline std::string NonLoopbackAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* a = list; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  freeifaddrs(list);
  return found;
}

// A plain TCP connection to 127.0.0.1:port with a 10 s receive timeout.
inline int RawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

// A 4-byte big-endian frame header followed by the payload.
inline std::string Framed(const std::string& payload) {
  std::string frame;
  for (int shift = 24; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((payload.size() >> shift) & 0xff));
  return frame + payload;
}

// A framed call of `method` whose arguments hold an unknown field nested `depth` structs deep
// (unknown fields are skipped, so only the nesting limit decides whether it is answered),
// then whatever `write_arguments` writes (the method's real arguments; none by default).
inline std::string CallWithNestedUnknownField(
    const std::string& method, int depth,
    const std::function<void(apache::thrift::protocol::TProtocol&)>& write_arguments = nullptr) {
  using apache::thrift::protocol::T_STRUCT;
  auto buffer = std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  apache::thrift::protocol::TBinaryProtocol out(buffer);
  out.writeMessageBegin(method, apache::thrift::protocol::T_CALL, 1);
  out.writeStructBegin("args");
  for (int i = 0; i < depth; ++i) {
    out.writeFieldBegin("x", T_STRUCT, 99);
    out.writeStructBegin("x");
  }
  for (int i = 0; i < depth; ++i) {
    out.writeFieldStop();
    out.writeStructEnd();
    out.writeFieldEnd();
  }
  if (write_arguments) write_arguments(out);
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeMessageEnd();
  return Framed(buffer->getBufferAsString());
}

}  // namespace txscore::testing
