// LLM decoder speed on CPU: prefill tokens/s and decode ms/token, next to what bounds them,
// measured in the same run: the machine's memory bandwidth (a streaming read; weight bytes / it
// is the least a decode step can take), libtorch's own matrix-vector speed over every weight
// matrix of the same shape and dtype, and the matrix-multiply peak prefill is compared with.
//
// docs/llm.md's "Speed" table comes from these commands (a block comment, so the shell's line
// continuation stays as README has it):
/*
./build/txscore llm make-checkpoint --family llama --size 0.5b --out var/models/bench-0.5b
./build/bench/llm_bench --model var/models/bench-0.5b --benchmark_min_time=1 --benchmark_repetitions=5 \
    --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
*/
// and docs/performance.md's targets table (issue 15: the Qwen3 0.5B checkpoint, 2 threads,
// against the memory floor and the matmul peak) from bench/run_llm_floor.sh, which runs this
// bench with --threads 2 and turns its figures into ratios.
// --threads N (default 1) sets libtorch's and OpenBLAS's thread count and the kernels' pool;
// the docs/llm.md table above uses 1, the targets table 2. Every forward pass is checked (its
// error, and logits of one row of vocab_size finite floats per sequence): a failing one stops
// its benchmark with the error instead of timing nothing. The values themselves are the
// tests' business (tests/llm/cpu_kernels_test.cc).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "accelerator/compute_threads.h"
#include "llm/cpu_kernels/kernels.h"
#include "llm/cpu_kernels/worker_pool.h"
#include "llm/decoder.h"

namespace {

std::string g_model;
int g_threads = 1;
constexpr int kPrefillTokens = 128;
constexpr int kDecodeContext = 256;  // decode steps run with the cache refilled to this length

// A variant is a dtype ("float32", "bfloat16"), "int8" (int8 weights, bfloat16 activations),
// and "-libtorch" for libtorch's ops in decode steps instead of txscore's CPU kernels.
txscore::llm::DecoderOptions VariantOptions(const std::string& variant) {
  txscore::llm::DecoderOptions options{.threads = g_threads};
  const bool libtorch = variant.size() > 9 && variant.substr(variant.size() - 9) == "-libtorch";
  const std::string base = libtorch ? variant.substr(0, variant.size() - 9) : variant;
  options.cpu_kernels = !libtorch;
  if (base == "int8") {
    options.dtype = txscore::accelerator::Dtype::kBFloat16;
    options.quantization = txscore::llm::DecoderOptions::Quantization::kInt8;
  } else {
    options.dtype = *txscore::accelerator::ParseDtype(base);
  }
  return options;
}

txscore::llm::Decoder& Model(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<txscore::llm::Decoder>> models;
  auto& slot = models[variant];
  if (!slot) {
    auto loaded = txscore::llm::Decoder::Load(g_model, VariantOptions(variant));
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.error().ToString().c_str());
      std::exit(1);
    }
    slot = std::move(loaded).value();
  }
  return *slot;
}

// Ids 1..3000 (1..vocab_size - 1 for a smaller vocabulary, as in a tiny checkpoint).
std::vector<int32_t> Tokens(int n, int offset, int64_t vocab_size) {
  const int64_t range = std::min<int64_t>(3000, vocab_size - 1);
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(1 + (i * 37 + offset) % range));
  return ids;
}

// Runs one forward pass of one sequence. False, with the benchmark stopped by
// SkipWithError, when it fails or its logits are not one row of vocab_size floats.
bool CheckedForward(benchmark::State& state, const txscore::llm::Decoder& model, txscore::llm::DecoderCache* cache,
                    std::vector<int32_t> tokens) {
  auto logits = model.Forward(cache, {std::move(tokens)});
  if (!logits.ok()) {
    state.SkipWithError(logits.error().ToString().c_str());
    return false;
  }
  const auto vocab_size = static_cast<size_t>(model.config().vocab_size);
  if (logits->size() != 1 || (*logits)[0].size() != vocab_size) {
    const std::string message = "forward returned " + std::to_string(logits->size()) + " rows of " +
                                std::to_string(logits->empty() ? 0 : (*logits)[0].size()) + " logits, expected 1 of " +
                                std::to_string(vocab_size);
    state.SkipWithError(message.c_str());
    return false;
  }
  for (float value : (*logits)[0]) {
    if (!std::isfinite(value)) {
      state.SkipWithError("forward returned a logit that is NaN or infinite");
      return false;
    }
  }
  benchmark::DoNotOptimize(logits->data());
  return true;
}

