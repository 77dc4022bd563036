#include "service/admin_server.h"

#include <openssl/ssl.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/host_port.h"
#include "common/logging.h"

namespace txscore::service {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using Routes = std::map<std::string, AdminRoute>;

// The route a request is for, or the answer that refuses it (wrong method, not local, no
// such path).
struct Routing {
  const AdminRoute* route = nullptr;
  std::string path;  // the target without its query
  HttpResponse refusal;
  const AdminRoute* denied = nullptr;  // the route, when the caller lacks its right
};

// Why `path` cannot name a route ("" when it can): only an absolute path without "." or ".."
// segments. Routes match exactly, so nothing else could reach one; a plain refusal tells a
// confused client (or a scanner) so instead of a misleading 404.
std::string UnroutablePath(const std::string& path) {
  if (path.empty() || path[0] != '/') return "the request target must be an absolute path (starting with /)";
  for (size_t start = 1; start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view segment(path.data() + start, end - start);
    if (segment == "." || segment == "..") return "the request target must not have . or .. segments";
    start = end + 1;
  }
  return "";
}

// Every error body of the port: one may quote what the caller sent (its Host, Origin or path),
// so card numbers in it are redacted, as InvalidArgument's are.
std::string JsonError(const std::string& message) {
  return nlohmann::json{{"error", RedactCardNumbersIn(message)}}.dump() + "\n";
}

// Why `caller` may not call a route that needs `right`; empty when it may.
std::string MissingRight(RouteRight right, const Caller& caller) {
  switch (right) {
    case RouteRight::kAdmitted:
      return "";
    case RouteRight::kOperator:
      if (caller.is_operator) return "";
      return caller.identity.empty()
                 ? "over plaintext, only local callers may do this"
                 : caller.identity + " is not an operator (security.tls.operators); only operators may do this";
    case RouteRight::kLlmApi:
      if (caller.may_use_llm_api) return "";
      return caller.identity.empty()
                 ? "over plaintext, only local callers may use the OpenAI-compatible API"
                 : caller.identity + " may not use the OpenAI-compatible API (security.tls.llm_api_clients)";
  }
  return "unknown right";
}

// The host part of an HTTP Host header or an Origin's authority: "localhost" of
// "localhost:9091", "::1" of "[::1]:9091".
std::string_view HostPart(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    return close == std::string_view::npos ? authority : authority.substr(1, close - 1);
  }
  return authority.substr(0, authority.find(':'));
}

bool IsLoopbackName(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as a dotted quad.
  unsigned a = 0, b = 0, c = 0, d = 0;
  char rest = 0;
  const std::string text(host);
  return std::sscanf(text.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &rest) == 4 && a == 127 && b < 256 && c < 256 &&
         d < 256;
}

// Why a request's framing is refused, as RFC 9112 says a server should ("" when it is not):
// Beast takes what these lines name, and a proxy in front of the port may read the same
// bytes another way (request smuggling). Only the headers are looked at. (A header folded over
// lines, obs-fold, is unfolded by Beast's parser into one value, as RFC 9112 5.2 allows.)
std::string FramingProblem(const http::request<http::string_body>& request) {
  const auto count = [&request](http::field name) {
    const auto [first, last] = request.equal_range(name);
    return std::distance(first, last);
  };
  if (request.version() >= 11 && count(http::field::host) != 1) {
    return "an HTTP/1.1 request needs exactly one Host header";
  }
  const auto transfer_encoding = request.find(http::field::transfer_encoding);
  if (transfer_encoding != request.end()) {
    std::string coding(transfer_encoding->value());
    std::transform(coding.begin(), coding.end(), coding.begin(), [](unsigned char c) { return std::tolower(c); });
    if (count(http::field::transfer_encoding) != 1 || coding != "chunked") {
      return "Transfer-Encoding must be chunked alone (no other coding is accepted in a request)";
    }
    if (count(http::field::content_length) != 0)
      return "a request may not give both Transfer-Encoding and Content-Length";
  }
  if (count(http::field::content_length) > 1) return "Content-Length is given more than once";
  const auto content_length = request.find(http::field::content_length);
  if (content_length != request.end() &&
      content_length->value().find_first_not_of("0123456789") != beast::string_view::npos) {
    return "Content-Length must be one decimal number";
  }
  return "";
}

