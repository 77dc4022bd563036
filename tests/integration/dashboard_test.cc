// The dashboard over a real server on loopback: the page and the files it loads, and what
// /api/dashboard says about the pipeline, the requests, the decisions and the reloads. The
// page itself is driven in a browser by dashboard_browser_test.py.
#include "service/dashboard.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "accelerator/device.h"
#include "gen-cpp/TxScore.h"
#include "service/build_info.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "tests/rpc_test_support.h"
#include "tests/server_test_support.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

using testing::AdminGet;

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteTestPipeline(dir_);
    // A registry written out by hand (a CPU, and CUDA absent), so that the model stages are
    // placed as `txscore serve` places them, whatever this machine is.
    auto settings = LoadServiceSettings(testing::TestSettingsPath(dir_));
    ASSERT_TRUE(settings.ok()) << settings.error().ToString();
    auto config = pipelines::LoadPipelineConfig(settings->pipeline);
    ASSERT_TRUE(config.ok()) << config.error().ToString();
    devices_ = std::make_unique<accelerator::DeviceRegistry>();
    devices_->Register(accelerator::HostCpuDevice(
        {.dispatch_us = 3, .flops_per_s = 40e9, .memory_bytes_per_s = 16e9, .copy_bytes_per_s = 0, .source = "test"},
        24LL << 30));
    devices_->ReportAbsent(accelerator::kCudaKind, "libtorch was built without CUDA");
    auto server = ScoringServer::Create(*settings, *config, {.devices = devices_.get()});
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(server).value();
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  nlohmann::json State() {
    const testing::AdminAnswer answer = AdminGet(server_->admin_port(), "/api/dashboard");
    EXPECT_EQ(answer.status, 200) << answer.body;
    EXPECT_EQ(answer.header("Content-Type"), "application/json");
    return nlohmann::json::parse(answer.body);
  }

  testing::TempDir dir_;
  std::unique_ptr<accelerator::DeviceRegistry> devices_;
  std::unique_ptr<ScoringServer> server_;
};

