// The decoder on libtorch. Formulas follow Hugging Face's modeling files for each family
// (modeling_llama, modeling_qwen3, modeling_granite, modeling_gemma2, modeling_gemma3); every
// family difference is a ModelConfig field or a weight name the family gives
// (llm/model_family.h), so there is one forward pass and no family is named here.
#include "llm/decoder.h"

#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include "accelerator/compute_threads.h"
#include "accelerator/op_adapters_torch.h"
#include "common/prepare_counters.h"
#include "llm/cpu_kernels/decode_step.h"
#include "llm/cpu_kernels/worker_pool.h"
#include "llm/model_family.h"
#include "llm/rope.h"
#include "llm/safetensors.h"

namespace txscore::llm {
namespace {

namespace F = torch::nn::functional;

bool HostIsLittleEndian() {
  const uint16_t probe = 1;
  unsigned char first;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

// Copies a checkpoint tensor out of the mapped file into a torch tensor of `dtype`.
Result<torch::Tensor> ToTorch(const TensorView& view, torch::ScalarType dtype) {
  const TensorInfo& info = *view.info;
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
  if (HostIsLittleEndian() && (info.dtype == DType::kF32 || info.dtype == DType::kBF16 || info.dtype == DType::kF16)) {
    const torch::ScalarType stored = info.dtype == DType::kF32    ? torch::kFloat32
                                     : info.dtype == DType::kBF16 ? torch::kBFloat16
                                                                  : torch::kFloat16;
    // from_blob views the mapping; the cast (or clone) copies it into memory we own.
    torch::Tensor mapped =
        torch::from_blob(const_cast<uint8_t*>(view.data), shape, torch::TensorOptions().dtype(stored));
    return stored == dtype ? mapped.clone() : mapped.to(dtype);
  }
  // Big-endian hosts (IBM Z) and other layouts: decode element by element.
  std::vector<float> values;
  TXSCORE_RETURN_IF_ERROR(DecodeToFloat(view, &values));
  return torch::from_blob(values.data(), shape, torch::kFloat32).to(dtype).clone();
}

}  // namespace

std::vector<SequenceRange> PrefillGroups(const std::vector<std::vector<int32_t>>& new_tokens, int64_t rows) {
  std::vector<SequenceRange> groups;
  const int64_t batch = static_cast<int64_t>(new_tokens.size());
  const auto length = [&](int64_t i) { return static_cast<int64_t>(new_tokens[static_cast<size_t>(i)].size()); };
  int64_t first = 0;
  while (first < batch) {
    if (length(first) == 0) {
      ++first;
      continue;
    }
    int64_t end = first + 1, longest = length(first);
    while (end < batch && (end - first + 1) * std::max(longest, length(end)) <= rows) {
      longest = std::max(longest, length(end));
      ++end;
    }
    groups.push_back({first, end});
    first = end;
  }
  return groups;
}

namespace {

class TorchCache : public DecoderCache {
 public:
  // head_dim: as the decoder lays heads out (padded with the head_dim adapter).
  TorchCache(const ModelConfig& c, int64_t head_dim, int batch, int max_tokens, const torch::TensorOptions& options)
      : lengths_(static_cast<size_t>(batch), 0), batch_(batch), max_tokens_(max_tokens) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      keys.push_back(torch::zeros({batch, c.num_key_value_heads, max_tokens, head_dim}, options));
      values.push_back(torch::zeros({batch, c.num_key_value_heads, max_tokens, head_dim}, options));
    }
  }
  // Sequences [first, first + count) of `cache`: the tensors are views of the cache's, so a
  // forward pass on the slice fills the cache; its lengths are copies (see the caller).
  TorchCache(const TorchCache& cache, int64_t first, int64_t count)
      : lengths_(cache.lengths_.begin() + first, cache.lengths_.begin() + first + count),
        batch_(static_cast<int>(count)),
        max_tokens_(cache.max_tokens_) {
    for (size_t l = 0; l < cache.keys.size(); ++l) {
      keys.push_back(cache.keys[l].narrow(0, first, count));
      values.push_back(cache.values[l].narrow(0, first, count));
    }
  }
  int batch() const override { return batch_; }
  int max_tokens() const override { return max_tokens_; }
  const std::vector<int64_t>& lengths() const override { return lengths_; }
  void Reset(int index) override { lengths_[static_cast<size_t>(index)] = 0; }

  std::vector<torch::Tensor> keys;  // per layer [batch, kv_heads, max_tokens, head_dim]
  std::vector<torch::Tensor> values;
  std::vector<int64_t> lengths_;

 private:
  int batch_;
  int max_tokens_;
};

// The additive attention mask of one forward pass (0 where key t is visible from query
// position p, -inf elsewhere): t <= p, and p - t < window on sliding layers. Built whole when
// attention runs in one block; built block by block from the positions when the scores are
// split into blocks of query rows, since a whole mask is as large as the scores it masks.
struct AttentionMask {
  bool needed = false;
  torch::Tensor query_position;  // [batch, length, 1]
  torch::Tensor key_index;       // [1, 1, tokens]
  torch::Tensor whole;           // [batch, 1, length, tokens], or undefined: built per block

  static torch::Tensor ToBias(const torch::Tensor& allowed) {
    return torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(torch::kFloat32).device(allowed.device()))
        .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
        .unsqueeze(1);
  }

  // window: the sliding window, 0 for global attention.
  torch::Tensor Build(const torch::Tensor& positions, int64_t window) const {
    torch::Tensor allowed = key_index <= positions;
    if (window > 0) allowed = allowed & ((positions - key_index) < window);
    return ToBias(allowed);
  }

  // [batch, 1, rows, tokens] for query rows [row, row + rows); undefined when no mask is needed.
  torch::Tensor Rows(int64_t row, int64_t rows, int64_t window) const {
    if (!needed) return {};
    if (whole.defined()) return rows == whole.size(2) ? whole : whole.narrow(2, row, rows);
    return Build(query_position.narrow(1, row, rows), window);
  }
};

