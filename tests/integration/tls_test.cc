// Both ports over mutual TLS: who is admitted, who is refused and how it is counted, what only
// operators may do and how it is audited, and certificates reloaded without a restart.
#include "service/tls.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thrift/transport/TTransportException.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "gen-cpp/TxScore.h"
#include "service/rpc_client.h"
#include "service/scoring_server.h"
#include "service/thrift_handler.h"
#include "service/transaction_json.h"
#include "storage/audit_log.h"
#include "tests/memory_support.h"
#include "tests/rpc_test_support.h"
#include "tests/server_test_support.h"
#include "tests/test_pki.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

namespace fs = std::filesystem;

// A TLS client written with OpenSSL directly, for what txscore's own client never does: no
// certificate, an old protocol version, an HTTP request on the admin port.
struct RawTlsClient {
  std::string cert_dir;              // empty: present no certificate
  int max_version = TLS1_3_VERSION;  // TLS1_1_VERSION: an old client
  std::string groups;                // the key-exchange groups offered; empty: OpenSSL's defaults
  // Connects, shakes hands, writes `request` (none when empty), and returns what the server sent
  // back before it closed (empty when it refused). `shook_hands`: set to whether the handshake
  // completed, as the client sees it.
  std::string Exchange(int port, const std::string& request, bool* shook_hands = nullptr) const {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_security_level(ctx, 0);  // let an old version be offered at all
    SSL_CTX_set_min_proto_version(ctx, TLS1_VERSION);
    SSL_CTX_set_max_proto_version(ctx, max_version);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    if (!groups.empty()) SSL_CTX_set1_groups_list(ctx, groups.c_str());
    if (!cert_dir.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx, (cert_dir + "/tls.crt").c_str());
      SSL_CTX_use_PrivateKey_file(ctx, (cert_dir + "/tls.key").c_str(), SSL_FILETYPE_PEM);
    }
    const int fd = testing::RawConnect(port);
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    std::string answer;
    const bool connected = SSL_connect(ssl) == 1;
    if (shook_hands != nullptr) *shook_hands = connected;
    if (connected && !request.empty() && SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
      char buffer[4096];
      for (int n; (n = SSL_read(ssl, buffer, sizeof buffer)) > 0;) answer.append(buffer, static_cast<size_t>(n));
    }
    ERR_clear_error();
    SSL_free(ssl);
    ::close(fd);
    SSL_CTX_free(ctx);
    return answer;
  }
};

std::string HttpRequestText(const std::string& method, const std::string& target) {
  return method + " " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
}

// The status code of an HTTP answer ("HTTP/1.1 200 OK..." -> 200), 0 when there is none.
int HttpStatus(const std::string& answer) {
  return answer.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(answer.substr(9, 3)) : 0;
}

TlsClientFiles Files(const std::string& dir) { return TlsClientFilesIn(dir); }

class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  void Start() {
    testing::WriteTestPipeline(dir_, "wal", testing::TestTransport::kTls);
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  // A score call over a fresh connection presenting `files`: true when it was answered.
  bool Scores(const TlsClientFiles& files, const std::string& host = "127.0.0.1") {
    Result<std::unique_ptr<RpcConnection>> connection =
        RpcConnection::Open({host, server_->rpc_port()}, {.tls = files});
    if (!connection.ok()) return false;
    try {
      rpc::HealthStatus health;
      (*connection)->client().health(health);
      return health.ready;
    } catch (const apache::thrift::TException&) {
      return false;
    }
  }
  // Waits (up to 10 s) until the Thrift port has counted `count` refusals for `reason`: the
  // server closes a refused client before it counts, so the client may see the close first.
  uint64_t WaitForThriftRefusals(TlsRefusal reason, uint64_t count) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server_->rpc_stats().tls_refusals[static_cast<size_t>(reason)] < count &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return server_->rpc_stats().tls_refusals[static_cast<size_t>(reason)];
  }
  // Stops the server, replaces `from` by `to` in its settings file, and starts it again.
  void RestartWith(const std::string& from, const std::string& to) {
    server_->Stop();
    std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
    settings.replace(settings.find(from), from.size(), to);
    testing::WriteFile(testing::TestSettingsPath(dir_), settings);
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  // `tx` scored over a fresh connection presenting the certificate in `dir`; throws what the
  // server answers.
  rpc::ScoreResult ScoreAs(const std::string& dir, const rpc::Transaction& tx) {
    std::unique_ptr<RpcConnection> connection =
        RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(dir)}).value();
    rpc::ScoreResult result;
    connection->client().score(result, tx);
    return result;
  }
  std::string Metrics() {
    return RawTlsClient{testing::SharedTestPki().admin_dir}.Exchange(server_->admin_port(),
                                                                     HttpRequestText("GET", "/metrics"));
  }

  testing::TempDir dir_;
  std::unique_ptr<ScoringServer> server_;
};

TEST_F(TlsServerTest, AnAllowedClientIsServedOverMutualTls) {
  const testing::TestPki& pki = testing::SharedTestPki();
  Result<std::unique_ptr<RpcConnection>> connection =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)});
  ASSERT_TRUE(connection.ok()) << connection.error().ToString();
  const rpc::Transaction tx = ToThriftTransaction(testing::ValidTransaction("over-tls"));
  rpc::ScoreResult result;
  (*connection)->client().score(result, tx);
  EXPECT_EQ(result.request_id, "over-tls");
  const storage::AuditRecord audited = server_->audit_log().ReadLast(1).value().at(0);
  EXPECT_EQ(audited.request_id, "over-tls");
  EXPECT_EQ(audited.caller.rfind("txscore-client (127.0.0.1:", 0), 0u) << audited.caller;  // PCI DSS 10.2.2
}

TEST_F(TlsServerTest, AnIdentityFromASanUriIsAdmitted) { EXPECT_TRUE(Scores(Files(testing::SharedTestPki().uri_dir))); }

