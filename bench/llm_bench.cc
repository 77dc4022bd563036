// LLM decoder speed on CPU: prefill tokens/s and decode ms/token, next to the floor measured
// in the same run: streaming every weight matrix once through a matrix-vector product of the
// same shape and dtype (what one decode step cannot beat on a memory-bound machine).
//
//   ./build/txscore llm make-checkpoint --family qwen3 --size 0.5b --out var/models/bench-0.5b
//   ./build/bench/llm_bench --model var/models/bench-0.5b --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//   (one command line)
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstring>
#include <map>

#include "llm/decoder.h"

namespace {

std::string g_model;
constexpr int kPrefillTokens = 128;
constexpr int kDecodeContext = 256;  // decode steps run with the cache refilled to this length

txscore::llm::Decoder& Model(const std::string& dtype) {
  static std::map<std::string, std::unique_ptr<txscore::llm::Decoder>> models;
  auto& slot = models[dtype];
  if (!slot) {
    auto loaded = txscore::llm::Decoder::Load(g_model, {.dtype = dtype});
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.error().ToString().c_str());
      std::exit(1);
    }
    slot = std::move(loaded).value();
  }
  return *slot;
}

std::vector<int32_t> Tokens(int n, int offset) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(1 + (i * 37 + offset) % 3000);
  return ids;
}

void BM_Prefill(benchmark::State& state, const char* dtype) {
  auto& model = Model(dtype);
  for (auto _ : state) {
    auto cache = model.NewCache(1, kPrefillTokens);
    auto logits = model.Forward(cache.get(), {Tokens(kPrefillTokens, 0)});
    benchmark::DoNotOptimize(logits);
  }
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(kPrefillTokens) * state.iterations(),
                                                      benchmark::Counter::kIsRate);
}

void BM_DecodeStep(benchmark::State& state, const char* dtype) {
  auto& model = Model(dtype);
  auto cache = model.NewCache(1, kDecodeContext + 1);
  auto fill = [&] {
    cache->Reset(0);
    (void)model.Forward(cache.get(), {Tokens(kDecodeContext - 64, 1)});
  };
  fill();
  int step = 0;
  for (auto _ : state) {
    if (cache->lengths()[0] >= kDecodeContext) {
      state.PauseTiming();
      fill();
      state.ResumeTiming();
    }
    auto logits = model.Forward(cache.get(), {{1 + step++ % 3000}});
    benchmark::DoNotOptimize(logits);
  }
}

// Every matrix of the model (all layers' q, k, v, o, gate, up, down, and the output head)
// times a single vector, in the model's dtype: the bandwidth floor of one decode step.
void BM_WeightStreamFloor(benchmark::State& state, const char* dtype) {
  const auto& c = Model(dtype).config();
  const auto scalar = std::strcmp(dtype, "bfloat16") == 0 ? torch::kBFloat16 : torch::kFloat32;
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<torch::Tensor> weights;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (auto shape : {std::vector<int64_t>{q, h}, {kv, h}, {kv, h}, {h, q}, {c.intermediate_size, h},
                       {c.intermediate_size, h}, {h, c.intermediate_size}}) {
      weights.push_back(torch::randn(shape).to(scalar));
    }
  }
  weights.push_back(torch::randn({c.vocab_size, h}).to(scalar));
  std::map<int64_t, torch::Tensor> inputs;
  for (const auto& w : weights) inputs.emplace(w.size(1), torch::randn({1, w.size(1)}).to(scalar));
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    for (const auto& w : weights) benchmark::DoNotOptimize(torch::nn::functional::linear(inputs[w.size(1)], w));
  }
  int64_t bytes = 0;
  for (const auto& w : weights) bytes += w.numel() * w.element_size();
  state.counters["weight_GB"] = static_cast<double>(bytes) / 1e9;
  state.counters["GB_per_s"] = benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9,
                                                  benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_Prefill, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WeightStreamFloor, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WeightStreamFloor, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0) {
      g_model = argv[i + 1];
      for (int j = i; j + 2 < argc; ++j) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  }
  if (g_model.empty()) {
    std::fprintf(stderr, "usage: llm_bench --model CHECKPOINT_DIR [benchmark flags]\n");
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("model", g_model);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
