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

}  // namespace txscore
