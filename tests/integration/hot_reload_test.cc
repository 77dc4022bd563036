// Hot reload of a serving txscore: the pipeline and its model replaced under load over
// loopback Thrift, bad sets refused, restart-only settings named, the admin route guarded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "fraud/xgboost_model.h"
#include "gen-cpp/TxScore.h"
#include "pipelines/bundle_digest.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "tests/pipelines/exploding_kind.h"
#include "tests/rpc_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

namespace fs = std::filesystem;

struct HttpAnswer {
  int status;
  std::string body;
};

HttpAnswer Http(const std::string& host, int port, boost::beast::http::verb verb, const std::string& target) {
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address(host), static_cast<unsigned short>(port)});
  http::request<http::string_body> request{verb, target, 11};
  request.set(http::field::host, "localhost");
  request.prepare_payload();
  http::write(socket, request);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  return {static_cast<int>(response.result_int()), response.body()};
}

// The first IPv4 address of this machine that is not loopback, or "" when it has none.
// A server whose settings, pipeline file and model file (models/fraud.ubj) the test rewrites
// between reloads. Models: A (the small test model) and B (the challenger), with their schemas.
class HotReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);  // the card key
    fs::create_directories(dir_.file("models"));
    InstallModel(testing::SmallModelDir());
    WritePipeline("p1", "");
    WriteSettings("pipeline.yaml");
    StartServer();
  }
  void StartServer(const pipelines::PipelineRuntime& runtime = {}) {
    auto settings = LoadServiceSettings(dir_.file("settings.yaml"));
    ASSERT_TRUE(settings.ok()) << settings.error().ToString();
    auto config = pipelines::LoadPipelineConfig(settings->pipeline);
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    auto server = ScoringServer::Create(*settings, *config, runtime);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // Puts a model and its schema in place the way a deployment would: written beside, then
  // renamed over the served path.
  void InstallModel(const std::string& from_dir) {
    for (const char* name : {"fraud.ubj", "fraud.features.json"}) {
      fs::copy_file(fs::path(from_dir) / name, dir_.file(std::string("models/.") + name),
                    fs::copy_options::overwrite_existing);
      fs::rename(dir_.file(std::string("models/.") + name), dir_.file(std::string("models/") + name));
    }
  }
  void CorruptModel() {
    const std::string bytes = testing::ReadFile(dir_.file("models/fraud.ubj"));
    testing::WriteFile(dir_.file("models/.fraud.ubj"), bytes.substr(0, bytes.size() / 2));
    fs::rename(dir_.file("models/.fraud.ubj"), dir_.file("models/fraud.ubj"));
  }
  // The service settings, naming the pipeline file `pipeline`.
  void WriteSettings(const std::string& pipeline) {
    testing::WriteFile(dir_.file("settings.yaml"),
                       "pipeline: " + pipeline +
                           "\n"
                           "server: {host: 127.0.0.1, port: 0, workers: 4, plaintext: true}\n"
                           "admin: {host: " +
                           admin_host_ +
                           ", port: 0, plaintext: true}\n"
                           "storage: {path: db, durability: wal}\n"
                           "security: {card_key_file: card.key}\n");
  }
  // The pipeline file `file`: version `version`, and `extra` stages after the decision's inputs.
  void WritePipeline(const std::string& version, const std::string& extra, const std::string& file = "pipeline.yaml") {
    testing::WriteFile(dir_.file(file),
                       "pipeline: {name: test, version: \"" + version +
                           "\"}\n"
                           "stages:\n"
                           "  - {name: features, kind: features}\n"
                           "  - {name: fraud, kind: xgboost, after: features, model: models/fraud.ubj}\n" +
                           extra + "  - {name: decision, kind: decision, after: fraud}\n");
  }
  std::string ModelVersionOf(const std::string& model_dir) {
    return fraud::XGBoostModel::Load(model_dir + "/fraud.ubj").value()->model_version();
  }

  testing::TempDir dir_;
  std::string admin_host_ = "127.0.0.1";
  std::unique_ptr<ScoringServer> server_;
};

