#include "llm/cpu_kernels/decode_step.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace txscore::llm::cpu {
namespace {

// Rows a chunk of a product is rounded to: the kernels take weight rows four at a time, and 16
// float32 outputs are a cache line's worth, so two threads' outputs seldom share a line
// (output buffers are not aligned to lines, and a second product of a group starts where the
// first ends: at worst one shared line per chunk boundary, written once).
constexpr int64_t kRowAlignment = 16;

// Products that run side by side in one parallel region: q, k and v; gate and up.
struct Product {
  const LinearWeights* weights;
  Output out;
};

// Per-step buffers; rows are the batch's sequences.
struct Activations {
  explicit Activations(const ModelConfig& c, int64_t batch)
      : hidden(static_cast<size_t>(batch * c.hidden_size)),
        normed(static_cast<size_t>(batch * std::max(c.hidden_size, c.intermediate_size))),
        q(static_cast<size_t>(batch * c.num_attention_heads * c.head_dim)),
        k(static_cast<size_t>(batch * c.num_key_value_heads * c.head_dim)),
        v(static_cast<size_t>(batch * c.num_key_value_heads * c.head_dim)),
        attention(static_cast<size_t>(batch * c.num_attention_heads * c.head_dim)),
        branch(static_cast<size_t>(batch * c.hidden_size)),
        gate(static_cast<size_t>(batch * c.intermediate_size)),
        up(static_cast<size_t>(batch * c.intermediate_size)),
        quantized(static_cast<size_t>(
            batch * std::max(c.hidden_size, std::max(c.intermediate_size, c.num_attention_heads * c.head_dim)))),
        scales(static_cast<size_t>(batch)) {}

  std::vector<float> hidden;  // the residual stream, bfloat16 values held as float32
  std::vector<Bf16> normed;   // a norm's output, or the MLP's gated product
  std::vector<Bf16> q, k, v, attention, branch, gate, up;
  std::vector<uint8_t> quantized;  // the input of an int8 product
  std::vector<float> scales;
};

class Step {
 public:
  Step(const DecoderWeights& weights, const KernelSet& kernels, const ParallelFor& parallel, const KvCacheView& cache,
       const std::vector<DecodeRequest>& requests)
      : w_(weights),
        c_(*weights.config),
        kernels_(kernels),
        parallel_(parallel),
        cache_(cache),
        requests_(requests),
        batch_(static_cast<int64_t>(requests.size())),
        a_(c_, batch_) {}

  std::vector<std::vector<float>> Run() {
    Embed();
    for (size_t l = 0; l < w_.layers.size(); ++l) Layer(w_.layers[l], l);
    RmsNormRows(a_.hidden.data(), batch_, c_.hidden_size, w_.final_norm, c_.norm_weight_plus_one, c_.rms_norm_eps,
                a_.normed.data());
    return Logits();
  }

 private:
  void Embed() {
    const LinearWeights& table = w_.embed_tokens;
    // The libtorch pass multiplies by the scale rounded to bfloat16, in bfloat16.
    const double scale = c_.embedding_scale();
    const float rounded_scale = RoundToBf16(static_cast<float>(scale));
    for (int64_t m = 0; m < batch_; ++m) {
      const int64_t id = requests_[static_cast<size_t>(m)].token;
      float* out = a_.hidden.data() + m * c_.hidden_size;
      for (int64_t k = 0; k < c_.hidden_size; ++k) {
        float value =
            table.quantized()
                ? RoundToBf16(static_cast<float>(table.int8.values[id * c_.hidden_size + k]) * table.int8.scales[id])
                : Bf16ToFloat(table.bf16.values[id * c_.hidden_size + k]);
        if (scale != 1.0) value = RoundToBf16(value * rounded_scale);
        out[k] = value;
      }
    }
  }