TEST_F(TlsServerTest, EachBadClientIsRefusedCountedByReasonAndTheServerGoesOn) {
  const testing::TestPki& pki = testing::SharedTestPki();
  const int port = server_->rpc_port();
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(Scores(Files(pki.stranger_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
  // Logged as one warning naming the client and the reason, no stack trace or exception text.
  // (The test's own Thrift client, in this process, may log its side of the hang-up too.)
  const std::string logged = ::testing::internal::GetCapturedStderr();
  const size_t at = logged.find("warning thrift: refused a TLS client from 127.0.0.1:");
  EXPECT_NE(at, std::string::npos) << logged;
  EXPECT_EQ(logged.find("refused a TLS client", logged.find('\n', at)), std::string::npos) << logged;
  EXPECT_NE(logged.find("identity_not_allowed"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("terminate"), std::string::npos) << logged;
  EXPECT_FALSE(Scores(Files(pki.expired_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kExpiredCertificate, 1), 1u);
  EXPECT_FALSE(Scores(Files(pki.rogue_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kUntrustedCertificate, 1), 1u);
  EXPECT_EQ(RawTlsClient{}.Exchange(port, "anything"), "");
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kNoCertificate, 1), 1u);
  EXPECT_EQ((RawTlsClient{pki.client_dir, TLS1_1_VERSION}.Exchange(port, "anything")), "");
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kProtocolVersion, 1), 1u);
  EXPECT_EQ((RawTlsClient{pki.client_dir, TLS1_VERSION}.Exchange(port, "anything")), "");
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kProtocolVersion, 2), 2u);
  // A CN counts only when the certificate has no SAN name; a CA's certificate is no client's.
  EXPECT_FALSE(Scores(Files(pki.cn_behind_san_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 2), 2u);
  EXPECT_FALSE(Scores(Files(pki.ca_as_client_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kUntrustedCertificate, 2), 2u);
  EXPECT_FALSE(Scores({}));  // a plaintext Thrift client
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kNotTls, 1), 1u);
  // Nothing else was counted, and a good client is still served.
  uint64_t total = 0;
  for (uint64_t n : server_->rpc_stats().tls_refusals) total += n;
  EXPECT_EQ(total, 9u);
  EXPECT_TRUE(Scores(Files(pki.client_dir)));
  const std::string metrics = Metrics();
  EXPECT_NE(metrics.find("txscore_tls_refusals_total{port=\"thrift\",reason=\"expired_certificate\"} 1\n"),
            std::string::npos)
      << metrics;
  // Each refused authentication is in the audit trail (PCI DSS 10.2.1.4), one entry each, in
  // order; what offered no credentials (an old protocol, plaintext) is not.
  server_->refusal_records().Flush();
  std::vector<std::string> recorded;
  const Result<std::vector<storage::AuditAction>> actions = server_->audit_log().ReadLastActions(50);
  ASSERT_TRUE(actions.ok()) << actions.error().ToString();
  for (const storage::AuditAction& action : *actions) {
    if (action.action != "authentication_refused") continue;
    EXPECT_EQ(action.caller.rfind("unauthenticated 127.0.0.1:", 0), 0u) << action.caller;
    EXPECT_EQ(action.target, "thrift");
    EXPECT_EQ(action.outcome, "denied");
    recorded.push_back(action.detail.substr(0, action.detail.find(':')));
  }
  EXPECT_EQ(recorded, (std::vector<std::string>{"untrusted_certificate", "identity_not_allowed", "no_certificate",
                                                "untrusted_certificate", "expired_certificate",
                                                "identity_not_allowed"}));  // newest first
}

// The CA case above is refused by OpenSSL (its key usage signs no handshake); this one passes
// OpenSSL's checks and reaches txscore's: the detail logged is txscore's own.
TEST_F(TlsServerTest, ACaCertificateOpenSslAcceptsAsAClientIsRefusedByTxscoresCheck) {
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(Scores(Files(testing::SharedTestPki().client_ca_as_client_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kUntrustedCertificate, 1), 1u);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find("untrusted_certificate (a CA certificate is not a client certificate)"), std::string::npos)
      << logged;
}

// "txscore-admin\0.evil.example" is no txscore-admin (a C string would read it so).
TEST_F(TlsServerTest, ANameWithAnEmbeddedNulNamesNobody) {
  EXPECT_FALSE(Scores(Files(testing::SharedTestPki().nul_name_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
}

TEST_F(TlsServerTest, ANameThatOnlyBeginsLikeAnAllowedOneIsRefused) {
  const testing::TestPki& pki = testing::SharedTestPki();
  EXPECT_FALSE(Scores(Files(pki.longer_name_dir)));
  EXPECT_FALSE(Scores(Files(pki.shorter_name_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 2), 2u);
}

TEST_F(TlsServerTest, AHandshakeNotDoneWithinTheFrameTimeoutIsCutOff) {
  const int fd = testing::RawConnect(server_->rpc_port());  // connects and says nothing
  char byte = 0;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0);  // closed by the server (frame_timeout_ms: 2 s), not by our 10 s timeout
  ::close(fd);
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kHandshakeTimeout, 1), 1u);
}

TEST_F(TlsServerTest, TheAdminPortAdmitsOnlyItsAllowlistAndReloadOnlyOperators) {
  const testing::TestPki& pki = testing::SharedTestPki();
  const int port = server_->admin_port();
  // txscore-client may score but is not on the admin port's allowlist.
  EXPECT_EQ(RawTlsClient{pki.client_dir}.Exchange(port, HttpRequestText("GET", "/readyz")), "");
  server_->refusal_records().Flush();  // the refusal is recorded before the attempts below
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.admin_dir}.Exchange(port, HttpRequestText("GET", "/readyz"))), 200);
  // The URI identity is on the admin port's allowlist but is no operator: it may read, not reload.
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.uri_dir}.Exchange(port, HttpRequestText("GET", "/healthz"))), 200);
  const std::string denied = RawTlsClient{pki.uri_dir}.Exchange(port, HttpRequestText("POST", "/admin/reload"));
  EXPECT_EQ(HttpStatus(denied), 403);
  EXPECT_NE(denied.find("spiffe://txscore.test/client is not an operator"), std::string::npos) << denied;
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.admin_dir}.Exchange(port, HttpRequestText("POST", "/admin/reload"))), 200);

  EXPECT_NE(Metrics().find("txscore_tls_refusals_total{port=\"admin\",reason=\"identity_not_allowed\"} 1\n"),
            std::string::npos);
  // Both attempts are in the audit trail, newest first, with who made them, after the refused
  // authentication.
  const std::vector<storage::AuditAction> actions = server_->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), 3u);
  EXPECT_EQ(actions[2].action, "authentication_refused");
  EXPECT_EQ(actions[2].target, "admin");
  EXPECT_EQ(actions[2].detail.rfind("identity_not_allowed: ", 0), 0u) << actions[2].detail;
  EXPECT_EQ(actions[0].action, "reload");
  EXPECT_EQ(actions[0].outcome, "applied");
  EXPECT_EQ(actions[0].caller.rfind("txscore-admin (127.0.0.1:", 0), 0u) << actions[0].caller;
  EXPECT_EQ(actions[0].target, testing::TestSettingsPath(dir_));
  EXPECT_EQ(actions[1].action, "reload");
  EXPECT_EQ(actions[1].outcome, "denied");
  EXPECT_EQ(actions[1].caller.rfind("spiffe://txscore.test/client (127.0.0.1:", 0), 0u) << actions[1].caller;
  // Decisions read back without the actions among them.
  EXPECT_TRUE(server_->audit_log().ReadLast(10).value().empty());
  EXPECT_EQ(server_->admin_port(), port);
}