// Why a request a browser may have been made to send is refused ("" when it is not):
// - a POST whose Origin is not this port's own: cross-site request forgery, a page elsewhere
//   making the operator's browser (certificate and all) reload or generate;
// - over plaintext, any request whose Host is no loopback name: DNS rebinding, a name the
//   attacker controls resolved to 127.0.0.1, which makes the attacker's page same-origin with
//   the port (over TLS the browser itself refuses: the certificate does not name that host).
// Clients that are no browser send no Origin and a Host of the address they dialled.
std::string BrowserRefusal(const http::request<http::string_body>& request, bool plaintext) {
  const auto field = [&request](http::field name) -> std::optional<std::string> {
    const auto it = request.find(name);
    if (it == request.end()) return std::nullopt;
    return std::string(it->value());
  };
  const std::optional<std::string> host = field(http::field::host);
  if (plaintext && host && !IsLoopbackName(HostPart(*host))) {
    return "Host " + *host +
           " is no loopback name: a plaintext admin port answers only requests made to localhost, 127.0.0.1 or [::1]";
  }
  const std::optional<std::string> origin = field(http::field::origin);
  if (request.method() != http::verb::post || !origin) return "";
  const size_t scheme_end = origin->find("://");
  const std::string authority = scheme_end == std::string::npos ? "" : origin->substr(scheme_end + 3);
  if (host && !authority.empty() && authority == *host) return "";
  return "a POST from another origin (" + *origin + ") is refused: only this port's own pages may send one";
}

Routing Route(const http::request<http::string_body>& request, const Routes& routes, const Caller& caller,
              bool plaintext) {
  std::string target(request.target());
  const std::string path = target.substr(0, target.find('?'));
  Routing routing;
  routing.path = path;
  HttpResponse& answer = routing.refusal;
  auto it = routes.find(path);
  if (it != routes.end() && it->second.path_handler) it = routes.end();  // a prefix answers only paths under it
  if (it == routes.end()) {
    // The longest prefix route above the path, if any.
    for (auto prefix = routes.begin(); prefix != routes.end(); ++prefix) {
      const std::string& key = prefix->first;
      if (prefix->second.path_handler && key.back() == '/' && path.size() > key.size() && path.rfind(key, 0) == 0 &&
          (it == routes.end() || key.size() > it->first.size())) {
        it = prefix;
      }
    }
  }
  if (const std::string why = UnroutablePath(path); !why.empty()) {
    answer = {400, "application/json", JsonError(why)};
  } else if (const std::string why = BrowserRefusal(request, plaintext); !why.empty()) {
    answer = {403, "application/json", JsonError(why)};
  } else if (it != routes.end()) {
    const AdminRoute& route = it->second;
    const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
    const bool post = request.method() == http::verb::post;
    if (route.post ? !post : !get) {
      answer = {405, "application/json", JsonError(route.post ? "use POST" : "use GET or HEAD")};
    } else if (const std::string why = MissingRight(route.right, caller); !why.empty()) {
      routing.denied = &route;
      answer = {403, "application/json", JsonError(why)};
    } else {
      routing.route = &route;
    }
  } else {
    nlohmann::json paths = nlohmann::json::array();
    for (const auto& [known, route] : routes) paths.push_back(known);
    answer = {404, "application/json", nlohmann::json{{"error", "no such path"}, {"paths", paths}}.dump() + "\n"};
  }
  return routing;
}

http::response<http::string_body> Respond(const http::request<http::string_body>& request, HttpResponse answer) {
  http::response<http::string_body> response{static_cast<http::status>(answer.status), request.version()};
  response.set(http::field::server, "txscore");
  response.set(http::field::content_type, answer.content_type);
  for (const auto& [name, value] : answer.headers) response.set(name, value);
  response.keep_alive(request.keep_alive());
  if (request.method() != http::verb::head) response.body() = std::move(answer.body);
  response.prepare_payload();
  return response;
}