// Multiply-adds of a prefill of `tokens` tokens: every layer's projections for every token,
// attention's two products over the causal triangle, and the output head for the last token.
double PrefillFlops(const txscore::llm::ModelConfig& c, int64_t tokens) {
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.num_attention_heads * c.head_dim),
               kv = static_cast<double>(c.num_key_value_heads * c.head_dim),
               inner = static_cast<double>(c.intermediate_size);
  const double per_token = q * h + 2 * kv * h + h * q + 3 * inner * h;
  const double attention = 2.0 * q * static_cast<double>(tokens) * static_cast<double>(tokens + 1) / 2;
  return 2.0 * (static_cast<double>(c.num_hidden_layers) * (per_token * static_cast<double>(tokens) + attention) +
                static_cast<double>(c.vocab_size) * h);
}

void BM_Prefill(benchmark::State& state, const char* dtype) {
  auto& model = Model(dtype);
  const auto prompt = Tokens(kPrefillTokens, 0, model.config().vocab_size);
  for (auto _ : state) {
    auto cache = model.NewCache(1, kPrefillTokens);
    if (!CheckedForward(state, model, cache.get(), prompt)) break;
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(kPrefillTokens) * state.iterations(), benchmark::Counter::kIsRate);
  // Against BM_MatmulPeak's GFLOP_per_s for the dtype (bench/run_llm_floor.sh).
  state.counters["GFLOP_per_s"] = benchmark::Counter(
      PrefillFlops(model.config(), kPrefillTokens) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Bytes of weights a decode step reads: every layer's q, k, v, o, gate, up and down, and the
// output head (the embedding table is not read beyond one row, unless tied to the head, which
// is counted once). int8 matrices carry a float scale and an int32 sum per row.
double DecodeWeightBytes(const txscore::llm::ModelConfig& c, const std::string& variant) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t inner = c.intermediate_size;
  const double rows = static_cast<double>(c.num_hidden_layers) * (q + 2 * kv + h + 3 * inner) + c.vocab_size;
  const double elements = static_cast<double>(c.num_hidden_layers) * (q * h + 2 * kv * h + h * q + 3 * inner * h) +
                          static_cast<double>(c.vocab_size) * h;
  if (variant.rfind("int8", 0) == 0) return elements + rows * 8;
  return elements * (variant.rfind("float32", 0) == 0 ? 4 : 2);
}

void BM_DecodeStep(benchmark::State& state, const char* variant) {
  auto& model = Model(variant);
  const int64_t vocab_size = model.config().vocab_size;
  const auto context = Tokens(kDecodeContext - 64, 1, vocab_size);
  auto cache = model.NewCache(1, kDecodeContext + 1);
  auto fill = [&] {
    cache->Reset(0);
    return CheckedForward(state, model, cache.get(), context);
  };
  if (!fill()) return;
  int step = 0;
  for (auto _ : state) {
    if (cache->lengths()[0] >= kDecodeContext) {
      state.PauseTiming();
      if (!fill()) break;  // stopped by SkipWithError: the timer must not be resumed
      state.ResumeTiming();
    }
    if (!CheckedForward(state, model, cache.get(), Tokens(1, step++, vocab_size))) break;
  }
  // Divided by BM_MemoryBandwidthFloor's GB_per_s (bench/run_llm_floor.sh does), the least
  // time a step can take.
  state.counters["weight_GB"] = DecodeWeightBytes(model.config(), variant) / 1e9;
}

// Only the matrix-vector products of a decode step, through txscore's kernels: every matrix
// of the model's shapes (random values; q, k, v in one parallel region and gate, up in
// another, as the decode step groups them) times one activation row, on a pool of --threads,
// with nothing else of the step (no norms, attention, activation quantization or logits). Its
// time against BM_DecodeStep's splits a step into the kernels' streaming and everything else;
// against weight bytes / BM_MemoryBandwidthFloor it is the kernels' own distance from the floor.
void BM_DecodeProducts(benchmark::State& state, const char* variant) {
  namespace cpu = txscore::llm::cpu;
  const auto& c = Model(variant).config();
  const bool int8 = std::strcmp(variant, "int8") == 0;
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  struct Matrix {
    std::vector<cpu::Bf16> bf16;
    std::vector<int8_t> int8;
    std::vector<float> scales;
    std::vector<int32_t> row_sums;
    int64_t rows = 0, cols = 0;
  };
  uint32_t seed = 12345;
  auto make = [&](int64_t rows, int64_t cols) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (float& v : values) v = static_cast<float>((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    if (int8) {
      m.int8.resize(values.size());
      m.scales.resize(static_cast<size_t>(rows));
      m.row_sums.resize(static_cast<size_t>(rows));
      cpu::QuantizeInt8Rows(values.data(), rows, cols, m.int8.data(), m.scales.data(), m.row_sums.data());
    } else {
      for (float v : values) m.bf16.push_back(cpu::FloatToBf16(v));
    }
    return m;
  };
  // Each region: matrices sharing one input of `cols` columns.
  std::vector<std::vector<Matrix>> regions;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<Matrix> qkv;
    qkv.push_back(make(q, h));
    qkv.push_back(make(kv, h));
    qkv.push_back(make(kv, h));
    regions.push_back(std::move(qkv));
    regions.emplace_back().push_back(make(h, q));
    std::vector<Matrix> gate_up;
    gate_up.push_back(make(c.intermediate_size, h));
    gate_up.push_back(make(c.intermediate_size, h));
    regions.push_back(std::move(gate_up));
    regions.emplace_back().push_back(make(h, c.intermediate_size));
  }
  regions.emplace_back().push_back(make(c.vocab_size, h));
  const int64_t widest = std::max({h, q, c.intermediate_size});
  std::vector<cpu::Bf16> x(static_cast<size_t>(widest), cpu::FloatToBf16(0.25f));
  std::vector<uint8_t> quantized(static_cast<size_t>(widest), 160);
  const float x_scale = 0.01f;
  std::vector<float> out(static_cast<size_t>(std::max(c.vocab_size, 2 * c.intermediate_size)));
  const cpu::KernelSet& kernels = cpu::BestKernels();
  cpu::WorkerPool pool(g_threads);
  for (auto _ : state) {
    for (const auto& region : regions) {
      int64_t total = 0;
      for (const Matrix& m : region) total += m.rows;
      cpu::ParallelRanges(pool, total, 16, [&](int64_t begin, int64_t end) {
        int64_t offset = 0;
        for (const Matrix& m : region) {
          const int64_t from = std::max(begin - offset, int64_t{0}), to = std::min(end - offset, m.rows);
          const cpu::Output target{.f32 = out.data() + offset, .stride = m.rows};
          offset += m.rows;
          if (from >= to) continue;
          if (int8) {
            const cpu::Int8Matrix w{m.int8.data(), m.scales.data(), m.row_sums.data(), m.rows, m.cols};
            kernels.gemv_int8(w, {quantized.data(), &x_scale, 1, m.cols}, target, from, to);
          } else {
            kernels.gemv_bf16({m.bf16.data(), m.rows, m.cols}, x.data(), 1, target, from, to);
          }
        }
      });
    }
    benchmark::DoNotOptimize(out.data());
  }
  for (float value : out) {
    if (!std::isfinite(value)) state.SkipWithError("a product gave a value that is NaN or infinite");
  }
  state.counters["weight_GB"] = DecodeWeightBytes(c, variant) / 1e9;
}

// Every matrix a decode step reads, as {rows, cols}: each layer's q, k, v, o, gate, up and
// down, then the output head.
std::vector<std::array<int64_t, 2>> ModelMatrixShapes(const txscore::llm::ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<std::array<int64_t, 2>> shapes;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const auto& shape : {std::array<int64_t, 2>{q, h},
                              {kv, h},
                              {kv, h},
                              {h, q},
                              {c.intermediate_size, h},
                              {c.intermediate_size, h},
                              {h, c.intermediate_size}}) {
      shapes.push_back(shape);
    }
  }
  shapes.push_back({c.vocab_size, h});
  return shapes;
}