// A matrix quantized per output row (DecoderOptions::Quantization::kInt8): int8 values
// [rows, cols], float32 scales and int32 row sums [rows] (llm/cpu_kernels/kernels.h).
struct Int8Weight {
  torch::Tensor values, scales, row_sums;
  bool defined() const { return values.defined(); }
};

struct Layer {
  torch::Tensor input_norm, post_attention_norm, pre_feedforward_norm, post_feedforward_norm;
  // With int8 quantization the dense projections are undefined and the *_int8 ones hold them.
  torch::Tensor q, k, v, o, q_bias, k_bias, v_bias, o_bias;
  torch::Tensor q_norm, k_norm;
  torch::Tensor gate, up, down;
  Int8Weight q_int8, k_int8, v_int8, o_int8, gate_int8, up_int8, down_int8;
  bool sliding = false;
};

class TorchDecoder : public Decoder {
 public:
  static Result<std::unique_ptr<TorchDecoder>> Create(const std::string& dir, const DecoderOptions& options) {
    Result<ModelConfig> config =
        LoadModelConfig(dir, options.families != nullptr ? *options.families : BuiltinModelFamilies());
    if (!config.ok()) return config.error();
    if (options.dtype == accelerator::Dtype::kFloat16) {
      return InvalidArgument("dtype must be float32 or bfloat16 (libtorch has no float16 matmul on CPU)", "dtype");
    }
    const bool int8 = options.quantization == DecoderOptions::Quantization::kInt8;
    if (int8 && (options.dtype != accelerator::Dtype::kBFloat16 || torch::Device(options.device) != torch::kCPU ||
                 options.adapters.any())) {
      return InvalidArgument(
          "int8 quantization runs on the CPU with bfloat16 activations and no op adapters: set dtype bfloat16 and "
          "device cpu",
          "quantization");
    }
    if (options.adapters.head_dim_alignment > 1 && config->head_dim % 2 != 0) {
      return InvalidArgument(
          "head_dim " + std::to_string(config->head_dim) + " is odd: RoPE's halves cannot be padded alike", "adapters");
    }
    // The loading work (casts, NaN checks) runs with the decoder's own thread count, on this
    // thread only: the process-wide settings are the program's (accelerator/compute_threads.h).
    accelerator::ScopedComputeThreads threads(options.threads);
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    if (!checkpoint.ok()) return checkpoint.error();
    auto decoder = std::unique_ptr<TorchDecoder>(new TorchDecoder());
    decoder->config_ = std::move(config).value();
    decoder->dtype_ = options.dtype == accelerator::Dtype::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
    decoder->device_ = torch::Device(options.device);
    decoder->adapters_ = options.adapters;
    decoder->attention_block_elements_ = options.attention_block_elements;
    decoder->cpu_prefill_group_rows_ = options.cpu_prefill_group_rows.value_or(
        options.quantization == DecoderOptions::Quantization::kInt8 ? 2048 : 512);
    decoder->threads_ = options.threads;
    TXSCORE_RETURN_IF_ERROR(decoder->LoadWeights(**checkpoint));
    // Every weight is a copy now: a file rewritten in place meanwhile may have given a mix of
    // two versions, a model that never existed on disk.
    if (options.after_weights_read) options.after_weights_read();
    TXSCORE_RETURN_IF_ERROR((*checkpoint)->CheckUnchanged());
    decoder->head_dim_ = accelerator::PaddedHeadDim(decoder->config_.head_dim, options.adapters.head_dim_alignment);
    decoder->PadHeadDim();
    decoder->global_inv_freq_ =
        decoder->PadFrequencies(RopeInverseFrequencies(decoder->config_.rope, decoder->config_.head_dim))
            .to(decoder->device_);
    decoder->local_inv_freq_ =
        decoder->PadFrequencies(RopeInverseFrequencies(decoder->config_.local_rope, decoder->config_.head_dim))
            .to(decoder->device_);
    decoder->MoveWeightsToDevice();
    if (int8) decoder->QuantizeWeights();
    decoder->cpu_kernels_ = options.cpu_kernels && decoder->device_.is_cpu() && decoder->dtype_ == torch::kBFloat16 &&
                            !options.adapters.any();
    decoder->cpu_pool_threads_ = options.threads > 0 ? options.threads : at::get_num_threads();
    if (decoder->cpu_kernels_) decoder->PrepareCpuDecodeStep();
    CountModelBuild();
    if (options.adapters.rope_as_matmul) {
      decoder->rotate_half_ = accelerator::RotateHalfMatrix(
          decoder->head_dim_, torch::TensorOptions().dtype(decoder->dtype_).device(decoder->device_));
    }
    return decoder;
  }

  const ModelConfig& config() const override { return config_; }

  std::unique_ptr<DecoderCache> NewCache(int batch, int max_tokens) const override {
    return std::make_unique<TorchCache>(config_, head_dim_, batch, max_tokens,
                                        torch::TensorOptions().dtype(dtype_).device(device_));
  }

  Result<std::vector<std::vector<float>>> Forward(DecoderCache* cache,
                                                  const std::vector<std::vector<int32_t>>& new_tokens) const override {
    // libtorch reports failures as c10::Error exceptions; they become Errors here.
    try {
      const accelerator::ScopedComputeThreads threads(threads_);
      return ForwardUnchecked(static_cast<TorchCache*>(cache), new_tokens);
    } catch (const c10::Error& e) {
      // The device's runtime failed, not the request: another device may run it.
      return Unavailable(std::string("libtorch failed in the decoder: ") + e.what_without_backtrace());
    }
  }

 private:
  TorchDecoder() = default;

