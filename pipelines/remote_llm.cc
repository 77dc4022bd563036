#include "pipelines/remote_llm.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/logging.h"
#include "llm/chat_template.h"

namespace txscore::pipelines {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Url {
  bool tls = false;
  std::string host, port, path;  // path without a trailing slash, e.g. "/v1"
};

Result<Url> ParseUrl(const std::string& text) {
  Url url;
  std::string rest;
  if (text.rfind("https://", 0) == 0) {
    url.tls = true;
    rest = text.substr(8);
  } else if (text.rfind("http://", 0) == 0) {
    rest = text.substr(7);
  } else {
    return InvalidArgument("remote.base_url must start with https:// or http://, not \"" + text + "\"",
                           "remote.base_url");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  url.path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!url.path.empty() && url.path.back() == '/') url.path.pop_back();
  if (!authority.empty() && authority[0] == '[') {  // [::1]:8443
    const size_t close = authority.find(']');
    if (close == std::string::npos) return InvalidArgument("remote.base_url: an IPv6 address needs its ]");
    url.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') url.port = authority.substr(close + 2);
  } else {
    const size_t colon = authority.rfind(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string::npos) url.port = authority.substr(colon + 1);
  }
  if (url.port.empty()) url.port = url.tls ? "443" : "80";
  if (url.host.empty() || url.port.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("remote.base_url \"" + text + "\" needs a host and a numeric port", "remote.base_url");
  }
  return url;
}

bool IsIpAddress(const std::string& host) {
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// The pool's addresses, found before `expiry`. An IP address needs no lookup. A name's lookup
// (getaddrinfo, which has no timeout) runs on a thread of its own and is waited for only until
// `expiry`: a slow resolver costs the call its time, never the stage's deadline; a lookup
// still running then finishes on its own and its answer is dropped.
Result<tcp::resolver::results_type> ResolveBefore(const std::string& host, const std::string& port,
                                                  Clock::time_point expiry) {
  if (IsIpAddress(host)) {
    const tcp::endpoint endpoint(asio::ip::make_address(host), static_cast<unsigned short>(std::stoi(port)));
    return tcp::resolver::results_type::create(endpoint, host, port);
  }
  struct Lookup {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    beast::error_code ec;
    tcp::resolver::results_type results;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host, port] {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::error_code ec;
    tcp::resolver::results_type results = resolver.resolve(host, port, ec);
    std::lock_guard<std::mutex> lock(lookup->mutex);
    lookup->ec = ec;
    lookup->results = std::move(results);
    lookup->done = true;
    lookup->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(lookup->mutex);
  if (!lookup->done_cv.wait_until(lock, expiry, [&] { return lookup->done; })) {
    return DeadlineExceeded("the lookup of " + host + " did not answer in time");
  }
  if (lookup->ec) return Unavailable("cannot resolve " + host + ": " + lookup->ec.message());
  return lookup->results;
}

}  // namespace

const char* CircuitStateName(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

bool CircuitBreaker::Allow() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kClosed) return true;
  if (state_ == State::kOpen) {
    if (clock_() < open_until_) return false;
    state_ = State::kHalfOpen;
  }
  if (trial_in_flight_) return false;  // half-open: one trial at a time
  trial_in_flight_ = true;
  return true;
}

void CircuitBreaker::Succeeded() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kClosed) Log(log_component_).info("{} answered: circuit closed", subject_);
  state_ = State::kClosed;
  failures_in_a_row_ = 0;
  trial_in_flight_ = false;
}

void CircuitBreaker::Failed() {
  std::lock_guard<std::mutex> lock(mu_);
  trial_in_flight_ = false;
  if (state_ == State::kHalfOpen || ++failures_in_a_row_ >= failures_to_open_) {
    if (state_ != State::kOpen) {
      times_opened_.fetch_add(1);
      Log(log_component_)
          .warn("{} failed {} calls in a row: circuit open for {} ms", subject_, failures_in_a_row_, open_for_.count());
    }
    state_ = State::kOpen;
    open_until_ = clock_() + open_for_;
  }
}

CircuitBreaker::State CircuitBreaker::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

struct RemoteLlm::Impl {
  Url url;
  std::optional<asio::ssl::context> tls;
};