// One reply as a client saw it.
struct Reply {
  std::string request_id;
  std::string model_version;
  std::string pipeline_version;
  std::set<std::string> stages;  // from its timings
  bool shadow_scored = false;    // stage_scores has the shadow's
};

TEST_F(HotReloadTest, UnderLoadEveryRequestRunsOnTheOldOrTheNewPipelineAndNoneFails) {
  const std::string model_a = ModelVersionOf(testing::SmallModelDir());
  const std::string model_b = ModelVersionOf(testing::ChallengerModelDir());
  ASSERT_NE(model_a, model_b);

  constexpr int kClients = 6;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::vector<Reply>> replies(kClients);
  std::array<std::atomic<int>, kClients> answered{};  // replies or failures, per client
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      testing::RpcClient client(server_->rpc_port());
      for (int i = 0; !stop.load(); ++i) {
        fraud::RawTransaction tx = testing::ValidTransaction("c" + std::to_string(c) + "-" + std::to_string(i));
        tx.card_number.reset();
        tx.card_token = std::string(63, 'a') + static_cast<char>('0' + c);  // a card per client
        tx.timestamp_ms += i * 1000;
        try {
          rpc::ScoreResult result;
          client.client->score(result, ToThriftTransaction(tx));
          Reply r{result.request_id, result.model_version, result.pipeline_version, {}};
          for (const rpc::StageTiming& t : result.timings) r.stages.insert(t.stage);
          r.shadow_scored = result.stage_scores.count("shadow") > 0;
          replies[static_cast<size_t>(c)].push_back(std::move(r));
        } catch (const std::exception& e) {
          ADD_FAILURE() << "client " << c << " request " << i << ": " << e.what();
          ++failures;
        }
        ++answered[static_cast<size_t>(c)];
      }
    });
  }
  // Each step waits until every client has been answered twice more: its next request after
  // a reload started after the swap.
  const auto served = [&](const std::string&) {
    std::array<int, kClients> before;
    for (int c = 0; c < kClients; ++c) before[static_cast<size_t>(c)] = answered[static_cast<size_t>(c)].load();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int c = 0; c < kClients; ++c) {
      while (answered[static_cast<size_t>(c)].load() < before[static_cast<size_t>(c)] + 2 && failures.load() == 0) {
        ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "client " << c << " was not answered for 60 s";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  };
  served("p1");
  // The first pipeline is freed once the reload has swapped it out and its requests are done.
  const std::weak_ptr<pipelines::ScoringPipeline> first = server_->pipeline();

  // 1. A new model (B) and pipeline version: applied, over the admin port.
  InstallModel(testing::ChallengerModelDir());
  WritePipeline("p2", "");
  HttpAnswer answer = Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::post, "/admin/reload");
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(nlohmann::json::parse(answer.body)["applied"], true);
  EXPECT_EQ(nlohmann::json::parse(answer.body)["model"], "fraud@" + model_b);
  served("p2");
  EXPECT_TRUE(first.expired()) << "the replaced pipeline is still held";

  // 2. A corrupt model: refused with the loader's reason; B keeps serving.
  CorruptModel();
  WritePipeline("p3", "");
  const ScoringServer::ReloadOutcome corrupt = server_->Reload("test");
  EXPECT_FALSE(corrupt.applied);
  EXPECT_NE(corrupt.detail.find("fraud.ubj"), std::string::npos) << corrupt.detail;
  EXPECT_EQ(corrupt.pipeline_version, "p2");
  EXPECT_EQ(corrupt.model_version, model_b);

  // 3. The pipeline gains a shadow stage (model A beside the deciding B), 4. and loses it.
  InstallModel(testing::ChallengerModelDir());
  fs::copy_file(fs::path(testing::SmallModelDir()) / "fraud.ubj", dir_.file("models/shadow.ubj"));
  fs::copy_file(fs::path(testing::SmallModelDir()) / "fraud.features.json", dir_.file("models/shadow.features.json"));
  WritePipeline("p4", "  - {name: shadow, kind: xgboost, after: features, model: models/shadow.ubj}\n");
  const ScoringServer::ReloadOutcome gained = server_->Reload("test");
  EXPECT_TRUE(gained.applied) << gained.detail;
  served("p4");
  // /readyz names every stage's model, the shadow's too.
  const std::unique_ptr<fraud::XGBoostModel> shadow_model =
      fraud::XGBoostModel::Load(dir_.file("models/shadow.ubj")).value();
  EXPECT_EQ(nlohmann::json::parse(
                Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::get, "/readyz").body)["models"],
            (nlohmann::json{{"fraud", "fraud@" + model_b},
                            {"shadow", shadow_model->model_id() + "@" + shadow_model->model_version()}}));
  WritePipeline("p5", "");
  EXPECT_TRUE(server_->Reload("test").applied);
  served("p5");

  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);

  // Each reply: a version that was applied, in the order applied (a client's requests are
  // sequential, so it never goes back to an older version); the shadow only on p4.
  const std::map<std::string, std::pair<int, std::string>> applied = {
      {"p1", {1, model_a}}, {"p2", {2, model_b}}, {"p4", {4, model_b}}, {"p5", {5, model_b}}};
  std::map<std::string, Reply> by_id;
  for (int c = 0; c < kClients; ++c) {
    int last = 0;
    for (const Reply& r : replies[static_cast<size_t>(c)]) {
      auto version = applied.find(r.pipeline_version);
      ASSERT_NE(version, applied.end()) << r.request_id << " ran on " << r.pipeline_version;
      EXPECT_EQ(r.model_version, version->second.second) << r.request_id;
      EXPECT_GE(version->second.first, last) << r.request_id;
      last = version->second.first;
      EXPECT_EQ(r.stages.count("shadow"), r.pipeline_version == "p4" ? 1u : 0u) << r.request_id;
      EXPECT_EQ(r.shadow_scored, r.pipeline_version == "p4") << r.request_id;
      by_id[r.request_id] = r;
    }
    EXPECT_EQ(last, 5) << "client " << c;
  }
  // The audit trail names the version that scored each decision.
  auto audit = server_->audit_log().ReadLast(by_id.size() + 10);
  ASSERT_TRUE(audit.ok());
  size_t matched = 0;
  for (const storage::AuditRecord& record : *audit) {
    auto reply = by_id.find(record.request_id);
    if (reply == by_id.end()) continue;
    ++matched;
    EXPECT_EQ(record.pipeline_version, reply->second.pipeline_version) << record.request_id;
    EXPECT_EQ(record.model_version, reply->second.model_version) << record.request_id;
  }
  EXPECT_EQ(matched, by_id.size());

  const std::string metrics = server_->metrics().RenderPrometheus();
  EXPECT_NE(metrics.find("txscore_reloads_total{outcome=\"applied\"} 3\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_reloads_total{outcome=\"refused\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("txscore_model_info{model_id=\"fraud\",model_version=\"" + model_b +
                         "\",pipeline=\"test\",pipeline_version=\"p5\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("txscore_stage_duration_seconds_count{stage=\"shadow\"}"), std::string::npos) << metrics;
  testing::RpcClient client(server_->rpc_port());
  rpc::HealthStatus health;
  client.client->health(health);
  EXPECT_EQ(health.pipeline_version, "p5");
  EXPECT_EQ(health.model_version, model_b);
  const nlohmann::json ready =
      nlohmann::json::parse(Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::get, "/readyz").body);
  EXPECT_EQ(ready["pipeline_version"], "p5");
  EXPECT_EQ(ready["model"], "fraud@" + model_b);
  EXPECT_EQ(ready["models"], (nlohmann::json{{"fraud", "fraud@" + model_b}}));
  EXPECT_EQ(ready["last_reload"]["applied"], true);
  ASSERT_EQ(server_->reload_history().size(), 4u);
  EXPECT_EQ(server_->reload_history()[0].trigger, "admin");
}