TEST_F(TlsServerTest, StrangersShakingHandsOnTheAdminPortCannotKeepAProbeOut) {
  const int port = server_->admin_port();
  // Every one of the port's 256 connections taken by a client that never says hello (each
  // would hold its slot for the 10 s handshake timeout, and reconnect).
  std::vector<int> silent;
  for (int i = 0; i < 256; ++i) silent.push_back(testing::RawConnect(port));
  // Connected is not yet accepted: wait until the server holds all 256.
  const auto open_now = [this] {
    const std::string metrics = server_->metrics().RenderPrometheus();
    const size_t at = metrics.find("\ntxscore_admin_connections_open ");
    return at == std::string::npos ? -1 : std::stoi(metrics.substr(at + 32));
  };
  for (int i = 0; i < 6000 && open_now() < 256; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(open_now(), 256);
  // A probe with a certificate is answered: the stranger shaking hands the longest made room.
  EXPECT_EQ(
      HttpStatus(RawTlsClient{testing::SharedTestPki().admin_dir}.Exchange(port, HttpRequestText("GET", "/healthz"))),
      200);
  const std::string metrics = server_->metrics().RenderPrometheus();
  EXPECT_NE(metrics.find("txscore_admin_handshakes_evicted_total 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_admin_connections_refused_total 0\n"), std::string::npos) << metrics;
  for (int fd : silent) ::close(fd);
}

TEST_F(TlsServerTest, JobControlIsForOperatorsAndEveryAttemptIsAudited) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::unique_ptr<RpcConnection> client =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::ClaimsJobRequest request;
  request.__set_input_path("claims.jsonl");
  rpc::ClaimsJobStatus status;
  try {
    client->client().submitClaimsJob(status, request);
    ADD_FAILURE() << "a non-operator submitted a job";
  } catch (const rpc::AccessDenied& e) {
    EXPECT_EQ(e.reason,
              "txscore-client is not an operator (security.tls.operators): only operators may submit claims jobs");
  }
  EXPECT_THROW(client->client().cancelClaimsJob(status, "some-job"), rpc::AccessDenied);
  // An operator gets past the check (this server runs no jobs, which it then says).
  std::unique_ptr<RpcConnection> admin =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.admin_dir)}).value();
  EXPECT_THROW(admin->client().submitClaimsJob(status, request), rpc::ServiceError);
  const std::vector<storage::AuditAction> actions = server_->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].action, "cancel_claims_job");
  EXPECT_EQ(actions[0].target, "some-job");
  EXPECT_EQ(actions[0].outcome, "denied");
  EXPECT_EQ(actions[1].action, "submit_claims_job");
  EXPECT_EQ(actions[1].target, "claims.jsonl");
  EXPECT_EQ(actions[1].outcome, "denied");
  EXPECT_EQ(actions[1].caller.rfind("txscore-client (127.0.0.1:", 0), 0u) << actions[1].caller;
}

// A denied operation's target is the caller's text, logged and audited: a card number in it is
// cut from both, also where the rest has the shape of a token txscore makes (the log-line rule
// leaves those whole) and where the card is grouped.
TEST_F(TlsServerTest, ACardNumberInADeniedOperationsTargetReachesNeitherTheLogNorTheTrail) {
  const std::string hex = "ac9b1680c1171d8c337f244c3774381013054796f43d212966aa8b659e556703";
  const std::vector<std::string> targets = {"/in/4111111111111111_" + hex + ".jsonl",
                                            "/in/pan-5555-5555-5555-4444_" + hex + ".jsonl",
                                            "/in/4111111111111111" + hex.substr(16) + ".jsonl"};
  std::unique_ptr<RpcConnection> client =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(testing::SharedTestPki().client_dir)})
          .value();
  ::testing::internal::CaptureStderr();
  for (const std::string& target : targets) {
    rpc::ClaimsJobRequest request;
    request.__set_input_path(target);
    rpc::ClaimsJobStatus status;
    EXPECT_THROW(client->client().submitClaimsJob(status, request), rpc::AccessDenied);
  }
  const std::string logged = ::testing::internal::GetCapturedStderr();
  const std::vector<storage::AuditAction> actions = server_->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), targets.size());
  for (const char* card : {"4111111111111111", "5555-5555-5555-4444"}) {
    EXPECT_EQ(logged.find(card), std::string::npos) << logged;
    for (const storage::AuditAction& action : actions) EXPECT_EQ(action.target.find(card), std::string::npos);
  }
  EXPECT_NE(logged.find("on /in/[card number redacted]_ac9b1680"), std::string::npos) << logged;
  EXPECT_EQ(actions[2].target.rfind("/in/[card number redacted]_ac9b1680", 0), 0u) << actions[2].target;
}

TEST_F(TlsServerTest, APartialTlsRecordIsWaitedForNotPolled) {
  // 9 bytes of a ClientHello, then nothing: the server must wait for the rest, not poll.
  const int fd = testing::RawConnect(server_->rpc_port());
  const unsigned char partial_hello[] = {0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4};
  ASSERT_EQ(::send(fd, partial_hello, sizeof partial_hello, 0), static_cast<ssize_t>(sizeof partial_hello));
  // Meanwhile 20 clients shake hands and are served. A server polling the half-open connection
  // (it used to take a whole core) would count, for it, steps that did nothing all that while.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(Scores(Files(testing::SharedTestPki().client_dir)));
  EXPECT_LE(server_->rpc_stats().tls_most_idle_handshake_steps, 1u);
  ::close(fd);
}

TEST_F(TlsServerTest, ClientsStillShakingHandsDoNotLockOutAGoodOne) {
  RestartWith("workers: 4", "workers: 4\n  max_connections: 5");
  std::vector<int> silent;  // connect and never say hello
  for (int i = 0; i < 8; ++i) silent.push_back(testing::RawConnect(server_->rpc_port()));
  EXPECT_TRUE(Scores(Files(testing::SharedTestPki().client_dir)));
  // 9 connections for 5 slots: the 4 that shook hands the longest were closed to make room.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->rpc_stats().idle_evictions < 4 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server_->rpc_stats().idle_evictions, 4u);
  for (int fd : silent) ::close(fd);
}

// Rounds of mutual-TLS connections, 200 held open, a health() each, then closed: once the
// first round has warmed the server's buffers and sessions, five more leave its resident
// memory within 16 MB (36,000 connections once took `txscore serve` from 204 to 383 MB, kept).
TEST_F(TlsServerTest, RoundsOfConnectionsLeaveNoMemoryBehind) {
  const TlsClientFiles files = Files(testing::SharedTestPki().client_dir);
  const auto round = [&] {
    std::vector<std::unique_ptr<RpcConnection>> open;
    for (int i = 0; i < 200; ++i) {
      Result<std::unique_ptr<RpcConnection>> connection =
          RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = files});
      ASSERT_TRUE(connection.ok()) << connection.error().ToString();
      rpc::HealthStatus health;
      (*connection)->client().health(health);  // the handshake happens here
      ASSERT_TRUE(health.ready);
      open.push_back(std::move(connection).value());
    }
  };
  round();
  ASSERT_TRUE(testing::Eventually([&] { return server_->rpc_stats().connections_open == 0; }));
  const size_t resident_before = testing::ResidentBytes();
  for (int i = 0; i < 5; ++i) round();
  ASSERT_TRUE(testing::Eventually([&] { return server_->rpc_stats().connections_open == 0; }));
  testing::ExpectResidentGrowthBelow(resident_before, 16u << 20);
}