RemoteLlm::RemoteLlm(RemoteLlmOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)),
      impl_(std::move(impl)),
      name_("remote:" + options_.base_url + " (" + options_.model + ")"),
      breaker_(options_.breaker_failures, options_.breaker_open, options_.clock) {}

RemoteLlm::~RemoteLlm() = default;

Result<std::unique_ptr<RemoteLlm>> RemoteLlm::Create(const RemoteLlmOptions& options) {
  auto impl = std::make_unique<Impl>();
  TXSCORE_ASSIGN_OR_RETURN(impl->url, ParseUrl(options.base_url));
  if (options.model.empty()) return InvalidArgument("remote.model is required", "remote.model");
  if (impl->url.tls) {
    for (const auto& [key, file] : {std::pair<const char*, const std::string&>{"remote.tls.ca", options.ca_file},
                                    {"remote.tls.certificate", options.certificate_file},
                                    {"remote.tls.private_key", options.private_key_file}}) {
      if (file.empty()) return InvalidArgument(std::string(key) + " is required for an https base_url", key);
      if (!std::ifstream(file).good()) return InvalidArgument(std::string(key) + ": cannot read " + file, key);
    }
    impl->tls.emplace(asio::ssl::context::tls_client);
    beast::error_code ec;
    impl->tls->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1);
    impl->tls->load_verify_file(options.ca_file, ec);
    if (!ec) impl->tls->use_certificate_chain_file(options.certificate_file, ec);
    if (!ec) impl->tls->use_private_key_file(options.private_key_file, asio::ssl::context::pem, ec);
    if (ec) return InvalidArgument("remote.tls: " + ec.message(), "remote.tls");
    impl->tls->set_verify_mode(asio::ssl::verify_peer);
  }
  return std::unique_ptr<RemoteLlm>(new RemoteLlm(options, std::move(impl)));
}

Result<llm::Findings> RemoteLlm::Analyze(const llm::TaskMessages& messages,
                                         std::chrono::steady_clock::time_point deadline) {
  const nlohmann::json body = {
      {"model", options_.model},
      // The case's text comes from outside: the pool's chat markup cannot be forged through it.
      {"messages",
       {{{"role", "system"}, {"content", messages.system}},
        {{"role", "user"}, {"content", llm::DefuseChatMarkup(messages.user)}}}},
      {"temperature", 0},
      {"max_tokens", options_.max_tokens},
      {"response_format",
       {{"type", "json_schema"},
        {"json_schema",
         {{"name", "findings"},
          {"strict", true},
          {"schema", nlohmann::json::parse(llm::ClaimAnalysisTask::Schema())}}}}}};
  const std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::chrono::milliseconds backoff = options_.backoff;
  Error last = Unavailable("no call was made");
  for (int attempt = 0; attempt <= options_.retries; ++attempt) {
    if (attempt > 0) {
      // Wait out the backoff, unless the deadline comes first.
      if (options_.clock() + backoff >= deadline) break;
      options_.sleep(backoff);
      backoff *= 2;
    }
    if (options_.clock() >= deadline) break;
    if (!breaker_.Allow()) {
      return Unavailable("the circuit to " + name_ + " is open (" + std::to_string(options_.breaker_failures) +
                         " failed calls in a row); last: " + last.message);
    }
    const auto call_deadline = std::min(deadline, options_.clock() + options_.call_timeout);
    Result<llm::Findings> findings = Call(text, call_deadline);
    if (findings.ok()) {
      breaker_.Succeeded();
      calls_ok_.fetch_add(1);
      findings->model_id = options_.model;
      return findings;
    }
    breaker_.Failed();
    last = findings.error();
  }
  if (options_.clock() >= deadline) {
    return DeadlineExceeded("the stage's deadline came before " + name_ + " answered: " + last.message);
  }
  return Unavailable(name_ + " did not answer: " + last.message);
}

namespace {

// One POST on `stream` (connected, handshaken), with every step bounded by the stream's
// expiry. Runs `io` until the reply is read or a step fails.
template <typename Stream>
void Post(Stream& stream, const http::request<http::string_body>& request, http::response<http::string_body>* reply,
          beast::flat_buffer* buffer, beast::error_code* error, std::string* step) {
  *step = "send";
  http::async_write(stream, request, [&stream, reply, buffer, error, step](beast::error_code ec, size_t) {
    if (ec) {
      *error = ec;
      return;
    }
    *step = "read the reply";
    http::async_read(stream, *buffer, *reply, [error](beast::error_code ec, size_t) { *error = ec; });
  });
}

}  // namespace