TEST_F(HotReloadTest, ABadNewSetIsRefusedWithItsReasonAndTheOldKeepsServing) {
  const std::string model_a = ModelVersionOf(testing::SmallModelDir());
  const auto refused = [&](const std::string& yaml) {
    testing::WriteFile(dir_.file("pipeline.yaml"), yaml);
    ScoringServer::ReloadOutcome outcome = server_->Reload("test");
    EXPECT_FALSE(outcome.applied);
    EXPECT_EQ(outcome.pipeline_version, "p1");
    EXPECT_EQ(outcome.model_version, model_a);
    return outcome.detail;
  };
  const std::string head = "pipeline: {name: test, version: \"p9\"}\nstages:\n  - {name: features, kind: features}\n";
  // A YAML error, with its line.
  EXPECT_NE(refused(head + "  - {name: fraud, kind: xgboost\n").find("pipeline.yaml:5:1: end of map flow not found"),
            std::string::npos);
  // A missing model file.
  EXPECT_NE(refused(head + "  - {name: fraud, kind: xgboost, after: features, model: models/none.ubj}\n"
                           "  - {name: decision, kind: decision, after: fraud}\n")
                .find("models/none.ubj does not exist"),
            std::string::npos);
  // A schema naming a different feature count than the model has.
  fs::copy_file(fs::path(testing::ClaimsModelDir()) / "claims.ubj", dir_.file("models/wrong.ubj"));
  fs::copy_file(fs::path(testing::SmallModelDir()) / "fraud.features.json", dir_.file("models/wrong.features.json"));
  const std::string wrong = refused(head +
                                    "  - {name: fraud, kind: xgboost, after: features, model: models/wrong.ubj}\n"
                                    "  - {name: decision, kind: decision, after: fraud}\n");
  EXPECT_NE(wrong.find("models/wrong.ubj expects "), std::string::npos) << wrong;
  // A model file cut short (a copy interrupted, a disk filled).
  const std::string model_bytes = testing::ReadFile((fs::path(testing::SmallModelDir()) / "fraud.ubj").string());
  testing::WriteFile(dir_.file("models/cut.ubj"), model_bytes.substr(0, model_bytes.size() / 2));
  fs::copy_file(fs::path(testing::SmallModelDir()) / "fraud.features.json", dir_.file("models/cut.features.json"));
  const std::string cut = refused(head +
                                  "  - {name: fraud, kind: xgboost, after: features, model: models/cut.ubj}\n"
                                  "  - {name: decision, kind: decision, after: fraud}\n");
  EXPECT_NE(cut.find("models/cut.ubj is not a valid XGBoost model: malformed UBJSON: the input ends inside"),
            std::string::npos)
      << cut;
  // Wrong types where a scalar, a list or a map belongs.
  const std::string decision = "  - {name: decision, kind: decision, after: fraud}\n";
  EXPECT_NE(refused("pipeline: {name: test, version: \"p9\"}\nstages: {name: features}\n")
                .find("pipeline.yaml:2:9: stages must be a list of stages"),
            std::string::npos);
  EXPECT_NE(refused(head + "  - {name: fraud, kind: xgboost, after: features, model: [a, b]}\n" + decision)
                .find("pipeline.yaml:4:58: \"model\" must be a non-empty string"),
            std::string::npos);
  EXPECT_NE(refused(head + "  - [features]\n").find("pipeline.yaml:4:5: a stage must be a mapping"), std::string::npos);
  // A billion laughs: nine anchors, each ten aliases of the one before (10^9 leaves if
  // expanded), beside the pipeline and inside a stage's list of predecessors.
  std::string laughs = "[&a0 [y, y, y, y, y, y, y, y, y, y]";
  for (int i = 1; i <= 8; ++i) {
    laughs += ", &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) laughs += (j ? ", *a" : "*a") + std::to_string(i - 1);
    laughs += "]";
  }
  laughs += "]";
  EXPECT_NE(refused("laughs: " + laughs + "\n" + head).find("pipeline.yaml:1:1: unknown key \"laughs\""),
            std::string::npos);
  EXPECT_NE(
      refused(head + "  - {name: fraud, kind: xgboost, after: " + laughs + ", model: models/fraud.ubj}\n" + decision)
          .find("pipeline.yaml:4:42: after: each entry must be a stage name"),
      std::string::npos);
  rpc::HealthStatus health;
  testing::RpcClient client(server_->rpc_port());
  client.client->health(health);
  EXPECT_EQ(health.pipeline_version, "p1");
  EXPECT_EQ(health.model_version, model_a);
  rpc::ScoreResult result;
  client.client->score(result, ToThriftTransaction(testing::ValidTransaction("after-refusals")));
  EXPECT_EQ(result.pipeline_version, "p1");
}