  void Layer(const LayerWeights& layer, size_t index) {
    const int64_t hidden = c_.hidden_size;
    RmsNormRows(a_.hidden.data(), batch_, hidden, layer.input_norm, c_.norm_weight_plus_one, c_.rms_norm_eps,
                a_.normed.data());
    const int64_t q_dim = c_.num_attention_heads * c_.head_dim, kv_dim = c_.num_key_value_heads * c_.head_dim;
    Products(a_.normed.data(), hidden,
             {{&layer.q, {.bf16 = a_.q.data(), .stride = q_dim}},
              {&layer.k, {.bf16 = a_.k.data(), .stride = kv_dim}},
              {&layer.v, {.bf16 = a_.v.data(), .stride = kv_dim}}});
    PrepareQueriesAndKeys(layer, index);
    Attend(layer, index);
    Products(a_.attention.data(), q_dim, {{&layer.o, {.bf16 = a_.branch.data(), .stride = hidden}}});
    AddBranch(c_.sandwich_norms ? layer.post_attention_norm : nullptr);

    RmsNormRows(a_.hidden.data(), batch_, hidden,
                c_.sandwich_norms ? layer.pre_feedforward_norm : layer.post_attention_norm, c_.norm_weight_plus_one,
                c_.rms_norm_eps, a_.normed.data());
    const int64_t inner = c_.intermediate_size;
    Products(a_.normed.data(), hidden,
             {{&layer.gate, {.bf16 = a_.gate.data(), .stride = inner}},
              {&layer.up, {.bf16 = a_.up.data(), .stride = inner}}});
    GatedActivation();
    Products(a_.normed.data(), inner, {{&layer.down, {.bf16 = a_.branch.data(), .stride = hidden}}});
    AddBranch(c_.sandwich_norms ? layer.post_feedforward_norm : nullptr);
  }

