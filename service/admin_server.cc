#include "service/admin_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <mutex>
#include <thread>
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
};

Routing Route(const http::request<http::string_body>& request, const Routes& routes, bool caller_is_local) {
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
    } else if (route.local_only && !caller_is_local) {
      answer = {403, "application/json", "{\"error\": \"only local callers may do this\"}\n"};
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

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Routes* routes, SlowHandlers* slow)
      : stream_(std::move(socket)), routes_(routes), slow_(slow) {}
  void Start() { Read(); }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxRequestBodyBytes);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }
  void OnRead(beast::error_code ec) {
    if (ec) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    beast::error_code peer_error;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(peer_error);
    const bool local = !peer_error && peer.address().is_loopback();
    const Routing routing = Route(parser_->get(), *routes_, local);
    if (routing.route == nullptr) return Write(routing.refusal);
    if (!routing.route->slow) return Write(routing.route->handler());
    // The answer is written back on this session's strand once the handler returns.
    stream_.expires_never();
    slow_->Run([self = shared_from_this(), handler = routing.route->handler] {
      HttpResponse answer = handler();
      asio::post(self->stream_.get_executor(),
                 [self, answer = std::move(answer)]() mutable { self->Write(std::move(answer)); });
    });
  }
  void Write(HttpResponse answer) {
    response_ = std::make_shared<http::response<http::string_body>>(Respond(parser_->get(), std::move(answer)));
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, *response_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || !self->response_->keep_alive()) {
        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
        return;
      }
      self->Read();
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::string_body>> response_;
  const Routes* routes_;
  SlowHandlers* slow_;
};

}  // namespace

struct AdminServer::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  Routes routes;
  SlowHandlers slow;
  std::thread thread;

  void Accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(std::move(socket), &routes, &slow)->Start();
      Accept();
    });
  }
};

AdminServer::AdminServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<AdminServer>> AdminServer::Create(const AdminConfig& config,
                                                         std::map<std::string, AdminRoute> routes) {
  auto impl = std::make_unique<Impl>();
  impl->routes = std::move(routes);
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
  impl_->slow.JoinAll();  // their answers are not written: the port is closed
}

}  // namespace txscore::service