TEST_F(DashboardTest, ThePageAndEveryFileItLoadsAreServedFromTheBinaryUnderAPolicyThatAllowsNothingElse) {
  const int port = server_->admin_port();
  const testing::AdminAnswer page = AdminGet(port, "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page.body, testing::ReadFile(std::string(TXSCORE_SOURCE_DIR) + "/service/dashboard/index.html"));
  EXPECT_EQ(page.header("Content-Security-Policy"), "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  EXPECT_EQ(page.header("X-Content-Type-Options"), "nosniff");
  // Each file the page names, byte for byte what the build embedded: ours, and uPlot's from npm.
  const std::vector<std::pair<std::string, std::string>> files = {
      {"/dashboard/dashboard.js", std::string(TXSCORE_SOURCE_DIR) + "/service/dashboard/dashboard.js"},
      {"/dashboard/dashboard.css", std::string(TXSCORE_SOURCE_DIR) + "/service/dashboard/dashboard.css"},
      {"/dashboard/uPlot.iife.min.js", std::string(TXSCORE_DASHBOARD_NPM) + "/uplot/dist/uPlot.iife.min.js"},
      {"/dashboard/uPlot.min.css", std::string(TXSCORE_DASHBOARD_NPM) + "/uplot/dist/uPlot.min.css"},
      {"/dashboard/uPlot.LICENSE", std::string(TXSCORE_DASHBOARD_NPM) + "/uplot/LICENSE"}};
  for (const auto& [path, file] : files) {
    EXPECT_NE(page.body.find("\"" + path + "\""), std::string::npos) << path << " is not named by the page";
    const testing::AdminAnswer answer = AdminGet(port, path);
    EXPECT_EQ(answer.status, 200) << path;
    EXPECT_EQ(answer.body, testing::ReadFile(file)) << path;
    EXPECT_EQ(answer.header("Content-Security-Policy"), page.header("Content-Security-Policy")) << path;
  }
  EXPECT_EQ(AdminGet(port, "/dashboard/uPlot.iife.min.js").header("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(AdminGet(port, "/dashboard/dashboard.css").header("Content-Type"), "text/css; charset=utf-8");
  // The page loads nothing from elsewhere: no absolute address in it.
  EXPECT_EQ(page.body.find("http://"), std::string::npos);
  EXPECT_EQ(page.body.find("https://"), std::string::npos);
  EXPECT_EQ(page.body.find("src=\"//"), std::string::npos);
  // Anything else under /dashboard/ is not there.
  const testing::AdminAnswer missing = AdminGet(port, "/dashboard/secrets.json");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing.body)["error"], "no such dashboard file");
  // The path named back has a card number in it cut, as every error quoting the caller's text.
  const testing::AdminAnswer card_path = AdminGet(port, "/dashboard/4111111111111111.js");
  EXPECT_EQ(card_path.status, 404);
  EXPECT_EQ(nlohmann::json::parse(card_path.body)["path"], "/dashboard/[card number redacted].js") << card_path.body;
  EXPECT_EQ(AdminGet(port, "/dashboard/").status, 404);
  EXPECT_EQ(AdminGet(port, "/dashboard/../metrics").status, 400);
}

TEST_F(DashboardTest, TheStateDrawsEachStageWithWhereItRunsAndWhyAndCountsWhatWasScored) {
  std::vector<std::string> tokens;
  {
    testing::RpcClient client(server_->rpc_port());
    for (int i = 0; i < 3; ++i) {
      fraud::RawTransaction tx = testing::ValidTransaction("dash-" + std::to_string(i));
      tx.timestamp_ms += i * 60000;
      rpc::ScoreResult result;
      client.client->score(result, ToThriftTransaction(tx));
      tokens.push_back(result.card_token);
    }
  }
  const testing::AdminAnswer answer = AdminGet(server_->admin_port(), "/api/dashboard");
  EXPECT_EQ(answer.body.find(testing::kTestPan), std::string::npos) << "the card number is in /api/dashboard";
  const nlohmann::json state = nlohmann::json::parse(answer.body);
  EXPECT_EQ(state["phase"], "serving");
  EXPECT_EQ(state["build"]["version"], ThisBuild().version);

  // The DAG: every stage in file order, with what it reads, where it runs and why.
  const std::shared_ptr<pipelines::ScoringPipeline> pipeline = server_->pipeline();
  const pipelines::StageGraph& graph = pipeline->config().graph;
  const nlohmann::json& stages = state["pipeline"]["stages"];
  ASSERT_EQ(stages.size(), graph.size());
  for (size_t i = 0; i < graph.size(); ++i) {
    const pipelines::GraphStage& stage = graph.stage(static_cast<int>(i));
    EXPECT_EQ(stages[i]["name"], stage.name);
    EXPECT_EQ(stages[i]["kind"], stage.kind);
    EXPECT_EQ(stages[i]["after"].size(), stage.after.size()) << stage.name;
    EXPECT_EQ(stages[i]["describe"], pipeline->stage(static_cast<int>(i)).Describe());
    const accelerator::Placement* placed = pipeline->plan().Find(stage.name);
    EXPECT_EQ(placed != nullptr, pipeline->stage(static_cast<int>(i)).model().has_value()) << stage.name;
    if (placed != nullptr) {
      EXPECT_EQ(stages[i]["device"], placed->device) << stage.name;
      EXPECT_EQ(stages[i]["why"], placed->reason) << stage.name;
      EXPECT_EQ(stages[i]["placement"], placed->requested) << stage.name;
      EXPECT_FALSE(stages[i]["candidates"].empty()) << stage.name;
    } else {
      EXPECT_EQ(stages[i]["device"], "host") << stage.name;
      EXPECT_EQ(stages[i]["placement"], nullptr) << stage.name;
    }
  }
  const nlohmann::json& fraud = stages[static_cast<size_t>(graph.Find("fraud"))];
  EXPECT_EQ(fraud["device"], "cpu");
  EXPECT_EQ(fraud["after"], nlohmann::json::array({"features"}));
  EXPECT_EQ(state["pipeline"]["model_id"], pipeline->model_id());

  // Counts: three requests, each through every stage, three decisions.
  EXPECT_EQ(state["requests"]["ok"], 3);
  EXPECT_EQ(state["requests"]["invalid"], 0);
  EXPECT_EQ(state["request_latency"]["count"], 3);
  EXPECT_GT(state["request_latency"]["seconds_sum"].get<double>(), 0);
  EXPECT_EQ(state["stage_latency"]["fraud"]["count"], 3);
  EXPECT_EQ(state["stage_latency"]["fraud"]["buckets"].back()[1], 3);  // cumulative: the last bucket holds all
  int decisions = 0;
  for (const auto& [decision, n] : state["decisions"].items()) decisions += n.get<int>();
  EXPECT_EQ(decisions, 3);

  // Recent decisions: newest first, by card token.
  const nlohmann::json& recent = state["recent_decisions"];
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0]["request_id"], "dash-2");
  EXPECT_EQ(recent[2]["request_id"], "dash-0");
  EXPECT_EQ(recent[0]["card_token"], tokens[2]);
  EXPECT_FALSE(tokens[2].empty());
  EXPECT_EQ(recent[0]["pipeline_version"], pipeline->config().version);
  EXPECT_EQ(state["reloads"], nlohmann::json::array());
  EXPECT_EQ(state["jobs"], nlohmann::json::array());  // no claims pipeline
  EXPECT_EQ(state["shard"], nullptr);                 // not sharded
  EXPECT_EQ(state["shard_forwards"], nlohmann::json::object());
}

