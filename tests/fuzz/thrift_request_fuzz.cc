// A request frame, as the Thrift port receives it after the 4-byte length, decoded the way the
// server decodes it (service::ThriftFrameReader under the default server.limits) and run by the
// real handler over a real scoring pipeline (the test model, a scratch database). Any bytes must
// end as a reply or a refused message, never a crash or a hang (scripts/fuzz.sh bounds memory at
// 2 GiB; the 1 MiB limits themselves are tested in tests/service/rpc_server_test.cc). The frame
// length is the transport's, not fed here.
// A reply must be a well-formed frame.
#include <thrift/transport/TTransportException.h>

#include <atomic>
#include <memory>

#include "gen-cpp/TxScore.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "service/metrics.h"
#include "service/rpc_server.h"
#include "service/thrift_handler.h"
#include "storage/database.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/test_support.h"

namespace {

struct Service {
  txscore::testing::TempDir dir;
  std::unique_ptr<txscore::storage::Database> db;
  txscore::service::MetricsRegistry registry;
  txscore::service::ActivePipeline active;
  std::atomic<bool> ready{true};
  std::shared_ptr<txscore::rpc::TxScoreAsyncProcessor> processor;
  txscore::service::ThriftFrameReader frames{txscore::service::ThriftLimits{}};
};

Service* g_service = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using txscore::fuzz::Fail;
  auto* service = new Service();  // lives as long as the process
  auto config = txscore::pipelines::LoadPipelineConfig(txscore::testing::WriteTestPipeline(service->dir, "wal"));
  if (!config.ok()) Fail(config.error().ToString());
  auto db =
      txscore::storage::Database::Open(service->dir.file("db"), {.durability = txscore::storage::Durability::kWal});
  if (!db.ok()) Fail(db.error().ToString());
  service->db = std::move(db).value();
  auto pipeline = txscore::pipelines::ScoringPipeline::Create(*config, service->db.get(),
                                                              txscore::testing::TestCardKeyPath(service->dir));
  if (!pipeline.ok()) Fail(pipeline.error().ToString());
  auto version = std::make_shared<txscore::service::ActivePipeline::Version>();
  version->pipeline = std::move(pipeline).value();
  version->metrics = std::make_shared<txscore::service::ScoringMetrics>(&service->registry, *version->pipeline);
  service->active.Set(version);
  service->processor = std::make_shared<txscore::rpc::TxScoreAsyncProcessor>(
      std::make_shared<txscore::service::AsyncTxScoreHandler>(std::make_shared<txscore::service::TxScoreHandler>(
          &service->active, [service] { return service->ready.load(); })));
  g_service = service;
  return 0;
}

// The replay's end (replay_main.cc): closes the database and removes the scratch directory.
// (A libFuzzer run leaves it; scripts/fuzz.sh points TMPDIR at a folder it removes.)
extern "C" void TxscoreFuzzTeardown() {
  delete g_service;
  g_service = nullptr;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> reply;
  bool answered = false, keep_open = false;
  try {
    // No thread here has a ContinuationHost: every method answers before Process returns.
    g_service->frames.Process(*g_service->processor, data, size, [&](std::vector<uint8_t> frame, bool open) {
      answered = true;
      keep_open = open;
      reply = std::move(frame);
    });
  } catch (const apache::thrift::TException&) {
    return 0;  // refused: the server closes the connection
  }
  if (!answered) txscore::fuzz::Fail("a request was neither answered nor refused");
  if (!keep_open) return 0;  // refused: the server closes the connection
  if (!reply.empty()) {
    const uint32_t length =
        (uint32_t{reply[0]} << 24) | (uint32_t{reply[1]} << 16) | (uint32_t{reply[2]} << 8) | uint32_t{reply[3]};
    if (length != reply.size() - 4) txscore::fuzz::Fail("a reply frame's length is not its size");
  }
  return 0;
}
