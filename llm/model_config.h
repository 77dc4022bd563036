// A decoder's architecture, read from a Hugging Face config.json.
//
// One struct covers the supported families; each difference between them is a field here,
// set from the config's keys (or the family's Hugging Face default when a key is absent), so
// the model code branches on fields, never on the family. Which family a config.json
// describes, and how its keys are read, is the family's own file's business
// (llm/model_family.h, llm/families/).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace txscore::llm {

class ModelFamily;          // model_family.h
class ModelFamilyRegistry;  // model_family.h

struct RopeConfig {
  double theta = 10000.0;
  // "default", "llama3" (Llama 3.1+ frequency-dependent scaling) or "linear" (positions / factor).
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  // The family that read this config: owned by the registry ParseModelConfig was given, which
  // must outlive it (the built-in one is never freed). Null only in a ModelConfig built by hand.
  const ModelFamily* family = nullptr;
  std::string model_type;  // as written in config.json (the family's own when config.json names only architectures)

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // grouped-query attention; = num_attention_heads when absent
  int64_t head_dim = 0;             // explicit in Qwen3 and Gemma; else hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  std::string hidden_act = "silu";  // as the file names it: "silu" or "gelu_pytorch_tanh"
  enum class Activation { kSilu, kGeluTanh };
  Activation activation = Activation::kSilu;  // hidden_act, checked and resolved at load
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;

  RopeConfig rope;        // global (full-attention) layers
  RopeConfig local_rope;  // sliding-window layers (Gemma 3: rope_local_base_freq, no scaling)

  // Per-head RMSNorm on queries and keys (Qwen3, Gemma 3).
  bool qk_norm = false;
  // Gemma: RMSNorm scales by (1 + weight); four norms per layer (post-attention and
  // pre/post-feed-forward); embeddings multiplied by sqrt(hidden_size).
  bool norm_weight_plus_one = false;
  bool sandwich_norms = false;
  bool embedding_scale_is_sqrt_hidden = false;

  // Granite: embeddings * embedding_multiplier, residual branches * residual_multiplier,
  // logits / logits_scaling, attention softmax scale = attention_multiplier.
  double embedding_multiplier = 1.0;
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  std::optional<double> attention_multiplier;

  // Gemma: softmax scale = query_pre_attn_scalar^-0.5; tanh soft-capping (0 = off).
  std::optional<double> query_pre_attn_scalar;
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;

  // Sliding-window attention: window size and, per layer, whether it applies.
  int64_t sliding_window = 0;
  std::vector<bool> layer_is_sliding;

  // config.json's bos_token_id is not read: what a prompt starts with is the tokenizer's
  // business (Tokenizer::SpecialPrefix). Qwen3's config names a bos_token_id its tokenizer never
  // adds, and its model was trained without one.
  std::vector<int64_t> eos_token_ids;

  // Scale applied to q.k before the softmax.
  double attention_scale() const;
  // Multiplier applied to token embeddings (sqrt(hidden_size) for Gemma, embedding_multiplier
  // for Granite, 1 otherwise).
  double embedding_scale() const;
  int64_t num_query_groups() const { return num_attention_heads / num_key_value_heads; }
};

// `source` names the file in errors. The family is found in `families` by model_type (or, when
// config.json has none, by architectures). kInvalidArgument naming the key for missing or wrong
// values; kFailedPrecondition naming the model_type (or option) `families` does not support.
// Default registry: BuiltinModelFamilies().
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source);
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source,
                                     const ModelFamilyRegistry& families);
// Reads DIR/config.json.
Result<ModelConfig> LoadModelConfig(const std::string& checkpoint_dir);
// What version of a checkpoint is loaded, by content: the first 12 hex digits of a SHA-256 over
// the name and SHA-256 of every top-level .json, .safetensors and .model file of DIR, in name
// order (config, tokenizer, weights). A checkpoint replaced in place gets a new version. Reads
// every byte of the weights once (about a second per GB).
Result<std::string> CheckpointVersion(const std::string& checkpoint_dir);
Result<ModelConfig> LoadModelConfig(const std::string& checkpoint_dir, const ModelFamilyRegistry& families);

}  // namespace txscore::llm
