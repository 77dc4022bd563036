// "Prepare once, run many" with the real decoder: a server whose forensic stage runs a tiny
// generated checkpoint on libtorch, placed on the emulated device (loaded from
// libtxscore_emulated_device.so through devices.backend_library) so that its weights are
// moved onto a device at start-up, writes findings for every request while the request path
// builds no model, compiles no constraint and moves no weights.
#include <gtest/gtest.h>

#include <fstream>

#include "accelerator/discovery.h"
#include "common/prepare_counters.h"
#include "gen-cpp/TxScore.h"
#include "llm/checkpoint_maker.h"
#include "llm/decoder.h"
#include "pipelines/placement.h"
#include "service/rpc_client.h"
#include "service/scoring_server.h"
#include "service/transaction_json.h"
#include "tests/test_support.h"

namespace txscore::service {
namespace {

std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

TEST(PrepareOnce, ARealDecoderOnADeviceMovesItsWeightsAtStartAndNoneOnTheRequestPath) {
  testing::TempDir dir;
  llm::CheckpointSpec spec;
  spec.family = "qwen3";
  spec.size = "tiny";
  ASSERT_TRUE(llm::MakeCheckpoint(spec, dir.file("llm")).ok());
  // Every decision is REVIEW (thresholds 0 and 1), so every request runs the forensic stage.
  std::string yaml = testing::ReadFile(testing::WriteTestPipeline(dir));
  yaml = Replaced(Replaced(yaml, "review_threshold: 0.5", "review_threshold: 0.0"), "decline_threshold: 0.9",
                  "decline_threshold: 1.0");
  // The emulated device comes from its library, loaded by discovery with dlopen as `txscore
  // serve` loads it; this binary does not link it.
  std::ofstream(testing::TestSettingsPath(dir), std::ios::app)
      << "devices:\n  backend_library: " << TXSCORE_EMULATED_DEVICE_LIBRARY << "\n";
  yaml +=
      "  - {name: forensic, kind: llm_findings, after: decision, model: llm, placement: emulated, "
      "budget_ms: 600000}\n";
  testing::WriteFile(dir.file("pipeline.yaml"), yaml);
  auto settings = LoadServiceSettings(testing::TestSettingsPath(dir));
  ASSERT_TRUE(settings.ok()) << settings.error().ToString();
  auto config = pipelines::LoadPipelineConfig(settings->pipeline);
  ASSERT_TRUE(config.ok()) << config.error().ToString();
  accelerator::DiscoveryOptions discovery;
  discovery.backend = settings->devices.backend;
  discovery.threads = pipelines::MostComputeThreads(*config);
  auto devices = accelerator::DiscoverDevices(discovery);
  ASSERT_TRUE(devices.ok()) << devices.error().ToString();
  pipelines::PipelineRuntime runtime;
  runtime.load_decoder = llm::Decoder::Load;
  runtime.devices = &*devices;

  const PrepareSnapshot before_start = PrepareCountersNow();
  auto server = ScoringServer::Create(*settings, *config, runtime);
  ASSERT_TRUE(server.ok()) << server.error().ToString();
  (*server)->Start();
  const PrepareSnapshot at_start = PrepareCountersNow() - before_start;
  EXPECT_EQ((*server)->pipeline()->plan().Find("forensic")->device, "emulated:0");
  EXPECT_TRUE((*server)->pipeline()->plan().Find("forensic")->emulated);
  EXPECT_GT(at_start.weight_bytes_moved, 0u);  // the decoder's weights, onto the emulated device
  EXPECT_GE(at_start.model_builds, 2u);        // the trees and the decoder
  EXPECT_GE(at_start.graph_builds, 1u);        // the findings constraint

  std::unique_ptr<RpcConnection> connection =
      RpcConnection::Open({"127.0.0.1", (*server)->rpc_port()}, {.recv_timeout_ms = 600000}).value();
  rpc::TxScoreClient& client = connection->client();
  for (int i = 0; i < 3; ++i) {
    fraud::RawTransaction tx = testing::ValidTransaction("prepare-" + std::to_string(i));
    tx.timestamp_ms += i * 1000;
    rpc::ScoreResult result;
    client.score(result, ToThriftTransaction(tx));
    EXPECT_EQ(result.decision, rpc::Decision::REVIEW);
    EXPECT_TRUE(result.__isset.findings) << "request " << i << " got no findings";
  }
  connection->Close();
  const PrepareSnapshot work = (*server)->RequestPathWork();
  EXPECT_EQ(work.model_builds, 0u);
  EXPECT_EQ(work.graph_builds, 0u);
  EXPECT_EQ(work.weight_bytes_moved, 0u);

  // The weight counter is live: the same decoder loaded onto the device now is request-path work.
  llm::DecoderOptions options;
  options.device = "privateuseone:0";
  const uint64_t moved_before = PrepareCountersNow().weight_bytes_moved;
  ASSERT_TRUE(llm::Decoder::Load(dir.file("llm"), options).ok());
  const uint64_t moved_by_load = PrepareCountersNow().weight_bytes_moved - moved_before;
  EXPECT_GT(moved_by_load, 0u);
  EXPECT_EQ((*server)->RequestPathWork().weight_bytes_moved, moved_by_load);
  (*server)->Stop();
}

}  // namespace
}  // namespace txscore::service
