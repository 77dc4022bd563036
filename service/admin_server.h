// The HTTP admin port (Boost.Beast): /healthz, /readyz, /metrics and whatever else the
// caller routes. GET and HEAD only; other methods get 405, unknown paths 404, both with a
// JSON body. One I/O thread; handlers must be quick and thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/result.h"
#include "pipelines/config.h"

namespace txscore::service {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class AdminServer {
 public:
  using Handler = std::function<HttpResponse()>;

  // Binds and listens before returning; routes map exact paths ("/healthz") to handlers.
  static Result<std::unique_ptr<AdminServer>> Create(const pipelines::AdminConfig& config,
                                                     std::map<std::string, Handler> routes);
  ~AdminServer();  // stops if still running

  int port() const;
  // Serves on a background thread until Stop().
  void Start();
  void Stop();

 private:
  struct Impl;
  explicit AdminServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace txscore::service