TEST_F(TlsServerTest, TlsOneThreeOnlyServersAreReachedByTxscoresOwnClient) {
  RestartWith("    thrift_clients:", "    min_version: \"1.3\"\n    thrift_clients:");
  EXPECT_TRUE(Scores(Files(testing::SharedTestPki().client_dir)));
  EXPECT_EQ((RawTlsClient{testing::SharedTestPki().client_dir, TLS1_2_VERSION}.Exchange(server_->rpc_port(), "x")), "");
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kProtocolVersion, 1), 1u);
}

// A partner's sub-CA under the shared root, name-constrained to DNS:.partner.example: OpenSSL
// accepts its certificates that name txscore-admin by CN, beside an IP SAN or as a bare URI
// (a constraint on DNS names binds neither), so those forms must name nobody.
TEST_F(TlsServerTest, ACnAnIpSanOrABareUriFromAConstrainedSubCaNamesNobody) {
  const testing::TestPki& pki = testing::SharedTestPki();
  RestartWith("thrift_clients: [", "thrift_clients: [svc.partner.example, ");
  EXPECT_TRUE(Scores(Files(pki.partner_dir)));           // the sub-CA's chain is good: a name within its constraint
  EXPECT_FALSE(Scores(Files(pki.partner_outside_dir)));  // the constraint is real: DNS txscore-admin fails it
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kUntrustedCertificate, 1), 1u);
  // Each of these passed OpenSSL's checks and reached txscore's own: counted as names not allowed.
  EXPECT_FALSE(Scores(Files(pki.partner_cn_only_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
  EXPECT_FALSE(Scores(Files(pki.partner_ip_only_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 2), 2u);
  EXPECT_FALSE(Scores(Files(pki.partner_uri_only_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 3), 3u);
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.partner_uri_only_dir}.Exchange(server_->admin_port(),
                                                                       HttpRequestText("GET", "/healthz"))),
            0);
  // cn_identity: true is what lets a CN name someone, and why it stays off with a shared root.
  RestartWith("    thrift_clients:", "    cn_identity: true\n    thrift_clients:");
  EXPECT_TRUE(Scores(Files(pki.partner_cn_only_dir)));
  EXPECT_FALSE(Scores(Files(pki.partner_ip_only_dir)));  // a SAN without DNS or a prefixed URI still keeps the CN out
}

TEST_F(TlsServerTest, AUriIsAnIdentityOnlyUnderAConfiguredPrefix) {
  const testing::TestPki& pki = testing::SharedTestPki();
  EXPECT_TRUE(Scores(Files(pki.uri_dir)));
  // The same URI written as a DNS name is no host name: nobody (URIs and DNS names never mix).
  EXPECT_FALSE(Scores(Files(pki.dns_uri_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
  // Without the trust domain the same certificate names nobody, although its URI is allowed.
  RestartWith("    uri_identity_prefixes: [\"spiffe://txscore.test/\"]\n", "");
  EXPECT_FALSE(Scores(Files(pki.uri_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
  // A prefix that only begins the same way is another trust domain.
  RestartWith("    thrift_clients:", "    uri_identity_prefixes: [\"spiffe://txscore.tes/\"]\n    thrift_clients:");
  EXPECT_FALSE(Scores(Files(pki.uri_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
}

// client_ca is a bundle of two roots (ours and an enterprise CA shared with other services):
// bound to our CA, txscore-admin is refused from the enterprise CA, and admitted from ours.
TEST_F(TlsServerTest, AnIdentityBoundToItsCaIsRefusedFromAnotherCaOfTheBundle) {
  const testing::TestPki& pki = testing::SharedTestPki();
  RestartWith("client_ca: " + pki.ca_certificate, "client_ca: " + pki.ca_bundle);
  EXPECT_TRUE(Scores(Files(pki.enterprise_admin_dir)));  // without a binding, any CA of the bundle names anyone
  RestartWith("    thrift_clients:", "    issuers:\n      - ca: " + pki.ca_certificate +
                                         "\n        identities: [txscore-admin, \"spiffe://txscore.test/\"]\n"
                                         "    thrift_clients:");
  EXPECT_FALSE(Scores(Files(pki.enterprise_admin_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kWrongIssuer, 1), 1u);
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.enterprise_admin_dir}.Exchange(server_->admin_port(),
                                                                       HttpRequestText("GET", "/healthz"))),
            0);
  EXPECT_TRUE(Scores(Files(pki.admin_dir)));
  EXPECT_TRUE(Scores(Files(pki.uri_dir)));  // under the bound trust domain, from its CA
  // The partner's sub-CA lies under the bound root, but it is not the root: its URI in our trust
  // domain (URIs are outside its DNS constraint) is refused.
  EXPECT_FALSE(Scores(Files(pki.partner_spiffe_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kWrongIssuer, 2), 2u);
  EXPECT_TRUE(Scores(Files(pki.client_dir)));  // not bound: any CA of the bundle
  // Bound to the partner's sub-CA, our own root's certificate no longer names txscore-admin.
  RestartWith("      - ca: " + pki.ca_certificate, "      - ca: " + pki.partner_ca_certificate);
  EXPECT_FALSE(Scores(Files(pki.admin_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kWrongIssuer, 1), 1u);  // counted by the new server
}

TEST_F(TlsServerTest, ARevokedCertificateIsRefused) {
  const testing::TestPki& pki = testing::SharedTestPki();
  EXPECT_TRUE(Scores(Files(pki.revoked_dir)));  // before the CRL
  RestartWith("    thrift_clients:", "    crl_file: " + pki.crl + "\n    thrift_clients:");
  EXPECT_FALSE(Scores(Files(pki.revoked_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kRevokedCertificate, 1), 1u);
  EXPECT_TRUE(Scores(Files(pki.client_dir)));
  // A client whose CA has no CRL in the file cannot be checked, and is refused.
  RestartWith("client_ca: " + pki.ca_certificate, "client_ca: " + pki.ca_bundle);
  EXPECT_FALSE(Scores(Files(pki.enterprise_admin_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kRevokedCertificate, 1), 1u);
}

TEST_F(TlsServerTest, ACrlPastItsNextUpdateRefusesEveryClientOfItsCa) {
  const testing::TestPki& pki = testing::SharedTestPki();
  RestartWith("    thrift_clients:", "    crl_file: " + pki.stale_crl + "\n    thrift_clients:");
  // The CRL revokes nothing, but nobody can tell what was revoked since it went stale.
  EXPECT_FALSE(Scores(Files(pki.client_dir)));
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kRevokedCertificate, 1), 1u);
  RestartWith("    crl_file: " + pki.stale_crl, "    crl_file: " + pki.empty_crl);
  EXPECT_TRUE(Scores(Files(pki.client_dir)));
}

TEST_F(TlsServerTest, OnlyTheConfiguredKeyExchangeGroupsAreAccepted) {
  const testing::TestPki& pki = testing::SharedTestPki();
  const auto healthz_with = [&](const std::string& groups) {
    RawTlsClient client{pki.admin_dir};
    client.groups = groups;
    return HttpStatus(client.Exchange(server_->admin_port(), HttpRequestText("GET", "/healthz")));
  };
  // The Thrift port, where a replayed ffdhe8192 ClientHello cost the server 130 ms of CPU each.
  const auto thrift_handshake_with = [&](const std::string& groups) {
    RawTlsClient client{pki.client_dir};
    client.groups = groups;
    bool shook_hands = false;
    client.Exchange(server_->rpc_port(), "", &shook_hands);
    return shook_hands;
  };
  EXPECT_EQ(healthz_with("X25519"), 200);
  EXPECT_EQ(healthz_with("P-384"), 200);
  EXPECT_EQ(healthz_with("ffdhe2048"), 0);  // OpenSSL 3.0 would take it; ~50 X25519 handshakes of CPU at 8192
  EXPECT_EQ(healthz_with("ffdhe8192"), 0);
  EXPECT_TRUE(thrift_handshake_with("X25519"));
  EXPECT_TRUE(thrift_handshake_with("P-256"));
  EXPECT_FALSE(thrift_handshake_with("ffdhe2048"));
  EXPECT_FALSE(thrift_handshake_with("ffdhe8192"));
  RestartWith("    thrift_clients:", "    groups: [X25519, ffdhe2048]\n    thrift_clients:");
  EXPECT_EQ(healthz_with("ffdhe2048"), 200);  // the settings may widen the list
  EXPECT_EQ(healthz_with("P-256"), 0);
  EXPECT_TRUE(thrift_handshake_with("ffdhe2048"));
  EXPECT_FALSE(thrift_handshake_with("P-256"));
}

// A client (the CLI, a shard forwarding to its owner) takes a server only when its certificate
// names the address dialled: with one certificate per shard, a pod cannot answer for another.
TEST_F(TlsServerTest, AClientRefusesAServerWhoseCertificateDoesNotNameTheAddressItDialled) {
  const testing::TestPki& pki = testing::SharedTestPki();
  RestartWith("    certificate: " + pki.server_certificate + "\n    private_key: " + pki.server_key,
              "    certificate: " + pki.localhost_only_server_dir +
                  "/tls.crt\n    private_key: " + pki.localhost_only_server_dir + "/tls.key");
  EXPECT_FALSE(Scores(Files(pki.client_dir), "127.0.0.1"));  // not among its names
  EXPECT_TRUE(Scores(Files(pki.client_dir), "localhost"));   // the same server, by the name it has
}

// forwarded_by (and older_card_tokens) move a card's history between replicas: only an identity
// on sharding.peer_identities may send them, however allowed it is otherwise.
TEST_F(TlsServerTest, OnlyAShardPeersIdentityMayForwardATransaction) {
  const testing::TestPki& pki = testing::SharedTestPki();
  RestartWith("security:\n", "sharding:\n  self: s0\n  client_tls_dir: " + pki.admin_dir +
                                 "\n  peer_identities: [txscore-admin]\n  shards:\n    - {name: s0, address: "
                                 "'127.0.0.1:1'}\nsecurity:\n");
  rpc::Transaction tx = ToThriftTransaction(testing::ValidTransaction("forwarded"));
  tx.__set_forwarded_by("s0");
  try {
    ScoreAs(pki.client_dir, tx);  // on thrift_clients, not a peer
    ADD_FAILURE() << "a forwarded transaction was taken from an identity that is not a shard peer";
  } catch (const rpc::InvalidRequest& e) {
    EXPECT_EQ(e.field, "forwarded_by");
    EXPECT_EQ(e.reason.rfind("txscore-client (127.0.0.1:", 0), 0u) << e.reason;
    EXPECT_NE(e.reason.find(" is not a shard peer (sharding.peer_identities): it may not forward transactions"),
              std::string::npos)
        << e.reason;
  }
  EXPECT_TRUE(server_->audit_log().ReadLast(1).value().empty());  // nothing decided, nothing stored
  EXPECT_EQ(ScoreAs(pki.admin_dir, tx).request_id, "forwarded");  // the peer's is scored
}

// Scoring by card_token acts on a card's history without its number: a right of its own.
TEST_F(TlsServerTest, ACardTokenIsTakenOnlyFromIdentitiesWithThatRight) {
  const testing::TestPki& pki = testing::SharedTestPki();
  rpc::Transaction tx = ToThriftTransaction(testing::ValidTransaction("by-token"));
  tx.__isset.card_number = false;
  tx.card_number.clear();
  tx.__set_card_token("caller-token-1");
  try {
    ScoreAs(pki.client_dir, tx);
    ADD_FAILURE() << "a card token was taken from an identity without the right";
  } catch (const rpc::InvalidRequest& e) {
    EXPECT_EQ(e.field, "card_token");
    EXPECT_EQ(e.reason.rfind("txscore-client (127.0.0.1:", 0), 0u) << e.reason;
    EXPECT_NE(e.reason.find(") may not send card_token (security.tls.card_token_clients): send card_number"),
              std::string::npos)
        << e.reason;
  }
  {  // scoreBatch takes the same path: the item is refused
    std::unique_ptr<RpcConnection> connection =
        RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
    std::vector<rpc::BatchItem> items;
    connection->client().scoreBatch(items, {tx});
    ASSERT_EQ(items.size(), 1u);
    ASSERT_TRUE(items[0].__isset.error);
    EXPECT_EQ(items[0].error.field, "card_token");
  }
  EXPECT_TRUE(server_->audit_log().ReadLast(1).value().empty());  // nothing decided, nothing stored
  RestartWith("    thrift_clients:", "    card_token_clients: [txscore-client]\n    thrift_clients:");
  EXPECT_EQ(ScoreAs(pki.client_dir, tx).card_token, "caller-token-1");
  EXPECT_EQ(server_->audit_log().ReadLast(1).value().at(0).card_token, "caller-token-1");
  EXPECT_THROW(ScoreAs(pki.admin_dir, tx), rpc::InvalidRequest);  // an operator, but not given this right
}

// The body of an HTTP answer (after the blank line that ends its headers).
std::string HttpBody(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

TEST_F(TlsServerTest, TheOpenAiApiIsForItsOwnIdentitiesAlone) {
  const testing::TestPki& pki = testing::SharedTestPki();
  const int port = server_->admin_port();
  const std::string post =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
      "Content-Length: 2\r\nConnection: close\r\n\r\n{}";
  // The URI identity is admitted to the admin port (it may read metrics) but not to the API.
  const std::string denied = RawTlsClient{pki.uri_dir}.Exchange(port, post);
  EXPECT_EQ(HttpStatus(denied), 403);
  EXPECT_NE(HttpBody(denied).find("spiffe://txscore.test/client may not use the OpenAI-compatible API "
                                  "(security.tls.llm_api_clients)"),
            std::string::npos)
      << denied;
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.uri_dir}.Exchange(port, HttpRequestText("GET", "/v1/models"))), 403);
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.uri_dir}.Exchange(port, HttpRequestText("GET", "/metrics"))), 200);
  // txscore-admin is on llm_api_clients: past the right, to the API's own answer.
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.admin_dir}.Exchange(port, HttpRequestText("GET", "/v1/models"))), 200);
  const int answered = HttpStatus(RawTlsClient{pki.admin_dir}.Exchange(port, post));
  EXPECT_NE(answered, 403);
  EXPECT_NE(answered, 0);
}

TEST_F(TlsServerTest, AMonitoringIdentitySeesTheDashboardWithoutCardTokens) {
  const testing::TestPki& pki = testing::SharedTestPki();
  ASSERT_TRUE(Scores(Files(pki.client_dir)));
  std::unique_ptr<RpcConnection> connection =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::ScoreResult result;
  connection->client().score(result, ToThriftTransaction(testing::ValidTransaction("seen")));
  const auto recent = [&](const std::string& dir) {
    const std::string answer =
        RawTlsClient{dir}.Exchange(server_->admin_port(), HttpRequestText("GET", "/api/dashboard"));
    EXPECT_EQ(HttpStatus(answer), 200) << answer;
    const nlohmann::json state = nlohmann::json::parse(HttpBody(answer), nullptr, false);
    return state.is_object() ? state.value("recent_decisions", nlohmann::json::array()) : nlohmann::json::array();
  };
  const nlohmann::json monitored = recent(pki.uri_dir);
  ASSERT_EQ(monitored.size(), 1u) << monitored;
  EXPECT_EQ(monitored[0]["request_id"], "seen");
  EXPECT_EQ(monitored[0]["card_token"], "(operators only)");
  const nlohmann::json operated = recent(pki.admin_dir);
  ASSERT_EQ(operated.size(), 1u) << operated;
  EXPECT_EQ(operated[0]["card_token"], result.card_token);
  // A reload's detail names files: for operators only as well.
  ASSERT_TRUE(server_->Reload("test").applied);
  const auto reloads = [&](const std::string& dir) {
    const std::string answer =
        RawTlsClient{dir}.Exchange(server_->admin_port(), HttpRequestText("GET", "/api/dashboard"));
    const nlohmann::json state = nlohmann::json::parse(HttpBody(answer), nullptr, false);
    return state.is_object() ? state.value("reloads", nlohmann::json::array()) : nlohmann::json::array();
  };
  ASSERT_FALSE(reloads(pki.uri_dir).empty());
  EXPECT_EQ(reloads(pki.uri_dir).back()["detail"], "(operators only)");
  EXPECT_NE(reloads(pki.admin_dir).back()["detail"], "(operators only)");
}

TEST_F(TlsServerTest, AClaimsJobsStatusIsForOperators) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::unique_ptr<RpcConnection> client =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::ClaimsJobStatus status;
  try {
    client->client().claimsJobStatus(status, "some-job");
    ADD_FAILURE() << "a non-operator read a job's status";
  } catch (const rpc::AccessDenied& e) {
    EXPECT_EQ(e.reason,
              "txscore-client is not an operator (security.tls.operators): only operators may read a "
              "claims job's status");
  }
  std::unique_ptr<RpcConnection> admin =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.admin_dir)}).value();
  EXPECT_THROW(admin->client().claimsJobStatus(status, "some-job"), rpc::ServiceError);  // past the check: no jobs
  const std::vector<storage::AuditAction> actions = server_->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].action, "claims_job_status");
  EXPECT_EQ(actions[0].outcome, "denied");
}

