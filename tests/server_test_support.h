// Starts a ScoringServer the way `txscore serve` does: the settings file, then the pipeline
// file it names. Header-only: only tests that link txscore_service include it.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <map>
#include <memory>
#include <string>

#include "common/result.h"
#include "pipelines/config.h"
#include "service/scoring_server.h"
#include "service/settings.h"

namespace txscore::testing {

// `settings_path`: e.g. TestSettingsPath(dir) after WriteTestPipeline(dir). Created, not started.
inline Result<std::unique_ptr<service::ScoringServer>> CreateTestServer(
    const std::string& settings_path, const pipelines::PipelineRuntime& runtime = {},
    const service::ScoringServer::Hooks& hooks = {}) {
  TXSCORE_ASSIGN_OR_RETURN(service::ServiceSettings settings, service::LoadServiceSettings(settings_path));
  TXSCORE_ASSIGN_OR_RETURN(pipelines::PipelineConfig config, pipelines::LoadPipelineConfig(settings.pipeline));
  return service::ScoringServer::Create(settings, config, runtime, hooks);
}

// One plain-HTTP request to the admin port on loopback, as a browser or probe would send it.
struct AdminAnswer {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;          // by name as sent
  std::string header(const std::string& name) const {  // "" when absent
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};
inline AdminAnswer AdminGet(int port, const std::string& target) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> request{http::verb::get, target, 11};
  request.set(http::field::host, "localhost");
  http::write(socket, request);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  AdminAnswer answer{static_cast<int>(response.result_int()), response.body(), {}};
  for (const auto& field : response) answer.headers[std::string(field.name_string())] = std::string(field.value());
  return answer;
}

}  // namespace txscore::testing