// What a CPU prefill with int8 weights does first, at every prefill group: every matrix of the
// model (all layers' q, k, v, o, gate, up, down, and the output head) dequantized to bfloat16
// by one kernel set, split over the pool's threads by rows. The output buffers are written
// once before timing (the decoder's are new at every group: their page faults are not here).
// The result is checked against the portable set's. GB_per_s counts int8 bytes read and
// bfloat16 bytes written.
void BM_DequantizeInt8(benchmark::State& state, txscore::llm::cpu::Isa isa) {
  namespace cpu = txscore::llm::cpu;
  const cpu::KernelSet* kernels = cpu::KernelsFor(isa);
  if (kernels == nullptr) {
    state.SkipWithError("this CPU does not run this kernel set");
    return;
  }
  struct Matrix {
    std::vector<int8_t> values;
    std::vector<float> scales;
    std::vector<cpu::Bf16> out;
    int64_t rows = 0, cols = 0;
  };
  std::vector<Matrix> matrices;
  uint32_t seed = 12345;
  auto add = [&](int64_t rows, int64_t cols) {
    Matrix& m = matrices.emplace_back();
    m.rows = rows;
    m.cols = cols;
    m.values.resize(static_cast<size_t>(rows * cols));
    for (int8_t& v : m.values) {
      v = static_cast<int8_t>((static_cast<int>((seed = seed * 1664525u + 1013904223u) >> 24) - 128) |
                              1);  // odd, -127..127
    }
    for (int64_t r = 0; r < rows; ++r) m.scales.push_back(0.001f + static_cast<float>(r % 97) * 1e-5f);
    m.out.assign(m.values.size(), 0);
  };
  for (const auto& [rows, cols] : ModelMatrixShapes(Model("int8").config())) add(rows, cols);
  cpu::WorkerPool pool(g_threads);
  auto dequantize = [&](const cpu::KernelSet& set, Matrix& m, cpu::Bf16* dest) {
    const cpu::Int8Matrix w{.values = m.values.data(), .scales = m.scales.data(), .rows = m.rows, .cols = m.cols};
    cpu::ParallelRanges(pool, m.rows, 16,
                        [&](int64_t begin, int64_t end) { set.dequantize_int8(w, begin, end, dest); });
  };
  for (auto _ : state) {
    for (Matrix& m : matrices) dequantize(*kernels, m, m.out.data());
    benchmark::DoNotOptimize(matrices.back().out.data());
  }
  // Checked after the timing: every matrix, against the portable set's bits.
  std::vector<cpu::Bf16> reference;
  for (Matrix& m : matrices) {
    reference.assign(m.out.size(), 0);
    dequantize(*cpu::KernelsFor(cpu::Isa::kPortable), m, reference.data());
    if (reference != m.out) {
      state.SkipWithError("the dequantized values differ from the portable set's");
      break;
    }
  }
  int64_t elements = 0;
  for (const Matrix& m : matrices) elements += m.rows * m.cols;
  state.counters["GB_per_s"] =
      benchmark::Counter(3.0 * static_cast<double>(elements) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Every matrix of the model (all layers' q, k, v, o, gate, up, down, and the output head)
// times a single vector, in the model's dtype: the bandwidth floor of one decode step.
void BM_WeightStreamFloor(benchmark::State& state, const char* dtype) {
  const auto& c = Model(dtype).config();
  const auto scalar = std::strcmp(dtype, "bfloat16") == 0 ? torch::kBFloat16 : torch::kFloat32;
  std::vector<torch::Tensor> weights;
  for (const auto& [rows, cols] : ModelMatrixShapes(c)) weights.push_back(torch::randn({rows, cols}).to(scalar));
  std::map<int64_t, torch::Tensor> inputs;
  for (const auto& w : weights) inputs.emplace(w.size(1), torch::randn({1, w.size(1)}).to(scalar));
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    for (const auto& w : weights) benchmark::DoNotOptimize(torch::nn::functional::linear(inputs[w.size(1)], w));
  }
  int64_t bytes = 0;
  for (const auto& w : weights) bytes += w.numel() * w.element_size();
  state.counters["weight_GB"] = static_cast<double>(bytes) / 1e9;
  state.counters["GB_per_s"] =
      benchmark::Counter(static_cast<double>(bytes) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The machine's floor for a decode step (issue: the LLM on the CPU near the memory floor): a
// streaming read of a buffer far larger than the caches (1 GiB), split over the decode's
// thread count (--threads), each thread summing its slice with 64-bit loads the compiler
// vectorises. A decode step must read every weight once, so weight bytes / this rate is the
// least time a step can take; BM_WeightStreamFloor is libtorch's matrix-vector speed instead.
void BM_MemoryBandwidthFloor(benchmark::State& state) {
  constexpr size_t kBytes = size_t{1} << 30;
  static std::vector<uint64_t> buffer = [] {
    std::vector<uint64_t> filled(kBytes / sizeof(uint64_t));
    for (size_t i = 0; i < filled.size(); ++i) filled[i] = i;  // touched: every page is resident
    return filled;
  }();
  const int threads = g_threads;
  const size_t per_thread = buffer.size() / static_cast<size_t>(threads);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        const uint64_t* begin = buffer.data() + static_cast<size_t>(t) * per_thread;
        uint64_t a = 0, b = 0, c = 0, d = 0;  // independent chains: loads, not adds, are the limit
        for (size_t i = 0; i + 4 <= per_thread; i += 4) {
          a += begin[i];
          b += begin[i + 1];
          c += begin[i + 2];
          d += begin[i + 3];
        }
        sums[static_cast<size_t>(t)] = a + b + c + d;
      });
    }
    for (std::thread& worker : workers) worker.join();
    benchmark::DoNotOptimize(sums.data());
  }
  // The read is checked: the sum of 0..n-1 over the whole buffer.
  uint64_t total = 0;
  for (uint64_t sum : sums) total += sum;
  const uint64_t n = per_thread * static_cast<size_t>(threads);
  if (total != n * (n - 1) / 2) state.SkipWithError("the streaming read summed the wrong value");
  state.counters["threads"] = threads;
  state.counters["GB_per_s"] = benchmark::Counter(static_cast<double>(n * sizeof(uint64_t)) * state.iterations() / 1e9,
                                                  benchmark::Counter::kIsRate);
}

