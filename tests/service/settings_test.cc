#include "service/settings.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/test_support.h"

namespace txscore::service {
namespace {

// A valid settings file whose relative paths resolve inside `dir`.
class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.file("card.key"), testing::TestCardKey());
    testing::WriteFile(dir_.file("p.yaml"), "stages: []\n");  // only its existence is checked here
  }
  Result<ServiceSettings> Parse(const std::string& yaml) { return ParseServiceSettings(yaml, dir_.file("s.yaml")); }
  std::string Where(int line, int column) {
    return dir_.file("s.yaml") + ":" + std::to_string(line) + ":" + std::to_string(column) + ": ";
  }

  // `relative` beside the test's directory: what "../relative" in its file resolves to.
  std::string Beside(const std::string& relative) const {
    return (std::filesystem::path(dir_.path()).parent_path() / relative).string();
  }

  static constexpr char kValid[] =
      "pipeline: p.yaml\n"
      "storage:\n"
      "  path: db\n"
      "security:\n"
      "  card_key_file: card.key\n";
  testing::TempDir dir_;
};

TEST_F(SettingsTest, ATabInTheIndentationIsNamedWithItsLineAndColumn) {
  auto settings = Parse("pipeline: p.yaml\nstorage:\n  path: db\nsecurity:\n\tcard_key_file: card.key\n");
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.error().message.rfind(
                Where(5, 1) + "a tab in the indentation (YAML indents with spaces only; yaml-cpp said at ", 0),
            0u)
      << settings.error().message;
  // A tab in a comment's indentation is not blamed: yaml-cpp's own error is given.
  auto other = Parse("pipeline: p.yaml\n\t# a comment\nstorage: {path: db\n");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.error().message.find("a tab"), std::string::npos) << other.error().message;
  // Without the tab the same file parses: the message was about the tab.
  EXPECT_TRUE(Parse("pipeline: p.yaml\nstorage:\n  path: db\nsecurity:\n  card_key_file: card.key\n").ok());
}

TEST_F(SettingsTest, MinimalFileGetsDefaultsAndResolvedPaths) {
  auto settings = Parse(kValid);
  ASSERT_TRUE(settings.ok()) << settings.error().ToString();
  EXPECT_EQ(settings->source_path, dir_.file("s.yaml"));
  EXPECT_EQ(settings->pipeline, dir_.file("p.yaml"));
  EXPECT_EQ(settings->server.host, "0.0.0.0");
  EXPECT_EQ(settings->server.port, 9090);
  EXPECT_EQ(settings->server.workers, 8);
  EXPECT_EQ(settings->server.io_threads, 1);
  EXPECT_EQ(settings->server.waiting_threads, 32);
  EXPECT_EQ(settings->server.max_handshakes, 64);
  EXPECT_EQ(settings->server.max_connections, 4096);
  EXPECT_EQ(settings->server.max_queued_requests, 1024);
  EXPECT_EQ(settings->server.frame_timeout_ms, 5000);
  EXPECT_EQ(settings->server.idle_timeout_ms, 600000);
  EXPECT_EQ(settings->server.limits.max_string_bytes, 65536);
  EXPECT_EQ(settings->admin.host, "127.0.0.1");
  EXPECT_EQ(settings->admin.port, 9091);
  EXPECT_EQ(settings->storage.path, dir_.file("db"));
  EXPECT_EQ(settings->storage.durability, storage::Durability::kSync);
  EXPECT_EQ(settings->storage.audit_checkpoint_every, 1000);
  EXPECT_EQ(settings->security.card_key_file, dir_.file("card.key"));
  EXPECT_EQ(settings->jobs.claims_pipeline, "");
  EXPECT_EQ(settings->devices.backend.library, "");
}