TEST_F(HotReloadTest, ANewSetWhoseCanaryFailsIsRefusedAndTheOldKeepsServing) {
  // A server whose reloads may use a kind that fails every run: the new set loads, and only
  // its canary transaction can find the fault.
  pipelines::StageKindRegistry kinds;
  pipelines::RegisterBuiltinStageKinds(&kinds);
  ASSERT_TRUE(kinds.Register(std::make_unique<testing::ExplodingKind>()).ok());
  server_->Stop();
  pipelines::PipelineRuntime runtime;
  runtime.kinds = &kinds;
  StartServer(runtime);
  WritePipeline("p2", "  - {name: tripwire, kind: explodes, after: features}\n");
  const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_EQ(outcome.detail, "failed precondition: the canary transaction failed in stage tripwire: boom");
  EXPECT_EQ(outcome.pipeline_version, "p1");
  testing::RpcClient client(server_->rpc_port());
  rpc::ScoreResult result;
  client.client->score(result, ToThriftTransaction(testing::ValidTransaction("after-canary")));
  EXPECT_EQ(result.pipeline_version, "p1");
  const std::string metrics = Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::get, "/metrics").body;
  EXPECT_NE(metrics.find("txscore_reloads_total{outcome=\"refused\"} 1\n"), std::string::npos) << metrics;
  // The same file without the tripwire goes in.
  WritePipeline("p3", "");
  EXPECT_TRUE(server_->Reload("test").applied);
  EXPECT_EQ(server_->pipeline()->config().version, "p3");
  server_->Stop();
  server_.reset();  // before `kinds`, which its pipeline's stages point into
}

