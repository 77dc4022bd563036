#include "llm/model_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_io.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

constexpr char kSupported[] = "llama, qwen3, granite, gemma2, gemma3_text, gemma3";

// Reads keys from one config object; missing keys fall back to the family defaults already in
// the target, null counts as missing (Hugging Face writes null for "off").
class Keys {
 public:
  Keys(const json& object, std::string source) : object_(object), source_(std::move(source)) {}

  Status Int(const char* key, int64_t* out, bool required = false) const {
    const json* v = Find(key);
    if (v == nullptr) return required && *out == 0 ? Missing(key) : Status::Ok();
    if (!v->is_number_integer() || v->get<int64_t>() < 0) return Wrong(key, "a non-negative integer");
    *out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Double(const char* key, double* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) return Wrong(key, "a number");
    *out = v->get<double>();
    return Status::Ok();
  }
  Status OptionalDouble(const char* key, std::optional<double>* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_number()) return Wrong(key, "a number");
    *out = v->get<double>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_boolean()) return Wrong(key, "true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    if (!v->is_string()) return Wrong(key, "a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }
  // An id or a list of ids (eos_token_id is either).
  Status Ids(const char* key, std::vector<int64_t>* out) const {
    const json* v = Find(key);
    if (v == nullptr) return Status::Ok();
    out->clear();
    if (v->is_number_integer()) {
      out->push_back(v->get<int64_t>());
      return Status::Ok();
    }
    if (!v->is_array()) return Wrong(key, "an integer or a list of integers");
    for (const json& id : *v) {
      if (!id.is_number_integer()) return Wrong(key, "an integer or a list of integers");
      out->push_back(id.get<int64_t>());
    }
    return Status::Ok();
  }
  const json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  Error Missing(const char* key) const { return InvalidArgument(source_ + ": missing \"" + key + "\"", key); }
  Error Wrong(const char* key, const char* expected) const {
    return InvalidArgument(source_ + ": \"" + key + "\" must be " + expected, key);
  }
  const std::string& source() const { return source_; }

 private:
  const json& object_;
  std::string source_;
};

// Hugging Face's Gemma3TextConfig defaults: the gemma3 (multimodal) config.json omits
// whatever equals them from its text_config.
void ApplyGemma3Defaults(ModelConfig* c) {
  c->vocab_size = 262208;
  c->hidden_size = 2304;
  c->intermediate_size = 9216;
  c->num_hidden_layers = 26;
  c->num_attention_heads = 8;
  c->num_key_value_heads = 4;
  c->head_dim = 256;
  c->hidden_act = "gelu_pytorch_tanh";
  c->max_position_embeddings = 131072;
  c->rope.theta = 1000000.0;
  c->local_rope.theta = 10000.0;
  c->query_pre_attn_scalar = 256;
  c->sliding_window = 4096;
  c->tie_word_embeddings = true;
}

Status ParseRopeScaling(const Keys& keys, RopeConfig* rope) {
  const json* scaling = keys.Find("rope_scaling");
  if (scaling == nullptr) return Status::Ok();
  if (!scaling->is_object()) return keys.Wrong("rope_scaling", "an object or null");
  Keys s(*scaling, keys.source() + ": rope_scaling");
  std::string type = "default";
  TXSCORE_RETURN_IF_ERROR(s.String("rope_type", &type));
  if (type == "default" && scaling->contains("type")) TXSCORE_RETURN_IF_ERROR(s.String("type", &type));
  if (type != "default" && type != "llama3" && type != "linear") {
    return FailedPrecondition(keys.source() + ": rope_scaling type \"" + type +
                              "\" is not supported (supported: llama3, linear)");
  }
  rope->type = type;
  TXSCORE_RETURN_IF_ERROR(s.Double("factor", &rope->factor));
  TXSCORE_RETURN_IF_ERROR(s.Double("low_freq_factor", &rope->low_freq_factor));
  TXSCORE_RETURN_IF_ERROR(s.Double("high_freq_factor", &rope->high_freq_factor));
  TXSCORE_RETURN_IF_ERROR(s.Int("original_max_position_embeddings", &rope->original_max_position_embeddings));
  if (!(rope->factor > 0)) return s.Wrong("factor", "a positive number");
  return Status::Ok();
}

}  // namespace

const char* ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kQwen3:
      return "qwen3";
    case ModelFamily::kGranite:
      return "granite";
    case ModelFamily::kGemma2:
      return "gemma2";
    case ModelFamily::kGemma3:
      return "gemma3";
  }
  return "?";
}