// config/txscore.yaml and config/batch.yaml name var/ files that exist only after set-up;
// their shape is checked with the paths pointed at this test's files.
TEST_F(SettingsTest, TheShippedServeSettingsParse) {
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/txscore.yaml");
  for (auto [from, to] : {std::pair<std::string, std::string>{"keyset: ../var/keyset.json", "keyset: card.key"},
                          {"pipeline: pipeline.yaml", "pipeline: p.yaml"},
                          {"claims_pipeline: claims.yaml", "claims_pipeline: p.yaml"},
                          {"../var/pki/server/tls.crt", "card.key"},
                          {"../var/pki/server/tls.key", "card.key"},
                          {"../var/pki/ca.crt", "card.key"},
                          {"- ca: ../var/pki/ca.crt", "- ca: card.key"}}) {
    yaml.replace(yaml.find(from), from.size(), to);
  }
  auto settings = Parse(yaml);
  ASSERT_TRUE(settings.ok()) << settings.error().ToString();
  EXPECT_EQ(settings->server.host, "127.0.0.1");
  EXPECT_EQ(settings->server.port, 9090);
  EXPECT_EQ(settings->admin.port, 9091);
  EXPECT_EQ(settings->storage.path, Beside("var/db"));
  EXPECT_EQ(settings->jobs.claims_pipeline, dir_.file("p.yaml"));
  EXPECT_EQ(settings->jobs.priority, JobsConfig::Priority::kIdle);
  EXPECT_EQ(settings->devices.backend.library, Beside("build/libtxscore_emulated_device.so"));
  // Both ports over mutual TLS; the demo clients' identities.
  EXPECT_FALSE(settings->server.plaintext);
  EXPECT_FALSE(settings->admin.plaintext);
  ASSERT_TRUE(settings->security.tls.has_value());
  EXPECT_EQ(settings->security.tls->thrift_clients, (std::vector<std::string>{"txscore-client", "txscore-admin"}));
  EXPECT_EQ(settings->security.tls->admin_clients, std::vector<std::string>{"txscore-admin"});
  EXPECT_EQ(settings->security.tls->operators, std::vector<std::string>{"txscore-admin"});
}

TEST_F(SettingsTest, TheShippedBatchSettingsParse) {
  std::string yaml = testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/config/batch.yaml");
  for (auto [from, to] : {std::pair<std::string, std::string>{"keyset: ../var/keyset.json", "keyset: card.key"},
                          {"pipeline: claims.yaml", "pipeline: p.yaml"}}) {
    yaml.replace(yaml.find(from), from.size(), to);
  }
  auto settings = Parse(yaml);
  ASSERT_TRUE(settings.ok()) << settings.error().ToString();
  EXPECT_EQ(settings->storage.path, Beside("var/db-claims"));
  EXPECT_EQ(settings->storage.durability, storage::Durability::kSync);
}

TEST_F(SettingsTest, APipelineFileGivenAsSettingsIsNamedForWhatItIs) {
  EXPECT_EQ(Parse(std::string(kValid) + "stages:\n  - {name: features, kind: features}\n").error().message,
            Where(7, 3) +
                "this is a pipeline file, not the service's settings: pass the settings file (e.g. "
                "config/txscore.yaml), whose `pipeline:` names the pipeline file");
}

TEST_F(SettingsTest, RestartOnlyChangesNameEverySettingButThePipeline) {
  testing::WriteFile(dir_.file("q.yaml"), "stages: []\n");
  auto running = Parse(std::string(kValid) + "server: {port: 9090, workers: 4}\n");
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  // Another pipeline file is not a restart-only change.
  std::string yaml = std::string(kValid) + "server: {port: 9090, workers: 4}\n";
  yaml.replace(yaml.find("p.yaml"), 6, "q.yaml");
  EXPECT_TRUE(RestartOnlyChanges(*running, *Parse(yaml)).empty());
  auto changed = Parse(std::string(kValid) + "server: {port: 9095}\nadmin: {port: 0}\n");
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  EXPECT_EQ(RestartOnlyChanges(*running, *changed),
            (std::vector<std::string>{"admin.port: (default) -> 0", "server.port: 9090 -> 9095",
                                      "server.workers: 4 -> (default)"}));
}

// pipeline_digest pins the pipeline's files (pipelines/bundle_digest.h): only its exact form is
// accepted, and a reload may change it with the files it pins.
TEST_F(SettingsTest, PipelineDigestIsReadInItsExactFormAndAReloadMayChangeIt) {
  EXPECT_EQ(Parse(kValid)->pipeline_digest, "");
  const std::string digest = "sha256:" + std::string(64, 'a');
  auto pinned = Parse("pipeline_digest: \"" + digest + "\"\n" + kValid);
  ASSERT_TRUE(pinned.ok()) << pinned.error().ToString();
  EXPECT_EQ(pinned->pipeline_digest, digest);
  EXPECT_TRUE(RestartOnlyChanges(*Parse(kValid), *pinned).empty());
  for (const std::string& bad :
       std::vector<std::string>{"sha256:" + std::string(64, 'A'), std::string(64, 'a'), "sha256:abc"}) {
    EXPECT_TRUE(testing::IsError(Parse("pipeline_digest: \"" + bad + "\"\n" + kValid), ErrorCode::kInvalidArgument,
                                 Where(1, 18) +
                                     "pipeline_digest must be \"sha256:\" and 64 lowercase hex digits, as `txscore "
                                     "pipeline digest` prints it"))
        << bad;
  }
  EXPECT_TRUE(testing::IsError(Parse("pipeline_digest: \"\"\n" + std::string(kValid)), ErrorCode::kInvalidArgument,
                               Where(1, 18) + "\"pipeline_digest\" must be a non-empty string"));
}