// Runs slow handlers on threads of their own, and waits for them at Stop.
// Threads that finished are joined when the next one starts, so they do not pile up.
class SlowHandlers {
 public:
  void Run(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = threads_.begin(); it != threads_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = threads_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back({std::thread([work = std::move(work), done] {
                          work();
                          done->store(true);
                        }),
                        done});
  }
  void JoinAll() {
    std::vector<Worker> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (Worker& w : threads) w.thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::vector<Worker> threads_;
};

// Connections still in their TLS handshake, oldest first (ids in the order they started), each
// with what closes it: a full port closes the oldest for a newcomer. Shared with the sessions,
// which may outlive AdminShared as the io_context is torn down.
class Handshakes {
 public:
  // Registers a connection's closer; the id to pass to Over.
  uint64_t Begin(std::function<void()> close) {
    std::lock_guard<std::mutex> lock(mutex_);
    closers_.emplace(++last_id_, std::move(close));
    return last_id_;
  }
  void Over(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    closers_.erase(id);
  }
  // Takes the closer of the connection shaking hands the longest out of the registry (so a
  // connection is never picked twice); empty when none is.
  std::function<void()> TakeOldest() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closers_.empty()) return {};
    std::function<void()> close = std::move(closers_.begin()->second);
    closers_.erase(closers_.begin());
    return close;
  }

 private:
  std::mutex mutex_;
  uint64_t last_id_ = 0;
  std::map<uint64_t, std::function<void()>> closers_;
};

// What admin sessions share: routes, slow-handler threads, the TLS in force and its refusals.
struct AdminShared {
  Routes routes;
  AdminLimits limits;
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<uint64_t> connections_refused{0};
  std::shared_ptr<Handshakes> handshakes = std::make_shared<Handshakes>();
  std::atomic<uint64_t> handshakes_evicted{0};
  // Sessions may outlive this struct as the io_context is torn down: they share the count.
  std::shared_ptr<std::atomic<int>> connections_open = std::make_shared<std::atomic<int>>(0);
  SlowHandlers slow;
  // Set by Stop: request handlers see their client as gone, so streams and generations end.
  std::atomic<bool> stopping{false};
  size_t largest_body_bytes = 0;  // of the port's limit and every route's
  bool tls_enabled = false;
  std::mutex tls_mutex;
  std::shared_ptr<const TlsServerContext> tls;   // replaced by SetTls
  std::shared_ptr<asio::ssl::context> asio_tls;  // the same OpenSSL context, as Asio wants it
  TlsRefusalCounters refusals;
  // One limiter per kind of event, so a flood of one kind cannot hide another.
  RateLimitedWarning tls_warning{"admin", std::chrono::seconds(10)};
  RateLimitedWarning bad_request_warning{"admin", std::chrono::seconds(10)};
  RateLimitedWarning refused_warning{"admin", std::chrono::seconds(10)};
  RateLimitedWarning evicted_warning{"admin", std::chrono::seconds(10)};

  TlsRefusalObserver on_refused;  // set before the first accept, then only read

  void Refuse(const Admission& refusal, const std::string& address) {
    if (on_refused) on_refused(TlsPort::kAdmin, address, refusal.refusal, refusal.detail);
    refusals.Add(refusal.refusal);
    tls_warning.Warn("refused a TLS client from {}: {} ({})", address, TlsRefusalName(refusal.refusal), refusal.detail);
  }
};