  Result<std::vector<std::vector<float>>> ForwardUnchecked(TorchCache* cache,
                                                           const std::vector<std::vector<int32_t>>& new_tokens) const {
    const ModelConfig& c = config_;
    const int64_t batch = cache->batch();
    if (static_cast<int64_t>(new_tokens.size()) != batch) {
      return InvalidArgument("new_tokens has " + std::to_string(new_tokens.size()) + " sequences; the cache holds " +
                             std::to_string(batch));
    }
    int64_t longest = 0, total_max = 0;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t n = static_cast<int64_t>(new_tokens[static_cast<size_t>(i)].size());
      if (cache->lengths_[static_cast<size_t>(i)] + n > cache->max_tokens()) {
        return InvalidArgument("sequence " + std::to_string(i) + " would hold " +
                               std::to_string(cache->lengths_[static_cast<size_t>(i)] + n) +
                               " tokens; the cache holds " + std::to_string(cache->max_tokens()));
      }
      for (int32_t id : new_tokens[static_cast<size_t>(i)]) {
        if (id < 0 || id >= c.vocab_size)
          return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary");
      }
      longest = std::max(longest, n);
      total_max = std::max(total_max, cache->lengths_[static_cast<size_t>(i)] + n);
    }
    std::vector<std::vector<float>> result(static_cast<size_t>(batch));
    if (longest == 0) return result;
    if (longest == 1 && !cpu_step_.layers.empty()) return CpuDecodeStep(cache, new_tokens);
    if (longest > 1 && device_.is_cpu() && cpu_prefill_group_rows_ > 0) {
      const std::vector<SequenceRange> groups = PrefillGroups(new_tokens, cpu_prefill_group_rows_);
      const bool whole_batch = groups.size() == 1 && groups[0] == SequenceRange{0, batch};
      if (!whole_batch) return ForwardInGroups(cache, new_tokens, groups);
    }

    torch::NoGradGuard no_grad;
    // Right-padded ids and, per query row, the absolute position it stands for (padding rows
    // repeat the sequence's last position so that their attention is well defined; their
    // outputs are never read).
    std::vector<int64_t> ids(static_cast<size_t>(batch * longest), 0),
        positions(static_cast<size_t>(batch * longest), 0);
    for (int64_t i = 0; i < batch; ++i) {
      const auto& tokens = new_tokens[static_cast<size_t>(i)];
      const int64_t n = static_cast<int64_t>(tokens.size());
      const int64_t start = cache->lengths_[static_cast<size_t>(i)];
      for (int64_t j = 0; j < longest; ++j) {
        if (j < n) ids[static_cast<size_t>(i * longest + j)] = tokens[static_cast<size_t>(j)];
        positions[static_cast<size_t>(i * longest + j)] = start + std::max<int64_t>(std::min(j, n - 1), 0);
      }
    }
    const torch::Tensor host_ids = torch::from_blob(ids.data(), {batch, longest}, torch::kInt64);
    const torch::Tensor id_tensor = host_ids.to(device_);
    const torch::Tensor position_tensor =
        torch::from_blob(positions.data(), {batch, longest}, torch::kInt64).to(device_);

    // One sequence decoding one token within the window sees every key: no mask then
    // (building one costs more ops than the step's attention at small sizes; measured in
    // bench/device_layer_bench.cc).
    const int64_t rows_per_block = AttentionRowsPerBlock(batch, total_max);
    AttentionMask global_mask, sliding_mask;
    global_mask.needed = batch > 1 || longest > 1 || (c.sliding_window > 0 && total_max > c.sliding_window);
    if (global_mask.needed) {
      global_mask.key_index =
          torch::arange(total_max, torch::TensorOptions().dtype(torch::kInt64).device(device_)).view({1, 1, total_max});
      global_mask.query_position = position_tensor.unsqueeze(-1);
      sliding_mask = global_mask;
      if (rows_per_block >= longest) {
        global_mask.whole = global_mask.Build(global_mask.query_position, 0);
        sliding_mask.whole = c.sliding_window > 0 ? sliding_mask.Build(sliding_mask.query_position, c.sliding_window)
                                                  : global_mask.whole;
      }
    }

    const torch::Tensor global_rope = RopeTables(global_inv_freq_, position_tensor);
    const torch::Tensor local_rope = RopeTables(local_inv_freq_, position_tensor);

