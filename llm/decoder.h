// A decoder-only transformer (Llama 3, Qwen3, Granite, Gemma 2/3) on libtorch, with a
// preallocated KV cache and batches of sequences of different lengths.
//
// This header has no torch include: callers hold a Decoder and a DecoderCache and get plain
// float logits back; the tensors stay inside decoder.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  // Default: unset, 512 rows (2048 with int8 weights). On the CPU, a prefill of several
  // sequences runs in groups of consecutive sequences of at most this many rows (sequences x
  // the group's longest new tokens; a longer sequence runs alone), one forward pass per group
  // (PrefillGroups below). A product of hundreds of rows still amortises its weight loads, and
  // a group's activations stay a few MB: one padded pass over 16 prompts of 418 tokens made
  // each MLP intermediate 65 MB (mapped and faulted in again on every layer) and split
  // attention into blocks of 11 query rows, and took 2.9x as long (docs/performance.md,
  // "Claims/s of a claims job"). With int8 weights, where every group dequantizes the weights
  // again, 2048 rows measured faster than 512 (docs/performance.md, "The LLM on the CPU").
  // 0: the whole batch in one pass. Other devices always take the batch
  // in one pass.
  std::optional<int64_t> cpu_prefill_group_rows = std::nullopt;
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
  // Default: none. Tests: called once every weight is copied out of the checkpoint's files,
  // before the files are checked for a rewrite in place during the load.
  std::function<void()> after_weights_read{};
};

// Sequences [first, end) of a batch.
struct SequenceRange {
  int64_t first = 0;
  int64_t end = 0;
  bool operator==(const SequenceRange&) const = default;
};

// The groups a CPU prefill runs in (DecoderOptions::cpu_prefill_group_rows): consecutive
// sequences, each group at most `rows` padded rows (its sequences x its longest new tokens)
// unless one sequence alone is longer. Sequences without new tokens start no group (one
// inside a group costs padding rows only); a batch that is not one group covering every
// sequence runs group by group.
std::vector<SequenceRange> PrefillGroups(const std::vector<std::vector<int32_t>>& new_tokens, int64_t rows);

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
  virtual ~Decoder();  // returns the freed weights' pages to the OS (common/malloc_tuning.h)

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