// The matrix-multiply peak prefill is measured against: a square product of 1024 x 1024
// matrices in the dtype, large enough to be compute-bound, on the bench's thread count
// (libtorch's GEMM: OpenBLAS for float32, its own kernels for bfloat16). Its result is checked
// against a float32 product of the same operands.
void BM_MatmulPeak(benchmark::State& state, const char* dtype) {
  constexpr int64_t kN = 1024;
  const auto scalar = std::strcmp(dtype, "bfloat16") == 0 ? torch::kBFloat16 : torch::kFloat32;
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({kN, kN}).to(scalar), b = torch::randn({kN, kN}).to(scalar);
  torch::Tensor product;
  for (auto _ : state) {
    product = torch::mm(a, b);
    benchmark::DoNotOptimize(product.data_ptr());
  }
  const double error = (product.to(torch::kFloat32) - torch::mm(a.to(torch::kFloat32), b.to(torch::kFloat32)))
                           .abs()
                           .max()
                           .item<double>();
  if (!(error < (scalar == torch::kBFloat16 ? 2.0 : 1e-2))) state.SkipWithError("the product is wrong");
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(2.0 * kN * kN * kN * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_MatmulPeak, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_MatmulPeak, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MemoryBandwidthFloor)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WeightStreamFloor, float32, "float32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, bfloat16_libtorch, "bfloat16-libtorch")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeStep, int8, "int8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeProducts, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeProducts, int8, "int8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Prefill, int8, "int8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_WeightStreamFloor, bfloat16, "bfloat16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DequantizeInt8, portable, txscore::llm::cpu::Isa::kPortable)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DequantizeInt8, avx2, txscore::llm::cpu::Isa::kAvx2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_DequantizeInt8, avx512, txscore::llm::cpu::Isa::kAvx512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; ++i) {
    const bool model = std::strcmp(argv[i], "--model") == 0;
    if (!model && std::strcmp(argv[i], "--threads") != 0) continue;
    if (model) {
      g_model = argv[i + 1];
    } else {
      char* end = nullptr;
      const long threads = std::strtol(argv[i + 1], &end, 10);
      if (*argv[i + 1] == '\0' || *end != '\0' || threads < 1 || threads > 1024) {
        std::fprintf(stderr, "llm_bench: --threads must be an integer from 1 to 1024, not \"%s\"\n", argv[i + 1]);
        return 2;
      }
      g_threads = static_cast<int>(threads);
    }
    for (int j = i; j + 2 < argc; ++j) argv[j] = argv[j + 2];
    argc -= 2;
    --i;
  }
  if (g_model.empty()) {
    std::fprintf(stderr, "usage: llm_bench --model CHECKPOINT_DIR [--threads N] [benchmark flags]\n");
    return 2;
  }
  // Process-wide, as txscore sets it at start-up: libtorch and OpenBLAS.
  txscore::accelerator::SetComputeThreads(g_threads);
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("model", g_model);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
