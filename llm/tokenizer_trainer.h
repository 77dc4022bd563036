// Trains a byte-level BPE tokenizer and writes it as a Hugging Face tokenizer.json.
//
// Pre-tokenization is Qwen's (a Unicode-aware Split regex, then ByteLevel), normalisation NFC,
// merges in the [a, b] pair form. Training is the classic greedy one: start from the 256
// byte tokens, repeatedly merge the most frequent adjacent pair (ties: the pair that sorts
// first, so training is deterministic) until the vocabulary is full or no pair occurs twice.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

struct BpeTrainingOptions {
  int vocab_size = 1024;  // Default: 1024 (bytes + merges), before special tokens
  // Appended after the vocabulary, in order. Default: ChatML-style control tokens.
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
};

// Returns the tokenizer.json text.
Result<std::string> TrainByteLevelBpe(const std::vector<std::string>& corpus, const BpeTrainingOptions& options = {});

// Text like what the LLM stage reads: claim narratives, adjuster notes, transaction
// descriptions and JSON findings. Seeded and deterministic.
std::vector<std::string> GenerateTrainingCorpus(uint64_t seed, int documents);

}  // namespace txscore::llm
