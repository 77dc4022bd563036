// One decode step on the CPU with txscore's own kernels (llm/cpu_kernels/kernels.h): each
// sequence of a batch adds one token and gets its logits back. The decoder (llm/decoder.cc)
// runs this instead of libtorch's ops when it can (bfloat16 or int8 weights on the CPU, one
// new token per sequence): at batch 1 a step's time is reading every weight once, and a
// libtorch op's own overhead, a few microseconds each over about 75 ops a layer, came to a
// third of that.
//
// The step mirrors the libtorch forward pass of llm/decoder.cc: activations are rounded to
// bfloat16 where the libtorch pass stores them (matrix products, norms, the residual stream),
// but a fused operation (RMSNorm, RoPE, attention's softmax) keeps float32 inside, so results
// agree within the tolerance tests/llm/cpu_kernels_test.cc states, not bit for bit.
//
// No libtorch here: weights, cache and outputs are plain pointers into the decoder's tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "llm/cpu_kernels/kernels.h"
#include "llm/model_config.h"

namespace txscore::llm::cpu {

// A linear projection's weight [out_features, in_features]: bfloat16 or int8 (exactly one
// set), and an optional bfloat16 bias of out_features.
struct LinearWeights {
  Bf16Matrix bf16;
  Int8Matrix int8;
  const Bf16* bias = nullptr;
  bool quantized() const { return int8.values != nullptr; }
  int64_t rows() const { return quantized() ? int8.rows : bf16.rows; }
  int64_t cols() const { return quantized() ? int8.cols : bf16.cols; }
};

// Norm weights are float32 as the norm multiplies them (already rounded to bfloat16 for the
// families whose norms multiply in the activation dtype; null where the family has none).
struct LayerWeights {
  const float* input_norm = nullptr;
  const float* post_attention_norm = nullptr;
  const float* pre_feedforward_norm = nullptr;   // sandwich_norms
  const float* post_feedforward_norm = nullptr;  // sandwich_norms
  const float* q_norm = nullptr;                 // qk_norm
  const float* k_norm = nullptr;                 // qk_norm
  LinearWeights q, k, v, o, gate, up, down;
  bool sliding = false;
};

struct DecoderWeights {
  const ModelConfig* config = nullptr;
  LinearWeights embed_tokens;  // rows are looked up (int8 rows are scaled back)
  LinearWeights lm_head;
  const float* final_norm = nullptr;
  std::vector<LayerWeights> layers;
  // RoPE inverse frequencies, head_dim / 2 each (llm/rope.h).
  const float* global_inv_freq = nullptr;
  const float* local_inv_freq = nullptr;
};

// The decoder's KV cache, per layer [batch][kv_heads][max_tokens][head_dim] bfloat16.
struct KvCacheView {
  std::vector<Bf16*> keys, values;
  int64_t max_tokens = 0;
};

// Runs fn over chunks that cover [0, count) once, boundaries on multiples of `alignment`, on
// several threads, and returns when all are done; the decoder passes its WorkerPool's
// ParallelRanges (worker_pool.h).
using ParallelFor =
    std::function<void(int64_t count, int64_t alignment, const std::function<void(int64_t begin, int64_t end)>& fn)>;

struct DecodeRequest {
  int64_t slot = 0;      // the sequence's index in the cache
  int32_t token = 0;     // the token it adds
  int64_t position = 0;  // tokens already in its cache; the new one goes there
};

// Appends each request's token to its sequence's cache and returns its logits (vocab_size
// float32 each), in request order. The caller has checked slots, ids and cache room.
// Thread-safe as long as no two calls share a cache slot.
std::vector<std::vector<float>> RunDecodeStep(const DecoderWeights& weights, const KernelSet& kernels,
                                              const ParallelFor& parallel, const KvCacheView& cache,
                                              const std::vector<DecodeRequest>& requests);
// Decode steps RunDecodeStep has run in this process: `txscore generate --json` reports it, so
// a test can tell that the command runs these kernels.
uint64_t DecodeStepsRun();

// Applies RMSNorm to `rows` rows of `features`: float32 inside, the result rounded to bfloat16
// as the decoder's libtorch Norm does (weight * bf16(normed), or bf16(normed * (1 + weight))
// when plus_one).
void RmsNormRows(const float* x, int64_t rows, int64_t features, const float* weight, bool plus_one, double eps,
                 Bf16* out);

// Rotates `heads` heads of head_dim values in place by RoPE at `position` ("rotate half"
// layout, llm/rope.h): cos and sin rounded to bfloat16 as the decoder's tables are, the
// rotation in float32, the result rounded to bfloat16.
void ApplyRopeInPlace(Bf16* x, int64_t heads, int64_t head_dim, const float* inv_freq, int64_t position);

// One query head's attention over `tokens` cached keys and values ([tokens, head_dim]
// bfloat16 each, rows head_dim apart): scores = keys . query * scale, tanh-capped at `cap`
// when cap > 0 (Gemma 2's attn_logit_softcapping), softmax in float32, and the values' sum
// weighted by it, rounded to bfloat16 into out (head_dim). `scratch` is working memory
// (tokens + head_dim floats), kept by the caller across heads.
void AttendHead(const KernelSet& kernels, const Bf16* query, const Bf16* keys, const Bf16* values, int64_t tokens,
                int64_t head_dim, float scale, float cap, std::vector<float>& scratch, Bf16* out);

}  // namespace txscore::llm::cpu
