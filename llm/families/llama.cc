// Llama 3.x (Hugging Face modeling_llama): the baseline the other families differ from.
// Llama 3.1+ scales RoPE frequencies (rope_scaling type "llama3"); its tokenizer adds
// <|begin_of_text|> after the ByteLevel post-processor.
#include "llm/families/llama.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

class LlamaFamily final : public ModelFamily {
 public:
  std::string_view name() const override { return "llama"; }
  std::vector<ConfigForm> forms() const override { return {{"llama", "LlamaForCausalLM", ""}}; }

  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t;
    t.config["model_type"] = "llama";
    t.config["architectures"] = json::array({"LlamaForCausalLM"});
    t.config["hidden_act"] = "silu";
    t.config["head_dim"] = d.head_dim;
    t.config["rope_theta"] = 500000.0;
    t.config["rope_scaling"] = {{"rope_type", "llama3"},
                                {"factor", 8.0},
                                {"low_freq_factor", 1.0},
                                {"high_freq_factor", 4.0},
                                {"original_max_position_embeddings", 8192}};
    t.config["rms_norm_eps"] = 1e-5;
    t.config["hidden_size"] = d.head_dim * d.heads;
    t.bos_token = "<|begin_of_text|>";
    t.bos = BosConvention::kAfterByteLevel;
    return t;
  }
};

}  // namespace

std::unique_ptr<ModelFamily> MakeLlamaFamily() { return std::make_unique<LlamaFamily>(); }

}  // namespace txscore::llm
