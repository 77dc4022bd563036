// Op adapters: where a device lacks an op (or runs it badly), the model uses an equivalent
// form built from ops the device has. Chosen per device from its native ops; the tensor code
// is in op_adapters_torch.h, each form tested equal to the native one (tests/accelerator).
//
//   rope_as_matmul      RoPE's rotate_half as x @ P, P a fixed signed permutation: a matmul
//                       instead of slicing and concatenation. Exact (one nonzero per column).
//   rms_norm_by_matmul  RMSNorm's sum of squares as (x*x) @ ones in float32: a matmul instead
//                       of a reduction. Within 1e-6 relative of the native form.
//   embedding_on_host   the embedding table stays in host memory and rows are looked up there
//                       and copied over: no gather on the device, and the table is never copied
//                       to the host for a fallback. Exact.
//   vocab_alignment     the LM head's rows (the vocabulary) padded with zeros to a multiple of
//                       the device's alignment, so its largest matmul has an aligned shape; the
//                       padding logits are cut off before anyone sees them. Exact.
//   head_dim_alignment  each attention head's dimension padded with zeros to a multiple of the
//                       device's alignment: q/k/v projections get zero rows, o_proj zero
//                       columns, each half of the head padded separately so RoPE still pairs
//                       entry i with i + head_dim/2; the attention scale and the q/k norms keep
//                       the real head_dim. Padded entries are zero throughout, so it is exact
//                       up to the order of additions (tested within 1e-5).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace txscore::accelerator {

struct OpAdapters {
  bool rope_as_matmul = false;
  bool rms_norm_by_matmul = false;
  bool embedding_on_host = false;
  int vocab_alignment = 0;     // 0 or 1: no padding
  int head_dim_alignment = 0;  // 0 or 1: no padding

  std::vector<std::string> Describe() const;  // one line per adapter in use
  bool any() const {
    return rope_as_matmul || rms_norm_by_matmul || embedding_on_host || vocab_alignment > 1 || head_dim_alignment > 1;
  }
};

// The adapters a stage needing `stage_ops` uses on a device with `native_ops`. `*missing` gets
// the ops that are neither native nor adaptable there (the stage cannot run on that device).
// With `vocab` (`head_dim`) and an `alignment` above 1 that does not divide it, the vocabulary
// (each attention head) is padded.
OpAdapters ChooseAdapters(const std::set<std::string>& stage_ops, const std::set<std::string>& native_ops,
                          std::vector<std::string>* missing, int64_t vocab = 0, int alignment = 1,
                          int64_t head_dim = 0);

// head_dim padded to a multiple of `alignment` (and even, so both halves grow alike); itself
// when alignment is 0 or 1.
int64_t PaddedHeadDim(int64_t head_dim, int alignment);

}  // namespace txscore::accelerator
