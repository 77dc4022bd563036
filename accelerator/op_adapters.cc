#include "accelerator/op_adapters.h"

#include "accelerator/device.h"

namespace txscore::accelerator {

std::vector<std::string> OpAdapters::Describe() const {
  std::vector<std::string> lines;
  if (embedding_on_host) lines.push_back("embedding lookup on the host");
  if (rms_norm_by_matmul) lines.push_back("rms_norm's sum of squares as a matmul, fp32 accumulator");
  if (rope_as_matmul) lines.push_back("rope's rotate_half as a matmul with a signed permutation");
  if (vocab_alignment > 1) lines.push_back("vocabulary padded to a multiple of " + std::to_string(vocab_alignment));
  if (head_dim_alignment > 1) lines.push_back("head_dim padded to a multiple of " + std::to_string(head_dim_alignment));
  return lines;
}

OpAdapters ChooseAdapters(const std::set<std::string>& stage_ops, const std::set<std::string>& native_ops,
                          std::vector<std::string>* missing, int64_t vocab, int alignment, int64_t head_dim) {
  OpAdapters adapters;
  if (vocab > 0 && alignment > 1 && vocab % alignment != 0 && stage_ops.count(ops::kMatmul) > 0) {
    adapters.vocab_alignment = alignment;
  }
  if (head_dim > 0 && head_dim % 2 == 0 && alignment > 1 && head_dim % alignment != 0 &&
      stage_ops.count(ops::kMatmul) > 0) {
    adapters.head_dim_alignment = alignment;
  }
  const bool matmul = native_ops.count(ops::kMatmul) > 0;
  for (const std::string& op : stage_ops) {
    if (native_ops.count(op) > 0) continue;
    if (op == ops::kRope && matmul) {
      adapters.rope_as_matmul = true;
    } else if (op == ops::kRmsNorm && matmul) {
      adapters.rms_norm_by_matmul = true;
    } else if (op == ops::kEmbedding) {
      adapters.embedding_on_host = true;
    } else {
      missing->push_back(op);
    }
  }
  return adapters;
}

int64_t PaddedHeadDim(int64_t head_dim, int alignment) {
  if (alignment <= 1) return head_dim;
  int64_t padded = (head_dim + alignment - 1) / alignment * alignment;
  if (padded % 2 != 0) padded += alignment;  // an odd alignment: the next multiple is even
  return padded;
}

}  // namespace txscore::accelerator