// jobs.claims_pipeline_digest pins the claims pipeline of a server's jobs, in the same form; it
// takes effect at a restart (claims jobs keep the pipeline they started with).
TEST_F(SettingsTest, ClaimsPipelineDigestIsReadInItsExactFormAndTakesEffectAtRestart) {
  const std::string jobs = "jobs: {claims_pipeline: p.yaml, input_dir: in, output_dir: out";
  const std::string digest = "sha256:" + std::string(64, 'b');
  auto unpinned = Parse(std::string(kValid) + jobs + "}\n");
  ASSERT_TRUE(unpinned.ok()) << unpinned.error().ToString();
  EXPECT_EQ(unpinned->jobs.claims_pipeline_digest, "");
  auto pinned = Parse(std::string(kValid) + jobs + ", claims_pipeline_digest: \"" + digest + "\"}\n");
  ASSERT_TRUE(pinned.ok()) << pinned.error().ToString();
  EXPECT_EQ(pinned->jobs.claims_pipeline_digest, digest);
  EXPECT_EQ(RestartOnlyChanges(*unpinned, *pinned),
            std::vector<std::string>{"jobs.claims_pipeline_digest: (default) -> " + digest});
  auto bad = Parse(std::string(kValid) + jobs + ", claims_pipeline_digest: \"sha256:abc\"}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("claims_pipeline_digest must be \"sha256:\" and 64 lowercase hex digits, as "
                                     "`txscore pipeline digest --pipeline " +
                                     dir_.file("p.yaml") + "` prints it"),
            std::string::npos)
      << bad.error().ToString();
}

TEST_F(SettingsTest, ASettingWrittenDifferentlyWithTheSameValueIsNoRestartOnlyChange) {
  auto running = Parse(std::string(kValid) +
                       "server: {workers: 4}\n"
                       "devices: {backend_library: lib.so, backend: {options: {cards: 2, mode: fast}}}\n");
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  // The default made explicit, a path written another way, a map's keys in another order.
  std::string yaml = std::string(kValid) +
                     "server: {workers: 4, port: 9090}\nadmin: {host: 127.0.0.1}\n"
                     "devices: {backend_library: ./lib.so, backend: {options: {mode: fast, cards: 2}}}\n";
  yaml.replace(yaml.find("path: db"), 8, "path: ./db");
  auto same = Parse(yaml);
  ASSERT_TRUE(same.ok()) << same.error().ToString();
  EXPECT_EQ(RestartOnlyChanges(*running, *same), std::vector<std::string>{});
}

TEST_F(SettingsTest, TlsIsParsedAndAChangeToItIsReloadableButPlaintextIsRestartOnly) {
  for (const char* file : {"s.crt", "s.key", "ca.crt"}) testing::WriteFile(dir_.file(file), "x");
  const std::string tls =
      "  tls:\n    certificate: s.crt\n    private_key: s.key\n    client_ca: ca.crt\n    min_version: \"1.3\"\n"
      "    thrift_clients: [a, \"spiffe://x/y\"]\n    admin_clients: [b]\n    operators: [b]\n";
  auto running = Parse(std::string(kValid) + tls);
  ASSERT_TRUE(running.ok()) << running.error().ToString();
  ASSERT_TRUE(running->security.tls.has_value());
  const TlsConfig& parsed = *running->security.tls;
  EXPECT_EQ(parsed.certificate, dir_.file("s.crt"));
  EXPECT_EQ(parsed.private_key, dir_.file("s.key"));
  EXPECT_EQ(parsed.client_ca, dir_.file("ca.crt"));
  EXPECT_EQ(parsed.min_version, TlsVersion::k1_3);
  EXPECT_EQ(parsed.thrift_clients, (std::vector<std::string>{"a", "spiffe://x/y"}));
  EXPECT_EQ(parsed.admin_clients, std::vector<std::string>{"b"});
  EXPECT_EQ(parsed.operators, std::vector<std::string>{"b"});
  EXPECT_FALSE(running->server.plaintext);
  // Other lists and files: no restart needed. The plaintext switch: a restart.
  std::string other = std::string(kValid) + tls;
  other.replace(other.find("operators: [b]"), 14, "operators: [a]");
  EXPECT_EQ(RestartOnlyChanges(*running, *Parse(other)), std::vector<std::string>{});
  auto plaintext = Parse(std::string(kValid) + tls + "server: {plaintext: true}\n");
  ASSERT_TRUE(plaintext.ok()) << plaintext.error().ToString();
  EXPECT_EQ(RestartOnlyChanges(*running, *plaintext), std::vector<std::string>{"server.plaintext: (default) -> true"});
}

