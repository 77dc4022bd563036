// The HTTP admin port (Boost.Beast): /healthz, /readyz, /metrics and whatever else the
// caller routes (the OpenAI-compatible API: service/openai_api.h). A route answers GET (and HEAD) or POST; another
// method gets 405, an unknown path 404, a target that is not an absolute path or has "." or ".." segments 400, all with
// a JSON body. Requests over AdminLimits are refused (431, 413; a trickler is disconnected). One I/O thread runs the
// quick handlers; a slow one (a reload) runs on a thread of its own, so the port keeps answering probes meanwhile.
// Handlers must be thread-safe.
//
// HTTPS (a TlsServerContext given to Create): Beast over OpenSSL; the client's certificate must
// name an identity the admin port allows (service/tls.h), else the connection is closed after
// the handshake and counted by reason. A route that needs a right (RouteRight) answers 403 to a
// caller without it. A POST from another origin, and over plaintext a request for a host that
// is no loopback name, answer 403 before any route (docs/security.md, "Plaintext").
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/result.h"
#include "service/settings.h"
#include "service/tls.h"

namespace txscore::service {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers = {};  // more headers (name, value)
};

// A handler is told who asked (for the audit trail of what changes things).
using AdminHandler = std::function<HttpResponse(const Caller& caller)>;

// A request as a request handler sees it.
struct AdminRequest {
  Caller caller;
  std::string target;  // path and query, as sent
  std::string body;
};

// How a request handler answers: once with Respond, or in parts (server-sent events) with
// Begin and Send. Thread-safe.
class AdminResponder {
 public:
  virtual ~AdminResponder() = default;
  // The whole answer. At most once, and not after Begin.
  virtual void Respond(HttpResponse answer) = 0;
  // Starts an answer sent in parts: status 200, `content_type`, chunked transfer encoding
  // (HTTP/1.0: the connection closes at its end). At most once.
  virtual void Begin(const std::string& content_type) = 0;
  // Queues a part of the body; false once the client has gone (the handler should stop).
  virtual bool Send(std::string part) = 0;
  // True once a write to the client has failed.
  virtual bool client_gone() const = 0;
};
// Runs on a thread of its own. The answer ends when it returns (a 500 if it gave none).
using AdminRequestHandler = std::function<void(const AdminRequest& request, AdminResponder& responder)>;
// A quick handler for the paths under a prefix: told the path (without the query).
using AdminPathHandler = std::function<HttpResponse(const Caller& caller, const std::string& path)>;

// Who may call a route, beyond being admitted to the port (service/tls.h, Caller).
enum class RouteRight {
  kAdmitted,  // any caller the port admits: probes, metrics, the dashboard
  kOperator,  // operators (TLS: security.tls.operators; plaintext: a loopback address)
  kLlmApi,    // the OpenAI-compatible API (TLS: security.tls.llm_api_clients; plaintext: loopback)
};

struct AdminRoute {
  AdminRoute() = default;
  // A quick GET route from any handler, with or without the caller.
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<HttpResponse, F&>>>
  AdminRoute(F f)  // NOLINT(google-explicit-constructor)
      : handler([f = std::move(f)](const Caller&) mutable { return f(); }) {}
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<HttpResponse, F&, const Caller&>>,
            typename = void>
  AdminRoute(F f) : handler(std::move(f)) {}  // NOLINT(google-explicit-constructor)
  AdminHandler handler;
  bool post = false;  // Default: GET and HEAD; true: POST only (a request that changes something)
  bool slow = false;  // Default: quick, run on the I/O thread; true: on a thread of its own
  // Default: any caller the port admits. Otherwise 403 unless the caller has the right.
  RouteRight right = RouteRight::kAdmitted;
  // Default: none. Called with a caller `right` turned away (to audit the attempt).
  std::function<void(const Caller& caller)> on_denied;
  // Default: none. Set instead of `handler` for a route that reads the request body or
  // streams its answer; it always runs on a thread of its own (as `slow`).
  AdminRequestHandler request_handler;
  // Default: 0, the port's AdminLimits::max_body_bytes. A larger limit for this route's body
  // (applied once the headers name the route).
  size_t max_body_bytes = 0;
  // Default: none. Set instead of `handler` on a route whose path ends in "/" (a prefix): it
  // answers every path under it that no exact route names (the longest prefix wins), on the
  // I/O thread, like `handler`. E.g. "/v2/models/" for /v2/models/{name}/ready.
  AdminPathHandler path_handler;
};

// What one client may hold of the admin port. Each refusal closes the connection; the port
// goes on serving everyone else.
struct AdminLimits {
  // Default: 8 KiB of request line and headers; more is answered 431 and the connection closed.
  size_t max_header_bytes = 8 * 1024;
  // Default: 8 KiB of body (the routes take none or a small JSON object); a longer body, or a
  // Content-Length announcing one, is answered 413 and the connection closed.
  size_t max_body_bytes = 8 * 1024;
  // Default: 30 s. A request must arrive whole within this of the previous answer (or of the
  // connection opening); a client that trickles or idles longer is disconnected.
  std::chrono::milliseconds request_timeout{30000};
  // Default: 256 connections open at once; one more is closed as soon as it is accepted.
  int max_connections = 256;
};

class AdminServer {
 public:
  using Handler = AdminHandler;

  // Binds and listens before returning; routes map exact paths ("/healthz") to handlers.
  // `tls`: null serves plaintext HTTP.
  static Result<std::unique_ptr<AdminServer>> Create(const AdminConfig& config,
                                                     std::map<std::string, AdminRoute> routes,
                                                     std::shared_ptr<const TlsServerContext> tls = nullptr,
                                                     const AdminLimits& limits = {},
                                                     TlsRefusalObserver on_refused = nullptr);
  ~AdminServer();  // stops if still running

  int port() const;
  // Serves on a background thread until Stop().
  void Start();
  // Stops accepting and answering; waits for slow handlers still running.
  void Stop();
  // New connections use `tls` from now on (certificates read again by a reload). Ignored on a
  // plaintext port.
  void SetTls(std::shared_ptr<const TlsServerContext> tls);
  bool uses_tls() const;
  // Clients refused during or after the TLS handshake, by reason.
  uint64_t tls_refusals(TlsRefusal refusal) const;
  // Requests that could not be read whole (malformed: 400; over AdminLimits: 413, 431), and
  // connections closed at once because max_connections were open.
  uint64_t bad_requests() const;
  uint64_t connections_refused() const;
  // Connections still in their TLS handshake closed to make room for a new one when
  // max_connections were open (the oldest first): strangers who show no certificate cannot
  // hold the port (a flood of new ones can still close a probe mid-handshake).
  uint64_t handshakes_evicted() const;
  int connections_open() const;

 private:
  struct Impl;
  explicit AdminServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace txscore::service
