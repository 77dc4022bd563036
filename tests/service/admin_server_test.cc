// The admin port on its own (plaintext, two routes) against clients that send what no browser
// or probe would: unknown methods and paths, targets that are not absolute paths or climb with
// "..", oversized headers and bodies, malformed requests, tricklers and idle connections by
// the hundred. Each is refused as documented in service/admin_server.h, and the port goes on
// answering a well-behaved probe with its memory bounded.
#include "service/admin_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/rpc_test_support.h"

namespace txscore::service {
namespace {

using namespace std::chrono_literals;

class AdminServerTest : public ::testing::Test {
 protected:
  void Start(AdminLimits limits = {}) {
    std::map<std::string, AdminRoute> routes;
    routes["/healthz"] = AdminRoute([this] {
      healthz_calls_++;
      return HttpResponse{200, "text/plain", "ok\n"};
    });
    AdminRoute reload([this](const Caller&) {
      reload_calls_++;
      return HttpResponse{200, "application/json", "{}\n"};
    });
    reload.post = true;
    routes["/admin/reload"] = reload;
    // Echoes the body back, with the caller's target.
    AdminRoute echo;
    echo.post = true;
    echo.max_body_bytes = 64 * 1024;
    echo.request_handler = [](const AdminRequest& request, AdminResponder& responder) {
      responder.Respond({200, "text/plain", request.target + " " + request.body});
    };
    routes["/echo"] = echo;
    // Streams the body's words one part each, then as many more "tick" parts as it may
    // (until the client is gone), counting the ones refused.
    AdminRoute stream;
    stream.post = true;
    stream.request_handler = [this](const AdminRequest& request, AdminResponder& responder) {
      responder.Begin("text/event-stream");
      size_t start = 0;
      for (size_t space; (space = request.body.find(' ', start)) != std::string::npos; start = space + 1) {
        responder.Send("data: " + request.body.substr(start, space - start) + "\n\n");
      }
      responder.Send("data: " + request.body.substr(start) + "\n\n");
      if (!ticking_) return;
      for (int i = 0; i < 100000 && !responder.client_gone(); ++i) {
        if (!responder.Send("data: tick\n\n")) break;
        std::this_thread::sleep_for(1ms);
      }
      saw_client_gone_ = responder.client_gone();
    };
    routes["/stream"] = stream;
    // Answers whole after its client has gone (or after 10 s): a long answer in the making.
    AdminRoute wait;
    wait.post = true;
    wait.request_handler = [this](const AdminRequest&, AdminResponder& responder) {
      for (int i = 0; i < 1000 && !responder.client_gone(); ++i) {
        wait_saw_its_client_ = true;  // running, and its client was there
        std::this_thread::sleep_for(10ms);
      }
      saw_client_gone_ = responder.client_gone();
      responder.Respond({200, "text/plain", "late\n"});
    };
    routes["/wait"] = wait;
    AdminRoute silent;
    silent.post = true;
    silent.request_handler = [](const AdminRequest&, AdminResponder&) {};
    routes["/silent"] = silent;
    auto server =
        AdminServer::Create({.host = "127.0.0.1", .port = 0, .plaintext = true}, std::move(routes), nullptr, limits);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }

  // Sends `bytes` on a fresh connection and returns everything received until the server
  // closes it (requests say "Connection: close", refusals close anyway).
  std::string Exchange(const std::string& bytes) {
    int fd = testing::RawConnect(server_->port());
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::string received;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) received.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return received;
  }
  static int Status(const std::string& response) {
    return response.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(response.substr(9, 3)) : -1;
  }
  static std::string Get(const std::string& target, const std::string& extra_headers = "") {
    return "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers + "Connection: close\r\n\r\n";
  }
  static std::string Post(const std::string& target, const std::string& body) {
    return "POST " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
  }
  void ExpectStillServing() {
    const std::string response = Exchange(Get("/healthz"));
    EXPECT_EQ(Status(response), 200) << response;
    EXPECT_NE(response.find("\r\n\r\nok\n"), std::string::npos) << response;
  }

