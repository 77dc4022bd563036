#include "llm/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_io.h"
#include "common/sha256.h"
#include "llm/config_keys.h"
#include "llm/model_family.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

// config.json's "architectures": the Hugging Face classes that load it.
Status ReadArchitectures(const ConfigKeys& keys, std::vector<std::string>* out) {
  const json* v = keys.Find("architectures");
  if (v == nullptr) return Status::Ok();
  if (!v->is_array()) return keys.Wrong("architectures", "a list of strings");
  for (const json& a : *v) {
    if (!a.is_string()) return keys.Wrong("architectures", "a list of strings");
    out->push_back(a.get<std::string>());
  }
  return Status::Ok();
}

Status ParseRopeScaling(const ConfigKeys& keys, RopeConfig* rope) {
  const json* scaling = keys.Find("rope_scaling");
  if (scaling == nullptr) return Status::Ok();
  if (!scaling->is_object()) return keys.Wrong("rope_scaling", "an object or null");
  ConfigKeys s(*scaling, keys.source() + ": rope_scaling");
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

double ModelConfig::attention_scale() const {
  if (attention_multiplier) return *attention_multiplier;
  if (query_pre_attn_scalar) return 1.0 / std::sqrt(*query_pre_attn_scalar);
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

double ModelConfig::embedding_scale() const {
  if (embedding_scale_is_sqrt_hidden) return std::sqrt(static_cast<double>(hidden_size));
  return embedding_multiplier;
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source) {
  return ParseModelConfig(json_text, source, BuiltinModelFamilies());
}

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& source,
                                     const ModelFamilyRegistry& families) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(source + ": not a JSON object");
  ModelConfig c;
  ConfigKeys top(root, source);
  TXSCORE_RETURN_IF_ERROR(top.String("model_type", &c.model_type));
  std::vector<std::string> architectures;
  if (c.model_type.empty()) TXSCORE_RETURN_IF_ERROR(ReadArchitectures(top, &architectures));
  if (c.model_type.empty() && architectures.empty()) return top.Missing("model_type");
  TXSCORE_ASSIGN_OR_RETURN(DetectedFamily detected, families.Detect(c.model_type, architectures, source));
  const ModelFamily& family = *detected.family;
  c.family = &family;
  if (c.model_type.empty()) c.model_type = detected.form.model_type;

  const json* text = &root;
  std::string where = source;
  if (!detected.form.text_config.empty()) {
    // Multimodal: the language model is described by a nested object.
    const char* key = detected.form.text_config.c_str();
    const json* text_config = top.Find(key);
    if (text_config == nullptr || !text_config->is_object()) return top.Missing(key);
    text = text_config;
    where = source + ": " + detected.form.text_config;
  }
  ConfigKeys keys(*text, where);
  family.ApplyDefaults(&c);

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
  c.local_rope = c.rope;
  TXSCORE_RETURN_IF_ERROR(family.ReadFamilyKeys(keys, &c));

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
  if (c.hidden_act == "silu") {
    c.activation = ModelConfig::Activation::kSilu;
  } else if (c.hidden_act == "gelu_pytorch_tanh") {
    c.activation = ModelConfig::Activation::kGeluTanh;
  } else {
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
  } else {
    TXSCORE_RETURN_IF_ERROR(family.SetSlidingLayers(keys, &c));
  }
  bool any_sliding = false;
  for (bool s : c.layer_is_sliding) any_sliding = any_sliding || s;
  if (any_sliding && c.sliding_window <= 0) return keys.Wrong("sliding_window", "a positive integer");
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& checkpoint_dir) {
  return LoadModelConfig(checkpoint_dir, BuiltinModelFamilies());
}

Result<ModelConfig> LoadModelConfig(const std::string& checkpoint_dir, const ModelFamilyRegistry& families) {
  const std::string path = checkpoint_dir + "/config.json";
  Result<std::string> text = ReadFileBounded(path, 16 << 20, "checkpoint config");
  if (!text.ok()) return text.error();
  return ParseModelConfig(*text, path, families);
}

Result<std::string> CheckpointVersion(const std::string& checkpoint_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator(checkpoint_dir, ec)) {
    const std::string extension = entry.path().extension().string();
    std::error_code not_a_file;  // a dangling link, say: not part of the checkpoint
    if (entry.is_regular_file(not_a_file) &&
        (extension == ".json" || extension == ".safetensors" || extension == ".model")) {
      names.push_back(entry.path().filename().string());
    }
  }
  if (ec) return NotFound("checkpoint directory " + checkpoint_dir + " cannot be read: " + ec.message());
  std::sort(names.begin(), names.end());
  std::string listing;
  for (const std::string& name : names) {
    TXSCORE_ASSIGN_OR_RETURN(std::string digest, Sha256HexOfFile(checkpoint_dir + "/" + name));
    listing += name + " " + digest + "\n";
  }
  TXSCORE_ASSIGN_OR_RETURN(std::string version, Sha256Hex(listing));
  return version.substr(0, 12);
}

}  // namespace txscore::llm