TEST(PlaintextJobControl, IsForLocalCallersOnly) {
  const std::string address = testing::NonLoopbackAddress();
  if (address.empty()) GTEST_SKIP() << "this machine has no address but loopback to call from";
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir));
  settings.replace(settings.find("host: 127.0.0.1"), 15, "host: 0.0.0.0");
  testing::WriteFile(testing::TestSettingsPath(dir), settings);
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  rpc::ClaimsJobRequest request;
  request.__set_input_path("claims.jsonl");
  rpc::ClaimsJobStatus status;
  std::unique_ptr<RpcConnection> remote = RpcConnection::Open({address, (*server)->rpc_port()}).value();
  EXPECT_THROW(remote->client().submitClaimsJob(status, request), rpc::AccessDenied);
  std::unique_ptr<RpcConnection> local = RpcConnection::Open({"127.0.0.1", (*server)->rpc_port()}).value();
  EXPECT_THROW(local->client().submitClaimsJob(status, request), rpc::ServiceError);  // past the check: no jobs here
  const std::vector<storage::AuditAction> actions = (*server)->audit_log().ReadLastActions(10).value();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].outcome, "denied");
  EXPECT_EQ(actions[0].caller.rfind("unauthenticated " + address + ":", 0), 0u) << actions[0].caller;
  (*server)->Stop();
}