TEST_F(HotReloadTest, AReloadPicksUpAChangedRulesList) {
  testing::WriteFile(dir_.file("deny.txt"), "# nobody yet\n");
  const std::string rules =
      "  - {name: rules, kind: rules, after: features, lists: {deny: deny.txt}, rules: [{id: R20, when: "
      "\"merchant_id in deny\", decision: DECLINE}]}\n";
  testing::WriteFile(dir_.file("pipeline.yaml"),
                     "pipeline: {name: test, version: \"p2\"}\nstages:\n  - {name: features, kind: features}\n"
                     "  - {name: fraud, kind: xgboost, after: features, model: models/fraud.ubj}\n" +
                         rules + "  - {name: decision, kind: decision, after: [fraud, rules]}\n");
  ASSERT_TRUE(server_->Reload("test").applied);
  testing::RpcClient client(server_->rpc_port());
  fraud::RawTransaction tx = testing::ValidTransaction("before");  // merchant m-US-17
  rpc::ScoreResult result;
  client.client->score(result, ToThriftTransaction(tx));
  EXPECT_NE(result.decision, rpc::Decision::DECLINE);
  testing::WriteFile(dir_.file("deny.txt"), "m-US-17\n");
  ASSERT_TRUE(server_->Reload("test").applied);
  tx.request_id = "after";
  tx.timestamp_ms += 60000;
  client.client->score(result, ToThriftTransaction(tx));
  EXPECT_EQ(result.decision, rpc::Decision::DECLINE);
  ASSERT_EQ(result.rule_hits.size(), 1u);
  EXPECT_EQ(result.rule_hits[0].rule, "R20");
}

