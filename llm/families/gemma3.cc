// Gemma 3 (Hugging Face modeling_gemma3): Gemma 2's layers with per-head RMSNorm on queries
// and keys, no soft-capping by default, five sliding layers to one global
// (sliding_window_pattern) and a RoPE of their own (rope_local_base_freq, unscaled). Text-only
// checkpoints (gemma3_text) keep the usual layout; multimodal ones (gemma3) describe the
// language model in text_config, omitting whatever equals Gemma3TextConfig's defaults, and
// keep its weights under language_model.
#include "llm/families/gemma3.h"

#include "llm/families/gemma_common.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

class Gemma3Family final : public ModelFamily {
 public:
  std::string_view name() const override { return "gemma3"; }
  std::vector<ConfigForm> forms() const override {
    return {{"gemma3_text", "Gemma3ForCausalLM", ""}, {"gemma3", "Gemma3ForConditionalGeneration", "text_config"}};
  }

  // Hugging Face's Gemma3TextConfig defaults.
  void ApplyDefaults(ModelConfig* c) const override {
    gemma::ApplyCommonDefaults(c);
    c->qk_norm = true;
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
    c->query_pre_attn_scalar = 256;
    c->sliding_window = 4096;
    c->tie_word_embeddings = true;
  }

  Status ReadFamilyKeys(const ConfigKeys& keys, ModelConfig* c) const override {
    TXSCORE_RETURN_IF_ERROR(gemma::ReadCommonKeys(keys, c));
    c->local_rope = RopeConfig{};  // sliding layers: their own base, no scaling
    c->local_rope.theta = 10000.0;
    return keys.Double("rope_local_base_freq", &c->local_rope.theta);
  }

  Status SetSlidingLayers(const ConfigKeys& keys, ModelConfig* c) const override {
    int64_t pattern = 6;
    TXSCORE_RETURN_IF_ERROR(keys.Int("sliding_window_pattern", &pattern));
    if (pattern == 0) return keys.Wrong("sliding_window_pattern", "a positive integer");
    for (size_t i = 0; i < c->layer_is_sliding.size(); ++i) {
      c->layer_is_sliding[i] = (static_cast<int64_t>(i) + 1) % pattern != 0;
    }
    return Status::Ok();
  }

  std::vector<WeightNames> weight_layouts() const override {
    return {WeightNames{}, WeightNames{"language_model.model.", "language_model.lm_head.weight"}};
  }

  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t;
    t.config["model_type"] = "gemma3_text";
    t.config["architectures"] = json::array({"Gemma3ForCausalLM"});
    t.config["hidden_activation"] = "gelu_pytorch_tanh";
    t.config["head_dim"] = d.head_dim;
    t.config["query_pre_attn_scalar"] = d.head_dim + 8;
    t.config["attn_logit_softcapping"] = nullptr;
    t.config["final_logit_softcapping"] = nullptr;
    t.config["sliding_window"] = d.sliding_window;
    t.config["sliding_window_pattern"] = 2;  // with few layers, both kinds appear
    t.config["rope_theta"] = 1000000.0;
    t.config["rope_local_base_freq"] = 10000.0;
    t.config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
    t.bos_token = "<bos>";
    t.bos = BosConvention::kTemplateAndTokenizerConfig;
    return t;
  }
};

}  // namespace

std::unique_ptr<ModelFamily> MakeGemma3Family() { return std::make_unique<Gemma3Family>(); }

}  // namespace txscore::llm