Result<llm::Findings> RemoteLlm::Call(const std::string& body, std::chrono::steady_clock::time_point call_deadline) {
  const Url& url = impl_->url;
  // The network runs on the real clock: the time left on the stage's clock, from now.
  const auto left = call_deadline - options_.clock();
  if (left <= Clock::duration::zero()) return DeadlineExceeded("no time left for a call");
  const auto expiry = Clock::now() + left;
  asio::io_context io;
  beast::error_code ec;
  std::string step = "resolve " + url.host;
  Result<tcp::resolver::results_type> resolved = ResolveBefore(url.host, url.port, expiry);
  if (!resolved.ok()) {
    calls_failed_.fetch_add(1);
    return Unavailable(resolved.error().message);
  }
  const tcp::resolver::results_type endpoints = std::move(resolved).value();
  http::request<http::string_body> request{http::verb::post, url.path + "/chat/completions", 11};
  request.set(http::field::host, url.host);
  request.set(http::field::content_type, "application/json");
  request.set(http::field::user_agent, "txscore");
  request.keep_alive(false);
  request.body() = body;
  request.prepare_payload();
  http::response<http::string_body> reply;  // Beast bounds its body (8 MB)
  beast::flat_buffer buffer;
  if (!url.tls) {
    beast::tcp_stream stream(io);
    stream.expires_at(expiry);
    step = "connect";
    stream.async_connect(endpoints, [&](beast::error_code connected, const tcp::endpoint&) {
      if (connected) {
        ec = connected;
        return;
      }
      Post(stream, request, &reply, &buffer, &ec, &step);
    });
    io.run();
  } else {
    beast::ssl_stream<beast::tcp_stream> stream(io, *impl_->tls);
    SSL* ssl = stream.native_handle();
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (IsIpAddress(url.host)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, url.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, url.host.c_str());
      X509_VERIFY_PARAM_set1_host(param, url.host.c_str(), 0);
    }
    beast::get_lowest_layer(stream).expires_at(expiry);
    step = "connect";
    beast::get_lowest_layer(stream).async_connect(endpoints, [&](beast::error_code connected, const tcp::endpoint&) {
      if (connected) {
        ec = connected;
        return;
      }
      step = "TLS handshake";
      stream.async_handshake(asio::ssl::stream_base::client, [&](beast::error_code shaken) {
        if (shaken) {
          ec = shaken;
          return;
        }
        Post(stream, request, &reply, &buffer, &ec, &step);
      });
    });
    io.run();
  }
  if (ec) {
    calls_failed_.fetch_add(1);
    if (ec == beast::error::timeout) return DeadlineExceeded("no answer within the call's time (at " + step + ")");
    return Unavailable("the call failed at " + step + ": " + ec.message());
  }
  if (reply.result_int() != 200) {
    calls_failed_.fetch_add(1);
    return Unavailable("HTTP " + std::to_string(reply.result_int()) + ": " + reply.body().substr(0, 300));
  }
  const nlohmann::json doc = nlohmann::json::parse(reply.body(), nullptr, /*allow_exceptions=*/false);
  const nlohmann::json* content = nullptr;
  if (!doc.is_discarded() && doc.contains("choices") && doc["choices"].is_array() && !doc["choices"].empty()) {
    const nlohmann::json& choice = doc["choices"][0];
    if (choice.contains("message") && choice["message"].contains("content") &&
        choice["message"]["content"].is_string()) {
      content = &choice["message"]["content"];
    }
  }
  if (content == nullptr) {
    calls_invalid_.fetch_add(1);
    return Internal("the reply is not a chat completion");
  }
  Result<llm::Findings> findings = llm::ClaimAnalysisTask::ParseFindings(content->get<std::string>());
  if (!findings.ok()) {
    calls_invalid_.fetch_add(1);
    return Internal("the reply's findings do not validate: " + findings.error().message);
  }
  return findings;
}

}  // namespace txscore::pipelines
