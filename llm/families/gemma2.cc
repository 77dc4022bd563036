// Gemma 2 (Hugging Face modeling_gemma2): Gemma's norms and embedding scale, soft-capping of
// attention scores and logits, sliding-window attention on every other layer (from the first),
// query_pre_attn_scalar as the softmax scale; its tokenizer adds <bos>.
#include "llm/families/gemma2.h"

#include "llm/families/gemma_common.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

class Gemma2Family final : public ModelFamily {
 public:
  std::string_view name() const override { return "gemma2"; }
  std::vector<ConfigForm> forms() const override { return {{"gemma2", "Gemma2ForCausalLM", ""}}; }

  // Hugging Face's Gemma2Config defaults for what configs on the hub may omit.
  void ApplyDefaults(ModelConfig* c) const override {
    gemma::ApplyCommonDefaults(c);
    c->hidden_act = "gelu_pytorch_tanh";
    c->tie_word_embeddings = true;
    c->query_pre_attn_scalar = 256;
    c->attn_logit_softcapping = 50.0;
    c->final_logit_softcapping = 30.0;
    c->sliding_window = 4096;
  }

  Status ReadFamilyKeys(const ConfigKeys& keys, ModelConfig* c) const override {
    return gemma::ReadCommonKeys(keys, c);
  }

  Status SetSlidingLayers(const ConfigKeys&, ModelConfig* c) const override {
    for (size_t i = 0; i < c->layer_is_sliding.size(); ++i) c->layer_is_sliding[i] = i % 2 == 0;
    return Status::Ok();
  }

  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t;
    t.config["model_type"] = "gemma2";
    t.config["architectures"] = json::array({"Gemma2ForCausalLM"});
    t.config["hidden_activation"] = "gelu_pytorch_tanh";
    t.config["head_dim"] = d.head_dim;
    t.config["query_pre_attn_scalar"] = d.head_dim + 8;  // differs from head_dim, so the scale is exercised
    t.config["attn_logit_softcapping"] = 20.0;
    t.config["final_logit_softcapping"] = 10.0;
    t.config["sliding_window"] = d.sliding_window;
    t.config["rope_theta"] = 10000.0;
    t.bos_token = "<bos>";
    t.bos = BosConvention::kTemplateAndTokenizerConfig;
    return t;
  }
};

}  // namespace

std::unique_ptr<ModelFamily> MakeGemma2Family() { return std::make_unique<Gemma2Family>(); }

}  // namespace txscore::llm