// With pipeline_digest in the settings, a model swapped on disk is refused (the old one keeps
// serving) until the pin names the new files; a server does not even start on files that do
// not match. The pin itself changes with a reload, like the pipeline file.
TEST_F(HotReloadTest, APinnedDigestRefusesChangedFilesUntilThePinNamesThem) {
  const auto digest_now = [&] {
    return pipelines::DigestPipelineBundle(pipelines::LoadPipelineConfig(dir_.file("pipeline.yaml")).value())
        .value()
        .digest;
  };
  const auto pin = [&](const std::string& digest) {
    WriteSettings("pipeline.yaml");
    testing::WriteFile(dir_.file("settings.yaml"),
                       testing::ReadFile(dir_.file("settings.yaml")) + "pipeline_digest: \"" + digest + "\"\n");
  };
  const std::string first = digest_now();
  pin(first);
  const ScoringServer::ReloadOutcome pinned = server_->Reload("test");
  ASSERT_TRUE(pinned.applied) << pinned.detail;
  EXPECT_EQ(server_->pipeline()->bundle().digest, first);
  EXPECT_EQ(pinned.detail.substr(pinned.detail.size() - first.size() - 8), ", files " + first);

  InstallModel(testing::ChallengerModelDir());
  const std::string second = digest_now();
  ASSERT_NE(second, first);
  const ScoringServer::ReloadOutcome refused = server_->Reload("test");
  EXPECT_FALSE(refused.applied);
  EXPECT_EQ(refused.detail, "failed precondition: the pipeline's files have digest " + second + ", not the " + first +
                                " that pipeline_digest in " + dir_.file("settings.yaml") +
                                " pins: a file of the pipeline changed; see each file's digest with: txscore pipeline "
                                "digest --config " +
                                dir_.file("settings.yaml"));
  EXPECT_EQ(server_->pipeline()->model_version(), ModelVersionOf(testing::SmallModelDir()));

  server_->Stop();
  server_.reset();
  auto settings = LoadServiceSettings(dir_.file("settings.yaml"));
  ASSERT_TRUE(settings.ok());
  auto config = pipelines::LoadPipelineConfig(settings->pipeline);
  ASSERT_TRUE(config.ok());
  auto not_started = ScoringServer::Create(*settings, *config);
  ASSERT_FALSE(not_started.ok());
  EXPECT_EQ(not_started.error().code, ErrorCode::kFailedPrecondition) << not_started.error().ToString();

  pin(second);
  StartServer();
  EXPECT_EQ(server_->pipeline()->model_version(), ModelVersionOf(testing::ChallengerModelDir()));
  EXPECT_EQ(server_->pipeline()->bundle().digest, second);
}

TEST_F(HotReloadTest, TheLastTwentyReloadsAreKept) {
  for (int i = 0; i < 22; ++i) {
    WritePipeline("h" + std::to_string(i), "");
    ASSERT_TRUE(server_->Reload("reload-" + std::to_string(i)).applied);
  }
  const std::vector<ScoringServer::ReloadOutcome> history = server_->reload_history();
  ASSERT_EQ(history.size(), ScoringServer::kReloadHistory);
  EXPECT_EQ(history.front().trigger, "reload-2");  // the two oldest are gone
  EXPECT_EQ(history.back().trigger, "reload-21");
  EXPECT_EQ(history.back().pipeline_version, "h21");
}

TEST_F(HotReloadTest, ARestartOnlySettingIsNamedInTheRefusal) {
  WritePipeline("p2", "");
  std::string yaml = testing::ReadFile(dir_.file("settings.yaml"));
  yaml.replace(yaml.find("workers: 4,"), 11, "workers: 5, max_connections: 10,");
  yaml.replace(yaml.find("durability: wal"), 15, "durability: sync");
  testing::WriteFile(dir_.file("settings.yaml"), yaml);
  const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_FALSE(outcome.applied);
  EXPECT_EQ(outcome.detail,
            "these settings change only with a restart: server.max_connections: (default) -> 10; "
            "server.workers: 4 -> 5; storage.durability: wal -> sync");
  EXPECT_EQ(outcome.pipeline_version, "p1");
}

