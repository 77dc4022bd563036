#include "service/admin_server.h"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

namespace txscore::service {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr size_t kMaxRequestBodyBytes = 8 * 1024;

using Routes = std::map<std::string, AdminRoute>;

// The route a request is for, or the answer that refuses it (wrong method, not local, no
// such path).
struct Routing {
  const AdminRoute* route = nullptr;
  HttpResponse refusal;
  const AdminRoute* denied = nullptr;  // the route, when the refusal is operators_only's
};

Routing Route(const http::request<http::string_body>& request, const Routes& routes, const Caller& caller) {
  std::string target(request.target());
  const std::string path = target.substr(0, target.find('?'));
  Routing routing;
  HttpResponse& answer = routing.refusal;
  if (auto it = routes.find(path); it != routes.end()) {
    const AdminRoute& route = it->second;
    const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
    const bool post = request.method() == http::verb::post;
    if (route.post ? !post : !get) {
      answer = {405, "application/json",
                std::string("{\"error\": \"") + (route.post ? "use POST" : "use GET or HEAD") + "\"}\n"};
    } else if (route.operators_only && !caller.is_operator) {
      routing.denied = &route;
      answer = {403, "application/json",
                caller.identity.empty()
                    ? "{\"error\": \"over plaintext, only local callers may do this\"}\n"
                    : "{\"error\": \"" + caller.identity +
                          " is not an operator (security.tls.operators); only operators may do this\"}\n"};
    } else {
      routing.route = &route;
    }
  } else {
    answer = {404, "application/json", "{\"error\": \"no such path\", \"paths\": [" + [&] {
                std::string list;
                for (const auto& [p, h] : routes) list += (list.empty() ? "\"" : ", \"") + p + "\"";
                return list;
              }() + "]}\n"};
  }
  return routing;
}

http::response<http::string_body> Respond(const http::request<http::string_body>& request, HttpResponse answer) {
  http::response<http::string_body> response{static_cast<http::status>(answer.status), request.version()};
  response.set(http::field::server, "txscore");
  response.set(http::field::content_type, answer.content_type);
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

// What admin sessions share: routes, slow-handler threads, the TLS in force and its refusals.
struct AdminShared {
  Routes routes;
  SlowHandlers slow;
  bool tls_enabled = false;
  std::mutex tls_mutex;
  std::shared_ptr<const TlsServerContext> tls;   // replaced by SetTls
  std::shared_ptr<asio::ssl::context> asio_tls;  // the same OpenSSL context, as Asio wants it
  TlsRefusalCounters refusals;
  std::atomic<int64_t> last_warning_ns{0};

  void Refuse(const Admission& refusal, const std::string& address) {
    refusals.Add(refusal.refusal);
    // At most one warning every 10 s: a flood of bad clients must not flood the log.
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    int64_t last = last_warning_ns.load();
    if (last != 0 && now - last < std::chrono::nanoseconds(std::chrono::seconds(10)).count()) return;
    if (!last_warning_ns.compare_exchange_strong(last, now)) return;
    spdlog::warn("admin: refused a TLS client from {}: {} ({})", address, TlsRefusalName(refusal.refusal),
                 refusal.detail);
  }
};

// One HTTP connection over `Stream`: beast::tcp_stream (plaintext) or
// beast::ssl_stream<beast::tcp_stream> (HTTPS; the caller is admitted after the handshake).
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Stream stream, AdminShared* shared, std::shared_ptr<const TlsServerContext> tls)
      : stream_(std::move(stream)), shared_(shared), tls_(std::move(tls)) {}

  void Start() {
    beast::error_code ec;
    const tcp::endpoint peer = beast::get_lowest_layer(stream_).socket().remote_endpoint(ec);
    caller_.address = ec ? "unknown" : peer.address().to_string() + ":" + std::to_string(peer.port());
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(kHandshakeTimeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code error) { self->OnHandshake(error); });
    } else {
      // Plaintext: no identity; only loopback callers may change things.
      caller_.is_operator = !ec && peer.address().is_loopback();
      Read();
    }
  }

 private:
  static constexpr auto kHandshakeTimeout = std::chrono::seconds(10);

  void OnHandshake(beast::error_code ec) {
    if constexpr (kTls) {
      SSL* ssl = stream_.native_handle();
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
    parser_->body_limit(kMaxRequestBodyBytes);
    beast::get_lowest_layer(stream_).expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }
  void OnRead(beast::error_code ec) {
    if (ec) return Shutdown();
    if constexpr (kTls) {
      // Admitted again under the certificates and lists in force now: a reload that took the
      // identity off a list (or off operators) applies to an open connection's next request.
      std::shared_ptr<const TlsServerContext> current;
      {
        std::lock_guard<std::mutex> lock(shared_->tls_mutex);
        current = shared_->tls;
      }
      if (current != tls_) {
        const Admission admission = current->Admit(stream_.native_handle(), TlsPort::kAdmin, caller_.address);
        if (!admission.admitted) {
          shared_->Refuse(admission, caller_.address);
          return;  // closed as the session is freed
        }
        caller_ = admission.caller;
        tls_ = std::move(current);
      }
    }
    const Routing routing = Route(parser_->get(), shared_->routes, caller_);
    if (routing.denied != nullptr && routing.denied->on_denied) routing.denied->on_denied(caller_);
    if (routing.route == nullptr) return Write(routing.refusal);
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
    beast::get_lowest_layer(stream_).expires_after(kIdleTimeout);
    http::async_write(stream_, *response_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->response_->keep_alive()) return self->Shutdown();
      self->Read();
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
      if (!ec && !shared.tls_enabled) {
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
                                                         std::shared_ptr<const TlsServerContext> tls) {
  auto impl = std::make_unique<Impl>();
  impl->shared.routes = std::move(routes);
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
  impl_->io.stop();
  impl_->thread.join();
  impl_->shared.slow.JoinAll();  // their answers are not written: the port is closed
}

void AdminServer::SetTls(std::shared_ptr<const TlsServerContext> tls) {
  if (impl_->shared.tls_enabled && tls != nullptr) impl_->SetTls(std::move(tls));
}

bool AdminServer::uses_tls() const { return impl_->shared.tls_enabled; }

uint64_t AdminServer::tls_refusals(TlsRefusal refusal) const { return impl_->shared.refusals.Get(refusal); }

}  // namespace txscore::service
