// Writes random-weight checkpoints in the Hugging Face layout (config.json, model.safetensors,
// tokenizer.json and tokenizer_config.json with a chat template) for tests, the demo and benchmarks:
// txscore never downloads a model. The weights are random, so whatever such a model writes is
// well-formed (with constrained decoding) but meaningless.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/result.h"
#include "llm/safetensors.h"

namespace txscore::llm {

class ModelFamilyRegistry;  // model_family.h

struct CheckpointSpec {
  std::string family = "qwen3";  // a registered family's name: llama, qwen3, granite, gemma2, gemma3
  // tiny (tests: 2 layers, hidden 64), small (4 layers, hidden 256), 0.5b (Qwen2.5-0.5B's
  // dimensions: 24 layers, hidden 896, 14 heads, 2 KV heads, vocabulary 151936).
  std::string size = "tiny";
  uint64_t seed = 1;
  DType dtype = DType::kBF16;  // Default: BF16, as checkpoints on the hub usually are
  // Default: true. Write a chat template (ChatML, the generated tokenizer's markers) into
  // tokenizer_config.json, as instruct checkpoints have; false leaves it out, as base models do.
  bool chat_template = true;
  // Default: none. Called with (steps done, steps) as the weights are made (the embedding,
  // each layer) and once the files are written: a 0.5b checkpoint takes tens of seconds.
  std::function<void(int done, int total)> progress = nullptr;
  // Default: the family's (tied, no bias, as every built-in family's template has it). Set,
  // written over the family's config.json: tests reach the paths real checkpoints take that
  // no built-in family does, an untied output head (lm_head.weight) and q/k/v biases.
  std::optional<bool> tie_word_embeddings = std::nullopt;
  std::optional<bool> attention_bias = std::nullopt;
  // Default: null, BuiltinModelFamilies(). Where `family` is looked up (its checkpoint
  // template and weight names); must outlive the call.
  const ModelFamilyRegistry* families = nullptr;
};

struct CheckpointSummary {
  int64_t parameters = 0;
  int64_t tokenizer_vocab = 0;  // trained tokens + special tokens
  int64_t config_vocab = 0;     // rows of the embedding (>= tokenizer_vocab)
};

// Creates `out_dir` if needed and writes the files (each to a temporary name first): the
// family's template (llm/model_family.h) over the keys every checkpoint shares, and the tensors
// the decoder reads from that config, under the family's weight names. The tokenizer of llama,
// gemma2 and gemma3 adds a BOS as the real ones do (config.json's bos_token_id names it);
// qwen3's and granite's add none. kInvalidArgument naming the registered families for an
// unknown one.
Result<CheckpointSummary> MakeCheckpoint(const CheckpointSpec& spec, const std::string& out_dir);

}  // namespace txscore::llm