TEST_F(DashboardTest, ReloadsAppearInTheHistoryAppliedOrRefusedWithWhy) {
  ASSERT_TRUE(server_->Reload("test").applied);
  const std::string pipeline_file = dir_.file("pipeline.yaml");
  const std::string good = testing::ReadFile(pipeline_file);
  testing::WriteFile(pipeline_file, "not: [valid");
  EXPECT_FALSE(server_->Reload("test").applied);
  testing::WriteFile(pipeline_file, good);
  const nlohmann::json reloads = State()["reloads"];
  ASSERT_EQ(reloads.size(), 2u);
  EXPECT_EQ(reloads[0]["applied"], true);
  EXPECT_EQ(reloads[0]["trigger"], "test");
  EXPECT_EQ(reloads[1]["applied"], false);
  EXPECT_NE(reloads[1]["detail"].get<std::string>().find("pipeline.yaml"), std::string::npos) << reloads[1];
}

TEST(DashboardState, JobAndReloadDetailsNamingFilesAreForOperatorsOnly) {
  DashboardSources sources;
  sources.jobs = [] {
    return nlohmann::json::array({{{"job_id", "j1"}, {"state", "failed"}, {"detail", "cannot read /data/in/x.jsonl"}}});
  };
  sources.reload_history = [] {
    return nlohmann::json::array({{{"applied", false}, {"detail", "/etc/txscore/pipeline.yaml:3:1: bad"}}});
  };
  const nlohmann::json monitoring = DashboardState(sources, 0, /*with_card_tokens=*/false);
  EXPECT_EQ(monitoring["jobs"][0]["detail"], kTokenForOperatorsOnly);
  EXPECT_EQ(monitoring["jobs"][0]["state"], "failed");  // the rest is for monitoring too
  EXPECT_EQ(monitoring["reloads"][0]["detail"], kTokenForOperatorsOnly);
  EXPECT_EQ(monitoring["reloads"][0]["applied"], false);
  const nlohmann::json operators = DashboardState(sources, 0, /*with_card_tokens=*/true);
  EXPECT_EQ(operators["jobs"][0]["detail"], "cannot read /data/in/x.jsonl");
  EXPECT_EQ(operators["reloads"][0]["detail"], "/etc/txscore/pipeline.yaml:3:1: bad");
}

