// HOST:PORT, as the command line's --server takes it: the one parser for every client command.
#pragma once

#include <string>

#include "common/result.h"

namespace txscore {

struct HostPort {
  std::string host;
  int port = 0;
};

// "127.0.0.1:9090", "localhost:9090", "[::1]:9090" (brackets removed). kInvalidArgument, saying
// what to write, for a missing host or a port that is not a number from 1 to 65535.
Result<HostPort> ParseHostPort(const std::string& text);

// How log lines and the audit trail name a peer: "10.244.13.201:45678", or an IPv6 address in
// brackets, "[fd00:10:244:81::8675]:40583" (RFC 3986's form, which the log-line rule for card
// numbers recognizes and leaves whole: common/pan_scan.h).
std::string PeerText(const std::string& address, bool is_v6, unsigned short port);

}  // namespace txscore
