// LLM stage throughput by batch size, on the CPU and on the emulated device: one batched
// forward pass per step for B sequences (Generator::GenerateBatch), 32 new tokens each, after a
// 48-token prompt. Reports generated tokens per second of wall time; on the emulated device
// also what its latency model says the same work would take on a dataflow card
// (modeled_tokens_per_s). The emulator itself runs on this CPU.
//
//   ./build/txscore llm make-checkpoint --family qwen3 --size small --out var/models/bench-small
//   ./build/bench/llm_batch_bench --model var/models/bench-small --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
//   (one command line)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "accelerator/compute_threads.h"
#include "accelerator/emulated_device.h"
#include "accelerator/op_adapters.h"
#include "common/malloc_tuning.h"
#include "llm/decoder.h"
#include "llm/generator.h"
#include "llm/tokenizer.h"

namespace {

using namespace txscore;

std::string g_model;
constexpr int kPromptTokens = 48;
constexpr int kNewTokens = 32;

struct Loaded {
  std::unique_ptr<llm::Decoder> decoder;
  std::unique_ptr<llm::Tokenizer> tokenizer;
  std::unique_ptr<llm::Generator> generator;
};

Loaded& Model(const std::string& device, const std::string& dtype) {
  static std::map<std::string, Loaded> models;
  Loaded& slot = models[device + dtype];
  if (!slot.decoder) {
    llm::DecoderOptions options;
    options.dtype = *accelerator::ParseDtype(dtype);
    options.device = device;
    options.threads = 1;
    if (device != "cpu") {
      // What the planner picks for the emulated device: all three adapters.
      options.adapters.rope_as_matmul = options.adapters.rms_norm_by_matmul = options.adapters.embedding_on_host = true;
    }
    auto decoder = llm::Decoder::Load(g_model, options);
    auto tokenizer = llm::Tokenizer::FromDirectory(g_model);
    if (!decoder.ok() || !tokenizer.ok()) {
      std::fprintf(stderr, "cannot load %s\n", g_model.c_str());
      std::exit(1);
    }
    slot.decoder = std::move(decoder).value();
    slot.tokenizer = std::move(tokenizer).value();
    slot.generator = std::make_unique<llm::Generator>(slot.decoder.get(), slot.tokenizer.get());
  }
  return slot;
}

void BM_GenerateBatch(benchmark::State& state, const char* device, const char* dtype) {
  const int batch = static_cast<int>(state.range(0));
  Loaded& model = Model(device, dtype);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> prompt;
    const int64_t vocab = model.decoder->config().vocab_size;
    for (int i = 0; i < kPromptTokens; ++i) prompt.push_back(static_cast<int32_t>(1 + (i * 37 + b * 11) % (vocab - 1)));
    prompts.push_back(std::move(prompt));
  }
  llm::GenerationOptions options;
  options.max_new_tokens = kNewTokens;
  options.ignore_eos = true;
  accelerator::ResetEmulatedDeviceStats();
  for (auto _ : state) {
    auto results = model.generator->GenerateBatch(prompts, options);
    if (!results.ok()) state.SkipWithError(results.error().ToString().c_str());
    benchmark::DoNotOptimize(results);
  }
  const double tokens = static_cast<double>(batch) * kNewTokens * static_cast<double>(state.iterations());
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  if (std::string(device) != "cpu") {
    const double modeled_s = accelerator::EmulatedDeviceStatsSnapshot().modeled_us * 1e-6;
    state.counters["modeled_tokens_per_s"] = modeled_s > 0 ? tokens / modeled_s : 0;
  }
}

BENCHMARK_CAPTURE(BM_GenerateBatch, cpu_float32, "cpu", "float32")
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GenerateBatch, cpu_bfloat16, "cpu", "bfloat16")
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GenerateBatch, emulated_bfloat16, "privateuseone:0", "bfloat16")
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  txscore::KeepFreedHeapMemory();              // as txscore's main does
  txscore::accelerator::SetComputeThreads(1);  // as txscore sets it at start-up for a 1-thread stage
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--model=", 8) == 0) g_model = argv[i] + 8;
    if (std::strcmp(argv[i], "--model") == 0 && i + 1 < argc) g_model = argv[i + 1];
  }
  if (g_model.empty()) {
    std::fprintf(stderr, "usage: llm_batch_bench --model DIR [benchmark flags]\n");
    return 2;
  }
  if (!txscore::accelerator::RegisterEmulatedDevice().ok()) return 1;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
