// A decoder-only transformer (Llama 3, Qwen3, Granite, Gemma 2/3) on libtorch, with a
// preallocated KV cache and batches of sequences of different lengths.
//
// This header has no torch include: callers hold a Decoder and a DecoderCache and get plain
// float logits back; the tensors stay inside decoder.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accelerator/device.h"
#include "accelerator/op_adapters.h"
#include "common/result.h"
#include "llm/model_config.h"

namespace txscore::llm {

struct DecoderOptions {
  // Default: float32; or bfloat16 (weights and activations). float16 is refused (libtorch has
  // no float16 matmul on the CPU).
  accelerator::Dtype dtype = accelerator::Dtype::kFloat32;
  // Default: 0, the calling thread's count as it is. libtorch intra-op threads for the
  // decoder's own work (loading, each Forward), set on the calling thread only for that work
  // (accelerator::ScopedComputeThreads): other threads and the process-wide settings, which
  // are the program's (accelerator::SetComputeThreads), are left alone.
  int threads = 0;
  // Default: "cpu". A libtorch device name: "cuda:0", or "privateuseone:0" for an out-of-tree
  // backend (the emulated device). Weights are moved there once, at load; logits come back.
  std::string device = "cpu";
  // Equivalent forms of ops the device lacks (accelerator/op_adapters.h); the placement plan
  // says which. Default: none.
  accelerator::OpAdapters adapters{};
  // Default: 1M (4 MB of float32 scores). Attention computes the scores of at most about this
  // many elements at a time, in blocks of query rows: a long batched prefill then reuses
  // allocations of a few MB instead of mapping and faulting in hundreds of MB per layer.
  int64_t attention_block_elements = 1 << 20;
  // Default: kNone, weights in `dtype`. kInt8: every matrix (projections, embedding and LM head)
  // is quantized per output row at load (symmetric, scale max|w| / 127), halving the bytes a
  // decode step reads; decode steps quantize their activations per row and multiply in
  // integers (llm/cpu_kernels/kernels.h), and so do products of up to 16 rows outside them
  // (a prefill's output head); larger products multiply by the weights dequantized for them.
  // With cpu_kernels false every product dequantizes, the output head's too, on every step:
  // a comparison, not a way to run. Needs dtype bfloat16 and the CPU (kInvalidArgument
  // otherwise).
  enum class Quantization { kNone, kInt8 };
  Quantization quantization = Quantization::kNone;
  // Default: true. On the CPU in bfloat16 (or int8), a forward pass where every sequence adds
  // at most one token (a decode step) runs txscore's own kernels (llm/cpu_kernels/), the best
  // set the CPU has; prefill, other dtypes and other devices run libtorch's ops. false: libtorch
  // for everything (the A/B benchmarks and the equivalence tests compare the two). Ignored with
  // op adapters, which are for other devices.
  bool cpu_kernels = true;
  // Default: null, BuiltinModelFamilies(). The families config.json's family is found in;
  // must outlive the decoder.
  const ModelFamilyRegistry* families = nullptr;
};

// Keys and values of every layer for `batch` sequences of up to `max_tokens` tokens each.
class DecoderCache {
 public:
  virtual ~DecoderCache() = default;
  virtual int batch() const = 0;
  virtual int max_tokens() const = 0;
  // Tokens already in the cache, per sequence.
  virtual const std::vector<int64_t>& lengths() const = 0;
  // Forget sequence `index` (its slot is reused from position 0).
  virtual void Reset(int index) = 0;
};

class Decoder {
 public:
  static Result<std::unique_ptr<Decoder>> Load(const std::string& checkpoint_dir, const DecoderOptions& options = {});
  virtual ~Decoder() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::unique_ptr<DecoderCache> NewCache(int batch, int max_tokens) const = 0;

  // Appends `new_tokens[i]` to sequence i of the cache (an empty list leaves it alone) and
  // returns, per sequence, the logits after its last new token (empty for untouched
  // sequences). Prefill and decode are the same call: many tokens, or one.
  // kInvalidArgument when a sequence would outgrow the cache or an id is out of range.
  virtual Result<std::vector<std::vector<float>>> Forward(
      DecoderCache* cache, const std::vector<std::vector<int32_t>>& new_tokens) const = 0;
};

// How a component that must not link libtorch gets a decoder: the program passes
// Decoder::Load (from txscore_llm_torch); tests may pass their own.
using DecoderLoader =
    std::function<Result<std::unique_ptr<Decoder>>(const std::string& checkpoint_dir, const DecoderOptions& options)>;

}  // namespace txscore::llm