  std::atomic<int> healthz_calls_{0};
  std::atomic<int> reload_calls_{0};
  std::atomic<bool> ticking_{false};
  std::atomic<bool> saw_client_gone_{false};
  std::atomic<bool> wait_saw_its_client_{false};  // /wait's handler ran while its client was connected
  std::unique_ptr<AdminServer> server_;
};

// Cross-site request forgery: a page elsewhere cannot make a browser POST here; this port's own
// origin, and clients that send no Origin (curl, txscore, the openai client), may.
TEST_F(AdminServerTest, APostFromAnotherOriginIsRefused) {
  Start();
  const auto post_from = [&](const std::string& origin) {
    return Exchange("POST /admin/reload HTTP/1.1\r\nHost: localhost:9091\r\n" + origin +
                    "Content-Length: 0\r\nConnection: close\r\n\r\n");
  };
  const std::string forged = post_from("Origin: https://attacker.example\r\n");
  EXPECT_EQ(Status(forged), 403);
  EXPECT_NE(forged.find("a POST from another origin (https://attacker.example) is refused"), std::string::npos)
      << forged;
  EXPECT_EQ(Status(post_from("Origin: null\r\n")), 403);                    // a sandboxed frame or a file: page
  EXPECT_EQ(Status(post_from("Origin: https://localhost:9092\r\n")), 403);  // another port is another origin
  EXPECT_EQ(reload_calls_.load(), 0);
  EXPECT_EQ(Status(post_from("Origin: https://localhost:9091\r\n")), 200);
  EXPECT_EQ(Status(post_from("")), 200);
  EXPECT_EQ(reload_calls_.load(), 2);
  // A GET reads: a cross-origin page cannot read the answer (no CORS headers), so it is served.
  EXPECT_EQ(Status(Exchange(Get("/healthz", "Origin: https://attacker.example\r\n"))), 200);
}

TEST_F(AdminServerTest, AnUnknownPathIs404ListingThePathsAndAWrongMethodIs405) {
  Start();
  const std::string missing = Exchange(Get("/nope"));
  EXPECT_EQ(Status(missing), 404);
  EXPECT_NE(missing.find(
                R"({"error":"no such path","paths":["/admin/reload","/echo","/healthz","/silent","/stream","/wait"]})"),
            std::string::npos)
      << missing;
  EXPECT_EQ(Status(Exchange("DELETE /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")), 405);
  EXPECT_EQ(Status(Exchange("BREW /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")), 405);
  EXPECT_EQ(Status(Exchange(Post("/healthz", ""))), 405);
  const std::string get_reload = Exchange(Get("/admin/reload"));
  EXPECT_EQ(Status(get_reload), 405);
  EXPECT_NE(get_reload.find(R"({"error":"use POST"})"), std::string::npos) << get_reload;
  EXPECT_EQ(healthz_calls_.load(), 0);
  EXPECT_EQ(reload_calls_.load(), 0);
  EXPECT_EQ(Status(Exchange(Post("/admin/reload", ""))), 200);  // the control: the right method
  EXPECT_EQ(reload_calls_.load(), 1);
  ExpectStillServing();
}

TEST_F(AdminServerTest, APrefixRouteAnswersThePathsUnderItThatNoExactRouteNames) {
  std::map<std::string, AdminRoute> routes;
  const auto prefix = [](const std::string& tag) {
    AdminRoute route;
    route.path_handler = [tag](const Caller&, const std::string& path) {
      return HttpResponse{200, "text/plain", tag + " " + path};
    };
    return route;
  };
  routes["/v2/models/"] = prefix("models");
  routes["/v2/models/special/"] = prefix("special");
  routes["/v2/models/exact"] = AdminRoute([] { return HttpResponse{200, "text/plain", "exact"}; });
  server_ = AdminServer::Create({.host = "127.0.0.1", .port = 0, .plaintext = true}, std::move(routes)).value();
  server_->Start();
  const auto body = [&](const std::string& target) {
    const std::string response = Exchange(Get(target));
    return std::to_string(Status(response)) + " " + response.substr(response.find("\r\n\r\n") + 4);
  };
  EXPECT_EQ(body("/v2/models/fraud/ready"), "200 models /v2/models/fraud/ready");
  EXPECT_EQ(body("/v2/models/fraud?verbose=1"), "200 models /v2/models/fraud");  // the path, without the query
  EXPECT_EQ(body("/v2/models/special/x"), "200 special /v2/models/special/x");   // the longest prefix
  EXPECT_EQ(body("/v2/models/special"), "200 models /v2/models/special");
  EXPECT_EQ(body("/v2/models/exact"), "200 exact");      // an exact route first
  EXPECT_EQ(Status(Exchange(Get("/v2/models/"))), 404);  // the prefix itself is not under it
  EXPECT_EQ(Status(Exchange(Get("/v2/models"))), 404);
  EXPECT_EQ(Status(Exchange(Get("/v2/models/../x"))), 400);
  EXPECT_EQ(Status(Exchange(Post("/v2/models/fraud", ""))), 405);  // GET and HEAD only
}

TEST_F(AdminServerTest, ATargetThatIsNotAnAbsolutePathOrHasDotSegmentsIs400) {
  Start();
  for (const std::string target : {"healthz", "http://x/healthz", "*", "/../healthz", "/x/../healthz", "/./healthz",
                                   "/healthz/..", "/healthz/."}) {
    const std::string response = Exchange(Get(target));
    EXPECT_EQ(Status(response), 400) << target << ": " << response;
  }
  EXPECT_EQ(healthz_calls_.load(), 0);
  // Dots elsewhere are ordinary: escaped ones name no route, a query is not the path.
  EXPECT_EQ(Status(Exchange(Get("/%2e%2e/healthz"))), 404);
  EXPECT_EQ(Status(Exchange(Get("/..healthz"))), 404);
  EXPECT_EQ(Status(Exchange(Get("/healthz?from=../.."))), 200);
  EXPECT_EQ(healthz_calls_.load(), 1);
}

TEST_F(AdminServerTest, HeadersOverTheLimitAre431AndTheConnectionCloses) {
  Start();
  const std::string within = Exchange(Get("/healthz", "X-Padding: " + std::string(7000, 'a') + "\r\n"));
  EXPECT_EQ(Status(within), 200) << within.substr(0, 200);
  const std::string over = Exchange(Get("/healthz", "X-Padding: " + std::string(9000, 'a') + "\r\n"));
  EXPECT_EQ(Status(over), 431) << over.substr(0, 200);
  EXPECT_NE(over.find(R"({"error":"the request line and headers are over 8192 bytes"})"), std::string::npos) << over;
  // Many small headers add up the same way.
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  EXPECT_EQ(Status(Exchange(Get("/healthz", many))), 431);
  EXPECT_EQ(healthz_calls_.load(), 1);
  EXPECT_EQ(server_->bad_requests(), 2u);
  ExpectStillServing();
}

TEST_F(AdminServerTest, TheConfiguredHeaderLimitIsTheOneApplied) {
  Start({.max_header_bytes = 4096});  // Beast's own default is 8 KiB
  EXPECT_EQ(Status(Exchange(Get("/healthz", "X-Padding: " + std::string(3000, 'a') + "\r\n"))), 200);
  const std::string over = Exchange(Get("/healthz", "X-Padding: " + std::string(5000, 'a') + "\r\n"));
  EXPECT_EQ(Status(over), 431);
  EXPECT_NE(over.find("over 4096 bytes"), std::string::npos) << over;
}

TEST_F(AdminServerTest, BodiesOverTheLimitAre413WhateverTheFraming) {
  Start();
  EXPECT_EQ(Status(Exchange(Post("/admin/reload", std::string(8192, 'b')))), 200);  // at the limit
  const std::string over = Exchange(Post("/admin/reload", std::string(8193, 'b')));
  EXPECT_EQ(Status(over), 413) << over;
  EXPECT_NE(over.find(R"({"error":"the body is over 8192 bytes"})"), std::string::npos) << over;
  // Announced but never sent: refused on the header alone.
  EXPECT_EQ(Status(Exchange("POST /admin/reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000000\r\n\r\n")),
            413);
  // Chunked: no length up front, refused once the chunks pass the limit.
  std::string chunked = "POST /admin/reload HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 10; ++i) chunked += "400\r\n" + std::string(1024, 'c') + "\r\n";
  EXPECT_EQ(Status(Exchange(chunked + "0\r\n\r\n")), 413);
  EXPECT_EQ(reload_calls_.load(), 1);
  EXPECT_EQ(server_->bad_requests(), 3u);
  ExpectStillServing();
}

TEST_F(AdminServerTest, AChunkExtensionOrTrailerThatNeverEndsIsRefusedWithinTheBufferLimit) {
  Start();
  ExpectStillServing();
  // A chunk size line whose extension never ends; a trailer line that never ends. 64 MiB of
  // each, made before the baseline (this process is the client too).
  const std::string chunked = "POST /admin/reload HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string endless_extension = chunked + "5;ext=" + std::string(64 << 20, 'x');
  const std::string endless_trailer = chunked + "0\r\nX-Trailer: " + std::string(64 << 20, 'x');
  testing::ResetPeakResidentBytes();
  const size_t peak_before = testing::PeakResidentBytes();
  const std::string extension = Exchange(endless_extension);
  EXPECT_EQ(Status(extension), 413) << extension.substr(0, 200);
  EXPECT_NE(extension.find(R"({"error":"the request is over 16384 bytes"})"), std::string::npos) << extension;
  EXPECT_EQ(Status(Exchange(endless_trailer)), 413);
  testing::ExpectPeakGrowthBelow(peak_before, 32u << 20);
  EXPECT_EQ(reload_calls_.load(), 0);
  EXPECT_EQ(server_->bad_requests(), 2u);
  ExpectStillServing();
}

TEST_F(AdminServerTest, MalformedRequestsAre400) {
  Start();
  for (const std::string& request : std::vector<std::string>{
           std::string("GARBAGE\r\n\r\n"), std::string("GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n"),
           std::string("GET /healthz HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
           std::string("GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
           std::string("GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
           std::string("G\0T /healthz HTTP/1.1\r\n\r\n", 25)}) {
    const std::string response = Exchange(request);
    EXPECT_EQ(Status(response), 400) << request << ": " << response;
  }
  EXPECT_EQ(healthz_calls_.load(), 0);
  EXPECT_EQ(server_->bad_requests(), 6u);
  ExpectStillServing();
}

TEST_F(AdminServerTest, AmbiguousFramingIsRefusedAsRfc9112Says) {
  Start();
  const struct {
    std::string request;
    std::string why;
  } kAmbiguous[] = {
      {"POST /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: xchunked\r\n\r\n",
       "\"malformed HTTP request: Transfer-Encoding must be chunked alone (no other coding is accepted in a "
       "request)\""},
      {"POST /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
       "\"malformed HTTP request: Transfer-Encoding must be chunked alone (no other coding is accepted in a "
       "request)\""},
      // Beast's own parser refuses this one before the check above would.
      {"POST /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
       "0\r\n\r\n",
       "malformed HTTP request: bad Content-Length"},
      {"GET /healthz HTTP/1.1\r\n\r\n",
       "\"malformed HTTP request: an HTTP/1.1 request needs exactly one Host header\""},
      {"GET /healthz HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\n\r\n",
       "\"malformed HTTP request: an HTTP/1.1 request needs exactly one Host header\""},
      {"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nbody",
       "\"malformed HTTP request: Content-Length is given more than once\""},
      {"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4, 4\r\n\r\nbody", "Content-Length"},
  };
  for (const auto& ambiguous : kAmbiguous) {
    const std::string response = Exchange(ambiguous.request);
    EXPECT_EQ(Status(response), 400) << ambiguous.request << ": " << response;
    EXPECT_NE(response.find(ambiguous.why), std::string::npos) << ambiguous.request << ": " << response;
  }
  EXPECT_EQ(healthz_calls_.load(), 0);
  // HTTP/1.0 needs no Host; a header folded over lines is one header (Beast unfolds it, as
  // RFC 9112 5.2 allows), not a second request.
  const std::string old_client = Exchange("GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_NE(old_client.find(" 200 OK\r\n"), std::string::npos) << old_client;
  const std::string folded =
      Exchange("GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Note: one\r\n two\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(Status(folded), 200) << folded;
  EXPECT_EQ(folded.find("HTTP/1.1", 1), std::string::npos) << folded;  // one answer
  ExpectStillServing();
}

TEST_F(AdminServerTest, TricklingAndIdleClientsAreCutOffAtTheRequestTimeoutWhileOthersAreServed) {
  Start({.request_timeout = 500ms});
  const std::string request = Get("/healthz");
  int trickler = testing::RawConnect(server_->port());
  int idle = testing::RawConnect(server_->port());
  const auto start = std::chrono::steady_clock::now();
  size_t sent = 0;
  // One byte every 50 ms: the whole request would take about 2.5 s.
  for (; sent < request.size(); ++sent) {
    if (::send(trickler, request.data() + sent, 1, MSG_NOSIGNAL) != 1) break;
    char buf[16];
    if (::recv(trickler, buf, sizeof buf, MSG_DONTWAIT) == 0) break;  // closed by the server
    if (sent % 10 == 0) ExpectStillServing();
    std::this_thread::sleep_for(50ms);
  }
  const auto cut_off_after = std::chrono::steady_clock::now() - start;
  EXPECT_LT(sent, request.size()) << "the trickler sent its whole request";
  EXPECT_GE(cut_off_after, 500ms);
  char buf[16];
  EXPECT_EQ(::recv(idle, buf, sizeof buf, 0), 0);  // the idle one, closed without a word
  ::close(trickler);
  ::close(idle);
  EXPECT_EQ(healthz_calls_.load(), static_cast<int>((sent + 9) / 10));  // only the well-behaved probes
}

TEST_F(AdminServerTest, ConnectionsOverTheLimitAreClosedAtOnceAndTheirSlotsComeBack) {
  Start({.max_connections = 8});
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) held.push_back(testing::RawConnect(server_->port()));
  ASSERT_TRUE([&] {
    for (int i = 0; i < 1000 && server_->connections_open() < 8; ++i) std::this_thread::sleep_for(10ms);
    return server_->connections_open() == 8;
  }());
  int over = testing::RawConnect(server_->port());
  char buf[16];
  EXPECT_EQ(::recv(over, buf, sizeof buf, 0), 0);  // accepted and closed
  ::close(over);
  EXPECT_EQ(server_->connections_refused(), 1u);
  for (int fd : held) ::close(fd);
  ASSERT_TRUE([&] {
    for (int i = 0; i < 1000 && server_->connections_open() > 0; ++i) std::this_thread::sleep_for(10ms);
    return server_->connections_open() == 0;
  }());
  ExpectStillServing();
}

TEST_F(AdminServerTest, AFloodOfBadRequestsLogsOneWarningAndCountsEveryOne) {
  Start();
  ::testing::internal::CaptureStderr();
  const std::string oversized = Get("/healthz", "X-Padding: " + std::string(9000, 'a') + "\r\n");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(Status(Exchange(oversized)), 431);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(logged.begin(), logged.end(), '\n'), 1) << logged;  // at most one every 10 s
  EXPECT_NE(logged.find("admin: answered 431 to 127.0.0.1:"), std::string::npos) << logged;
  EXPECT_EQ(server_->bad_requests(), 50u);
}

TEST_F(AdminServerTest, RefusedRequestsLeaveMemoryBounded) {
  Start();
  ExpectStillServing();
  testing::ResetPeakResidentBytes();
  const size_t peak_before = testing::PeakResidentBytes();
  // 200 clients each sending a megabyte of header: the port reads 8 KiB of each.
  const std::string huge = Get("/healthz", "X-Padding: " + std::string(1 << 20, 'h') + "\r\n");
  for (int i = 0; i < 200; ++i) EXPECT_EQ(Status(Exchange(huge)), 431);
  testing::ExpectPeakGrowthBelow(peak_before, 32u << 20);
  ExpectStillServing();
}

// The body of a chunked response, chunks joined.
std::string Dechunk(const std::string& body) {
  std::string out;
  for (size_t pos = 0;;) {
    const size_t line_end = body.find("\r\n", pos);
    if (line_end == std::string::npos) return out + "<cut>";
    const size_t size = std::stoul(body.substr(pos, line_end - pos), nullptr, 16);
    if (size == 0) return out;
    out += body.substr(line_end + 2, size);
    pos = line_end + 2 + size + 2;
  }
}

TEST_F(AdminServerTest, ARequestHandlerReadsTheBodyUpToItsRoutesOwnLimit) {
  Start();
  const std::string body(20000, 'b');  // over the port's 8 KiB, under the route's 64 KiB
  std::string response = Exchange(Post("/echo?x=1", body));
  EXPECT_EQ(Status(response), 200) << response.substr(0, 200);
  EXPECT_NE(response.find("\r\n\r\n/echo?x=1 " + body), std::string::npos);
  EXPECT_EQ(Status(Exchange(Post("/echo", std::string(70000, 'b')))), 413);
  EXPECT_EQ(Status(Exchange(Post("/admin/reload", body))), 413);  // other routes keep the port's limit
  response = Exchange(Post("/silent", "{}"));
  EXPECT_EQ(Status(response), 500) << response;
  EXPECT_NE(response.find("the handler gave no answer"), std::string::npos);
}

TEST_F(AdminServerTest, AStreamedAnswerComesInChunksAndTheConnectionServesTheNextRequest) {
  Start();
  int fd = testing::RawConnect(server_->port());
  const std::string request = "POST /stream HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\n\r\nalpha beta!";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string received;
  char buf[4096];
  while (received.find("\r\n0\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << received;
    received.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(Status(received), 200) << received;
  const size_t head_end = received.find("\r\n\r\n");
  const std::string head = received.substr(0, head_end);
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  EXPECT_EQ(head.find("Connection: close"), std::string::npos) << head;
  EXPECT_EQ(Dechunk(received.substr(head_end + 4)), "data: alpha\n\ndata: beta!\n\n");
  // The same connection answers another request.
  const std::string probe = Get("/healthz");
  ::send(fd, probe.data(), probe.size(), MSG_NOSIGNAL);
  received.clear();
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) received.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(Status(received), 200) << received;
}

TEST_F(AdminServerTest, AStreamingHandlerLearnsTheClientHasGone) {
  Start();
  ticking_ = true;
  int fd = testing::RawConnect(server_->port());
  const std::string request = Post("/stream", "go");
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  char buf[4096];
  std::string received;
  while (received.find("tick") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    received.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);       // with data unread: the server's next writes fail
  ASSERT_TRUE([&] {  // the handler's loop ends within its first failed writes
    for (int i = 0; i < 3000 && !saw_client_gone_.load(); ++i) std::this_thread::sleep_for(10ms);
    return saw_client_gone_.load();
  }());
  ExpectStillServing();
}

TEST_F(AdminServerTest, AHandlerMakingAWholeAnswerLearnsTheClientHasGone) {
  Start();
  int fd = testing::RawConnect(server_->port());
  const std::string request = Post("/wait", "{}");
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  ASSERT_TRUE([&] {  // the handler runs and sees its client there
    for (int i = 0; i < 3000 && !wait_saw_its_client_.load(); ++i) std::this_thread::sleep_for(10ms);
    return wait_saw_its_client_.load();
  }());
  EXPECT_FALSE(saw_client_gone_.load());
  ::close(fd);  // nothing was written to it: only the closed connection says so
  ASSERT_TRUE([&] {
    for (int i = 0; i < 6000 && !saw_client_gone_.load(); ++i) std::this_thread::sleep_for(10ms);  // up to a minute
    return saw_client_gone_.load();
  }());
  ExpectStillServing();
}

}  // namespace
}  // namespace txscore::service
