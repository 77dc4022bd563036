// Granite 3.x / 4 dense (Hugging Face modeling_granite): Llama's layers with four multipliers,
// all read from config.json (embedding_multiplier, residual_multiplier, logits_scaling,
// attention_multiplier as the softmax scale); no BOS.
#include "llm/families/granite.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

class GraniteFamily final : public ModelFamily {
 public:
  std::string_view name() const override { return "granite"; }
  std::vector<ConfigForm> forms() const override { return {{"granite", "GraniteForCausalLM", ""}}; }

  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t;
    t.config["model_type"] = "granite";
    t.config["architectures"] = json::array({"GraniteForCausalLM"});
    t.config["hidden_act"] = "silu";
    t.config["rope_theta"] = 10000000.0;
    t.config["embedding_multiplier"] = 12.0;
    t.config["attention_multiplier"] = 0.0625;
    t.config["residual_multiplier"] = 0.22;
    t.config["logits_scaling"] = 8.0;
    t.config["hidden_size"] = d.head_dim * d.heads;
    return t;
  }
};

}  // namespace

std::unique_ptr<ModelFamily> MakeGraniteFamily() { return std::make_unique<GraniteFamily>(); }

}  // namespace txscore::llm