// The settings name copies of the certificate files, so the test can replace them on disk.
class TlsReloadTest : public TlsServerTest {
 protected:
  void SetUp() override {
    const testing::TestPki& pki = testing::SharedTestPki();
    fs::copy_file(pki.server_certificate, dir_.file("server.crt"));
    fs::copy_file(pki.server_key, dir_.file("server.key"));
    testing::WriteTestPipeline(dir_, "wal", testing::TestTransport::kTls);
    std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
    settings.replace(settings.find(pki.server_certificate), pki.server_certificate.size(), "server.crt");
    settings.replace(settings.find(pki.server_key), pki.server_key.size(), "server.key");
    testing::WriteFile(testing::TestSettingsPath(dir_), settings);
    auto server = testing::CreateTestServer(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
};

TEST_F(TlsReloadTest, AReloadServesTheCertificateNowOnDiskAndOpenConnectionsKeepTheirs) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::unique_ptr<RpcConnection> before =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::HealthStatus health;
  before->client().health(health);
  // The server's certificate is rotated on disk to one from another CA, then reloaded.
  fs::copy_file(pki.other_server_dir + "/tls.crt", dir_.file("server.crt"), fs::copy_options::overwrite_existing);
  fs::copy_file(pki.other_server_dir + "/tls.key", dir_.file("server.key"), fs::copy_options::overwrite_existing);
  ::chmod(dir_.file("server.key").c_str(), 0600);
  EXPECT_TRUE(Scores(Files(pki.client_dir)));  // not before the reload
  ASSERT_TRUE(server_->Reload("test").applied);
  // New clients trusting only the old CA refuse the new certificate; those trusting the new CA connect.
  EXPECT_FALSE(Scores(Files(pki.client_dir)));
  TlsClientFiles trusting_new_ca = Files(pki.client_dir);
  trusting_new_ca.ca = pki.other_server_dir + "/ca.crt";
  EXPECT_TRUE(Scores(trusting_new_ca));
  // The connection opened before the reload goes on.
  before->client().health(health);
  EXPECT_TRUE(health.ready);
}

TEST_F(TlsReloadTest, AReloadTakesRightsAwayFromOpenConnectionsToo) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::unique_ptr<RpcConnection> admin =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.admin_dir)}).value();
  std::unique_ptr<RpcConnection> client =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::HealthStatus health;
  admin->client().health(health);
  client->client().health(health);
  // txscore-admin is no operator any more, and txscore-client no longer on the Thrift port's list.
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  settings.replace(settings.find("operators: [txscore-admin]"), 26, "operators: []");
  const std::string allowed = "thrift_clients: [txscore-client, ";
  settings.replace(settings.find(allowed), allowed.size(), "thrift_clients: [");
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  rpc::ClaimsJobRequest request;
  request.__set_input_path("claims.jsonl");
  rpc::ClaimsJobStatus status;
  EXPECT_THROW(admin->client().submitClaimsJob(status, request), rpc::AccessDenied);
  EXPECT_THROW(client->client().health(health), apache::thrift::transport::TTransportException);
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kIdentityNotAllowed, 1), 1u);
  admin->client().health(health);  // still admitted, as a caller who is no operator
  EXPECT_TRUE(health.ready);
}