double ModelConfig::attention_scale() const {
  if (attention_multiplier) return *attention_multiplier;
  if (query_pre_attn_scalar) return 1.0 / std::sqrt(*query_pre_attn_scalar);
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

double ModelConfig::embedding_scale() const {
  if (family == ModelFamily::kGemma2 || family == ModelFamily::kGemma3) {
    return std::sqrt(static_cast<double>(hidden_size));
  }
  return embedding_multiplier;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(source + ": not a JSON object");
  ModelConfig c;
  Keys top(root, source);
  TXSCORE_RETURN_IF_ERROR(top.String("model_type", &c.model_type));
  if (c.model_type.empty()) return top.Missing("model_type");

  const json* text = &root;
  std::string where = source;
  if (c.model_type == "gemma3") {
    // Multimodal Gemma 3: the language model is described by text_config.
    const json* text_config = top.Find("text_config");
    if (text_config == nullptr || !text_config->is_object()) return top.Missing("text_config");
    text = text_config;
    where = source + ": text_config";
  }
  Keys keys(*text, where);

  if (c.model_type == "llama") {
    c.family = ModelFamily::kLlama;
  } else if (c.model_type == "qwen3") {
    c.family = ModelFamily::kQwen3;
    c.qk_norm = true;
    c.rms_norm_eps = 1e-6;
  } else if (c.model_type == "granite") {
    c.family = ModelFamily::kGranite;
  } else if (c.model_type == "gemma2") {
    c.family = ModelFamily::kGemma2;
    c.norm_weight_plus_one = true;
    c.sandwich_norms = true;
    c.hidden_act = "gelu_pytorch_tanh";
    c.tie_word_embeddings = true;
    c.query_pre_attn_scalar = 256;
    c.attn_logit_softcapping = 50.0;
    c.final_logit_softcapping = 30.0;
    c.sliding_window = 4096;
  } else if (c.model_type == "gemma3_text" || c.model_type == "gemma3") {
    c.family = ModelFamily::kGemma3;
    c.norm_weight_plus_one = true;
    c.sandwich_norms = true;
    c.qk_norm = true;
    ApplyGemma3Defaults(&c);
  } else {
    return FailedPrecondition(source + ": model_type \"" + c.model_type +
                              "\" is not supported (supported: " + kSupported + ")");
  }

  TXSCORE_RETURN_IF_ERROR(keys.Int("vocab_size", &c.vocab_size, true));
  TXSCORE_RETURN_IF_ERROR(keys.Int("hidden_size", &c.hidden_size, true));
  TXSCORE_RETURN_IF_ERROR(keys.Int("intermediate_size", &c.intermediate_size, true));
  TXSCORE_RETURN_IF_ERROR(keys.Int("num_hidden_layers", &c.num_hidden_layers, true));
  TXSCORE_RETURN_IF_ERROR(keys.Int("num_attention_heads", &c.num_attention_heads, true));
  TXSCORE_RETURN_IF_ERROR(keys.Int("num_key_value_heads", &c.num_key_value_heads));
  TXSCORE_RETURN_IF_ERROR(keys.Int("head_dim", &c.head_dim));
  TXSCORE_RETURN_IF_ERROR(keys.Int("max_position_embeddings", &c.max_position_embeddings));
  TXSCORE_RETURN_IF_ERROR(keys.Double("rms_norm_eps", &c.rms_norm_eps));
  // Gemma names it hidden_activation; older configs carry both.
  TXSCORE_RETURN_IF_ERROR(keys.String("hidden_act", &c.hidden_act));
  TXSCORE_RETURN_IF_ERROR(keys.String("hidden_activation", &c.hidden_act));
  TXSCORE_RETURN_IF_ERROR(keys.Bool("attention_bias", &c.attention_bias));
  TXSCORE_RETURN_IF_ERROR(keys.Bool("mlp_bias", &c.mlp_bias));
  // tie_word_embeddings sits at the top level of multimodal configs.
  TXSCORE_RETURN_IF_ERROR(top.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  if (text != &root) TXSCORE_RETURN_IF_ERROR(keys.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  TXSCORE_RETURN_IF_ERROR(keys.Double("rope_theta", &c.rope.theta));
  TXSCORE_RETURN_IF_ERROR(ParseRopeScaling(keys, &c.rope));

  TXSCORE_RETURN_IF_ERROR(keys.Double("embedding_multiplier", &c.embedding_multiplier));
  TXSCORE_RETURN_IF_ERROR(keys.Double("residual_multiplier", &c.residual_multiplier));
  TXSCORE_RETURN_IF_ERROR(keys.Double("logits_scaling", &c.logits_scaling));
  TXSCORE_RETURN_IF_ERROR(keys.OptionalDouble("attention_multiplier", &c.attention_multiplier));
  TXSCORE_RETURN_IF_ERROR(keys.OptionalDouble("query_pre_attn_scalar", &c.query_pre_attn_scalar));
  if (c.family == ModelFamily::kGemma2 || c.family == ModelFamily::kGemma3) {
    // Present-and-null means "off"; absent means the family default.
    if (text->contains("attn_logit_softcapping") && (*text)["attn_logit_softcapping"].is_null()) {
      c.attn_logit_softcapping = 0;
    }
    if (text->contains("final_logit_softcapping") && (*text)["final_logit_softcapping"].is_null()) {
      c.final_logit_softcapping = 0;
    }
    TXSCORE_RETURN_IF_ERROR(keys.Double("attn_logit_softcapping", &c.attn_logit_softcapping));
    TXSCORE_RETURN_IF_ERROR(keys.Double("final_logit_softcapping", &c.final_logit_softcapping));
    TXSCORE_RETURN_IF_ERROR(keys.Int("sliding_window", &c.sliding_window));
  }
  if (c.family == ModelFamily::kGemma3) {
    c.local_rope.theta = 10000.0;
    TXSCORE_RETURN_IF_ERROR(keys.Double("rope_local_base_freq", &c.local_rope.theta));
  } else {
    c.local_rope = c.rope;
  }
  if (c.family == ModelFamily::kQwen3) {
    bool use_sliding_window = false;
    TXSCORE_RETURN_IF_ERROR(keys.Bool("use_sliding_window", &use_sliding_window));
    if (use_sliding_window) {
      return FailedPrecondition(where + ": use_sliding_window=true is not supported for qwen3");
    }
  }

  TXSCORE_RETURN_IF_ERROR(top.Ids("eos_token_id", &c.eos_token_ids));
  if (c.eos_token_ids.empty() && text != &root) TXSCORE_RETURN_IF_ERROR(keys.Ids("eos_token_id", &c.eos_token_ids));

  // Derived values and consistency.
  if (c.num_attention_heads == 0) return keys.Wrong("num_attention_heads", "a positive integer");
  // Values a forward pass divides by, raises to a power or sizes a cache with: a hostile or
  // broken config would otherwise give NaNs or empty buffers, not an error.
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0)) return keys.Wrong("rms_norm_eps", "a positive number");
  if (!(std::isfinite(c.rope.theta) && c.rope.theta > 0)) return keys.Wrong("rope_theta", "a positive number");
  if (c.max_position_embeddings == 0) return keys.Wrong("max_position_embeddings", "a positive integer");
  if (c.vocab_size == 0 || c.hidden_size == 0 || c.num_hidden_layers == 0 || c.intermediate_size == 0) {
    return InvalidArgument(where +
                           ": vocab_size, hidden_size, intermediate_size and num_hidden_layers must be positive");
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return InvalidArgument(where + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                               ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
                               ")",
                           "num_key_value_heads");
  }
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return InvalidArgument(where + ": hidden_size is not a multiple of num_attention_heads and head_dim is absent",
                             "head_dim");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return keys.Wrong("head_dim", "even (rotary embeddings rotate pairs)");
  if (c.hidden_act != "silu" && c.hidden_act != "gelu_pytorch_tanh") {
    return FailedPrecondition(where + ": activation \"" + c.hidden_act +
                              "\" is not supported (supported: silu, gelu_pytorch_tanh)");
  }

  // Which layers use the sliding window: layer_types when given (newer configs), else the
  // family's pattern.
  c.layer_is_sliding.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (const json* types = keys.Find("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<size_t>(c.num_hidden_layers)) {
      return keys.Wrong("layer_types", "a list with one entry per layer");
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        c.layer_is_sliding[i] = true;
      } else if (t != "full_attention") {
        return keys.Wrong("layer_types", "a list of \"sliding_attention\" and \"full_attention\"");
      }
    }
  } else if (c.family == ModelFamily::kGemma2) {
    for (size_t i = 0; i < c.layer_is_sliding.size(); ++i) c.layer_is_sliding[i] = i % 2 == 0;
  } else if (c.family == ModelFamily::kGemma3) {
    int64_t pattern = 6;
    TXSCORE_RETURN_IF_ERROR(keys.Int("sliding_window_pattern", &pattern));
    if (pattern == 0) return keys.Wrong("sliding_window_pattern", "a positive integer");
    for (size_t i = 0; i < c.layer_is_sliding.size(); ++i) {
      c.layer_is_sliding[i] = (static_cast<int64_t>(i) + 1) % pattern != 0;
    }
  }
  bool any_sliding = false;
  for (bool s : c.layer_is_sliding) any_sliding = any_sliding || s;
  if (any_sliding && c.sliding_window <= 0) return keys.Wrong("sliding_window", "a positive integer");
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/config.json";
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "checkpoint config");
  if (!text.ok()) return text.error();
  return ParseModelConfig(*text, path);
}

}  // namespace txscore::llm
