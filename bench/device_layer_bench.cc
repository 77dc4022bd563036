// The overhead of txscore's model layer: the same Llama-architecture model, the same weights,
// the same device (CPU, 1 libtorch thread), one decode step at a time, driven
//   A: through txscore (llm::Decoder::Forward: input checks, masks, cache bookkeeping, logits
//      copied into a std::vector, errors as values), and
//   B: directly through libtorch: the plain forward a developer would write by hand with the
//      same tensor ops and no checks.
// Each iteration prefills 64 tokens (not timed) and times 64 decode steps. At start the two
// are checked to give the same logits.
//
//   ./build/bench/device_layer_bench --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true   (one command line; writes its own checkpoint)
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "accelerator/compute_threads.h"
#include "llm/checkpoint_maker.h"
#include "llm/decoder.h"
#include "llm/safetensors.h"

namespace {

using namespace txscore;
namespace F = torch::nn::functional;

constexpr int kPrompt = 64;
constexpr int kSteps = 64;

std::string g_dir;

// The plain forward, written as one would without txscore.
struct HandWritten {
  int64_t hidden = 0, heads = 0, kv = 0, hd = 0, layers = 0;
  double eps = 1e-5;
  torch::Tensor embed, final_norm, inv_freq;
  struct Layer {
    torch::Tensor in_norm, post_norm, q, k, v, o, gate, up, down;
  };
  std::vector<Layer> l;
  std::vector<torch::Tensor> keys, values;
  int64_t length = 0;

  static torch::Tensor Load(const llm::SafetensorsCheckpoint& ckpt, const std::string& name) {
    llm::TensorView view = ckpt.Get(name).value();
    std::vector<int64_t> shape(view.info->shape.begin(), view.info->shape.end());
    return torch::from_blob(const_cast<uint8_t*>(view.data), shape, torch::kBFloat16).to(torch::kFloat32);
  }

  explicit HandWritten(const std::string& dir) {
    std::ifstream in(dir + "/config.json");
    const nlohmann::json c = nlohmann::json::parse(in);
    hidden = c["hidden_size"];
    heads = c["num_attention_heads"];
    kv = c["num_key_value_heads"];
    hd = c.value("head_dim", hidden / heads);
    layers = c["num_hidden_layers"];
    eps = c["rms_norm_eps"];
    const double theta = c["rope_theta"];
    auto ckpt = llm::SafetensorsCheckpoint::Open(dir).value();
    embed = Load(*ckpt, "model.embed_tokens.weight");
    final_norm = Load(*ckpt, "model.norm.weight");
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      l.push_back({Load(*ckpt, p + "input_layernorm.weight"), Load(*ckpt, p + "post_attention_layernorm.weight"),
                   Load(*ckpt, p + "self_attn.q_proj.weight"), Load(*ckpt, p + "self_attn.k_proj.weight"),
                   Load(*ckpt, p + "self_attn.v_proj.weight"), Load(*ckpt, p + "self_attn.o_proj.weight"),
                   Load(*ckpt, p + "mlp.gate_proj.weight"), Load(*ckpt, p + "mlp.up_proj.weight"),
                   Load(*ckpt, p + "mlp.down_proj.weight")});
    }
    inv_freq =
        1.0 / torch::pow(theta, torch::arange(0, hd, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(hd));
  }

  void Reset(int64_t max_tokens) {
    keys.clear();
    values.clear();
    for (int64_t i = 0; i < layers; ++i) {
      keys.push_back(torch::zeros({1, kv, max_tokens, hd}));
      values.push_back(torch::zeros({1, kv, max_tokens, hd}));
    }
    length = 0;
  }

  torch::Tensor Norm(const torch::Tensor& x, const torch::Tensor& w) const {
    return w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + eps));
  }
  static torch::Tensor RotateHalf(const torch::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  }

  // Appends `ids` (one sequence) and returns the last token's logits.
  std::vector<float> Forward(const std::vector<int64_t>& ids) {
    torch::NoGradGuard no_grad;
    const int64_t n = static_cast<int64_t>(ids.size());
    const torch::Tensor id = torch::from_blob(const_cast<int64_t*>(ids.data()), {1, n}, torch::kInt64);
    const torch::Tensor positions = torch::arange(length, length + n, torch::kInt64).to(torch::kFloat32);
    const torch::Tensor freqs = positions.unsqueeze(-1) * inv_freq.unsqueeze(0);
    const torch::Tensor angles = torch::cat({freqs, freqs}, -1);
    const torch::Tensor cos = angles.cos(), sin = angles.sin();
    const int64_t total = length + n;
    // Causal mask only for a prefill; a single new token sees every key.
    torch::Tensor mask;
    if (n > 1) {
      mask = torch::full({n, total}, -std::numeric_limits<float>::infinity()).triu(length + 1);
    }
    torch::Tensor x = F::embedding(id, embed);
    for (int64_t i = 0; i < layers; ++i) {
      const Layer& w = l[static_cast<size_t>(i)];
      torch::Tensor h = Norm(x, w.in_norm);
      torch::Tensor q = F::linear(h, w.q).view({1, n, heads, hd}).transpose(1, 2);
      torch::Tensor k = F::linear(h, w.k).view({1, n, kv, hd}).transpose(1, 2);
      torch::Tensor v = F::linear(h, w.v).view({1, n, kv, hd}).transpose(1, 2);
      q = q * cos + RotateHalf(q) * sin;
      k = k * cos + RotateHalf(k) * sin;
      keys[static_cast<size_t>(i)].narrow(2, length, n).copy_(k);
      values[static_cast<size_t>(i)].narrow(2, length, n).copy_(v);
      const torch::Tensor all_k = keys[static_cast<size_t>(i)].narrow(2, 0, total);
      const torch::Tensor all_v = values[static_cast<size_t>(i)].narrow(2, 0, total);
      const int64_t groups = heads / kv;
      torch::Tensor scores =
          torch::matmul(q.reshape({1, kv, groups * n, hd}), all_k.transpose(2, 3)) / std::sqrt(static_cast<double>(hd));
      if (mask.defined()) scores = scores + mask.repeat({groups, 1});
      const torch::Tensor attn = torch::matmul(torch::softmax(scores, -1), all_v)
                                     .view({1, heads, n, hd})
                                     .transpose(1, 2)
                                     .reshape({1, n, hidden});
      x = x + F::linear(attn, w.o);
      h = Norm(x, w.post_norm);
      x = x + F::linear(F::silu(F::linear(h, w.gate)) * F::linear(h, w.up), w.down);
    }
    length = total;
    const torch::Tensor logits = F::linear(Norm(x, final_norm)[0][n - 1], embed).contiguous();
    return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  }
};