TEST_F(HotReloadTest, AReloadMayPointTheSettingsAtAnotherPipelineFile) {
  WritePipeline("v2", "", "pipeline-v2.yaml");
  WriteSettings("pipeline-v2.yaml");
  const ScoringServer::ReloadOutcome outcome = server_->Reload("test");
  EXPECT_TRUE(outcome.applied) << outcome.detail;
  EXPECT_EQ(server_->pipeline()->config().version, "v2");
  EXPECT_EQ(server_->pipeline()->config().source_path, dir_.file("pipeline-v2.yaml"));
  // A settings file that no longer parses is refused like a bad pipeline.
  testing::WriteFile(dir_.file("settings.yaml"), "pipeline: absent.yaml\n");
  const ScoringServer::ReloadOutcome refused = server_->Reload("test");
  EXPECT_FALSE(refused.applied);
  EXPECT_NE(refused.detail.find("absent.yaml does not exist"), std::string::npos) << refused.detail;
  EXPECT_EQ(server_->pipeline()->config().version, "v2");
}

TEST_F(HotReloadTest, TheAdminReloadRouteIsPostOnly) {
  WritePipeline("p2", "");
  EXPECT_EQ(Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::get, "/admin/reload").status, 405);
  EXPECT_EQ(server_->pipeline()->config().version, "p1");
  const HttpAnswer answer = Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::post, "/admin/reload");
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(server_->pipeline()->config().version, "p2");
  // A refused reload answers 422 with the reason.
  WritePipeline("p3", "  - {name: broken, kind: nonsense}\n");
  const HttpAnswer refused = Http("127.0.0.1", server_->admin_port(), boost::beast::http::verb::post, "/admin/reload");
  EXPECT_EQ(refused.status, 422);
  EXPECT_NE(nlohmann::json::parse(refused.body)["detail"].get<std::string>().find("unknown kind \"nonsense\""),
            std::string::npos)
      << refused.body;
}

// Over plaintext only loopback callers may reload: a plaintext admin port therefore listens on
// loopback alone, and a remote caller could not even reach it.
TEST_F(HotReloadTest, APlaintextAdminPortOnANonLoopbackAddressIsRefusedAtStart) {
  server_->Stop();
  admin_host_ = "0.0.0.0";
  WriteSettings("pipeline.yaml");
  auto settings = LoadServiceSettings(dir_.file("settings.yaml"));
  EXPECT_TRUE(testing::IsError(settings, ErrorCode::kInvalidArgument,
                               dir_.file("settings.yaml") +
                                   ":3:15: admin.plaintext serves the admin port without TLS, so it listens on a "
                                   "loopback address only: set admin.host to 127.0.0.1 or ::1 (not 0.0.0.0), or "
                                   "serve it over TLS (docs/security.md)"));
}

// A plaintext admin port answers only requests made to a loopback name: a page on a name the
// attacker controls, resolved to 127.0.0.1 (DNS rebinding), is refused before any route.
TEST_F(HotReloadTest, APlaintextAdminPortRefusesRequestsForAnotherHost) {
  WritePipeline("p2", "");
  const auto post = [&](const std::string& host) {
    const int fd = testing::RawConnect(server_->admin_port());
    const std::string request =
        "POST /admin/reload HTTP/1.1\r\nHost: " + host + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string answer;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<size_t>(n));
    ::close(fd);
    return answer;
  };
  const std::string rebound = post("attacker.example:9091");
  EXPECT_EQ(rebound.rfind("HTTP/1.1 403 ", 0), 0u) << rebound;
  EXPECT_NE(rebound.find("Host attacker.example:9091 is no loopback name"), std::string::npos) << rebound;
  EXPECT_EQ(server_->pipeline()->config().version, "p1");
  EXPECT_EQ(post("127.0.0.1:9091").rfind("HTTP/1.1 200 ", 0), 0u);
  EXPECT_EQ(server_->pipeline()->config().version, "p2");
}

}  // namespace
}  // namespace txscore::service