TEST_F(TlsReloadTest, AReloadAppliesAChangedAllowlistAndRefusesUnusableFiles) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  const std::string allowed = "thrift_clients: [txscore-client, ";
  settings.replace(settings.find(allowed), allowed.size(), "thrift_clients: [");
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  EXPECT_FALSE(Scores(Files(pki.client_dir)));
  EXPECT_TRUE(Scores(Files(pki.admin_dir)));
  // A key that does not belong to the certificate: refused, and the running set keeps serving.
  fs::copy_file(pki.other_server_dir + "/tls.key", dir_.file("server.key"), fs::copy_options::overwrite_existing);
  const ScoringServer::ReloadOutcome refused = server_->Reload("test");
  EXPECT_FALSE(refused.applied);
  EXPECT_NE(refused.detail.find("cannot load the TLS private key " + dir_.file("server.key") +
                                ": error:05800074:x509 certificate routines::key values mismatch"),
            std::string::npos)
      << refused.detail;
  EXPECT_TRUE(Scores(Files(pki.admin_dir)));
}

TEST_F(TlsReloadTest, AReloadVerifiesOpenConnectionsAgainWithTheNewCrl) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::unique_ptr<RpcConnection> revoked =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.revoked_dir)}).value();
  std::unique_ptr<RpcConnection> good =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  rpc::HealthStatus health;
  revoked->client().health(health);
  good->client().health(health);
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  settings.replace(settings.find("    thrift_clients:"), 0, "    crl_file: " + pki.crl + "\n");
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  EXPECT_THROW(revoked->client().health(health), apache::thrift::transport::TTransportException);
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kRevokedCertificate, 1), 1u);
  good->client().health(health);
  EXPECT_TRUE(health.ready);
}

TEST_F(TlsReloadTest, AReloadClosesAnOpenConnectionWhoseCertificateHasSinceExpired) {
  const testing::TestPki& pki = testing::SharedTestPki();
  // A certificate that expires a few seconds from now; a loaded machine that connects too late
  // tries again with a longer one.
  std::unique_ptr<RpcConnection> expiring;
  std::time_t expires_at = 0;
  rpc::HealthStatus health;
  uint64_t expired_too_soon = 0;  // each counted as a refusal by the server
  for (long seconds = 3; expiring == nullptr && seconds <= 96; seconds *= 2) {
    const std::string dir = testing::IssueClientValidFor("expiring-" + std::to_string(seconds), seconds);
    expires_at = std::time(nullptr) + seconds;  // taken after: never before the certificate's notAfter
    Result<std::unique_ptr<RpcConnection>> opened =
        RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(dir)});
    try {
      if (opened.ok()) {
        (*opened)->client().health(health);
        expiring = std::move(opened).value();
        break;
      }
    } catch (const apache::thrift::transport::TTransportException&) {
    }
    ++expired_too_soon;
  }
  ASSERT_NE(expiring, nullptr) << "no short-lived certificate was taken before it expired";
  std::unique_ptr<RpcConnection> good =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.client_dir)}).value();
  good->client().health(health);  // its handshake now: a connection that never shakes hands is cut off
  // Waits for the event itself: the clock past the certificate's notAfter.
  while (std::time(nullptr) <= expires_at) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  expiring->client().health(health);  // without a reload, an open connection is not checked again
  ASSERT_TRUE(server_->Reload("test").applied);
  EXPECT_THROW(expiring->client().health(health), apache::thrift::transport::TTransportException);
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kExpiredCertificate, expired_too_soon + 1), expired_too_soon + 1);
  good->client().health(health);
  EXPECT_TRUE(health.ready);
}

TEST_F(TlsReloadTest, AReloadThatRemovesACaClosesItsOpenConnections) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  settings.replace(settings.find(pki.ca_certificate), pki.ca_certificate.size(), pki.ca_bundle);
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  std::unique_ptr<RpcConnection> ours =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.admin_dir)}).value();
  std::unique_ptr<RpcConnection> enterprise =
      RpcConnection::Open({"127.0.0.1", server_->rpc_port()}, {.tls = Files(pki.enterprise_admin_dir)}).value();
  rpc::HealthStatus health;
  ours->client().health(health);
  enterprise->client().health(health);
  // The enterprise CA leaves client_ca: its open connection goes at its next request.
  settings.replace(settings.find(pki.ca_bundle), pki.ca_bundle.size(), pki.ca_certificate);
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  EXPECT_THROW(enterprise->client().health(health), apache::thrift::transport::TTransportException);
  EXPECT_EQ(WaitForThriftRefusals(TlsRefusal::kUntrustedCertificate, 1), 1u);
  ours->client().health(health);
  EXPECT_TRUE(health.ready);
}