    torch::Tensor x = adapters_.embedding_on_host ? accelerator::EmbeddingOnHost(embed_tokens_host_, host_ids, device_)
                      : embed_tokens_int8_.defined() ? Dequantize(embed_tokens_int8_, id_tensor)
                                                     : F::embedding(id_tensor, embed_tokens_);
    const double embed_scale = c.embedding_scale();
    if (embed_scale != 1.0) {
      // Hugging Face multiplies by the scale rounded to the activation dtype.
      x = x * torch::tensor(embed_scale, torch::TensorOptions().dtype(dtype_)).to(device_);
    }

    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      torch::Tensor h = Norm(x, layer.input_norm);
      h = Attention(layer, h, layer.sliding ? local_rope : global_rope, layer.sliding ? sliding_mask : global_mask,
                    layer.sliding ? c.sliding_window : 0, rows_per_block, cache, l, new_tokens, total_max);
      if (c.sandwich_norms) h = Norm(h, layer.post_attention_norm);
      x = x + (c.residual_multiplier != 1.0 ? h * c.residual_multiplier : h);
      h = Norm(x, c.sandwich_norms ? layer.pre_feedforward_norm : layer.post_attention_norm);
      h = Mlp(layer, h);
      if (c.sandwich_norms) h = Norm(h, layer.post_feedforward_norm);
      x = x + (c.residual_multiplier != 1.0 ? h * c.residual_multiplier : h);
    }
    x = Norm(x, final_norm_);

    for (int64_t i = 0; i < batch; ++i) {
      const int64_t n = static_cast<int64_t>(new_tokens[static_cast<size_t>(i)].size());
      if (n == 0) continue;
      torch::Tensor logits = As(Project(x[i][n - 1], lm_head_, lm_head_int8_), torch::kFloat32);
      if (logits.size(0) != c.vocab_size) logits = logits.narrow(0, 0, c.vocab_size);  // padded vocabulary
      if (!device_.is_cpu()) logits = logits.to(torch::kCPU);
      if (c.logits_scaling != 1.0) logits = logits / c.logits_scaling;
      if (c.final_logit_softcapping > 0) {
        logits = torch::tanh(logits / c.final_logit_softcapping) * c.final_logit_softcapping;
      }
      logits = logits.contiguous();
      result[static_cast<size_t>(i)].assign(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
      cache->lengths_[static_cast<size_t>(i)] += n;
    }
    return result;
  }

  // One forward pass per group of sequences, each on a slice of the cache. The lengths
  // advance only once every group has run, as after one pass (a failed pass leaves them).
  Result<std::vector<std::vector<float>>> ForwardInGroups(TorchCache* cache,
                                                          const std::vector<std::vector<int32_t>>& new_tokens,
                                                          const std::vector<SequenceRange>& groups) const {
    std::vector<std::vector<float>> result(new_tokens.size());
    std::vector<int64_t> lengths = cache->lengths_;
    for (const auto& [first, end] : groups) {
      TorchCache slice(*cache, first, end - first);
      const std::vector<std::vector<int32_t>> tokens(new_tokens.begin() + first, new_tokens.begin() + end);
      Result<std::vector<std::vector<float>>> logits = ForwardUnchecked(&slice, tokens);
      if (!logits.ok()) return logits.error();
      for (int64_t i = first; i < end; ++i) {
        result[static_cast<size_t>(i)] = std::move((*logits)[static_cast<size_t>(i - first)]);
        lengths[static_cast<size_t>(i)] = slice.lengths_[static_cast<size_t>(i - first)];
      }
    }
    cache->lengths_ = std::move(lengths);
    return result;
  }

  // t in `dtype`, without a dispatch when it already is (a no-op .to() still costs a libtorch
  // call, and a decode step makes dozens of them).
  static torch::Tensor As(const torch::Tensor& t, torch::ScalarType dtype) {
    return t.scalar_type() == dtype ? t : t.to(dtype);
  }

  // cos and sin stacked: [2, batch, 1, longest, head_dim], in the activation dtype.
  torch::Tensor RopeTables(const torch::Tensor& inv_freq, const torch::Tensor& positions) const {
    return As(llm::RopeTables(inv_freq, positions), dtype_);
  }

  torch::Tensor RotateHalf(const torch::Tensor& x) const {
    return adapters_.rope_as_matmul ? accelerator::RotateHalfByMatmul(x, rotate_half_)
                                    : accelerator::RotateHalfBySlicing(x);
  }

  // RMSNorm in float32, as Hugging Face computes it; Gemma scales by (1 + w). `features`: how
  // many of the last dimension's entries are real (the rest are head_dim padding, all zero);
  // 0: all of them.
  torch::Tensor Norm(const torch::Tensor& x, const torch::Tensor& weight, int64_t features = 0) const {
    const torch::Tensor x32 = As(x, torch::kFloat32);
    const bool padded = features > 0 && features != x32.size(-1);
    const double n = static_cast<double>(padded ? features : x32.size(-1));
    const torch::Tensor mean_square = adapters_.rms_norm_by_matmul ? accelerator::SumOfSquaresByMatmul(x32) / n
                                      : padded                     ? x32.pow(2).sum(-1, true) / n
                                                                   : x32.pow(2).mean(-1, true);
    const torch::Tensor normed = x32 * torch::rsqrt(mean_square + config_.rms_norm_eps);
    if (config_.norm_weight_plus_one) return As(normed * (1.0 + As(weight, torch::kFloat32)), x.scalar_type());
    return weight * As(normed, x.scalar_type());
  }

  // Query rows attended at a time. The scores of a long prefill are large ([batch, heads,
  // length, tokens]: 8 prompts of 1000 tokens are 128 MB in float32, and the scale, mask and
  // softmax each make another of that size). Blocks of query rows keep each intermediate near
  // attention_block_elements_: allocations of a few MB come back from malloc's free lists,
  // where hundreds of MB would be mapped, faulted in page by page and unmapped again on every
  // layer, which slowed other threads and processes on the same host (found with perf in
  // bench/run_job_priority_bench.sh; see README). Rows are independent: blocking changes no
  // result.
  int64_t AttentionRowsPerBlock(int64_t batch, int64_t tokens) const {
    const int64_t row_elements = std::max<int64_t>(1, batch * config_.num_attention_heads * tokens);
    return std::max<int64_t>(1, attention_block_elements_ / row_elements);
  }

  torch::Tensor Attention(const Layer& layer, const torch::Tensor& h, const torch::Tensor& rope,
                          const AttentionMask& mask, int64_t window, int64_t rows_per_block, TorchCache* cache,
                          size_t layer_index, const std::vector<std::vector<int32_t>>& new_tokens,
                          int64_t total_max) const {
    const ModelConfig& c = config_;
    const int64_t batch = h.size(0), length = h.size(1);
    const int64_t head_dim = head_dim_;
    torch::Tensor q =
        Project(h, layer.q, layer.q_int8, layer.q_bias).view({batch, length, c.num_attention_heads, head_dim});
    torch::Tensor k =
        Project(h, layer.k, layer.k_int8, layer.k_bias).view({batch, length, c.num_key_value_heads, head_dim});
    torch::Tensor v =
        Project(h, layer.v, layer.v_int8, layer.v_bias).view({batch, length, c.num_key_value_heads, head_dim});
    if (c.qk_norm) {
      q = Norm(q, layer.q_norm, c.head_dim);
      k = Norm(k, layer.k_norm, c.head_dim);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    const torch::Tensor cos = rope[0], sin = rope[1];
    q = ApplyRope(q, cos, sin, RotateHalf(q));
    k = ApplyRope(k, cos, sin, RotateHalf(k));

    torch::Tensor& cache_k = cache->keys[layer_index];
    torch::Tensor& cache_v = cache->values[layer_index];
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t n = static_cast<int64_t>(new_tokens[static_cast<size_t>(i)].size());
      if (n == 0) continue;
      const int64_t start = cache->lengths_[static_cast<size_t>(i)];
      cache_k[i].narrow(1, start, n).copy_(k[i].narrow(1, 0, n));
      cache_v[i].narrow(1, start, n).copy_(v[i].narrow(1, 0, n));
    }
    const torch::Tensor keys = cache_k.narrow(2, 0, total_max);
    const torch::Tensor values = cache_v.narrow(2, 0, total_max);
    if (rows_per_block >= length) {
      return Project(AttendBlock(q, keys, values, mask.Rows(0, length, window)), layer.o, layer.o_int8, layer.o_bias);
    }
    std::vector<torch::Tensor> blocks;
    for (int64_t row = 0; row < length; row += rows_per_block) {
      const int64_t rows = std::min(rows_per_block, length - row);
      blocks.push_back(AttendBlock(q.narrow(2, row, rows), keys, values, mask.Rows(row, rows, window)));
    }
    return Project(torch::cat(blocks, 1), layer.o, layer.o_int8, layer.o_bias);
  }

  // Attention of query rows q [batch, heads, rows, head_dim] over the cached keys and values
  // [batch, kv_heads, tokens, head_dim]; mask [batch, 1, rows, tokens] or undefined. Returns
  // [batch, rows, heads * head_dim].
  torch::Tensor AttendBlock(const torch::Tensor& q, const torch::Tensor& keys, const torch::Tensor& values,
                            const torch::Tensor& mask) const {
    const ModelConfig& c = config_;
    const int64_t batch = q.size(0), rows = q.size(2), head_dim = q.size(3), tokens = keys.size(2);
    // Grouped-query attention without copying the cache: the `groups` query heads that share a
    // KV head are stacked along the query axis, so one batched product per KV head serves them
    // all ([batch, kv, groups * rows, head_dim] x [batch, kv, head_dim, tokens]).
    const int64_t groups = c.num_query_groups();
    const torch::Tensor grouped_q = q.reshape({batch, c.num_key_value_heads, groups * rows, head_dim});
    torch::Tensor scores = torch::matmul(grouped_q, keys.transpose(2, 3)) * c.attention_scale();
    if (c.attn_logit_softcapping > 0) {
      scores = torch::tanh(scores / c.attn_logit_softcapping) * c.attn_logit_softcapping;
    }
    scores = As(scores, torch::kFloat32);
    if (mask.defined()) {
      // mask: [batch, 1, rows, tokens] -> the same for each stacked group.
      scores =
          scores +
          (groups == 1
               ? mask
               : mask.unsqueeze(2).expand({batch, 1, groups, rows, tokens}).reshape({batch, 1, groups * rows, tokens}));
    }
    const torch::Tensor weights = As(torch::softmax(scores, -1), dtype_);
    return torch::matmul(weights, values)
        .view({batch, c.num_attention_heads, rows, head_dim})
        .transpose(1, 2)
        .reshape({batch, rows, -1});
  }

  // Up to this many rows, an int8 product runs the decode step's kernel (quantized
  // activations) instead of dequantizing the weights: the output head of every prefill (one row
  // per sequence), and all products of a prefill of a few tokens.
  static constexpr int64_t kInt8KernelRows = 16;

  // h times a projection's weight (transposed), plus bias: the dense weight, or with int8
  // quantization the int8 kernel for a few rows, the weight dequantized for many (a prefill's).
  torch::Tensor Project(const torch::Tensor& h, const torch::Tensor& dense, const Int8Weight& int8,
                        const torch::Tensor& bias = {}) const {
    if (dense.defined()) return F::linear(h, dense, bias);
    if (cpu_kernels_ && h.numel() / h.size(-1) <= kInt8KernelRows) return ProjectInt8(h, int8, bias);
    return F::linear(h, Dequantize(int8), bias);
  }

  torch::Tensor ProjectInt8(const torch::Tensor& h, const Int8Weight& int8, const torch::Tensor& bias) const {
    const torch::Tensor x = h.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols, out_features = int8.values.size(0);
    torch::Tensor values = torch::empty({rows, cols}, torch::kUInt8), scales = torch::empty({rows});
    cpu::QuantizeActivations(reinterpret_cast<const cpu::Bf16*>(x.data_ptr<at::BFloat16>()), rows, cols,
                             values.data_ptr<uint8_t>(), scales.data_ptr<float>());
    const cpu::QuantizedActivations activations{
        .values = values.data_ptr<uint8_t>(), .scales = scales.data_ptr<float>(), .rows = rows, .cols = cols};
    torch::Tensor out = torch::empty({rows, out_features});
    const cpu::Int8Matrix matrix = Int8View(int8);
    const cpu::Output output{.f32 = out.data_ptr<float>(), .stride = out_features};
    cpu::ParallelRanges(Pool(), out_features, 16, [&](int64_t begin, int64_t end) {
      cpu::BestKernels().gemv_int8(matrix, activations, output, begin, end);
    });
    if (bias.defined()) out += bias.to(torch::kFloat32);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = out_features;
    return out.to(dtype_).view(shape);
  }

  static cpu::Int8Matrix Int8View(const Int8Weight& w) {
    return {.values = w.values.data_ptr<int8_t>(),
            .scales = w.scales.data_ptr<float>(),
            .row_sums = w.row_sums.data_ptr<int32_t>(),
            .rows = w.values.size(0),
            .cols = w.values.size(1)};
  }

  // The rows `ids` of an int8 matrix (all of them when ids is undefined), in the activation
  // dtype. The whole matrix is written straight to bfloat16 by the pool's threads: no float32
  // copy (the output head's would be 545 MB at 0.5B, faulted in on every prefill).
  torch::Tensor Dequantize(const Int8Weight& w, const torch::Tensor& ids = {}) const {
    if (!ids.defined()) {
      torch::Tensor out = torch::empty(w.values.sizes(), torch::kBFloat16);
      const cpu::Int8Matrix matrix = Int8View(w);
      auto* dest = reinterpret_cast<cpu::Bf16*>(out.data_ptr<at::BFloat16>());
      cpu::ParallelRanges(Pool(), matrix.rows, 16, [&](int64_t begin, int64_t end) {
        cpu::BestKernels().dequantize_int8(matrix, begin, end, dest);
      });
      return out;
    }
    const torch::Tensor flat = ids.reshape({-1});
    std::vector<int64_t> shape = ids.sizes().vec();
    shape.push_back(w.values.size(1));
    return (w.values.index_select(0, flat).to(torch::kFloat32) * w.scales.index_select(0, flat).unsqueeze(1))
        .to(dtype_)
        .view(shape);
  }

  // DecoderOptions::Quantization::kInt8: each matrix quantized per output row, the dense one
  // dropped. A tied LM head shares the embedding's int8 form, as it shared the dense one.
  void QuantizeWeights() {
    auto quantize = [](torch::Tensor& dense, Int8Weight* out) {
      const torch::Tensor wide = dense.to(torch::kFloat32).contiguous();
      const int64_t rows = wide.size(0), cols = wide.size(1);
      out->values = torch::empty({rows, cols}, torch::kInt8);
      out->scales = torch::empty({rows}, torch::kFloat32);
      out->row_sums = torch::empty({rows}, torch::kInt32);
      cpu::QuantizeInt8Rows(wide.data_ptr<float>(), rows, cols, out->values.data_ptr<int8_t>(),
                            out->scales.data_ptr<float>(), out->row_sums.data_ptr<int32_t>());
      dense = torch::Tensor();
    };
    const bool tied = lm_head_.is_same(embed_tokens_);
    quantize(embed_tokens_, &embed_tokens_int8_);
    if (tied) {
      lm_head_int8_ = embed_tokens_int8_;
      lm_head_ = torch::Tensor();
    } else {
      quantize(lm_head_, &lm_head_int8_);
    }
    for (Layer& l : layers_) {
      quantize(l.q, &l.q_int8);
      quantize(l.k, &l.k_int8);
      quantize(l.v, &l.v_int8);
      quantize(l.o, &l.o_int8);
      quantize(l.gate, &l.gate_int8);
      quantize(l.up, &l.up_int8);
      quantize(l.down, &l.down_int8);
    }
  }

  // Views of the weights for cpu::RunDecodeStep; norm weights it reads as float32 are copied
  // once here.
  void PrepareCpuDecodeStep() {
    auto floats = [this](const torch::Tensor& t) -> const float* {
      if (!t.defined()) return nullptr;
      cpu_step_tensors_.push_back(t.to(torch::kFloat32).contiguous());
      return cpu_step_tensors_.back().data_ptr<float>();
    };
    auto bf16 = [](const torch::Tensor& t) -> const cpu::Bf16* {
      return t.defined() ? reinterpret_cast<const cpu::Bf16*>(t.data_ptr<at::BFloat16>()) : nullptr;
    };
    auto linear = [&](const torch::Tensor& dense, const Int8Weight& int8, const torch::Tensor& bias = {}) {
      cpu::LinearWeights w;
      if (int8.defined()) {
        w.int8 = Int8View(int8);
      } else {
        w.bf16 = {.values = bf16(dense), .rows = dense.size(0), .cols = dense.size(1)};
      }
      w.bias = bf16(bias);
      return w;
    };
    cpu_step_.config = &config_;
    cpu_step_.embed_tokens = linear(embed_tokens_, embed_tokens_int8_);
    cpu_step_.lm_head = linear(lm_head_, lm_head_int8_);
    cpu_step_.final_norm = floats(final_norm_);
    cpu_step_.global_inv_freq = floats(global_inv_freq_);
    cpu_step_.local_inv_freq = floats(local_inv_freq_);
    for (const Layer& l : layers_) {
      cpu::LayerWeights w;
      w.input_norm = floats(l.input_norm);
      w.post_attention_norm = floats(l.post_attention_norm);
      w.pre_feedforward_norm = floats(l.pre_feedforward_norm);
      w.post_feedforward_norm = floats(l.post_feedforward_norm);
      w.q_norm = floats(l.q_norm);
      w.k_norm = floats(l.k_norm);
      w.q = linear(l.q, l.q_int8, l.q_bias);
      w.k = linear(l.k, l.k_int8, l.k_bias);
      w.v = linear(l.v, l.v_int8, l.v_bias);
      w.o = linear(l.o, l.o_int8, l.o_bias);
      w.gate = linear(l.gate, l.gate_int8);
      w.up = linear(l.up, l.up_int8);
      w.down = linear(l.down, l.down_int8);
      w.sliding = l.sliding;
      cpu_step_.layers.push_back(w);
    }
  }

  // A decode step (every sequence adds at most one token) through cpu::RunDecodeStep.
  Result<std::vector<std::vector<float>>> CpuDecodeStep(TorchCache* cache,
                                                        const std::vector<std::vector<int32_t>>& new_tokens) const {
    cpu::KvCacheView view;
    view.max_tokens = cache->max_tokens();
    for (size_t l = 0; l < layers_.size(); ++l) {
      view.keys.push_back(reinterpret_cast<cpu::Bf16*>(cache->keys[l].data_ptr<at::BFloat16>()));
      view.values.push_back(reinterpret_cast<cpu::Bf16*>(cache->values[l].data_ptr<at::BFloat16>()));
    }
    std::vector<cpu::DecodeRequest> requests;
    for (size_t i = 0; i < new_tokens.size(); ++i) {
      if (new_tokens[i].empty()) continue;
      requests.push_back({.slot = static_cast<int64_t>(i), .token = new_tokens[i][0], .position = cache->lengths_[i]});
    }
    const cpu::ParallelFor parallel = [this](int64_t count, int64_t alignment,
                                             const std::function<void(int64_t, int64_t)>& fn) {
      cpu::ParallelRanges(Pool(), count, alignment, fn);
    };
    std::vector<std::vector<float>> logits =
        cpu::RunDecodeStep(cpu_step_, cpu::BestKernels(), parallel, view, requests);
    std::vector<std::vector<float>> result(new_tokens.size());
    for (size_t r = 0; r < requests.size(); ++r) {
      const auto slot = static_cast<size_t>(requests[r].slot);
      result[slot] = std::move(logits[r]);
      cache->lengths_[slot] += 1;
    }
    return result;
  }

  torch::Tensor Mlp(const Layer& layer, const torch::Tensor& h) const {
    torch::Tensor gate = Project(h, layer.gate, layer.gate_int8);
    gate = config_.activation == ModelConfig::Activation::kSilu
               ? F::silu(gate)
               : F::gelu(gate, F::GELUFuncOptions().approximate("tanh"));
    return Project(gate * Project(h, layer.up, layer.up_int8), layer.down, layer.down_int8);
  }

  Status LoadWeights(const SafetensorsCheckpoint& checkpoint) {
    const ModelConfig& c = config_;
    // The family's first layout whose embedding the checkpoint holds (multimodal Gemma 3 keeps
    // the text model under language_model.); the usual one when none does, for its errors.
    const std::vector<WeightNames> layouts = c.family->weight_layouts();
    WeightNames names = layouts.front();
    for (const WeightNames& layout : layouts) {
      if (checkpoint.Contains(layout.Name(DecoderWeight::kEmbedTokens))) {
        names = layout;
        break;
      }
    }
    const std::string head_name = names.Name(DecoderWeight::kLmHead);
    using W = DecoderWeight;
    auto load = [&](const std::string& name, std::vector<int64_t> shape, torch::Tensor* out) -> Status {
      Result<TensorView> view = checkpoint.Get(name);
      if (!view.ok()) return view.error();
      if (view->info->shape != shape) {
        std::string want, got;
        for (int64_t d : shape) want += (want.empty() ? "" : "x") + std::to_string(d);
        for (int64_t d : view->info->shape) got += (got.empty() ? "" : "x") + std::to_string(d);
        return DataLoss("tensor \"" + name + "\" has shape " + got + "; config.json implies " + want);
      }
      // Norm weights stay in float32: they are applied in float32.
      Result<torch::Tensor> tensor = ToTorch(*view, shape.size() == 1 ? torch::kFloat32 : dtype_);
      if (!tensor.ok()) return tensor.error();
      // One pass over each tensor at load: a NaN or infinite weight would poison every
      // generation without an error.
      if (!torch::isfinite(*tensor).all().item<bool>()) {
        return DataLoss("tensor \"" + name + "\" holds NaN or infinite values");
      }
      *out = std::move(tensor).value();
      return Status::Ok();
    };
    const int64_t hidden = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
                  kv_dim = c.num_key_value_heads * c.head_dim;
    TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kEmbedTokens), {c.vocab_size, hidden}, &embed_tokens_));
    TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kFinalNorm), {hidden}, &final_norm_));
    if (c.tie_word_embeddings || !checkpoint.Contains(head_name)) {
      if (!c.tie_word_embeddings)
        return NotFound("checkpoint has no \"" + head_name + "\" and embeddings are not tied");
      lm_head_ = embed_tokens_;
    } else {
      TXSCORE_RETURN_IF_ERROR(load(head_name, {c.vocab_size, hidden}, &lm_head_));
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      Layer layer;
      layer.sliding = c.layer_is_sliding[static_cast<size_t>(l)];
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kInputNorm, l), {hidden}, &layer.input_norm));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kPostAttentionNorm, l), {hidden}, &layer.post_attention_norm));
      if (c.sandwich_norms) {
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kPreFeedforwardNorm, l), {hidden}, &layer.pre_feedforward_norm));
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kPostFeedforwardNorm, l), {hidden}, &layer.post_feedforward_norm));
      }
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kQProj, l), {q_dim, hidden}, &layer.q));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kKProj, l), {kv_dim, hidden}, &layer.k));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kVProj, l), {kv_dim, hidden}, &layer.v));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kOProj, l), {hidden, q_dim}, &layer.o));
      if (c.attention_bias) {
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kQBias, l), {q_dim}, &layer.q_bias));
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kKBias, l), {kv_dim}, &layer.k_bias));
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kVBias, l), {kv_dim}, &layer.v_bias));
        layer.q_bias = layer.q_bias.to(dtype_);
        layer.k_bias = layer.k_bias.to(dtype_);
        layer.v_bias = layer.v_bias.to(dtype_);
      }
      if (c.qk_norm) {
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kQNorm, l), {c.head_dim}, &layer.q_norm));
        TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kKNorm, l), {c.head_dim}, &layer.k_norm));
      }
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kGateProj, l), {c.intermediate_size, hidden}, &layer.gate));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kUpProj, l), {c.intermediate_size, hidden}, &layer.up));
      TXSCORE_RETURN_IF_ERROR(load(names.Name(W::kDownProj, l), {hidden, c.intermediate_size}, &layer.down));
      if (!c.norm_weight_plus_one) {
        // Llama-style norms multiply in the activation dtype (weight * normed.to(dtype)).
        layer.input_norm = layer.input_norm.to(dtype_);
        layer.post_attention_norm = layer.post_attention_norm.to(dtype_);
        if (c.qk_norm) {
          layer.q_norm = layer.q_norm.to(dtype_);
          layer.k_norm = layer.k_norm.to(dtype_);
        }
      }
      layers_.push_back(std::move(layer));
    }
    if (!c.norm_weight_plus_one) final_norm_ = final_norm_.to(dtype_);
    return Status::Ok();
  }

  // Weights are moved once, at load: the request path moves none.
  // The LM head gets zero rows up to a multiple of the alignment; logits are cut back to the
  // vocabulary in ForwardUnchecked. The embedding keeps its rows: ids never reach the padding.
  void PadVocabulary() {
    const int64_t align = adapters_.vocab_alignment;
    const int64_t vocab = lm_head_.size(0);
    if (align <= 1 || vocab % align == 0) return;
    const int64_t padded = (vocab + align - 1) / align * align;
    lm_head_ = torch::cat({lm_head_, torch::zeros({padded - vocab, lm_head_.size(1)}, lm_head_.options())}, 0);
  }

  // The head_dim adapter (accelerator/op_adapters.h), applied to the weights on the host at load.
  // Rows of a [heads * head_dim, ...] tensor go to [heads * head_dim_, ...]: each head's first
  // half at the start of its padded first half, its second half at the start of its padded
  // second half, zeros elsewhere; so rotate_half over head_dim_ still pairs i with i + d/2.
  torch::Tensor PadHeadRows(const torch::Tensor& t, int64_t heads) const {
    const int64_t d = config_.head_dim, half = d / 2, padded_half = head_dim_ / 2;
    std::vector<int64_t> shape = t.sizes().vec();
    std::vector<int64_t> per_head = {heads, d};
    per_head.insert(per_head.end(), shape.begin() + 1, shape.end());
    const torch::Tensor src = t.reshape(per_head);
    per_head[1] = head_dim_;
    torch::Tensor out = torch::zeros(per_head, t.options());
    out.narrow(1, 0, half).copy_(src.narrow(1, 0, half));
    out.narrow(1, padded_half, half).copy_(src.narrow(1, half, half));
    shape[0] = heads * head_dim_;
    return out.reshape(shape);
  }

  void PadHeadDim() {
    if (head_dim_ == config_.head_dim) return;
    const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads;
    for (Layer& l : layers_) {
      l.q = PadHeadRows(l.q, heads);
      l.k = PadHeadRows(l.k, kv_heads);
      l.v = PadHeadRows(l.v, kv_heads);
      if (l.q_bias.defined()) l.q_bias = PadHeadRows(l.q_bias, heads);
      if (l.k_bias.defined()) l.k_bias = PadHeadRows(l.k_bias, kv_heads);
      if (l.v_bias.defined()) l.v_bias = PadHeadRows(l.v_bias, kv_heads);
      l.o = PadHeadRows(l.o.t(), heads).t().contiguous();  // o_proj's columns are the heads
      if (l.q_norm.defined()) l.q_norm = PadHeadRows(l.q_norm, 1);
      if (l.k_norm.defined()) l.k_norm = PadHeadRows(l.k_norm, 1);
    }
  }

  // RoPE's inverse frequencies (head_dim / 2 of them) with zeros for the padded entries:
  // angle 0 there, and the entries are zero anyway.
  torch::Tensor PadFrequencies(const torch::Tensor& inv_freq) const {
    if (head_dim_ == config_.head_dim) return inv_freq;
    return torch::cat({inv_freq, torch::zeros({(head_dim_ - config_.head_dim) / 2}, inv_freq.options())});
  }

  void MoveWeightsToDevice() {
    if (adapters_.embedding_on_host) embed_tokens_host_ = embed_tokens_;  // stays in host memory
    if (device_.is_cpu()) {
      PadVocabulary();
      return;
    }
    auto move = [this](torch::Tensor& t) {
      if (!t.defined()) return;
      t = t.to(device_);
      CountWeightBytesMoved(static_cast<uint64_t>(t.numel()) * t.element_size());
    };
    const bool tied = lm_head_.is_same(embed_tokens_);
    move(embed_tokens_);
    move(final_norm_);
    if (tied) {
      lm_head_ = embed_tokens_;
    } else {
      move(lm_head_);
    }
    PadVocabulary();
    for (Layer& l : layers_) {
      for (torch::Tensor* t :
           {&l.input_norm, &l.post_attention_norm, &l.pre_feedforward_norm, &l.post_feedforward_norm, &l.q, &l.k, &l.v,
            &l.o, &l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.q_norm, &l.k_norm, &l.gate, &l.up, &l.down}) {
        move(*t);
      }
    }
  }

  ModelConfig config_;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Device device_ = torch::kCPU;
  accelerator::OpAdapters adapters_;
  int64_t attention_block_elements_ = 0;  // DecoderOptions::attention_block_elements
  int64_t cpu_prefill_group_rows_ = 0;    // DecoderOptions::cpu_prefill_group_rows
  int threads_ = 0;                       // DecoderOptions::threads
  int64_t head_dim_ = 0;                  // config_.head_dim, or padded to the head_dim adapter's alignment
  torch::Tensor rotate_half_;             // with rope_as_matmul
  torch::Tensor embed_tokens_host_;       // with embedding_on_host (on a non-CPU device)
  torch::Tensor embed_tokens_, final_norm_, lm_head_;
  Int8Weight embed_tokens_int8_, lm_head_int8_;  // quantization kInt8 (the dense ones then undefined)
  cpu::DecoderWeights cpu_step_;                 // views for cpu::RunDecodeStep; no layers: not used
  std::vector<torch::Tensor> cpu_step_tensors_;  // float32 copies cpu_step_ points into
  // The kernels' threads: for decode steps (cpu_kernels_), and with int8 weights for the
  // products that dequantize or run the int8 kernel outside a decode step.
  // Made by the first forward pass that needs it, so that its threads inherit that thread's
  // scheduling class: a claims job's engine runs its passes on an idle-priority batcher thread
  // (docs/claims-jobs.md, "Priority"), and its workers must not run above it.
  cpu::WorkerPool& Pool() const {
    std::call_once(cpu_pool_once_, [this] { cpu_pool_ = std::make_unique<cpu::WorkerPool>(cpu_pool_threads_); });
    return *cpu_pool_;
  }
  mutable std::once_flag cpu_pool_once_;
  mutable std::unique_ptr<cpu::WorkerPool> cpu_pool_;
  int cpu_pool_threads_ = 1;
  bool cpu_kernels_ = false;  // DecoderOptions::cpu_kernels, where it applies (CPU, bfloat16, no adapters)
  torch::Tensor global_inv_freq_, local_inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace

Result<std::unique_ptr<Decoder>> Decoder::Load(const std::string& checkpoint_dir, const DecoderOptions& options) {
  try {
    Result<std::unique_ptr<TorchDecoder>> decoder = TorchDecoder::Create(checkpoint_dir, options);
    if (!decoder.ok()) return decoder.error();
    return std::unique_ptr<Decoder>(std::move(decoder).value());
  } catch (const c10::Error& e) {
    return Internal(std::string("libtorch failed while loading ") + checkpoint_dir + ": " + e.what_without_backtrace());
  }
}

}  // namespace txscore::llm