TEST_F(SettingsTest, TlsIdentityRulesIssuersCrlAndGroupsAreParsedAndChecked) {
  for (const char* file : {"s.crt", "s.key", "ca.crt", "ours.crt", "ca.crl"}) testing::WriteFile(dir_.file(file), "x");
  const std::string base =
      "  tls:\n    certificate: s.crt\n    private_key: s.key\n    client_ca: ca.crt\n"
      "    thrift_clients: [a]\n    admin_clients: [b]\n";
  auto defaults = Parse(std::string(kValid) + base);
  ASSERT_TRUE(defaults.ok()) << defaults.error().ToString();
  EXPECT_TRUE(defaults->security.tls->uri_identity_prefixes.empty());
  EXPECT_FALSE(defaults->security.tls->cn_identity);
  EXPECT_TRUE(defaults->security.tls->issuers.empty());
  EXPECT_EQ(defaults->security.tls->crl_file, "");
  EXPECT_EQ(defaults->security.tls->groups, (std::vector<std::string>{"X25519", "P-256", "P-384"}));
  auto given = Parse(std::string(kValid) + base +
                     "    uri_identity_prefixes: [\"spiffe://bank.example/\"]\n    cn_identity: true\n"
                     "    crl_file: ca.crl\n    groups: [X25519]\n"
                     "    issuers:\n      - ca: ours.crt\n        identities: [b, \"spiffe://bank.example/\"]\n");
  ASSERT_TRUE(given.ok()) << given.error().ToString();
  const TlsConfig& tls = *given->security.tls;
  EXPECT_EQ(tls.uri_identity_prefixes, std::vector<std::string>{"spiffe://bank.example/"});
  EXPECT_TRUE(tls.cn_identity);
  EXPECT_EQ(tls.crl_file, dir_.file("ca.crl"));
  EXPECT_EQ(tls.groups, std::vector<std::string>{"X25519"});
  ASSERT_EQ(tls.issuers.size(), 1u);
  EXPECT_EQ(tls.issuers[0].ca, dir_.file("ours.crt"));
  EXPECT_EQ(tls.issuers[0].identities, (std::vector<std::string>{"b", "spiffe://bank.example/"}));
  // A prefix without its '/' would take in another trust domain; a trust domain bound to a CA
  // must be one whose URIs are identities at all.
  EXPECT_TRUE(testing::IsError(
      Parse(std::string(kValid) + base + "    uri_identity_prefixes: [\"spiffe://bank.example\"]\n"),
      ErrorCode::kInvalidArgument,
      Where(12, 29) + "\"spiffe://bank.example\" is no URI prefix: give a scheme and authority ending in '/', e.g. "
                      "\"spiffe://bank.example/\""));
  EXPECT_TRUE(testing::IsError(
      Parse(std::string(kValid) + base + "    issuers:\n      - ca: ours.crt\n        identities: [\"spiffe://x/\"]\n"),
      ErrorCode::kInvalidArgument,
      Where(14, 22) + "\"spiffe://x/\" ends in '/' (a trust domain) but is not on uri_identity_prefixes"));
}