  // Every product of `products` (same input: batch_ rows of `cols` bfloat16 at x) in one
  // parallel region, split by output rows; biases added before the rounding.
  void Products(const Bf16* x, int64_t cols, std::initializer_list<Product> products) {
    const bool quantized = products.begin()->weights->quantized();
    QuantizedActivations qx;
    if (quantized) {
      QuantizeActivations(x, batch_, cols, a_.quantized.data(), a_.scales.data());
      qx = {.values = a_.quantized.data(), .scales = a_.scales.data(), .rows = batch_, .cols = cols};
    }
    std::vector<Product> list(products);
    int64_t total = 0;
    for (const Product& p : list) total += p.weights->rows();
    // Biases need the float sum: those products go through a float buffer.
    std::vector<std::vector<float>> sums(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].weights->bias != nullptr) sums[i].resize(static_cast<size_t>(batch_ * list[i].weights->rows()));
    }
    parallel_(total, kRowAlignment, [&](int64_t begin, int64_t end) {
      int64_t offset = 0;
      for (size_t i = 0; i < list.size(); ++i) {
        const LinearWeights& weights = *list[i].weights;
        const int64_t rows = weights.rows();
        const int64_t from = std::max(begin - offset, int64_t{0}), to = std::min(end - offset, rows);
        offset += rows;
        if (from >= to) continue;
        const Output out = sums[i].empty() ? list[i].out : Output{.f32 = sums[i].data(), .stride = rows};
        if (quantized) {
          kernels_.gemv_int8(weights.int8, qx, out, from, to);
        } else {
          kernels_.gemv_bf16(weights.bf16, x, batch_, out, from, to);
        }
        if (sums[i].empty()) continue;
        for (int64_t m = 0; m < batch_; ++m) {
          for (int64_t r = from; r < to; ++r) {
            list[i].out.bf16[m * list[i].out.stride + r] =
                FloatToBf16(sums[i][static_cast<size_t>(m * rows + r)] + Bf16ToFloat(weights.bias[r]));
          }
        }
      }
    });
  }

  // qk-norm, RoPE, and the new keys and values into the cache.
  void PrepareQueriesAndKeys(const LayerWeights& layer, size_t index) {
    const int64_t d = c_.head_dim, heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    const float* inv_freq = layer.sliding ? w_.local_inv_freq : w_.global_inv_freq;
    for (int64_t m = 0; m < batch_; ++m) {
      Bf16* q = a_.q.data() + m * heads * d;
      Bf16* k = a_.k.data() + m * kv_heads * d;
      if (c_.qk_norm) {
        NormHeadsInPlace(q, heads, layer.q_norm);
        NormHeadsInPlace(k, kv_heads, layer.k_norm);
      }
      const DecodeRequest& request = requests_[static_cast<size_t>(m)];
      ApplyRopeInPlace(q, heads, d, inv_freq, request.position);
      ApplyRopeInPlace(k, kv_heads, d, inv_freq, request.position);
      const Bf16* v = a_.v.data() + m * kv_heads * d;
      for (int64_t h = 0; h < kv_heads; ++h) {
        const int64_t at = ((request.slot * kv_heads + h) * cache_.max_tokens + request.position) * d;
        std::copy(k + h * d, k + (h + 1) * d, cache_.keys[index] + at);
        std::copy(v + h * d, v + (h + 1) * d, cache_.values[index] + at);
      }
    }
  }

  void NormHeadsInPlace(Bf16* x, int64_t heads, const float* weight) {
    std::vector<float> wide(static_cast<size_t>(heads * c_.head_dim));
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = Bf16ToFloat(x[i]);
    RmsNormRows(wide.data(), heads, c_.head_dim, weight, c_.norm_weight_plus_one, c_.rms_norm_eps, x);
  }

  // Each (sequence, query head) attends over its cache: scores by the bfloat16 product kernel
  // (the keys are a [tokens, head_dim] matrix), softmax in float32, values summed in float32.
  void Attend(const LayerWeights& layer, size_t index) {
    const int64_t d = c_.head_dim, heads = c_.num_attention_heads, kv_heads = c_.num_key_value_heads;
    const int64_t groups = c_.num_query_groups();
    const float scale = static_cast<float>(c_.attention_scale());
    const float cap = static_cast<float>(c_.attn_logit_softcapping);
    parallel_(batch_ * heads, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch;
      for (int64_t job = begin; job < end; ++job) {
        const int64_t m = job / heads, h = job % heads, kv = h / groups;
        const DecodeRequest& request = requests_[static_cast<size_t>(m)];
        int64_t first = 0;
        if (layer.sliding && c_.sliding_window > 0)
          first = std::max<int64_t>(0, request.position - c_.sliding_window + 1);
        const int64_t base = ((request.slot * kv_heads + kv) * cache_.max_tokens + first) * d;
        AttendHead(kernels_, a_.q.data() + (m * heads + h) * d, cache_.keys[index] + base, cache_.values[index] + base,
                   request.position + 1 - first, d, scale, cap, scratch, a_.attention.data() + (m * heads + h) * d);
      }
    });
  }

  // hidden += branch (normed first with sandwich norms), times the residual multiplier, each
  // step rounded to bfloat16 as the libtorch pass stores it.
  void AddBranch(const float* post_norm) {
    const int64_t n = batch_ * c_.hidden_size;
    const Bf16* branch = a_.branch.data();
    std::vector<Bf16> normed;
    if (post_norm != nullptr) {
      std::vector<float> wide(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) wide[static_cast<size_t>(i)] = Bf16ToFloat(branch[i]);
      normed.resize(static_cast<size_t>(n));
      RmsNormRows(wide.data(), batch_, c_.hidden_size, post_norm, c_.norm_weight_plus_one, c_.rms_norm_eps,
                  normed.data());
      branch = normed.data();
    }
    const float multiplier = static_cast<float>(c_.residual_multiplier);
    for (int64_t i = 0; i < n; ++i) {
      float value = Bf16ToFloat(branch[i]);
      if (c_.residual_multiplier != 1.0) value = RoundToBf16(value * multiplier);
      a_.hidden[static_cast<size_t>(i)] = RoundToBf16(a_.hidden[static_cast<size_t>(i)] + value);
    }
  }

  // normed = act(gate) * up, both rounded to bfloat16 as libtorch's ops store them.
  void GatedActivation() {
    const int64_t n = batch_ * c_.intermediate_size;
    const bool silu = c_.activation == ModelConfig::Activation::kSilu;
    parallel_(n, kRowAlignment, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = Bf16ToFloat(a_.gate[static_cast<size_t>(i)]);
        float act;
        if (silu) {
          act = g / (1.0f + std::exp(-g));
        } else {
          const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
          act = 0.5f * g * (1.0f + std::tanh(inner));
        }
        a_.normed[static_cast<size_t>(i)] = FloatToBf16(RoundToBf16(act) * Bf16ToFloat(a_.up[static_cast<size_t>(i)]));
      }
    });
  }

  std::vector<std::vector<float>> Logits() {
    const int64_t vocab = c_.vocab_size;
    std::vector<std::vector<float>> logits(static_cast<size_t>(batch_), std::vector<float>(static_cast<size_t>(vocab)));
    std::vector<float> all(static_cast<size_t>(batch_ * vocab));
    const LinearWeights& head = w_.lm_head;
    QuantizedActivations qx;
    if (head.quantized()) {
      QuantizeActivations(a_.normed.data(), batch_, c_.hidden_size, a_.quantized.data(), a_.scales.data());
      qx = {.values = a_.quantized.data(), .scales = a_.scales.data(), .rows = batch_, .cols = c_.hidden_size};
    }
    const Output out{.f32 = all.data(), .stride = vocab};
    const float scaling = static_cast<float>(c_.logits_scaling);
    const float cap = static_cast<float>(c_.final_logit_softcapping);
    parallel_(vocab, kRowAlignment, [&](int64_t begin, int64_t end) {
      if (head.quantized()) {
        kernels_.gemv_int8(head.int8, qx, out, begin, end);
      } else {
        kernels_.gemv_bf16(head.bf16, a_.normed.data(), batch_, out, begin, end);
      }
      // Finished by the same thread while its rows are still in cache.
      for (int64_t m = 0; m < batch_; ++m) {
        const float* sums = all.data() + m * vocab;
        float* dest = logits[static_cast<size_t>(m)].data();
        for (int64_t r = begin; r < end; ++r) {
          // The libtorch pass's head output is a bfloat16 tensor, then float32.
          float value = RoundToBf16(sums[r]);
          if (scaling != 1.0f) value = value / scaling;
          if (cap > 0) value = std::tanh(value / cap) * cap;
          dest[r] = value;
        }
      }
    });
    return logits;
  }

  const DecoderWeights& w_;
  const ModelConfig& c_;
  const KernelSet& kernels_;
  const ParallelFor& parallel_;
  const KvCacheView& cache_;
  const std::vector<DecodeRequest>& requests_;
  const int64_t batch_;
  Activations a_;
};

}  // namespace