// One HTTPS connection kept open across requests (keep-alive), presenting `cert_dir`.
class KeptAdminConnection {
 public:
  KeptAdminConnection(int port, const std::string& cert_dir) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    SSL_CTX_use_certificate_chain_file(ctx_, (cert_dir + "/tls.crt").c_str());
    SSL_CTX_use_PrivateKey_file(ctx_, (cert_dir + "/tls.key").c_str(), SSL_FILETYPE_PEM);
    fd_ = testing::RawConnect(port);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    connected_ = SSL_connect(ssl_) == 1;
  }
  ~KeptAdminConnection() {
    SSL_free(ssl_);
    ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  // The status of GET `target` on this connection; 0 when the server closed it instead.
  int Get(const std::string& target) {
    const std::string request = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n";
    if (!connected_ || SSL_write(ssl_, request.data(), static_cast<int>(request.size())) <= 0) return 0;
    std::string answer;
    char buffer[4096];
    while (true) {
      const size_t head_end = answer.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        const size_t at = answer.find("Content-Length: ");
        const size_t length = at == std::string::npos ? 0 : std::stoul(answer.substr(at + 16));
        if (answer.size() >= head_end + 4 + length) break;
      }
      const int n = SSL_read(ssl_, buffer, sizeof buffer);
      if (n <= 0) return 0;
      answer.append(buffer, static_cast<size_t>(n));
    }
    ERR_clear_error();
    return HttpStatus(answer);
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool connected_ = false;
};

// The admin port verifies an open connection again after a reload, as the Thrift port does.
TEST_F(TlsReloadTest, AReloadThatRemovesACaClosesItsOpenAdminConnections) {
  const testing::TestPki& pki = testing::SharedTestPki();
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir_));
  settings.replace(settings.find(pki.ca_certificate), pki.ca_certificate.size(), pki.ca_bundle);
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  KeptAdminConnection ours(server_->admin_port(), pki.admin_dir);
  KeptAdminConnection enterprise(server_->admin_port(), pki.enterprise_admin_dir);
  EXPECT_EQ(ours.Get("/healthz"), 200);
  EXPECT_EQ(enterprise.Get("/healthz"), 200);
  EXPECT_EQ(enterprise.Get("/healthz"), 200);  // the connection is kept
  settings.replace(settings.find(pki.ca_bundle), pki.ca_bundle.size(), pki.ca_certificate);
  testing::WriteFile(testing::TestSettingsPath(dir_), settings);
  ASSERT_TRUE(server_->Reload("test").applied);
  EXPECT_EQ(enterprise.Get("/healthz"), 0);  // txscore-admin still, but its CA is gone: closed
  EXPECT_EQ(ours.Get("/healthz"), 200);
}

// The case the admin port cannot defend: 256 clients with certificates each holding a
// connection open (none is a stranger to evict). A liveness probe sent to admin.probe_port,
// a listener of its own on loopback, is answered all the same, so the fill cannot get the
// replica restarted; the probe port answers the health routes and nothing else.
TEST_F(TlsServerTest, TheProbePortAnswersWhileClientsWithCertificatesHoldEveryAdminConnection) {
  // The admin port on every address, as the Kubernetes manifests have it.
  RestartWith("admin:\n  host: 127.0.0.1\n  port: 0\n", "admin:\n  host: 0.0.0.0\n  port: 0\n  probe_port: 0\n");
  const int probe_port = server_->probe_port();
  ASSERT_NE(probe_port, 0);
  const testing::TestPki& pki = testing::SharedTestPki();
  std::vector<std::unique_ptr<KeptAdminConnection>> held;
  for (int i = 0; i < 256; ++i) {
    held.push_back(std::make_unique<KeptAdminConnection>(server_->admin_port(), pki.admin_dir));
    ASSERT_EQ(held.back()->Get("/healthz"), 200) << "connection " << i;
  }
  // The admin port is full of authenticated connections: a probe sent there is closed unanswered.
  EXPECT_EQ(HttpStatus(RawTlsClient{pki.admin_dir}.Exchange(server_->admin_port(), HttpRequestText("GET", "/healthz"))),
            0);
  for (const char* path : {"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"}) {
    EXPECT_EQ(testing::AdminGet(probe_port, path).status, 200) << path;
  }
  EXPECT_EQ(testing::AdminGet(probe_port, "/metrics").status, 404);
  EXPECT_EQ(testing::AdminGet(probe_port, "/api/dashboard").status, 404);
  EXPECT_EQ(testing::AdminGet(probe_port, "/v1/models").status, 404);
  // The probe port listens on 127.0.0.1 alone, wherever the admin port listens: at another
  // address of this host the admin port accepts and the probe port refuses.
  const auto connects_at_127_0_0_2 = [](int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(0x7f000002);
    const int connected = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    const int error = errno;
    ::close(fd);
    return connected == 0 ? 0 : error;
  };
  EXPECT_EQ(connects_at_127_0_0_2(server_->admin_port()), 0);
  EXPECT_EQ(connects_at_127_0_0_2(probe_port), ECONNREFUSED);
  EXPECT_EQ(held.front()->Get("/healthz"), 200);  // the fill was still in place
}

TEST(TlsSettings, AServerWithoutTlsOrAnExplicitPlaintextDoesNotStart) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  std::string settings = testing::ReadFile(testing::TestSettingsPath(dir));
  settings.erase(settings.find("  plaintext: true\n"), std::string("  plaintext: true\n").size());  // server: TLS
  testing::WriteFile(testing::TestSettingsPath(dir), settings);
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));
  EXPECT_TRUE(testing::IsError(
      server, ErrorCode::kInvalidArgument,
      testing::TestSettingsPath(dir) +
          ": security.tls is missing: both ports serve TLS with client certificates unless server.plaintext and "
          "admin.plaintext say true (scripts/make-demo-pki.sh makes a demo CA and certificates; docs/settings.md)"));
}

TEST(TlsSettings, APrivateKeyOthersMayReadIsRefused) {
  const testing::TestPki& pki = testing::SharedTestPki();
  testing::TempDir dir;
  fs::copy_file(pki.server_key, dir.file("server.key"));
  TlsConfig config;
  config.certificate = pki.server_certificate;
  config.private_key = dir.file("server.key");
  config.client_ca = pki.ca_certificate;
  for (const mode_t mode : {0644, 0640, 0604}) {  // others, group alone, others alone
    ::chmod(dir.file("server.key").c_str(), mode);
    char shown[8];
    std::snprintf(shown, sizeof shown, "%04o", static_cast<unsigned>(mode));
    EXPECT_TRUE(testing::IsError(TlsServerContext::Create(config), ErrorCode::kInvalidArgument,
                                 "the TLS private key " + dir.file("server.key") + " has mode " + shown +
                                     ": group or others may read it; only its owner may (chmod 600 " +
                                     dir.file("server.key") + ")"));
  }
  ::chmod(dir.file("server.key").c_str(), 0600);
  EXPECT_TRUE(TlsServerContext::Create(config).ok());
}

}  // namespace
}  // namespace txscore::service