// One HTTP connection over `Stream`: beast::tcp_stream (plaintext) or
// beast::ssl_stream<beast::tcp_stream> (HTTPS; the caller is admitted after the handshake).
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Stream stream, AdminShared* shared, std::shared_ptr<const TlsServerContext> tls)
      : stream_(std::move(stream)),
        shared_(shared),
        tls_(std::move(tls)),
        // Bytes read but not yet parsed: the parser's limits do not cover a chunk extension or
        // a trailer line that never ends, so the buffer itself is bounded too.
        buffer_(shared->limits.max_header_bytes + shared->limits.max_body_bytes),
        open_(shared->connections_open),
        handshakes_(shared->handshakes) {
    open_->fetch_add(1);
  }
  ~Session() {
    if (handshake_id_ != 0) handshakes_->Over(handshake_id_);
    open_->fetch_sub(1);
  }

  void Start() {
    beast::error_code ec;
    const tcp::endpoint peer = beast::get_lowest_layer(stream_).socket().remote_endpoint(ec);
    caller_.address = ec ? "unknown" : PeerText(peer.address().to_string(), peer.address().is_v6(), peer.port());
    if constexpr (kTls) {
      // The closer runs on the acceptor's thread, so it posts the close to this session's
      // strand; a session already gone is left alone.
      handshake_id_ = handshakes_->Begin([weak = this->weak_from_this()] {
        if (std::shared_ptr<Session> self = weak.lock()) {
          asio::post(self->stream_.get_executor(), [self] {
            // It finished its handshake since it was picked: it has shown a certificate, it stays.
            if (self->handshake_id_ == 0) return;
            self->evicted_ = true;
            beast::get_lowest_layer(self->stream_).close();
          });
        }
      });
      beast::get_lowest_layer(stream_).expires_after(kHandshakeTimeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code error) { self->OnHandshake(error); });
    } else {
      // Plaintext: no identity; only loopback callers may change things.
      caller_.is_operator = caller_.may_use_llm_api = !ec && peer.address().is_loopback();  // plaintext (tls.h)
      Read();
    }
  }

 private:
  static constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

  void OnHandshake(beast::error_code ec) {
    if constexpr (kTls) {
      handshakes_->Over(handshake_id_);
      handshake_id_ = 0;
      SSL* ssl = stream_.native_handle();
      if (evicted_) {
        shared_->evicted_warning.Warn("closed a connection from {} still shaking hands to make room for a new one",
                                      caller_.address);
        return;
      }
      if (ec) {
        // Asio has taken the failure off OpenSSL's error queue: its code is the error_code's value.
        const bool from_openssl = ec.category() == asio::error::get_ssl_category();
        Admission refusal = tls_->Refuse(ssl, from_openssl ? static_cast<unsigned long>(ec.value()) : 0);
        if (ec == beast::error::timeout) {
          refusal.refusal = TlsRefusal::kHandshakeTimeout;
          refusal.detail = "no TLS handshake within 10 s";
        } else if (!from_openssl) {
          refusal.detail = ec.message();
        }
        shared_->Refuse(refusal, caller_.address);
        return;  // the connection closes as the session is freed
      }
      Admission admission = tls_->Admit(ssl, TlsPort::kAdmin, caller_.address);
      if (!admission.admitted) {
        shared_->Refuse(admission, caller_.address);
        return;
      }
      caller_ = admission.caller;
      Read();
    }
  }

  void Read() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(shared_->limits.max_header_bytes));
    // The parser checks a Content-Length against its limit as the headers end: until the
    // route is known, the largest any route takes.
    body_limit_ = shared_->largest_body_bytes;
    parser_->body_limit(body_limit_);
    beast::get_lowest_layer(stream_).expires_after(shared_->limits.request_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }
  // The headers name the route, and with it how much body it takes.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    if (const std::string problem = FramingProblem(parser_->get()); !problem.empty()) {
      return Refuse(400, "malformed HTTP request: " + problem);
    }
    const std::string target(parser_->get().target());
    body_limit_ = shared_->limits.max_body_bytes;
    if (auto route = shared_->routes.find(target.substr(0, target.find('?')));
        route != shared_->routes.end() && route->second.max_body_bytes > 0) {
      body_limit_ = route->second.max_body_bytes;
    }
    if (parser_->content_length() && *parser_->content_length() > body_limit_) {
      return Refuse(413, "the body is over " + std::to_string(body_limit_) + " bytes");
    }
    parser_->body_limit(body_limit_);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }
  void OnRead(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      return Refuse(
          431, "the request line and headers are over " + std::to_string(shared_->limits.max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return Refuse(413, "the body is over " + std::to_string(body_limit_) + " bytes");
    }
    if (ec == http::error::buffer_overflow) {
      return Refuse(413, "the request is over " +
                             std::to_string(shared_->limits.max_header_bytes + shared_->limits.max_body_bytes) +
                             " bytes");
    }
    // The client closed (between requests or in the middle of one), the request deadline
    // passed (the stream is closed already), or the socket failed: nothing to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        (ec && ec.category() != http::make_error_code(http::error::bad_method).category())) {
      return Shutdown();
    }
    if (ec) return Refuse(400, "malformed HTTP request: " + ec.message());
    if constexpr (kTls) {
      // Verified and admitted again under the CAs, CRLs and lists in force now: a reload that
      // removed a CA, revoked the certificate or took the identity off a list (or off operators)
      // applies to an open connection's next request.
      std::shared_ptr<const TlsServerContext> current;
      {
        std::lock_guard<std::mutex> lock(shared_->tls_mutex);
        current = shared_->tls;
      }
      if (current != tls_) {
        const Admission admission = current->Readmit(stream_.native_handle(), TlsPort::kAdmin, caller_.address);
        if (!admission.admitted) {
          shared_->Refuse(admission, caller_.address);
          return;  // closed as the session is freed
        }
        caller_ = admission.caller;
        tls_ = std::move(current);
      }
    }
    const Routing routing = Route(parser_->get(), shared_->routes, caller_, /*plaintext=*/!kTls);
    if (routing.denied != nullptr && routing.denied->on_denied) routing.denied->on_denied(caller_);
    if (routing.route == nullptr) return Write(routing.refusal);
    if (routing.route->request_handler) {
      beast::get_lowest_layer(stream_).expires_never();
      AdminRequest request{caller_, std::string(parser_->get().target()), std::move(parser_->get().body())};
      shared_->slow.Run(
          [self = this->shared_from_this(), handler = routing.route->request_handler, request = std::move(request)] {
            Responder responder(self);
            // A handler's exception is its own bug; it costs its request, not the process.
            try {
              handler(request, responder);
            } catch (const std::exception& e) {
              Log("admin").error("the handler of {} failed: {}", request.target, e.what());
              responder.Respond({500, "application/json", JsonError("internal error")});
            }
            responder.Finish();
          });
      return;
    }
    if (routing.route->path_handler) return Write(routing.route->path_handler(caller_, routing.path));
    if (!routing.route->slow) return Write(routing.route->handler(caller_));
    // The answer is written back on this session's strand once the handler returns.
    beast::get_lowest_layer(stream_).expires_never();
    shared_->slow.Run([self = this->shared_from_this(), handler = routing.route->handler] {
      HttpResponse answer = handler(self->caller_);
      asio::post(self->stream_.get_executor(),
                 [self, answer = std::move(answer)]() mutable { self->Write(std::move(answer)); });
    });
  }
  void Write(HttpResponse answer) {
    response_ = std::make_shared<http::response<http::string_body>>(Respond(parser_->get(), std::move(answer)));
    beast::get_lowest_layer(stream_).expires_after(shared_->limits.request_timeout);
    http::async_write(stream_, *response_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->response_->keep_alive()) return self->Shutdown();
      self->Read();
    });
  }
  // A request handler's answer, written on this session's strand.
  class Responder : public AdminResponder {
   public:
    explicit Responder(std::shared_ptr<Session> session) : session_(std::move(session)) {}
    void Respond(HttpResponse answer) override {
      std::lock_guard<std::mutex> lock(mu_);
      if (answered_) return;
      answered_ = true;
      asio::post(session_->stream_.get_executor(),
                 [s = session_, answer = std::move(answer)]() mutable { s->Write(std::move(answer)); });
    }
    void Begin(const std::string& content_type) override {
      std::lock_guard<std::mutex> lock(mu_);
      if (answered_) return;
      answered_ = begun_ = true;
      asio::post(session_->stream_.get_executor(), [s = session_, content_type] { s->BeginStream(content_type); });
    }
    bool Send(std::string part) override {
      std::lock_guard<std::mutex> lock(mu_);
      if (!begun_ || client_gone()) return false;
      asio::post(session_->stream_.get_executor(),
                 [s = session_, part = std::move(part)]() mutable { s->QueuePart(std::move(part)); });
      return true;
    }
    // Gone once a write failed, or once the client has closed its side of the connection
    // (while a whole answer is still in the making nothing is written to find out).
    bool client_gone() const override {
      if (session_->client_gone_->load() || session_->shared_->stopping.load()) return true;
      // POLLRDHUP: the client's FIN has come, even behind unread bytes (a TLS close_notify).
      pollfd socket{beast::get_lowest_layer(session_->stream_).socket().native_handle(), POLLRDHUP, 0};
      if (::poll(&socket, 1, 0) > 0 && (socket.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        session_->client_gone_->store(true);
      }
      return session_->client_gone_->load();
    }
    // After the handler returns: end the stream, or answer for a handler that did not.
    void Finish() {
      bool begun = false, answered = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        begun = begun_;
        answered = answered_;
      }
      if (!answered) {
        Respond({500, "application/json", JsonError("the handler gave no answer")});
      } else if (begun) {
        asio::post(session_->stream_.get_executor(), [s = session_] { s->EndStream(); });
      }
    }

   private:
    std::shared_ptr<Session> session_;
    std::mutex mu_;
    bool answered_ = false, begun_ = false;
  };

  // A streamed answer: the status line and headers, then each part as a chunk (HTTP/1.1) or
  // as is (HTTP/1.0, ended by closing), each written in turn from a queue. A write that fails
  // or stalls past the request timeout marks the client gone.
  void BeginStream(const std::string& content_type) {
    const auto& request = parser_->get();
    stream_chunked_ = request.version() >= 11;
    stream_keep_alive_ = stream_chunked_ && request.keep_alive();
    Queue(std::string("HTTP/1.") + (stream_chunked_ ? "1" : "0") + " 200 OK\r\nServer: txscore\r\nContent-Type: " +
          content_type + "\r\nCache-Control: no-cache\r\n" + (stream_chunked_ ? "Transfer-Encoding: chunked\r\n" : "") +
          (stream_keep_alive_ ? "" : "Connection: close\r\n") + "\r\n");
  }
  void QueuePart(std::string part) {
    if (part.empty()) return;  // an empty chunk would end the body
    if (stream_chunked_) {
      char size[24];
      std::snprintf(size, sizeof size, "%zx\r\n", part.size());
      part = size + part + "\r\n";
    }
    Queue(std::move(part));
  }
  void EndStream() {
    if (stream_chunked_) Queue("0\r\n\r\n");
    stream_ended_ = true;
    if (!writing_) WriteNext();
  }
  void Queue(std::string bytes) {
    if (client_gone_->load()) return;
    pending_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    if (pending_.empty()) {
      writing_ = false;
      if (stream_ended_) {
        stream_ended_ = false;
        if (stream_keep_alive_ && !client_gone_->load()) return Read();
        return Shutdown();
      }
      return;
    }
    writing_ = true;
    beast::get_lowest_layer(stream_).expires_after(shared_->limits.request_timeout);
    asio::async_write(stream_, asio::buffer(pending_.front()),
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) {
                          self->client_gone_->store(true);
                          self->pending_.clear();
                          self->writing_ = false;
                          return;  // the connection closes as the session is freed
                        }
                        self->pending_.pop_front();
                        self->WriteNext();
                      });
  }

  // Answers a request that could not be read whole (malformed, over a limit) and closes.
  void Refuse(int status, const std::string& why) {
    shared_->bad_requests.fetch_add(1);
    shared_->bad_request_warning.Warn("answered {} to {}: {}", status, caller_.address, why);
    response_ = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    response_->set(http::field::server, "txscore");
    response_->set(http::field::content_type, "application/json");
    response_->keep_alive(false);
    response_->body() = JsonError(why);
    response_->prepare_payload();
    beast::get_lowest_layer(stream_).expires_after(shared_->limits.request_timeout);
    http::async_write(stream_, *response_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return;  // the connection closes as the session is freed
      if constexpr (kTls) {
        self->Shutdown();
      } else {
        // The rest of the request may still be arriving: closing now, with it unread, would
        // reset the connection and could destroy the answer before the client reads it. So
        // send a FIN and read and drop what comes, for at most a second (a lingering close).
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        beast::get_lowest_layer(self->stream_).expires_after(std::chrono::seconds(1));
        self->DiscardUntilClosed();
      }
    });
  }
  void DiscardUntilClosed() {
    stream_.async_read_some(asio::buffer(discard_), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->DiscardUntilClosed();
    });
  }

  void Shutdown() {
    beast::error_code ec;
    if constexpr (kTls) {
      // close_notify, then the socket closes as the session is freed.
      beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(1));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {});
    } else {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    }
  }

  Stream stream_;
  AdminShared* shared_;
  std::shared_ptr<const TlsServerContext> tls_;  // the certificates this connection was accepted with
  Caller caller_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::string_body>> response_;
  std::shared_ptr<std::atomic<int>> open_;  // AdminShared::connections_open
  std::shared_ptr<Handshakes> handshakes_;  // AdminShared::handshakes
  uint64_t handshake_id_ = 0;               // registered in handshakes_ while not 0
  bool evicted_ = false;                    // closed to make room (set on this session's strand)
  char discard_[4096];                      // what a refused request still sends
  size_t body_limit_ = 0;                   // of the request being read
  // A streamed answer (BeginStream): parts waiting to be written, in order.
  std::deque<std::string> pending_;
  bool writing_ = false, stream_ended_ = false, stream_chunked_ = true, stream_keep_alive_ = false;
  std::shared_ptr<std::atomic<bool>> client_gone_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