TEST_F(SettingsTest, BadTlsSettingsAreNamedWithTheirPlace) {
  testing::WriteFile(dir_.file("s.crt"), "x");
  EXPECT_TRUE(testing::IsError(
      Parse(std::string(kValid) + "  tls: {certificate: s.crt, private_key: s.crt, client_ca: s.crt, min_version: "
                                  "\"1.1\"}\n"),
      ErrorCode::kInvalidArgument, Where(6, 80) + "min_version must be \"1.2\" or \"1.3\", not \"1.1\""));
  auto missing = Parse(std::string(kValid) + "  tls: {certificate: s.crt, client_ca: s.crt}\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("private_key"), std::string::npos) << missing.error().message;
}

TEST_F(SettingsTest, ShardingListsEveryShardNamesItsSelfAndIsRestartOnly) {
  std::filesystem::create_directories(dir_.file("pki/client"));
  const std::string sharding =
      "sharding:\n"
      "  self: txscore-1\n"
      "  shards:\n"
      "    - {name: txscore-0, address: 10.0.0.1:9090}\n"
      "    - {name: txscore-1, address: txscore-1.txscore:9090}\n"
      "  client_tls_dir: pki/client\n"
      "  peer_identities: [txscore-shard]\n"
      "  forward_timeout_ms: 750\n";
  auto settings = Parse(std::string(kValid) + sharding);
  ASSERT_TRUE(settings.ok()) << settings.error().ToString();
  EXPECT_EQ(settings->sharding.self, "txscore-1");
  EXPECT_EQ(settings->sharding.shards,
            (std::vector<ShardEndpoint>{{"txscore-0", "10.0.0.1:9090"}, {"txscore-1", "txscore-1.txscore:9090"}}));
  EXPECT_EQ(settings->sharding.client_tls_dir, dir_.file("pki/client"));
  EXPECT_EQ(settings->sharding.peer_identities, std::vector<std::string>{"txscore-shard"});
  EXPECT_EQ(settings->sharding.forward_timeout_ms, 750);
  EXPECT_EQ(settings->sharding.connect_timeout_ms, 500);  // the default
  auto unsharded = Parse(kValid);
  ASSERT_TRUE(unsharded.ok());
  EXPECT_TRUE(unsharded->sharding.shards.empty());
  const std::vector<std::string> changes = RestartOnlyChanges(*unsharded, *settings);
  EXPECT_FALSE(changes.empty());
  for (const std::string& change : changes) EXPECT_EQ(change.rfind("sharding.", 0), 0u) << change;
  // Refusals, each at its place.
  EXPECT_EQ(Parse(std::string(kValid) + "sharding:\n  self: a\n").error().message,
            Where(7, 3) + "sharding.shards must list every shard: - {name: ..., address: HOST:PORT}");
  EXPECT_EQ(Parse(std::string(kValid) + "sharding:\n  shards:\n    - {name: a, address: h:1}\n    - {name: a, address: "
                                        "h:2}\n")
                .error()
                .message,
            Where(8, 5) + "shard \"a\" is named twice");
  EXPECT_EQ(
      Parse(std::string(kValid) + "sharding:\n  self: b\n  shards:\n    - {name: a, address: h:1}\n").error().message,
      Where(7, 9) + "sharding.self \"b\" is not among sharding.shards");
  EXPECT_NE(Parse(std::string(kValid) + "sharding:\n  shards:\n    - {name: a, address: nope}\n")
                .error()
                .message.find(Where(8, 26) + "\"nope\" is not HOST:PORT"),
            std::string::npos);
  EXPECT_EQ(Parse(std::string(kValid) + "sharding:\n  shards:\n    - {name: a, adress: h:1}\n").error().code,
            ErrorCode::kInvalidArgument);
}

TEST_F(SettingsTest, AShardSetsPeersAreCheckedAgainstItsTransport) {
  for (const char* file : {"s.crt", "s.key", "ca.crt"}) testing::WriteFile(dir_.file(file), "x");
  std::filesystem::create_directories(dir_.file("shard"));
  const std::string tls =
      "  tls:\n    certificate: s.crt\n    private_key: s.key\n    client_ca: ca.crt\n"
      "    thrift_clients: [caller, txscore-shard]\n    admin_clients: [admin]\n";
  const std::string shards = "sharding:\n  self: a\n  shards: [{name: a, address: h:1}, {name: b, address: h:2}]\n";
  const auto message = [&](const std::string& yaml) {
    auto settings = Parse(yaml);
    return settings.ok() ? std::string("accepted") : settings.error().message;
  };
  EXPECT_EQ(
      message(std::string(kValid) + tls + shards + "  client_tls_dir: shard\n  peer_identities: [txscore-shard]\n"),
      "accepted");
  EXPECT_NE(message(std::string(kValid) + tls + shards + "  peer_identities: [txscore-shard]\n")
                .find("sharding.client_tls_dir is required when the Thrift port serves TLS"),
            std::string::npos);
  EXPECT_NE(message(std::string(kValid) + tls + shards + "  client_tls_dir: shard\n")
                .find("sharding.peer_identities is required when the Thrift port serves TLS"),
            std::string::npos);
  EXPECT_NE(message(std::string(kValid) + tls + shards + "  client_tls_dir: shard\n  peer_identities: [other]\n")
                .find("shard peer other is not on security.tls.thrift_clients"),
            std::string::npos);
  EXPECT_NE(message(std::string(kValid) + "server: {plaintext: true}\n" + shards + "  peer_identities: [x]\n")
                .find("sharding.peer_identities needs TLS on the Thrift port"),
            std::string::npos);
  EXPECT_EQ(message(std::string(kValid) + "server: {plaintext: true}\n" + shards), "accepted");
}

TEST(LoadServiceSettings, MissingFileIsNotFound) {
  auto settings = LoadServiceSettings("/nonexistent/s.yaml");
  ASSERT_FALSE(settings.ok());
  EXPECT_EQ(settings.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(settings.error().message, "settings file /nonexistent/s.yaml does not exist or cannot be read");
}

TEST_F(SettingsTest, UnknownKeyIsRejectedWithLineAndColumn) {
  auto config = Parse(std::string("server:\n  prot: 9090\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message,
            Where(2, 3) +
                "unknown key \"prot\" in server (expected one of: drain_timeout_ms, frame_timeout_ms, host, "
                "idle_timeout_ms, io_threads, limits, max_connections, max_handshakes, max_queued_requests, plaintext, "
                "port, stop_delay_ms, waiting_threads, workers)");
}

TEST_F(SettingsTest, ServerTransportSettingsAreReadAndBounded) {
  auto config = Parse(std::string("server:\n  io_threads: 3\n  max_connections: 50\n  max_queued_requests: 7\n"
                                  "  frame_timeout_ms: 250\n  idle_timeout_ms: 9000\n  waiting_threads: 0\n"
                                  "  max_handshakes: 5\n") +
                      kValid);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->server.io_threads, 3);
  EXPECT_EQ(config->server.waiting_threads, 0);
  EXPECT_EQ(config->server.max_handshakes, 5);
  EXPECT_EQ(config->server.max_connections, 50);
  EXPECT_EQ(config->server.max_queued_requests, 7);
  EXPECT_EQ(config->server.frame_timeout_ms, 250);
  EXPECT_EQ(config->server.idle_timeout_ms, 9000);
  auto zero = Parse(std::string("server:\n  max_connections: 0\n") + kValid);
  ASSERT_FALSE(zero.ok());
  EXPECT_FALSE(Parse(std::string("server:\n  max_handshakes: 0\n") + kValid).ok());
  EXPECT_FALSE(Parse(std::string("server:\n  waiting_threads: -1\n") + kValid).ok());
  EXPECT_EQ(zero.error().message, Where(2, 20) + "\"max_connections\" must be between 1 and 1000000");
}

TEST_F(SettingsTest, ThriftLimitsAreReadAndBounded) {
  auto config = Parse(std::string("server:\n  limits: {max_message_bytes: 4096, max_frame_bytes: 8192, "
                                  "max_string_bytes: 100, max_container_items: 9, max_recursion_depth: 5}\n") +
                      kValid);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  EXPECT_EQ(config->server.limits.max_message_bytes, 4096);
  EXPECT_EQ(config->server.limits.max_frame_bytes, 8192);
  EXPECT_EQ(config->server.limits.max_string_bytes, 100);
  EXPECT_EQ(config->server.limits.max_container_items, 9);
  EXPECT_EQ(config->server.limits.max_recursion_depth, 5);
  EXPECT_TRUE(testing::IsError(Parse(std::string("server:\n  limits: {max_recursion_depth: 3}\n") + kValid),
                               ErrorCode::kInvalidArgument,
                               Where(2, 33) + "\"max_recursion_depth\" must be between 4 and 1000"));
  EXPECT_TRUE(testing::IsError(
      Parse(std::string("server:\n  limits: {max_strings: 3}\n") + kValid), ErrorCode::kInvalidArgument,
      Where(2, 12) + "unknown key \"max_strings\" in server.limits (expected one of: "
                     "max_container_items, max_frame_bytes, max_message_bytes, max_recursion_depth, "
                     "max_string_bytes)"));
}

TEST_F(SettingsTest, AKeyGivenTwiceIsRefusedWithBothLines) {
  auto config = Parse(std::string("server:\n  port: 9090\n  workers: 4\n  port: 9191\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(4, 3) + "\"port\" is given twice in server (first on line 2)");
}

TEST_F(SettingsTest, WrongTypeIsRejectedWithLineAndColumn) {
  auto config = Parse(std::string("server:\n  workers: many\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(2, 12) + "\"workers\" must be an integer");
}

TEST_F(SettingsTest, OutOfRangeIsRejected) {
  auto config = Parse(std::string("server:\n  port: 70000\n") + kValid);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(2, 9) + "\"port\" must be between 0 and 65535");
}

TEST_F(SettingsTest, DevicesSectionNamesTheBackendLibraryAndDescribesIt) {
  EXPECT_EQ(Parse(kValid)->devices.backend.library, "");
  auto config = Parse(std::string(kValid) +
                      "devices:\n"
                      "  calibration_cache: profiles.json\n"
                      "  backend_library: lib/libtorch_spyre.so\n"
                      "  backend:\n"
                      "    kind: spyre\n"
                      "    index: 1\n"
                      "    dtypes: [float16, bfloat16]\n"
                      "    native_ops: [matmul, softmax]\n"
                      "    memory_gib: 64\n"
                      "    alignment: 128\n"
                      "    emulator: false\n"
                      "    cost: {dispatch_us: 80, tflops: 100, memory_gbps: 400, copy_gbps: 32}\n"
                      "    options: {cards: 2, mode: fast}\n");
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  const DevicesConfig& d = config->devices;
  EXPECT_EQ(d.calibration_cache, dir_.file("profiles.json"));
  EXPECT_EQ(d.backend.library, dir_.file("lib/libtorch_spyre.so"));  // relative to the file
  EXPECT_EQ(d.backend.kind, "spyre");
  EXPECT_EQ(d.backend.index, 1);
  EXPECT_EQ(d.backend.dtypes,
            (std::vector<accelerator::Dtype>{accelerator::Dtype::kFloat16, accelerator::Dtype::kBFloat16}));
  EXPECT_EQ(d.backend.native_ops, (std::set<std::string>{"matmul", "softmax"}));
  EXPECT_EQ(d.backend.memory_bytes, 64LL << 30);
  EXPECT_EQ(d.backend.alignment, 128);
  EXPECT_EQ(d.backend.emulator, false);
  ASSERT_TRUE(d.backend.cost.has_value());
  EXPECT_EQ(d.backend.cost->dispatch_us, 80);
  EXPECT_EQ(d.backend.cost->flops_per_s, 100e12);
  EXPECT_EQ(d.backend.cost->memory_bytes_per_s, 400e9);
  EXPECT_EQ(d.backend.cost->copy_bytes_per_s, 32e9);
  using Options = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(d.backend.options, (Options{{"cards", "2"}, {"mode", "fast"}}));
}

TEST_F(SettingsTest, BackendDescriptionKeysAreChecked) {
  const std::string devices = std::string(kValid) + "devices:\n  backend:\n";
  EXPECT_EQ(
      Parse(devices + "    kind: Spyre-1\n").error().message,
      Where(8, 11) +
          "kind \"Spyre-1\" is not a device kind name (1-32 characters of a-z, 0-9 and _, starting with a letter)");
  EXPECT_EQ(Parse(devices + "    kind: cuda\n").error().message,
            Where(8, 11) + "kind \"cuda\" is PyTorch's own; an out-of-tree backend needs another");
  EXPECT_EQ(Parse(devices + "    dtypes: [bfloat16, int8]\n").error().message,
            Where(8, 24) + "unknown dtype \"int8\" (known: float32, bfloat16, float16)");
  EXPECT_EQ(Parse(devices + "    native_ops: [matmul, conv2d]\n").error().message,
            Where(8, 26) +
                "unknown op \"conv2d\" (known: matmul, softmax, rms_norm, rope, embedding, activation, tree_walk)");
  EXPECT_EQ(Parse(devices + "    native_ops: []\n").error().message,
            Where(8, 17) + "\"native_ops\" must be a non-empty list");
  EXPECT_EQ(Parse(devices + "    cost: {dispatch_us: 80}\n").error().message,
            Where(8, 11) + "devices.backend.cost needs tflops");
  EXPECT_EQ(Parse(devices + "    options: {latency: [1, 2]}\n").error().message,
            Where(8, 24) + "devices.backend.options: latency must be a single value");
}

TEST_F(SettingsTest, TheOldEmulatedSectionSaysWhereItsKeysWent) {
  EXPECT_EQ(Parse(std::string(kValid) + "devices:\n  emulated: {tflops: 100}\n").error().message,
            Where(7, 13) +
                "devices.emulated is no longer read: the emulated device is a backend library now; load it with "
                "devices.backend_library (e.g. ../build/libtxscore_emulated_device.so) and put its latency model "
                "under devices.backend.options");
  EXPECT_EQ(Parse(std::string(kValid) + "devices:\n  backend_kind: spyre\n").error().message,
            Where(7, 17) + "devices.backend_kind is now devices.backend.kind");
}

TEST_F(SettingsTest, RequiredKeysAreNamed) {
  EXPECT_EQ(Parse("security:\n  card_key_file: card.key\n").error().message,
            Where(1, 1) + "missing required key \"pipeline\"");
  EXPECT_EQ(Parse("pipeline: p.yaml\nsecurity:\n  card_key_file: card.key\n").error().message,
            Where(1, 1) + "missing required key \"storage\"");
  EXPECT_EQ(Parse("pipeline: p.yaml\nstorage: {path: db}\n").error().message,
            Where(1, 1) + "missing required key \"security\"");
  EXPECT_EQ(Parse("pipeline: absent.yaml\nstorage: {path: db}\nsecurity: {card_key_file: card.key}\n").error().message,
            Where(1, 11) + "\"pipeline\": file " + dir_.file("absent.yaml") + " does not exist");
}

TEST_F(SettingsTest, SecurityTakesExactlyOneKeySourceAndAReloadMayChangeTheKeyset) {
  const std::string need_one =
      "security needs exactly one of keyset (a keyset file: txscore keys create) and card_key_file (a raw key file "
      "from before keysets)";
  EXPECT_EQ(Parse("pipeline: p.yaml\nstorage: {path: db}\nsecurity: {kek_env: K}\n").error().message,
            Where(3, 11) + need_one);
  EXPECT_EQ(Parse("pipeline: p.yaml\nstorage: {path: db}\nsecurity: {keyset: card.key, card_key_file: card.key}\n")
                .error()
                .message,
            Where(3, 11) + need_one);
  auto keyset = Parse("pipeline: p.yaml\nstorage: {path: db}\nsecurity: {keyset: card.key, kek_env: TXSCORE_KEK}\n");
  ASSERT_TRUE(keyset.ok()) << keyset.error().ToString();
  EXPECT_EQ(keyset->security.key_file(), dir_.file("card.key"));
  EXPECT_EQ(keyset->security.kek().env, "TXSCORE_KEK");
  testing::WriteFile(dir_.file("other.json"), "{}");
  auto other = Parse("pipeline: p.yaml\nstorage: {path: db}\nsecurity: {keyset: other.json}\n");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(RestartOnlyChanges(*keyset, *other), std::vector<std::string>{});
}

TEST_F(SettingsTest, BadDurabilityIsRejected) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("path: db"), 8, "path: db\n  durability: maybe");
  auto config = Parse(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, Where(4, 15) + "durability must be \"sync\" or \"wal\", not \"maybe\"");
}

TEST_F(SettingsTest, AuditCheckpointEveryIsReadRangeCheckedAndRestartOnly) {
  std::string yaml = kValid;
  yaml.replace(yaml.find("path: db"), 8, "path: db\n  audit_checkpoint_every: 50");
  auto every50 = Parse(yaml);
  ASSERT_TRUE(every50.ok()) << every50.error().ToString();
  EXPECT_EQ(every50->storage.audit_checkpoint_every, 50);
  EXPECT_EQ(RestartOnlyChanges(*Parse(kValid), *every50),
            std::vector<std::string>{"storage.audit_checkpoint_every: (default) -> 50"});
  yaml = kValid;
  yaml.replace(yaml.find("path: db"), 8, "path: db\n  audit_checkpoint_every: 0");
  auto zero = Parse(yaml);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("audit_checkpoint_every"), std::string::npos) << zero.error().message;
}

}  // namespace
}  // namespace txscore::service
