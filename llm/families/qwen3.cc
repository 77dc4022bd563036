// Qwen3 dense (Hugging Face modeling_qwen3): per-head RMSNorm on queries and keys, head_dim
// given explicitly (not hidden_size / heads); no BOS (its config names a bos_token_id its
// tokenizer never adds). Sliding-window attention is refused: no released Qwen3 uses it.
#include "llm/families/qwen3.h"

namespace txscore::llm {
namespace {

using nlohmann::json;

class Qwen3Family final : public ModelFamily {
 public:
  std::string_view name() const override { return "qwen3"; }
  std::vector<ConfigForm> forms() const override { return {{"qwen3", "Qwen3ForCausalLM", ""}}; }

  void ApplyDefaults(ModelConfig* c) const override {
    c->qk_norm = true;
    c->rms_norm_eps = 1e-6;
  }

  Status ReadFamilyKeys(const ConfigKeys& keys, ModelConfig*) const override {
    bool use_sliding_window = false;
    TXSCORE_RETURN_IF_ERROR(keys.Bool("use_sliding_window", &use_sliding_window));
    if (use_sliding_window) {
      return FailedPrecondition(keys.source() + ": use_sliding_window=true is not supported for qwen3");
    }
    return Status::Ok();
  }

  CheckpointTemplate MakeCheckpointTemplate(const CheckpointDimensions& d) const override {
    CheckpointTemplate t;
    t.config["model_type"] = "qwen3";
    t.config["architectures"] = json::array({"Qwen3ForCausalLM"});
    t.config["hidden_act"] = "silu";
    t.config["head_dim"] = d.head_dim * 2;  // explicit and different from hidden / heads, as in Qwen3
    t.config["rope_theta"] = 1000000.0;
    t.config["use_sliding_window"] = false;
    return t;
  }
};

}  // namespace

std::unique_ptr<ModelFamily> MakeQwen3Family() { return std::make_unique<Qwen3Family>(); }

}  // namespace txscore::llm