std::vector<int64_t> Prompt(int64_t vocab) {
  std::vector<int64_t> ids;
  for (int i = 0; i < kPrompt; ++i) ids.push_back(1 + (i * 37) % (vocab - 1));
  return ids;
}

llm::Decoder& Txscore() {
  static std::unique_ptr<llm::Decoder> decoder =
      llm::Decoder::Load(g_dir, {.dtype = accelerator::Dtype::kFloat32, .threads = 1}).value();
  return *decoder;
}
HandWritten& Direct() {
  static HandWritten* model = new HandWritten(g_dir);
  return *model;
}

void BM_DecodeSteps_Txscore(benchmark::State& state) {
  llm::Decoder& model = Txscore();
  const std::vector<int64_t> prompt64 = Prompt(model.config().vocab_size);
  const std::vector<int32_t> prompt(prompt64.begin(), prompt64.end());
  for (auto _ : state) {
    state.PauseTiming();
    auto cache = model.NewCache(1, kPrompt + kSteps);
    auto logits = model.Forward(cache.get(), {prompt}).value();
    state.ResumeTiming();
    for (int t = 0; t < kSteps; ++t) {
      const int32_t next =
          static_cast<int32_t>(std::max_element(logits[0].begin(), logits[0].end()) - logits[0].begin());
      logits = model.Forward(cache.get(), {{next}}).value();
    }
    benchmark::DoNotOptimize(logits);
  }
  state.counters["ms_per_step"] =
      benchmark::Counter(kSteps * state.iterations(), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_DecodeSteps_Libtorch(benchmark::State& state) {
  HandWritten& model = Direct();
  const std::vector<int64_t> prompt = Prompt(model.embed.size(0));
  for (auto _ : state) {
    state.PauseTiming();
    model.Reset(kPrompt + kSteps);
    std::vector<float> logits = model.Forward(prompt);
    state.ResumeTiming();
    for (int t = 0; t < kSteps; ++t) {
      const int64_t next = std::max_element(logits.begin(), logits.end()) - logits.begin();
      logits = model.Forward({next});
    }
    benchmark::DoNotOptimize(logits);
  }
  state.counters["ms_per_step"] =
      benchmark::Counter(kSteps * state.iterations(), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_DecodeSteps_Txscore)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeSteps_Libtorch)->Unit(benchmark::kMillisecond);

// The two must compute the same thing, or the comparison means nothing.
bool SameLogits() {
  llm::Decoder& a = Txscore();
  HandWritten& b = Direct();
  const std::vector<int64_t> prompt64 = Prompt(a.config().vocab_size);
  auto cache = a.NewCache(1, kPrompt + 4);
  std::vector<float> x = a.Forward(cache.get(), {std::vector<int32_t>(prompt64.begin(), prompt64.end())}).value()[0];
  b.Reset(kPrompt + 4);
  std::vector<float> y = b.Forward(prompt64);
  double worst = 0;
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(x[i] - y[i])));
    const int32_t next = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
    x = a.Forward(cache.get(), {{next}}).value()[0];
    y = b.Forward({next});
  }
  std::fprintf(stderr, "largest logit difference, txscore vs hand-written, over a prefill and 3 steps: %.3g\n", worst);
  return worst < 1e-4;
}

}  // namespace

int main(int argc, char** argv) {
  accelerator::SetComputeThreads(1);  // libtorch and OpenBLAS, as txscore sets them at start-up
  g_dir = (std::filesystem::temp_directory_path() / "txscore-device-layer-bench").string();
  // A Llama-architecture checkpoint without rope scaling, so the hand-written forward stays plain.
  if (!llm::MakeCheckpoint({.family = "llama", .size = "small"}, g_dir).ok()) return 1;
  nlohmann::json config = nlohmann::json::parse(std::ifstream(g_dir + "/config.json"));
  config.erase("rope_scaling");
  std::ofstream(g_dir + "/config.json") << config.dump(2);
  if (!SameLogits()) {
    std::fprintf(stderr, "the two forwards disagree: not benchmarking\n");
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