TEST(PipelineGraphJson, WithoutDeviceDiscoveryAModelStageSaysItRunsOnTheCpuAndWhy) {
  testing::TempDir dir;
  testing::WriteTestPipeline(dir);
  auto server = testing::CreateTestServer(testing::TestSettingsPath(dir));  // no device registry
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  const nlohmann::json graph = PipelineGraphJson(*(*server)->pipeline());
  const nlohmann::json& fraud = graph["stages"][1];
  ASSERT_EQ(fraud["name"], "fraud");
  EXPECT_EQ(fraud["device"], "cpu");
  EXPECT_EQ(fraud["placement"], nullptr);
  EXPECT_EQ(fraud["why"], "not placed: this process looked for no devices, so the model runs on the CPU");
  EXPECT_EQ(graph["stages"][0]["device"], "host");  // features: no model
}

TEST(RecentDecisions, KeepTheNewestUpToTheirCapacityNewestFirst) {
  RecentDecisions recent(2);
  for (int i = 0; i < 3; ++i) {
    pipelines::ScoreOutcome outcome;
    outcome.request_id = "r" + std::to_string(i);
    outcome.card_token = "t" + std::to_string(i);
    outcome.decision = pipelines::Decision::kReview;
    outcome.reasons = {{.feature = "amount_zscore"}};
    recent.Add(outcome, 1000 + i);
  }
  const std::vector<RecentDecisions::Entry> newest = recent.Newest();
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0].request_id, "r2");
  EXPECT_EQ(newest[0].time_ms, 1002);
  EXPECT_EQ(newest[1].card_token, "t1");
  EXPECT_EQ(newest[1].decision, "REVIEW");
  EXPECT_EQ(newest[1].reasons, std::vector<std::string>{"amount_zscore"});
}

TEST(RecentDecisions, ShowRuleHitsAndFindingsWithTheSummaryForOperatorsOnlyAndNoCardNumber) {
  RecentDecisions recent;
  pipelines::ScoreOutcome outcome;
  outcome.request_id = "r1";
  outcome.card_token = "tok";
  outcome.decision = pipelines::Decision::kDecline;
  pipelines::RuleHit deny_list;
  deny_list.rule = "R20";
  deny_list.decision = pipelines::Decision::kDecline;
  pipelines::RuleHit night;
  night.rule = "N05";
  outcome.rule_hits = {deny_list, night};
  llm::Findings findings;
  findings.risk_level = llm::RiskLevel::kHigh;
  findings.flags = {"velocity_anomaly", "new_device"};
  findings.summary = "Card 4111 1111 1111 1111 was used at a blocked merchant.";
  outcome.findings = findings;
  recent.Add(outcome, 1000);
  pipelines::ScoreOutcome plain;
  plain.request_id = "r2";
  recent.Add(plain, 1001);

  DashboardSources sources;
  sources.decisions = &recent;
  const nlohmann::json operator_view = DashboardState(sources, 2000, /*with_card_tokens=*/true);
  const nlohmann::json& declined = operator_view["recent_decisions"][1];
  EXPECT_EQ(declined["rule_hits"], nlohmann::json::array({"R20", "N05"}));
  EXPECT_EQ(declined["findings"], "high: velocity_anomaly, new_device");
  EXPECT_EQ(declined["findings_summary"].get<std::string>().find("4111"), std::string::npos)
      << declined["findings_summary"];
  EXPECT_NE(declined["findings_summary"].get<std::string>().find("at a blocked merchant"), std::string::npos);
  const nlohmann::json& approved = operator_view["recent_decisions"][0];
  EXPECT_EQ(approved["rule_hits"], nlohmann::json::array());
  EXPECT_EQ(approved["findings"], "");
  EXPECT_EQ(approved["findings_summary"], "");

  const nlohmann::json monitor_view = DashboardState(sources, 2000, /*with_card_tokens=*/false);
  EXPECT_EQ(monitor_view["recent_decisions"][1]["findings"], "high: velocity_anomaly, new_device");
  EXPECT_EQ(monitor_view["recent_decisions"][1]["findings_summary"], kTokenForOperatorsOnly);
  EXPECT_EQ(monitor_view["recent_decisions"][1]["card_token"], kTokenForOperatorsOnly);
}

}  // namespace
}  // namespace txscore::service