void RmsNormRows(const float* x, int64_t rows, int64_t features, const float* weight, bool plus_one, double eps,
                 Bf16* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * features;
    float sum = 0;
    for (int64_t k = 0; k < features; ++k) sum += row[k] * row[k];
    const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(features) + static_cast<float>(eps));
    for (int64_t k = 0; k < features; ++k) {
      const float normed = row[k] * inverse;
      out[r * features + k] =
          plus_one ? FloatToBf16(normed * (1.0f + weight[k])) : FloatToBf16(weight[k] * RoundToBf16(normed));
    }
  }
}

void ApplyRopeInPlace(Bf16* x, int64_t heads, int64_t head_dim, const float* inv_freq, int64_t position) {
  const int64_t half = head_dim / 2;
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    cos[static_cast<size_t>(i)] = RoundToBf16(std::cos(angle));
    sin[static_cast<size_t>(i)] = RoundToBf16(std::sin(angle));
  }
  for (int64_t h = 0; h < heads; ++h) {
    Bf16* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float first = Bf16ToFloat(head[i]), second = Bf16ToFloat(head[i + half]);
      const float c = cos[static_cast<size_t>(i)], s = sin[static_cast<size_t>(i)];
      head[i] = FloatToBf16(first * c - second * s);
      head[i + half] = FloatToBf16(second * c + first * s);
    }
  }
}

void AttendHead(const KernelSet& kernels, const Bf16* query, const Bf16* keys, const Bf16* values, int64_t tokens,
                int64_t head_dim, float scale, float cap, std::vector<float>& scratch, Bf16* out) {
  scratch.assign(static_cast<size_t>(tokens + head_dim), 0.0f);
  float* scores = scratch.data();
  float* sum = scores + tokens;  // float32, head_dim
  kernels.gemv_bf16({.values = keys, .rows = tokens, .cols = head_dim}, query, 1, {.f32 = scores, .stride = tokens}, 0,
                    tokens);
  float largest = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < tokens; ++t) {
    float s = scores[t] * scale;
    if (cap > 0) s = std::tanh(s / cap) * cap;
    largest = std::max(largest, s);
    scores[t] = s;
  }
  float total = 0;
  for (int64_t t = 0; t < tokens; ++t) total += (scores[t] = std::exp(scores[t] - largest));
  for (int64_t t = 0; t < tokens; ++t) scores[t] /= total;
  kernels.weighted_sum_bf16(scores, values, tokens, head_dim, head_dim, sum);
  for (int64_t i = 0; i < head_dim; ++i) out[i] = FloatToBf16(sum[i]);
}

namespace {
std::atomic<uint64_t> decode_steps_run{0};
}  // namespace

std::vector<std::vector<float>> RunDecodeStep(const DecoderWeights& weights, const KernelSet& kernels,
                                              const ParallelFor& parallel, const KvCacheView& cache,
                                              const std::vector<DecodeRequest>& requests) {
  if (requests.empty()) return {};
  decode_steps_run.fetch_add(1, std::memory_order_relaxed);
  return Step(weights, kernels, parallel, cache, requests).Run();
}

uint64_t DecodeStepsRun() { return decode_steps_run.load(std::memory_order_relaxed); }

}  // namespace txscore::llm::cpu
