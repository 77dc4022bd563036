// The HTTP admin port (Boost.Beast): /healthz, /readyz, /metrics and whatever else the
// caller routes. A route answers GET (and HEAD) or POST; another method gets 405, an unknown
// path 404, both with a JSON body. One I/O thread runs the quick handlers; a slow one (a
// reload) runs on a thread of its own, so the port keeps answering probes meanwhile.
// Handlers must be thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>

#include "common/result.h"
#include "service/settings.h"

namespace txscore::service {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using AdminHandler = std::function<HttpResponse()>;

struct AdminRoute {
  AdminRoute() = default;
  // A quick GET route from any handler.
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<HttpResponse, F&>>>
  AdminRoute(F f) : handler(std::move(f)) {}  // NOLINT(google-explicit-constructor)
  AdminHandler handler;
  bool post = false;        // Default: GET and HEAD; true: POST only (a request that changes something)
  bool slow = false;        // Default: quick, run on the I/O thread; true: on a thread of its own
  bool local_only = false;  // Default: any caller; true: 403 unless the caller's address is loopback
};

class AdminServer {
 public:
  using Handler = AdminHandler;

  // Binds and listens before returning; routes map exact paths ("/healthz") to handlers.
  static Result<std::unique_ptr<AdminServer>> Create(const AdminConfig& config,
                                                     std::map<std::string, AdminRoute> routes);
  ~AdminServer();  // stops if still running

  int port() const;
  // Serves on a background thread until Stop().
  void Start();
  // Stops accepting and answering; waits for slow handlers still running.
  void Stop();

 private:
  struct Impl;
  explicit AdminServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace txscore::service