struct AdminServer::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  AdminShared shared;
  std::thread thread;

  void Accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      // Full: the connection shaking hands the longest makes room (it has shown no certificate);
      // the newcomer counts until that one's close runs, at once, on its strand.
      const bool full = !ec && shared.connections_open->load() >= shared.limits.max_connections;
      const std::function<void()> close_oldest_handshake = full ? shared.handshakes->TakeOldest() : nullptr;
      if (close_oldest_handshake) {
        shared.handshakes_evicted.fetch_add(1);
        close_oldest_handshake();
      }
      if (full && !close_oldest_handshake) {
        shared.connections_refused.fetch_add(1);
        shared.refused_warning.Warn(
            "{} connections are open (the most allowed), none still shaking hands; closed a new one",
            shared.limits.max_connections);
        socket.close(ec);
      } else if (!ec && !shared.tls_enabled) {
        std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), &shared, nullptr)->Start();
      } else if (!ec) {
        std::shared_ptr<const TlsServerContext> tls;
        std::shared_ptr<asio::ssl::context> asio_tls;
        {
          std::lock_guard<std::mutex> lock(shared.tls_mutex);
          tls = shared.tls;
          asio_tls = shared.asio_tls;
        }
        // The stream's SSL object holds its own reference to the OpenSSL context.
        using TlsStream = beast::ssl_stream<beast::tcp_stream>;
        std::make_shared<Session<TlsStream>>(TlsStream(beast::tcp_stream(std::move(socket)), *asio_tls), &shared,
                                             std::move(tls))
            ->Start();
      }
      Accept();
    });
  }

  void SetTls(std::shared_ptr<const TlsServerContext> tls) {
    SSL_CTX_up_ref(tls->native());  // Asio's context takes a reference of its own
    auto asio_tls = std::make_shared<asio::ssl::context>(tls->native());
    std::lock_guard<std::mutex> lock(shared.tls_mutex);
    shared.tls = std::move(tls);
    shared.asio_tls = std::move(asio_tls);
  }
};

