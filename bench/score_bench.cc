// In-process scoring latency: the pieces of the request path and the whole of it.
//
//   ./build/bench/score_bench --model var/models/fraud.ubj
//
// Every benchmark records each call's latency and reports p50/p99 (microseconds) next to
// Google Benchmark's mean. Transactions come from the synthetic generator, replayed in time
// order so card state builds up as it would in production.
#include <benchmark/benchmark.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "fraud/features.h"
#include "fraud/synthetic.h"
#include "fraud/trainer.h"
#include "fraud/xgboost_model.h"
#include "pipelines/config.h"
#include "pipelines/scoring_pipeline.h"
#include "tests/test_support.h"

namespace txscore {
namespace {

std::string g_model_path = "var/models/fraud.ubj";

class LatencyRecorder {
 public:
  void Add(std::chrono::steady_clock::duration d) {
    samples_.push_back(std::chrono::duration<double, std::micro>(d).count());
  }
  void Report(benchmark::State& state) {
    std::sort(samples_.begin(), samples_.end());
    if (samples_.empty()) return;
    state.counters["p50_us"] = samples_[samples_.size() / 2];
    state.counters["p99_us"] = samples_[std::min(samples_.size() - 1, samples_.size() * 99 / 100)];
  }

 private:
  std::vector<double> samples_;
};

const std::vector<fraud::LabeledTransaction>& Transactions() {
  static const auto* all =
      new std::vector<fraud::LabeledTransaction>(fraud::GenerateTransactions({.seed = 99, .cards = 500, .days = 10}));
  return *all;
}

const fraud::FeatureTable& Features() {
  static const auto* table = new fraud::FeatureTable(fraud::BuildFeatureTable(Transactions()).value());
  return *table;
}

const fraud::XGBoostModel& Model() {
  static const auto* model = [] {
    auto loaded = fraud::XGBoostModel::Load(g_model_path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\nrun ./scripts/setup.sh first, or pass --model FILE\n",
                   loaded.error().ToString().c_str());
      std::exit(1);
    }
    return std::move(loaded).value().release();
  }();
  return *model;
}

void BM_ComputeFeatures(benchmark::State& state) {
  const auto& all = Transactions();
  fraud::CardState card;
  std::vector<fraud::Transaction> txs;
  for (size_t i = 0; i < 1000; ++i) txs.push_back(fraud::ValidateTransaction(all[i].tx).value());
  for (size_t i = 0; i < 40; ++i) fraud::UpdateCardState(txs[i], &card);  // a card with history
  LatencyRecorder latency;
  size_t i = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(fraud::ComputeFeatures(txs[i++ % txs.size()], card));
    latency.Add(std::chrono::steady_clock::now() - start);
  }
  latency.Report(state);
}
BENCHMARK(BM_ComputeFeatures);

// Single-row prediction and contributions: txscore's TreeEnsemble against XGBoost's C API
// on the same model and rows (the A/B pair the fast evaluator is judged by).
template <typename Call>
void TimeOneRowCalls(benchmark::State& state, Call call) {
  const auto& table = Features();
  LatencyRecorder latency;
  size_t r = 0;
  for (auto _ : state) {
    const float* row = table.values.data() + (r++ % table.rows()) * table.schema.size();
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(call(row));
    latency.Add(std::chrono::steady_clock::now() - start);
  }
  latency.Report(state);
}

void BM_PredictOneRow(benchmark::State& state, bool fast) {
  const auto& model = Model();
  TimeOneRowCalls(state,
                  [&](const float* row) { return fast ? model.Predict(row, 1) : model.PredictWithXGBoost(row, 1); });
}
BENCHMARK_CAPTURE(BM_PredictOneRow, tree_ensemble, true);
BENCHMARK_CAPTURE(BM_PredictOneRow, xgboost_c_api, false);

void BM_ContributionsOneRow(benchmark::State& state, bool fast) {
  const auto& model = Model();
  TimeOneRowCalls(
      state, [&](const float* row) { return fast ? model.Contributions(row) : model.ContributionsWithXGBoost(row); });
}
BENCHMARK_CAPTURE(BM_ContributionsOneRow, tree_ensemble, true);
BENCHMARK_CAPTURE(BM_ContributionsOneRow, xgboost_c_api, false);

// The whole request path minus Thrift: validate, tokenize, state read, features, model,
// contributions, decision, and the RocksDB batch with the given durability.
void BM_PipelineScore(benchmark::State& state, const char* durability, bool fast) {
  testing::TempDir dir;
  const std::string key = dir.file("card.key");
  testing::WriteFile(key, testing::TestCardKey());
  ::chmod(key.c_str(), 0600);
  const std::string yaml = dir.file("p.yaml");
  testing::WriteFile(yaml, std::string("stages:\n"
                                       "  - {name: features, kind: features}\n"
                                       "  - {name: fraud, kind: xgboost, after: features, model: ") +
                               g_model_path + (fast ? "" : ", evaluator: xgboost") +
                               "}\n"
                               "  - {name: decision, kind: decision, after: fraud}\n");
  auto config = pipelines::LoadPipelineConfig(yaml);
  if (!config.ok()) {
    state.SkipWithError(config.error().ToString().c_str());
    return;
  }
  Result<storage::Durability> parsed_durability = storage::ParseDurability(durability);
  auto db = storage::Database::Open(dir.file("db"), {.durability = parsed_durability.value()});
  auto pipeline = pipelines::ScoringPipeline::Create(*config, db->get(), key);
  if (!pipeline.ok()) {
    state.SkipWithError(pipeline.error().ToString().c_str());
    return;
  }
  const auto& all = Transactions();
  LatencyRecorder latency;
  size_t i = 0;
  for (auto _ : state) {
    fraud::RawTransaction tx = all[i++ % all.size()].tx;
    const auto start = std::chrono::steady_clock::now();
    auto outcome = (*pipeline)->Score(std::move(tx));
    latency.Add(std::chrono::steady_clock::now() - start);
    if (!outcome.ok()) {
      state.SkipWithError(outcome.error().ToString().c_str());
      break;
    }
  }
  latency.Report(state);
}
BENCHMARK_CAPTURE(BM_PipelineScore, wal / tree_ensemble, "wal", true);
BENCHMARK_CAPTURE(BM_PipelineScore, wal / xgboost_c_api, "wal", false);
BENCHMARK_CAPTURE(BM_PipelineScore, sync / tree_ensemble, "sync", true);
BENCHMARK_CAPTURE(BM_PipelineScore, sync / xgboost_c_api, "sync", false);

}  // namespace
}  // namespace txscore

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0) {
      txscore::g_model_path = std::filesystem::absolute(argv[i + 1]).string();
      for (int j = i; j + 2 < argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  }
  txscore::g_model_path = std::filesystem::absolute(txscore::g_model_path).string();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
