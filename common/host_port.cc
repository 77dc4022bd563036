#include "common/host_port.h"

namespace txscore {

Result<HostPort> ParseHostPort(const std::string& text) {
  const std::string example = " (HOST:PORT, e.g. 127.0.0.1:9090)";
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("\"" + text + "\" is not HOST:PORT" + example);
  }
  HostPort out;
  out.host = text.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return InvalidArgument("\"" + port + "\" in \"" + text + "\" is not a port from 1 to 65535" + example);
  }
  out.port = std::stoi(port);
  return out;
}

std::string PeerText(const std::string& address, bool is_v6, unsigned short port) {
  return (is_v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

}  // namespace txscore