AdminServer::AdminServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<AdminServer>> AdminServer::Create(const AdminConfig& config,
                                                         std::map<std::string, AdminRoute> routes,
                                                         std::shared_ptr<const TlsServerContext> tls,
                                                         const AdminLimits& limits, TlsRefusalObserver on_refused) {
  auto impl = std::make_unique<Impl>();
  impl->shared.on_refused = std::move(on_refused);
  impl->shared.routes = std::move(routes);
  impl->shared.limits = limits;
  impl->shared.largest_body_bytes = limits.max_body_bytes;
  for (const auto& [path, route] : impl->shared.routes) {
    impl->shared.largest_body_bytes = std::max(impl->shared.largest_body_bytes, route.max_body_bytes);
  }
  impl->shared.tls_enabled = tls != nullptr;
  if (tls != nullptr) impl->SetTls(std::move(tls));
  beast::error_code ec;
  const auto address = asio::ip::make_address(config.host, ec);
  if (ec) return InvalidArgument("admin host " + config.host + " is not an IP address: " + ec.message(), "admin.host");
  const tcp::endpoint endpoint{address, static_cast<unsigned short>(config.port)};
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error{ErrorCode::kUnavailable,
                 "cannot listen on admin port " + config.host + ":" + std::to_string(config.port) + ": " + ec.message(),
                 {}};
  }
  return std::unique_ptr<AdminServer>(new AdminServer(std::move(impl)));
}

AdminServer::~AdminServer() { Stop(); }

int AdminServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void AdminServer::Start() {
  impl_->Accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void AdminServer::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->shared.stopping.store(true);  // request handlers see their clients gone and finish
  impl_->io.stop();
  impl_->thread.join();
  impl_->shared.slow.JoinAll();  // their answers are not written: the port is closed
}

void AdminServer::SetTls(std::shared_ptr<const TlsServerContext> tls) {
  if (impl_->shared.tls_enabled && tls != nullptr) impl_->SetTls(std::move(tls));
}

bool AdminServer::uses_tls() const { return impl_->shared.tls_enabled; }

uint64_t AdminServer::tls_refusals(TlsRefusal refusal) const { return impl_->shared.refusals.Get(refusal); }
uint64_t AdminServer::bad_requests() const { return impl_->shared.bad_requests.load(); }
uint64_t AdminServer::connections_refused() const { return impl_->shared.connections_refused.load(); }
uint64_t AdminServer::handshakes_evicted() const { return impl_->shared.handshakes_evicted.load(); }
int AdminServer::connections_open() const { return impl_->shared.connections_open->load(); }

}  // namespace txscore::service
